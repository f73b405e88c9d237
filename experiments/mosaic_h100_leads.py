"""MosaicML's llm-foundry rows (the 97 ``pytorch-eager`` runs): what each lead for the H100
deficit is worth, priced with the model's own rules (docs/calibration.md §5.96).

Per group (A100; H100 8-64 GPUs, Oct 2023 sweep; H100 128-512 GPUs, Jan 2024 sweep): runs,
MAPE and mean error, with the cross-entropy the stack ran (``framework.
COMPOSER_CROSS_ENTROPY``: flash-attn's fused loss plus Composer's two train metrics) and with
the three-pass assumption it replaced (``LossPasses()``). Then, per lead, seconds per step
from the model next to the seconds the H100 rows miss (measured - modelled):

* ``loss``: the cross-entropy change above (priced).
* ``optimizer``: the step's Adam, clip and norm passes the estimate charges after the last
  backward (``breakdown_s["optimizer"]``), and the GPU idle of Composer's unfused per-tensor
  loop (``optimizer_launch_s``: MPT's ``6 L + 2`` weight tensors x ``ADAM_KERNELS`` +
  ``CLIP_KERNELS`` kernels x the stack's launch gap), both once per step.
* ``FSDP traffic``: FSDP's collectives of one step alone on the links
  (``comm.dp_collective_time`` over the run's dp group; per micro-batch the 2-byte
  all-gather before the forward, again before the backward under ``FULL_SHARD`` (ZeRO-3),
  and the 4-byte reduce-scatter; ``SHARD_GRAD_OP`` (ZeRO-2) gathers once per step): the most
  that FSDP's prefetch settings (``limit_all_gathers``, ``backward_prefetch``) could expose
  if none of it overlapped.
* ``attention``: the attention core's seconds (the step with the fused kernel at half its rate
  less the step), and what the H100 rows of the Oct 2023 sweep (llm-foundry's
  FlashAttention-1-class Triton kernel, §3.8) would add if that kernel gained on H100 only
  FlashAttention v1's H100/A100 ratio (the FlashAttention-2 paper's causal, head-dim-128
  forward + backward figures at 2k: ``FA1_H100_2K / FA1_A100_2K``) instead of the catalog's
  (``flash_rate_ratio``): ``attention x (catalog ratio / v1 ratio - 1)``.
* ``implied HBM``: the factor on the datasheet HBM bandwidth at which the estimate equals
  the measured step (bisection on the run's own job): every memory-bound kernel (eager
  elementwise, casts, loss, gradient passes, optimizer) scales with it.
* pairs: the A100/H100 step ratio of runs that differ only in the GPU, measured and
  modelled, and the gap in seconds per micro-batch.

Run: python experiments/mosaic_h100_leads.py
"""
from __future__ import annotations

import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.gemm_in_situ import implied_factor  # noqa: E402
from simulator.studies.validate import load_cases, mape  # noqa: E402
from strategies.cost import comm, measured  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.stacks.passes import LossPasses  # noqa: E402
from strategies.job import Job  # noqa: E402

#: kernels per weight tensor of Composer's ``DecoupledAdamW.adamw`` loop (composer v0.16.4
#: ``optim/decoupled_weight_decay.py``, weight decay 0: exp_avg.mul_, .add_, exp_avg_sq.mul_,
#: .addcmul_, sqrt, div, add_(eps), param.addcdiv_), the list ``framework.
#: COMPOSER_ADAMW_ELEMENTS`` counts bytes for
ADAM_KERNELS = 8
#: FlashAttention v1, causal, head dim 128, sequence 2k, forward + backward TFLOP/s (Dao 2023,
#: FlashAttention-2 paper; the flash-attention repository's assets/flash2_a100_fwd_bwd_benchmark
#: .png and flash2_h100_fwd_bwd_benchmark.png, docs/calibration.md §3.8)
FA1_A100_2K, FA1_H100_2K = 69.0, 108.0
#: kernels per weight tensor of FSDP1's ``clip_grad_norm_`` (a norm per tensor, the clip
#: multiply per tensor; torch/distributed/fsdp/fully_sharded_data_parallel.py, PyTorch 2.1)
CLIP_KERNELS = 2


