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

Table 4 (docs/calibration.md §5.166), the leads read at this recipe's sources, per ``jax-xla``
row of the DGX Cloud suite: XLA's latency-hiding scheduler limit (``xla_scheduler_limit_bytes``,
openxla/xla ``xla/service/gpu/gpu_hlo_schedule.cc`` ``GetSchedulerMemoryLimit``) beside the
temporaries the model keeps live at the step's peak (the saved activations and the fp32
gradient shard); for the PaxML rows also every FSDP collective of the step run unhidden
(``fsdp_serial_s``: an upper bound, not a reading) and the bf16 one-hot embedding matmuls Pax
runs (``onehot_embedding_s``: ``EMBEDDING_LOOKUP_STYLE = 'matmul'``).
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
#: the MaxText rows' (NVIDIA/dgxc-benchmarking ``maxtext/configure.sh:40`` @v24.11.1)
MAXTEXT_MEM_FRACTION = 0.94
#: XLA:GPU's scheduler limit when the module sets no device memory size (JAX sets none):
#: ``device_memory_size * 80 / 100``, less the entry's parameters and outputs (aliased ones
#: once), times ``xla_gpu_memory_limit_slop_factor`` percent (default 95); openxla/xla
#: ``xla/service/gpu/gpu_hlo_schedule.cc`` ``GetSchedulerMemoryLimit``
XLA_BASE_FRACTION = 0.8
XLA_SLOP_PERCENT = 95.0
#: the vocabulary the run's model has: google/paxml ``paxml/contrib/gpu/scripts_gpu/configs.py``
#: @e5bebb7 (the image's, §3.24) l.235, ``GPT175BBase.VOCAB_SIZE = 50257``; the row keeps the README's 51200
#: (its MFU formula's)
PAX_VOCAB = 50257
#: positions of the learned position embedding, looked up as a one-hot matmul too
#: (``configure_gpt3_task``: ``position_emb_tpl.lookup_style = EMBEDDING_LOOKUP_STYLE``)
PAX_POSITIONS = 2048

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


def xla_scheduler_limit_bytes(device_bytes: float, io_bytes: float,
                              base_fraction: float = XLA_BASE_FRACTION,
                              slop_percent: float = XLA_SLOP_PERCENT) -> float:
    """Bytes of temporaries XLA's latency-hiding scheduler plans under (its ``memory_limit``):
    ``(base_fraction * device_bytes - io_bytes) * slop_percent / 100``, ``io_bytes`` the
    step's donated state (parameters and outputs aliased, counted once). ``base_fraction``
    0.8 when the compile options carry no device memory size; the allocator's fraction
    (``XLA_PYTHON_CLIENT_MEM_FRACTION``) where the client passes its ``bytes_limit``
    (``xla/python/py_client.cc`` in later versions; not read at the image's jaxlib). Above
    the limit the scheduler's memory rules (``kMemoryPeakOverLimit``,
    ``kDecreaseMemoryOverLimit``) rank before its overlap rule (``kScheduleDone``)
    (``xla/service/latency_hiding_scheduler.cc``, ``ReadySetLt``)."""
    if (device_bytes <= 0 or io_bytes < 0 or not 0 < base_fraction <= 1
            or not 0 < slop_percent <= 100):
        raise ValueError(f"device_bytes={device_bytes}, io_bytes={io_bytes}, "
                         f"base_fraction={base_fraction}, slop_percent={slop_percent}: need "
                         "device_bytes > 0, io_bytes >= 0, 0 < base_fraction <= 1 and "
                         "0 < slop_percent <= 100")
    return (base_fraction * device_bytes - io_bytes) * slop_percent / 100.0


def scheduler_headroom(job: Job, base_fraction: float = XLA_BASE_FRACTION
                       ) -> tuple[float, float, float]:
    """(limit, live, limit - live) in bytes for ``job``: XLA's scheduler limit
    (``xla_scheduler_limit_bytes`` at ``base_fraction``) with the model's stored state
    (weights, optimizer) as the step's I/O, and the temporaries the model keeps live at the
    peak (activations and gradients)."""
    mem = estimate(job).memory
    limit = xla_scheduler_limit_bytes(job.cluster.gpu.hbm_bytes, mem.params + mem.optimizer,
                                      base_fraction)
    live = mem.activations + mem.grads
    return limit, live, limit - live


