"""MosaicML's llm-foundry rows: the attention core the model charges, the least rate the kernel
that ran must have reached, and what the FlashAttention-1 class's published bars would make of
the rows (docs/calibration.md §5.140, §3.8).

For each ``mosaic_`` run of ``published.json`` (analytic estimate): the modelled step, the
attention core's seconds per step (``attention_time.attention_time_fwd`` x layers x
micro-batches, a full recompute's second forward included, times the overlap clock) and its
share of the step; the executed attention FLOPs per step (forward per pass + backward 2.5x,
``attention_counts.attn_core_flops_fwd``) over those seconds, the rate the model gives the
kernel; the same FLOPs over the **measured** step, ``floor``: the least rate the kernel can
have run at, since the attention cannot take longer than the whole step; the FlashAttention-1
bar at the run's sequence (``attention_fa1.combined_rate``); and the step's error with the
framework's kernel set to ``"fa1"`` (the estimate run again) where the run states a
FlashAttention-1-class kernel (``plan.attn_impl``: llm-foundry's ``triton``), else as modelled.

A bar below ``floor`` cannot be the rate of the kernel that ran: the attention alone would
outlast the measured step. The summary gives, per chip and sequence bucket, the median
attention share, MAPE and mean error as modelled and with ``"fa1"``, and how many runs' floor
is above the bar.

Run: python experiments/mosaic_attention.py [--rows]
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases, mape  # noqa: E402
from strategies.cost import attention_counts, attention_fa1, attention_time  # noqa: E402
from strategies.cost import overlap_clock  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.text import attention_kernel  # noqa: E402

def chip_of(gpu_name: str) -> str:
    """'A100' or 'H100' from the catalog's GPU name."""
    return "H100" if "H100" in gpu_name else "A100"


def bucket(seq: int) -> str:
    """The sequence bucket of the issue's table."""
    return "<=2048" if seq <= 2048 else ("4096-8192" if seq <= 8192 else ">=16384")


def attention_row(case) -> dict:
    """The modelled attention of one MosaicML run and the errors with the published rates."""
    j = case.job
    m, p, fw = j.model, j.plan, j.framework
    gpu = j.cluster.groups[0].gpu
    step = estimate(j).step_time_s
    mb = j.num_microbatches
    fwd, bwd = attention_time.attention_time_fwd(m, p.mbs, p.tp, p.cp, True, gpu, 1.0, fw,
                                                 j.system)
    passes = 2 if p.recompute == "full" else 1
    slow = float(overlap_clock.overlap_slowdown(
        p.tp, p.tp_comm_overlap, p.cp, p.zero,
        overlap_clock.dp_overlaps_whole_step(p.dp, mb, p.overlap_grad_reduce)))
    attn = slow * m.num_layers * mb * (passes * float(fwd) + float(bwd))
    flops = m.num_layers * mb * (passes + attention_time.FLASH_BWD_FACTOR) \
        * float(attention_counts.attn_core_flops_fwd(m, p.mbs, p.tp, p.cp, True))
    meas = case.measured_step_s
    stated = attention_kernel((case.raw.get("plan") or {}).get("attn_impl"))
    fa1 = stated == "fa1" and attention_fa1.has_rate(gpu)
    step_fa1 = estimate(replace(j, framework=replace(fw, attention_kernel="fa1"))).step_time_s \
        if fa1 else step
    bar = attention_fa1.combined_rate(gpu, m.seq_length) if attention_fa1.has_rate(gpu) else None
    return {"id": case.id, "chip": chip_of(gpu.name), "seq": m.seq_length,
            "bucket": bucket(m.seq_length), "stated": stated or "-", "step": step,
            "measured": meas, "err": 100 * (step / meas - 1), "attn": attn, "share": attn / step,
            "model_rate": flops / attn, "floor": flops / meas, "bar": bar,
            "err_fa1": 100 * (step_fa1 / meas - 1)}


def rows() -> list[dict]:
    """Every ``mosaic_`` run of published.json that resolves, as ``attention_row``."""
    return [attention_row(c) for c in load_cases(tiers=None)
            if c.job is not None and c.id.startswith("mosaic_")]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every run")
    args = ap.parse_args(argv)
    rs = rows()
    if args.rows:
        print("| run | stated | error | attention s | share | model TF/s | floor TF/s | "
              "FA1 bar TF/s | error at fa1 |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rs:
            print(f"| {r['id']} | {r['stated']} | {r['err']:+.1f} % | {r['attn']:.3f} | "
                  f"{r['share']:.2f} | {r['model_rate'] / 1e12:.0f} | {r['floor'] / 1e12:.0f} | "
                  f"{r['bar'] / 1e12:.0f} | {r['err_fa1']:+.1f} % |")
        print()
    print("| chip | seq | runs | attention share (median) | MAPE as modelled | mean | "
          "MAPE at fa1 | mean | floor above the FA1 bar |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for chip in ("A100", "H100"):
        for b in ("<=2048", "4096-8192", ">=16384", "all"):
            g = [r for r in rs if r["chip"] == chip and (b == "all" or r["bucket"] == b)]
            if not g:
                continue
            sh = sorted(r["share"] for r in g)[len(g) // 2]
            above = sum(r["floor"] > r["bar"] for r in g)
            print(f"| {chip} | {b} | {len(g)} | {sh:.2f} | {mape([r['err'] for r in g]):.2f} % | "
                  f"{_mean([r['err'] for r in g]):+.2f} % | "
                  f"{mape([r['err_fa1'] for r in g]):.2f} % | "
                  f"{_mean([r['err_fa1'] for r in g]):+.2f} % | {above} |")
    print(f"| all | all | {len(rs)} | | {mape([r['err'] for r in rs]):.2f} % | "
          f"{_mean([r['err'] for r in rs]):+.2f} % | {mape([r['err_fa1'] for r in rs]):.2f} % | "
          f"{_mean([r['err_fa1'] for r in rs]):+.2f} % | "
          f"{sum(r['floor'] > r['bar'] for r in rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
