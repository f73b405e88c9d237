"""The dense-GEMM efficiency published runs imply, everything else as the model charges it
(docs/calibration.md §3.13).

For each run whose id matches ``--match``: the analytic step time and error, and the factor on
the catalog's sustained GEMM fractions (``GPU.matmul_efficiency``, and
``fp8_matmul_efficiency`` for fp8 GEMMs; the shape penalties of ``strategies.cost.gemm_kernel``
still apply on top) at which the analytic estimate equals the measured step, found by
bisection on the run's own job with only those fields of its GPU changed (``implied eff``:
that factor times the bf16 fraction). A run whose GEMMs ran on the previous generation's instruction
(``mma.sync`` on Hopper) would imply about ``MMA_SYNC_FRACTION`` of the catalog's figure;
``mma.sync err`` is the run's error with the GEMMs at that fraction. Last, the A100/H100 step
ratio, measured and modelled, of runs that differ only in the GPU.
The summary groups runs by software family and GPU (``group``), and again over the runs of at
most ``SHORT_SEQ`` tokens: runs, MAPE, and the median and range of the implied factor.

Run: python experiments/gemm_in_situ.py [--match REGEX]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import check_id_filter  # noqa: E402
from simulator.studies.validate import load_cases, mape  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402

#: the fraction of H100's dense tensor-core peak that Ampere-style ``mma.sync`` kernels reach,
#: as the CUDA-11.8 hypothesis states it (after the FlashAttention-3 paper, Shah et al. 2024,
#: arXiv:2407.08608; docs/calibration.md §3.13): used here only to say what that hypothesis
#: would predict, not by the model
MMA_SYNC_FRACTION = 2 / 3
#: the summary also groups runs of at most this many tokens per sequence, where attention is
#: a small share of the step (under 10 % of the modelled MPT layers, docs/calibration.md §3.8)
SHORT_SEQ = 2048


def with_gemm_scale(job: Job, scale: float) -> Job:
    """``job`` with every GPU's sustained GEMM fractions (``matmul_efficiency`` and, where the
    part has one, ``fp8_matmul_efficiency``) multiplied by ``scale``; nothing else changed."""
    def scaled(g):
        fp8 = g.fp8_matmul_efficiency
        return replace(g, matmul_efficiency=g.matmul_efficiency * scale,
                       fp8_matmul_efficiency=None if fp8 is None else fp8 * scale)
    groups = tuple(replace(n, gpu=scaled(n.gpu)) for n in job.cluster.groups)
    return replace(job, cluster=replace(job.cluster, groups=groups))


def implied_scale(job: Job, measured_s: float, lo: float = 0.05,
                  tol: float = 1e-5) -> float | None:
    """The factor on the catalog's GEMM fractions at which ``estimate(job)`` takes
    ``measured_s`` seconds per step (bisection between ``lo`` and the factor that puts the
    largest fraction at 1; None when no factor in that range reaches it)."""
    hi = min(1 / max(f for n in job.cluster.groups
                     for f in (n.gpu.matmul_efficiency, n.gpu.fp8_matmul_efficiency or 0)),
             4.0)
    return implied_factor(with_gemm_scale, job, measured_s, lo, hi, tol)


def implied_factor(scaled: Callable[[Job, float], Job], job: Job, measured_s: float,
                   lo: float, hi: float, tol: float) -> float | None:
    """The factor ``x`` in ``[lo, hi]`` at which ``estimate(scaled(job, x))`` takes
    ``measured_s`` seconds per step, the step falling as ``x`` grows (bisection to ``tol``;
    None when no factor in the range reaches it)."""
    def step(x: float) -> float:
        return estimate(scaled(job, x)).step_time_s
    if step(hi) > measured_s or step(lo) < measured_s:
        return None
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if step(mid) > measured_s:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def group(case) -> str:
    """Software family and GPU of a run: its framework profile's name (MosaicML's rows as
    ``mosaic`` and, for the 128-512 GPU table, ``mosaic-ls``) and the GPU name's first part."""
    gpu = case.job.cluster.groups[0].gpu.name.split("-")[0]
    fw = case.job.framework.name
    if case.id.startswith("mosaic_"):
        fw = "mosaic-ls" if "h100ls" in case.id else "mosaic"
    return f"{fw} {gpu}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--match", default=r"^(mosaic_|torchtitan_|megatron_core_|dgxc_nemo)",
                    help="regex on the run id")
    args = ap.parse_args(argv)
    check_id_filter("gemm_in_situ", "--match", args.match, regex=True)
    head = ("run", "group", "error", "catalog eff", "implied eff", "implied/catalog",
            "mma.sync err")
    rows, per, cases = [], {}, {}
    for c in load_cases(tiers=None):
        if c.job is None or c.measured_step_s is None or not re.search(args.match, c.id):
            continue
        gpu = c.job.cluster.groups[0].gpu
        cases[c.id] = c
        err = 100 * (estimate(c.job).step_time_s / c.measured_step_s - 1)
        # only parts whose native MMA FlashAttention-2 does not use (Hopper: the catalog's
        # ``fa2_attention_efficiency``) have a previous-generation path to fall back to
        mma_err = None
        if gpu.fa2_attention_efficiency is not None:
            mma = estimate(with_gemm_scale(c.job, MMA_SYNC_FRACTION)).step_time_s
            mma_err = 100 * (mma / c.measured_step_s - 1)
        ratio = implied_scale(c.job, c.measured_step_s)
        imp = None if ratio is None else ratio * gpu.matmul_efficiency
        rows.append((c.id, group(c), f"{err:+.1f} %", f"{gpu.matmul_efficiency:.3f}",
                     "-" if imp is None else f"{imp:.3f}",
                     "-" if ratio is None else f"{ratio:.3f}",
                     "-" if mma_err is None else f"{mma_err:+.1f} %"))
        per.setdefault(group(c), []).append((err, ratio, mma_err))
        if c.job.model.seq_length <= SHORT_SEQ:
            per.setdefault(group(c) + f" seq<={SHORT_SEQ}", []).append((err, ratio, mma_err))
    w = [max(len(x) for x in col) for col in zip(head, *rows)]
    for r in (head, *rows):
        print("  ".join(x.ljust(n) for x, n in zip(r, w)))
    print()
    print("group  runs  MAPE  implied/catalog median [min, max]  MAPE with mma.sync GEMMs")
    for g in sorted(per):
        errs = [e for e, _, _ in per[g]]
        rs = [r for _, r, _ in per[g] if r is not None]
        ms = [x for _, _, x in per[g] if x is not None]
        span = (f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]" if rs else "-")
        print(f"{g}  {len(errs)}  {mape(errs):.1f} %  {span}  "
              + (f"{mape(ms):.1f} %" if ms else "-"))
    print(f"\nmma.sync on Hopper would imply {MMA_SYNC_FRACTION:.3f} of the catalog's figure")
    print("\nA100 step / H100 step of runs that differ only in the GPU (same model, sequence, "
          "GPU count, micro-batch and global batch): measured, modelled")
    for ident, a in sorted(cases.items()):
        h = cases.get(ident.replace("_a100_", "_h100_"))
        if "_a100_" not in ident or h is None or a.job.plan.gbs != h.job.plan.gbs:
            continue
        model = estimate(a.job).step_time_s / estimate(h.job).step_time_s
        print(f"{ident.replace('_a100_', '_*_')}  seq {a.job.model.seq_length}  "
              f"{a.measured_step_s / h.measured_step_s:.2f}  {model:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