def group(case) -> str:
    """``a100``, ``h100`` (8-64 GPUs) or ``h100ls`` (128-512 GPUs) from the run id."""
    for g in ("h100ls", "a100", "h100"):
        if f"_{g}_" in case.id:
            return g
    return "?"


def with_loss(job: Job, loss: LossPasses) -> Job:
    """``job`` with its stack's cross-entropy passes replaced by ``loss``."""
    return replace(job, framework=replace(job.framework, loss=loss))


def with_hbm_scale(job: Job, scale: float) -> Job:
    """``job`` with every GPU's datasheet HBM bandwidth multiplied by ``scale``."""
    groups = tuple(replace(n, gpu=replace(n.gpu, hbm_bandwidth=n.gpu.hbm_bandwidth * scale))
                   for n in job.cluster.groups)
    return replace(job, cluster=replace(job.cluster, groups=groups))


def implied_hbm(job: Job, measured_s: float, lo: float = 0.05, hi: float = 20.0,
                tol: float = 1e-3) -> float | None:
    """The factor on the HBM bandwidth at which ``estimate(job)`` takes ``measured_s``
    seconds (bisection; None when no factor in ``[lo, hi]`` reaches it)."""
    return implied_factor(with_hbm_scale, job, measured_s, lo, hi, tol)


def optimizer_launch_s(job: Job) -> float:
    """GPU idle seconds per step of an unfused per-tensor optimizer loop: MPT's weight
    tensors (per block Wqkv, out_proj, up, down and two norm weights, no biases; the tied
    embedding and the final norm) times ``ADAM_KERNELS + CLIP_KERNELS``, each boundary at
    the stack's launch gap."""
    tensors = 6 * job.model.num_layers + 2
    gpu = job.cluster.groups[0].gpu
    return tensors * (ADAM_KERNELS + CLIP_KERNELS) * measured.launch_gap(
        gpu, job.framework.launch_gap_s)


def fsdp_traffic_s(job: Job, micro: int) -> float:
    """Seconds per step of FSDP's collectives alone on the links (module docstring)."""
    P, params = job.plan, job.model.num_params()

    def t(kind: str, nbytes: float) -> float:
        return float(comm.dp_collective_time(kind, nbytes, params, 0.0, 1, 1, P.dp, 1, 1,
                                             job.cluster))
    gathers = 2 * micro if P.zero >= 3 else 1
    return gathers * t("allgather", 2.0) + micro * t("reduce_scatter", 4.0)


def flash_rate_ratio() -> float:
    """The catalog's H100/A100 ratio of the fused attention kernel's rate (the stack's
    ``fa2``; forward and backward scale alike)."""
    from topologies.gpus import get_gpu
    h, a = get_gpu("h100"), get_gpu("a100")
    return (h.peak("bf16") * h.flash_efficiency("fa2")) / (a.peak("bf16") * a.flash_efficiency("fa2"))


def half_attention(job: Job) -> Job:
    """``job`` with its fused attention kernel at half the rate (every GPU): the step grows
    by the attention core's seconds."""
    def fast(g):
        fa2 = g.fa2_attention_efficiency
        return replace(g, attention_efficiency=g.attention_efficiency / 2,
                       fa2_attention_efficiency=None if fa2 is None else fa2 / 2)
    groups = tuple(replace(n, gpu=fast(n.gpu)) for n in job.cluster.groups)
    return replace(job, cluster=replace(job.cluster, groups=groups))


def row(c) -> dict:
    """The figures of one run (seconds per step unless said)."""
    job, meas = c.job, c.measured_step_s
    e = estimate(job)
    old = estimate(with_loss(job, LossPasses())).step_time_s
    return dict(id=c.id, g=group(c), seq=job.model.seq_length, m=e.num_microbatches,
                meas=meas, est=e.step_time_s, old=old, err=100 * (e.step_time_s / meas - 1),
                err_old=100 * (old / meas - 1), opt=e.breakdown_s["optimizer"],
                launch=optimizer_launch_s(job), fsdp=fsdp_traffic_s(job, e.num_microbatches),
                attn=estimate(half_attention(job)).step_time_s - e.step_time_s,
                hbm=implied_hbm(job, meas))