def fsdp_serial_s(job: Job, gather_bytes: float = 1.0, scatter_bytes: float = 2.0) -> float:
    """Seconds of every FSDP collective of one step run alone (an upper bound, not a reading):
    per layer the forward's and the backward's all-gather of the layer's weights
    (``gather_bytes`` each: fp8, §3.24) and the reduce-scatter of its gradients
    (``scatter_bytes``: bf16) over the shard group (``dp_shard``, else ``dp``), one
    micro-batch per step."""
    m, p = job.model, job.plan
    w = float(param_counts.layer_params_per_gpu(m, 1, 1))
    group = p.dp_shard or p.dp
    ag = comm.collective_time("allgather", w * gather_bytes, group, 1, job.cluster)
    rs = comm.collective_time("reduce_scatter", w * scatter_bytes, group, 1, job.cluster)
    return float(m.num_layers * (2.0 * ag + rs))


def onehot_embedding_s(job: Job, vocab: int = PAX_VOCAB, positions: int = PAX_POSITIONS) -> float:
    """Seconds of Pax's one-hot embedding lookups as bf16 GEMMs on one GPU (forward and
    weight gradient; the one-hot input takes no gradient): ``(tokens x vocab) @ (vocab x h)``
    and its ``(vocab x tokens) @ (tokens x h)``, the same for the positions (``gemm_unit`` at
    the catalog's bf16 rate, as the output layer is priced)."""
    from strategies.cost.gemm_kernel import gemm_fixed_s, gemm_unit, gemm_waves, k_knee
    gpu, p = job.cluster.gpu, job.plan
    rate = gpu.peak("bf16") * gpu.matmul_efficiency
    kn, wv, t0 = k_knee(gpu, "bf16"), gemm_waves(gpu, job.system), gemm_fixed_s(gpu)
    tokens, h = p.mbs * job.seq_len, job.model.hidden_size

    def g(M: float, N: float, K: float) -> float:
        return float(gemm_unit(M, N, K, rate, gpu.hbm_bandwidth, 2.0, None, kn, None, wv, t0))
    per_mb = sum(g(tokens, h, v) + g(v, h, tokens) for v in (vocab, positions))
    return per_mb * p.gbs / (p.mbs * p.dp)


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

    print()
    print("Leads of §5.166: XLA's scheduler limit against the live temporaries (GB), with no "
          "device memory size (0.8) and with the allocator's limit (the recipe's fraction); "
          "PaxML: every FSDP collective unhidden, the one-hot embedding matmuls")
    print("run  measured_s  estimate_s  live_GB  limit@0.8  headroom  |  fraction  limit  "
          "headroom  |  serial FSDP s  + serial: error  |  one-hot s  + one-hot: error")
    for c in load_cases(tiers=(2, 3)):
        if not c.id.startswith(("dgxc_paxml", "dgxc_maxtext")):
            continue
        pax = c.id.startswith("dgxc_paxml")
        frac = MEM_FRACTION if pax else MAXTEXT_MEM_FRACTION
        limit, live, room = scheduler_headroom(c.job)
        alimit, _, aroom = scheduler_headroom(c.job, frac)
        est, ms = estimate(c.job).step_time_s, c.measured_step_s
        tail = ""
        if pax:
            fs, oh = fsdp_serial_s(c.job), onehot_embedding_s(c.job)
            tail = (f"  |  {fs:.3f}  {100 * ((est + fs) / ms - 1):+.1f} %  |  {oh:.4f}  "
                    f"{100 * ((est + oh) / ms - 1):+.1f} %")
        print(f"{c.id}  {ms:.3f}  {est:.3f}  {live / 1e9:.1f}  {limit / 1e9:.1f}  "
              f"{room / 1e9:+.1f}  |  {frac}  {alimit / 1e9:.1f}  {aroom / 1e9:+.1f}{tail}")

if __name__ == "__main__":
    main()
