"""The PaxML GPT-3 175B FP8 rows (DGX Cloud, v24.11.1) under their recipe, and the four leads
of docs/calibration.md §3.24 checked against them (§3.23 for the recipe itself).

Run:
    python experiments/paxml_recipe.py

Table 1, per row: measured and estimated step time and error, the estimate's breakdown
(compute, recomputation, exposed data-parallel communication, optimizer with the weight
casts), its peak memory, and three readings that are not the model:

* ``fp8 AG``: the FSDP all-gathers carrying fp8 weights (``SystemConfig.param_bytes=1``), as
  XLA's FP8 GEMM rewrite makes them (the all-gather between the dequantisation and the dot is
  taken into the pattern and moved onto the fp8 operand: openxla/xla PR #4462, 2023-07;
  JAX-Toolbox ``rosetta/docs/NATIVE_FP8.md``, 2024-01) and Transformer Engine's ``cast_fp8``
  lets it (its custom partitioning keeps the kernel's sharding: the cast runs on the shard);
* ``fp32 AG``: the what-if §3.23 left open (``param_bytes=4``), refuted by the same sources;
* ``+ replica AR``: the estimate plus the hybrid mesh's all-reduce of each GPU's 1/128
  gradient shard over the ``n/128`` replicas (``FSDP_GROUP``), in bf16, as if fully exposed:
  an upper bound on what the mesh adds to the step (the model now reads the mesh, plan
  ``dp_shard``, and prices this all-reduce behind compute: docs/calibration.md §5.104).

Also per row: ``casts_s``, the weight-quantisation term inside ``optimizer_s`` (§3.23,
``elementwise_time.weight_cast_time`` x ``quantise.weight_cast_passes``: the whole model's weights,
twice per step), and ``Pax GB``, memory as Pax holds the states under its mesh: fp32 weights
(the master copy; Praxis computes in ``fprop_dtype`` bf16), Adam's two fp32 moments and the
fp32 gradients, ``PAX_STATE_BYTES`` per parameter of the ``1/FSDP_GROUP`` shard, plus the
activations the model keeps (``MemoryBreakdown.activations``), against the memory the recipe
lets XLA take (``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the GPU's).

Table 2, the same stack's earlier H100 and A100 runs (NVIDIA/JAX-Toolbox
``rosetta/rosetta/projects/pax/README.md``, perf table of 2023-10-26, commit df7a5fea, and
unchanged at dbac0a7 of 2024-03-04): GPT-3 175B (``GPT175B``: vocabulary 50257, full
recomputation, Praxis's ``SAVE_NOTHING``; google/paxml ``paxml/contrib/gpu/scripts_gpu/
configs.py`` @077140f) on 256 GPUs, FSDP 256, 6 sequences per GPU, from the README's
sequences per second; with the factor on the catalog's GEMM rates at which the estimate meets
the run (``experiments/gemm_in_situ.implied_scale``).

Table 3, the suite's other Pax rows, same image (``pax-2024-03-04``) and recipe
(NVIDIA/dgxc-benchmarking ``paxml/README_5b.md`` @v24.11.1, in bf16 and fp8): GPT 5B
(``GPT5BBase``: 24 layers, hidden 4096, 32 heads of 128, FFN 16384, vocabulary 50304), 4
sequences per GPU, ``Synthetic5BCkpt``'s ``SAVE_DOT_ONLY`` (``checkpoint_dots``: every dot's
output kept, the norms and the attention kernel rerun: ``selective`` with ``core_attn`` and
``layernorm``) and, to bracket it, ``full``. Their mesh (``FSDP=1``: FSDP over the node's 8
GPUs, nodes as replicas) is read as ZeRO-3 over all GPUs; the gathers are hidden either way
(``dp_comm`` 3-4 ms).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.gemm_in_situ import implied_scale  # noqa: E402
from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm, elementwise_time, param_counts, quantise  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.stacks.jax_xla import JAX_XLA  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.plan_arrays import RECOMPUTE_CODE  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

#: GPUs in one FSDP group of the recipe: ``FSDP=16`` nodes in ``--fdl.DCN_MESH_SHAPE=[DP,16,1]``
#: (NVIDIA/dgxc-benchmarking ``paxml/configure.sh`` @v24.11.1) times ``ICI_MESH_SHAPE=[1,8,1]``
#: (google/paxml ``GPT175BBase``); weights sharded over the ``data`` axis (Transformer Engine's
#: ``W_FSDP_AXES`` through ``te.MeshResource`` of ``fp8_autocast('replica', 'mdl', 'data')``,
#: JAX-Toolbox's paxml patch PR-46), replicas over ``replica``
FSDP_GROUP = 128
#: bytes per gradient element of the replicas' all-reduce (Transformer Engine's weight
#: gradients are bf16, ``grad.dtype`` in ``_fp8_dot_bwd_rule``)
REPLICA_GRAD_BYTES = 2.0
#: bytes Pax holds per parameter: fp32 weights, Adam's m and v in fp32, the fp32 gradient
PAX_STATE_BYTES = 16.0
#: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the recipe in fp8 (``paxml/configure.sh``)
MEM_FRACTION = 0.9

#: JAX-Toolbox's Pax GPT-3 175B runs: (GPU preset, nodes, --dtype, precision as the README
#: names it, sequences per second). 256 GPUs, DP 1, FSDP 256, TP 1, 6 sequences per GPU.
JAX_TOOLBOX_RUNS = (
    ("dgx-a100", 32, "bf16", "A100 BF16", 18.29),
    ("dgx-a100", 32, "bf16", "A100 TE BF16", 19.47),
    ("dgx-h100", 32, "bf16", "H100 TE BF16", 44.01),
    ("dgx-h100", 32, "fp8", "H100 TE FP8", 65.64),
)
#: GPT 5B of the same suite: (--dtype, GPUs, measured seconds per step, README_5b.md @v24.11.1)
PAX_5B_RUNS = (("bf16", 16, 0.634), ("bf16", 128, 0.651), ("fp8", 16, 0.47), ("fp8", 128, 0.5))
PAX_5B_RECOMPUTE = (
    ("SAVE_DOT_ONLY", "recompute=selective,recompute_modules=core_attn+layernorm"),
    ("full", "recompute=full"))
JAX_TOOLBOX_PLAN = "tp=1,pp=1,dp=256,mbs=6,gbs=1536,zero=3,recompute=full"
JAX_TOOLBOX_VOCAB = 50257


def model_params(job: Job) -> float:
    """Parameters of the whole model: every layer's and the embedding's (tp 1)."""
    m = job.model
    return float(param_counts.layer_params_per_gpu(m, 1, 1) * m.num_layers
                 + param_counts.embedding_params_per_gpu(m, 1))


def replica_allreduce_s(job: Job, fsdp: int = FSDP_GROUP,
                        grad_bytes: float = REPLICA_GRAD_BYTES) -> float:
    """Seconds of the hybrid mesh's gradient all-reduce alone on its links: each GPU's
    ``1/fsdp`` shard of the gradients over the ``dp/fsdp`` replicas, ``fsdp`` ranks apart
    (``comm.collective_time``); 0 with one replica."""
    r = job.plan.dp // fsdp
    if r <= 1:
        return 0.0
    return float(comm.collective_time("allreduce", model_params(job) / fsdp * grad_bytes, r,
                                      fsdp, job.cluster))


def casts_s(job: Job) -> float:
    """Seconds of the weight quantisation the model charges per step
    (``elementwise_time.weight_cast_time`` over the layers' weights, times
    ``quantise.weight_cast_passes``)."""
    m, p = job.model, job.plan
    w = param_counts.layer_params_per_gpu(m, p.tp, p.ep) * m.num_layers / p.pp
    passes = quantise.weight_cast_passes(job.framework.weight_cast_per_forward,
                                         p.gbs / (p.mbs * p.dp), RECOMPUTE_CODE[p.recompute])
    return float(elementwise_time.weight_cast_time(w, job.cluster.gpu, job.dtype, job.system)
                 * passes)


def pax_memory_bytes(job: Job, activations: float, fsdp: int = FSDP_GROUP) -> float:
    """Bytes per GPU as Pax holds the states (``PAX_STATE_BYTES`` per parameter of the
    ``1/fsdp`` shard) plus ``activations``."""
    return PAX_STATE_BYTES * model_params(job) / fsdp + activations


def with_param_bytes(job: Job, nbytes: float) -> Job:
    """``job`` with the FSDP all-gathers moving ``nbytes`` per weight."""
    return replace(job, system=replace(job.system, param_bytes=nbytes))


def jax_toolbox_job(template: Job, gpu: str, nodes: int, dtype: str) -> Job:
    """A JAX-Toolbox README run as a job: ``template``'s model with GPT175B's vocabulary, on
    ``nodes`` nodes of preset ``gpu``, under ``JAX_TOOLBOX_PLAN``."""
    return make_job(replace(template.model, vocab_size=JAX_TOOLBOX_VOCAB),
                    cluster_preset(gpu, nodes), parse_plan(JAX_TOOLBOX_PLAN), dtype=dtype,
                    framework=JAX_XLA)


def pax_5b_job(template: Job, n: int, dtype: str, recompute: str) -> Job:
    """A GPT 5B row of the suite as a job: ``template``'s model with ``GPT5BBase``'s shape on
    ``n`` H100s, 4 sequences per GPU, ZeRO-3, the ``recompute`` plan fields."""
    m = replace(template.model, name="GPT 5B", num_layers=24, hidden_size=4096,
                num_attention_heads=32, ffn_hidden_size=16384, vocab_size=50304)
    plan = parse_plan(f"tp=1,pp=1,dp={n},mbs=4,gbs={4 * n},zero=3,{recompute}")
    return make_job(m, cluster_preset("dgx-h100", n // 8), plan, dtype=dtype,
                    framework=JAX_XLA)


def main() -> None:
    cases = [c for c in load_cases(tiers=(2, 3)) if c.id.startswith("dgxc_paxml")]
    print("run  plan  measured_s  estimate_s  error  compute_s  recompute_s  dp_comm_s  "
          "optimizer_s  casts_s  memory_GB  Pax_GB/pool  |  fp8 AG: s  error  |  "
          "fp32 AG: s  error  |  replica AR s  + replica AR: s  error")
    for c in cases:
        e = estimate(c.job)
        b = e.breakdown_s
        mem = sum(e.memory.__dict__.values()) / 1e9
        ms = c.measured_step_s
        w1 = estimate(with_param_bytes(c.job, 1.0)).step_time_s
        w4 = estimate(with_param_bytes(c.job, 4.0)).step_time_s
        ar = replica_allreduce_s(c.job)
        p = c.job.plan
        pax = pax_memory_bytes(c.job, e.memory.activations) / 1e9
        pool = MEM_FRACTION * c.job.cluster.gpu.hbm_bytes / 1e9
        print(f"{c.id}  {p.recompute}:{'+'.join(p.recompute_modules or ())} z{p.zero} dp{p.dp}  "
              f"{ms:.3f}  {e.step_time_s:.3f}  {100 * (e.step_time_s / ms - 1):+.1f} %  "
              f"{b['compute']:.3f}  {b['recompute']:.3f}  {b['dp_comm']:.3f}  "
              f"{b['optimizer']:.3f}  {casts_s(c.job):.3f}  {mem:.1f}  {pax:.1f}/{pool:.1f}  |  "
              f"{w1:.3f}  {100 * (w1 / ms - 1):+.1f} %  |  "
              f"{w4:.3f}  {100 * (w4 / ms - 1):+.1f} %  |  {ar:.3f}  {e.step_time_s + ar:.3f}  "
              f"{100 * ((e.step_time_s + ar) / ms - 1):+.1f} %")
    print()
    print("JAX-Toolbox Pax GPT-3 175B, 256 GPUs, FSDP 256, 6 per GPU, full recomputation")
    print("run  seq/s  measured_s  estimate_s  error  implied GEMM factor")
    for gpu, nodes, dtype, label, seqs in JAX_TOOLBOX_RUNS:
        job = jax_toolbox_job(cases[0].job, gpu, nodes, dtype)
        ms = job.plan.gbs / seqs
        est = estimate(job).step_time_s
        k = implied_scale(job, ms)
        print(f"{label}  {seqs:.2f}  {ms:.3f}  {est:.3f}  {100 * (est / ms - 1):+.1f} %  "
              f"{'-' if k is None else f'{k:.3f}'}")

    print()
    print("Pax GPT 5B (same suite and image), 4 per GPU")
    print("run  measured_s  " + "  ".join(f"{name}: estimate_s  error  implied GEMM factor"
                                          for name, _ in PAX_5B_RECOMPUTE))
    for dtype, n, ms in PAX_5B_RUNS:
        cols = []
        for _, rc in PAX_5B_RECOMPUTE:
            job = pax_5b_job(cases[0].job, n, dtype, rc)
            est = estimate(job).step_time_s
            k = implied_scale(job, ms)
            cols.append(f"{est:.3f}  {100 * (est / ms - 1):+.1f} %  "
                        f"{'-' if k is None else f'{k:.3f}'}")
        print(f"{dtype} {n} GPUs  {ms:.3f}  " + "  ".join(cols))


if __name__ == "__main__":
    main()