def main() -> int:
    rows = [row(c) for c in load_cases(tiers=None)
            if c.id.startswith("mosaic_") and c.job is not None and c.measured_step_s]
    v1 = flash_rate_ratio() / (FA1_H100_2K / FA1_A100_2K) - 1
    for r in rows:
        r["v1"] = r["attn"] * v1 if r["g"] == "h100" else 0.0
    print("run  seq  micro-batches  measured s  modelled s  error % (old loss %)  "
          "missing s  loss s  optimizer s  optimizer-loop idle s  FSDP traffic s  "
          "attention s  v1-ratio attention s  implied HBM factor")
    for r in rows:
        hbm = "-" if r["hbm"] is None else f"{r['hbm']:.2f}"
        print(f"{r['id']}  {r['seq']}  {r['m']}  {r['meas']:.3f}  {r['est']:.3f}  "
              f"{r['err']:+.1f} ({r['err_old']:+.1f})  {r['meas'] - r['est']:+.3f}  "
              f"{r['est'] - r['old']:+.4f}  {r['opt']:.4f}  {r['launch']:.4f}  "
              f"{r['fsdp']:.3f}  {r['attn']:.3f}  {r['v1']:.3f}  {hbm}")
    print("\ngroup  runs  MAPE (old loss)  mean error (old loss)  median share of the step: "
          "missing, loss change, optimizer, optimizer-loop idle, FSDP traffic, "
          "attention, v1-ratio attention  implied HBM factor median [min, max]")
    groups = {}
    for r in rows:
        groups.setdefault(r["g"], []).append(r)
        if r["seq"] <= 2048:
            groups.setdefault(r["g"] + " seq<=2048", []).append(r)
    groups["all 97"] = rows
    for g in ("a100", "a100 seq<=2048", "h100", "h100 seq<=2048", "h100ls", "all 97"):
        rs = groups.get(g, [])
        if not rs:
            continue
        errs, olds = [r["err"] for r in rs], [r["err_old"] for r in rs]
        share = [statistics.median(f(r) / r["est"] for r in rs) for f in (
            lambda r: r["meas"] - r["est"], lambda r: r["est"] - r["old"],
            lambda r: r["opt"], lambda r: r["launch"], lambda r: r["fsdp"],
            lambda r: r["attn"], lambda r: r["v1"])]
        hb = [r["hbm"] for r in rs if r["hbm"] is not None]
        span = f"{statistics.median(hb):.2f} [{min(hb):.2f}, {max(hb):.2f}]" if hb else "-"
        print(f"{g}  {len(rs)}  {mape(errs):.2f} % ({mape(olds):.2f} %)  "
              f"{statistics.fmean(errs):+.2f} % ({statistics.fmean(olds):+.2f} %)  "
              + ", ".join(f"{100 * s:+.1f} %" for s in share) + f"  {span}")
    print(f"\ncatalog H100/A100 attention rate ratio {flash_rate_ratio():.3f}, FlashAttention v1's "
          f"at 2k {FA1_H100_2K / FA1_A100_2K:.3f}")
    print("\nA100 step / H100 step of runs that differ only in the GPU (same model, sequence, "
          "GPU count, micro-batch, global batch): measured, modelled (old loss); H100 seconds "
          "missing per micro-batch")
    by = {r["id"]: r for r in rows}
    for ident, a in sorted(by.items()):
        h = by.get(ident.replace("_a100_", "_h100_"))
        if a["g"] != "a100" or h is None or a["m"] != h["m"]:
            continue
        print(f"{ident.replace('_a100_', '_*_')}  seq {a['seq']}  {a['meas'] / h['meas']:.2f}  "
              f"{a['est'] / h['est']:.2f} ({a['old'] / h['old']:.2f})  "
              f"{(h['meas'] - h['est']) / h['m']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
