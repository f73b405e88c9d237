"""GB300 over GB200 on the same software release: does GB200's fp8 rate on the 2025-26 stacks
(CUDA 13.x) read higher than the Azure harness measured on CUDA 12.8? (docs/calibration.md §5.55)

Megatron-Bridge publishes each model on GB200 and on GB300 in the same container (25.11,
26.04.01, 26.06). The Azure harness (``topologies.gpus.sustained.AZURE_FP8_SUSTAINED``) measured GB200
on CUDA 12.8 and GB300 on CUDA 13.0. If a newer cuBLAS had lifted GB200's fp8 GEMMs beyond
the 12.8 figure, GB300/GB200 on one 13.x stack would read *below* the harness's ratio. Per
pair this prints the measured step-time ratio GB200/GB300, the model's, and the harness's
GB300/GB200 fp8 rate ratio (mean of its two shapes).

Usage:
    python experiments/blackwell_release_pairs.py
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topologies.gpus.sustained import AZURE_FP8_SUSTAINED  # noqa: E402

FILES = ("published_2026.json", "megatron_bridge_2604.json", "heldout_2026b.json")


def harness_gb300_over_gb200() -> float:
    """GB300's sustained fp8 rate over GB200's in the Azure harness (mean of both shapes)."""
    return statistics.mean(a / b for a, b in zip(AZURE_FP8_SUSTAINED["GB300"],
                                                  AZURE_FP8_SUSTAINED["GB200"]))


def pair_rows(files: tuple[str, ...] = FILES) -> list[tuple]:
    """``(file, GB200 run, dtype, measured GB200/GB300 step ratio, model's ratio,
    GB200 plan, GB300 plan)`` (plans as text: tp, pp, vp, gbs) of every run whose id names
    gb200 and has a gb300 twin (same id with gb300) in the same file; analytic estimate."""
    from simulator.studies.validate import load_cases
    from strategies.estimate.scalar import estimate

    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "strategies", "reference", "data")
    out = []
    for f in files:
        cases = {c.id: c for c in load_cases(os.path.join(data, f), tiers=None)
                 if c.job is not None and c.measured_step_s is not None}
        for cid, c in cases.items():
            twin = cases.get(cid.replace("gb200", "gb300"))
            if "gb200" not in cid or twin is None:
                continue
            plans = [f"tp{p.tp} pp{p.pp} vp{p.vpp} gbs{p.gbs}"
                     for p in (c.job.plan, twin.job.plan)]
            out.append((f, cid, c.job.dtype,
                        c.measured_step_s / twin.measured_step_s,
                        estimate(c.job).step_time_s / estimate(twin.job).step_time_s,
                        plans[0], plans[1]))
    return out


def main() -> int:
    h = harness_gb300_over_gb200()
    print(f"Azure harness, fp8, GB300 (CUDA 13.0) / GB200 (CUDA 12.8): {h:.3f}\n")
    rows = pair_rows()
    print("| file | GB200 run | dtype | measured GB200/GB300 | model GB200/GB300 "
          "| plans GB200 ; GB300 |")
    print("|---|---|---|---:|---:|---|")
    for f, cid, d, meas, model, p2, p3 in rows:
        print(f"| {f} | {cid} | {d} | {meas:.3f} | {model:.3f} | {p2} ; {p3} |")
    fp8 = [r for r in rows if r[2] in ("fp8", "fp8-current", "mxfp8")]
    meas, model = [r[3] for r in fp8], [r[4] for r in fp8]
    print(f"\nfp8/mxfp8 pairs: {len(fp8)}; measured ratio mean {statistics.mean(meas):.3f} "
          f"(min {min(meas):.3f}); model mean {statistics.mean(model):.3f}; "
          f"pairs whose measured ratio is below the harness's {h:.3f}: "
          f"{sum(r[3] < h for r in fp8)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
