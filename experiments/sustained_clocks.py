#!/usr/bin/env python
"""Public sustained-GEMM measurements against the catalog's sustained clocks
(docs/calibration.md §5.41).

Run (a few seconds, analytic only):

    python experiments/sustained_clocks.py            # Markdown tables on stdout
    python experiments/sustained_clocks.py --what-if  # + GB200 rows at the power rule's ratio

The catalog prices a large Blackwell GEMM at ``peak · MAMF/peak · r``: mamf-finder's burst
fraction times a sustained/burst clock ratio ``r`` (``topologies/gpus/sustained.py``, §3.1).
B200's ``r`` is measured (node MSMF / MAMF); the power rule (``sustained_ratio``) scales it by the cube
root of the power per SM for B300 and GB300. GB200's ``r`` is read from one public harness
that ran on H100, H200, GB200 and GB300 (``AZURE_FP8_SUSTAINED``: cuBLASLt fp8, 10,000
warm-up iterations), through the Hopper parts, whose catalog rates are measured
(``harness_ratio``).

Table 1: the harness's rates beside the model's rate at the same shape (``model_tflops``).
On one harness the measured/model ratio should be the same on every part if the catalog's
sustained rates are right relative to each other.

Table 2: each part's sustained/burst ratio: the catalog's, the power rule's, and the harness's
(through H100 and H200). GB200's other published harness run (driver 570.99) is listed to show
how much the software moved the figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.h100_gemm_shapes import model_tflops  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402
from topologies.gpus.sustained import (AZURE_FP8_SUSTAINED, GB200_FP8_SUSTAINED_RATIO,  # noqa: E402
                                       HOPPER_FP8, HOPPER_FP8_PEAK, harness_ratio,
                                       sustained_ratio)

#: the two shapes of ``AZURE_FP8_SUSTAINED`` (m = n = k)
SHAPES = (16384, 32768)
#: mamf-finder's fp8 burst of the Grace-Blackwell parts (ml-engineering 744d01e: GB200 3615.6
#: TFLOP/s; no GB300 row is published, so GB300 takes GB200's, as the catalog does)
MAMF_FP8 = {"GB200": 3615.6, "GB300": 3615.6}
#: the other stored version of Azure_Results/ND_GB200_v6_results.md (driver 570.99, CUDA 12.8,
#: fp8 only, fewer sections: by its content the earlier run), same harness and shapes: TFLOP/s
#: at 16384 and 32768
AZURE_GB200_570_99 = (2695.0, 2623.1)


def rate_rows() -> list[tuple]:
    """``(part, n, measured TFLOP/s, model TFLOP/s, measured / model)`` of every harness point."""
    out = []
    for part, rates in AZURE_FP8_SUSTAINED.items():
        for n, meas in zip(SHAPES, rates):
            mod = model_tflops(part, "fp8", 1, n, n, n)
            out.append((part, n, meas, mod, meas / mod))
    return out


def ratio_rows() -> list[tuple]:
    """``(part, catalog ratio, power-rule ratio, harness ratio, rule / harness - 1)`` of the
    Grace-Blackwell parts, and GB200's other (driver 570.99) harness run."""
    out = []
    for part in ("GB200", "GB300"):
        g = get_gpu(part)
        cat = g.fp8_matmul_efficiency * g.peak("fp8") / 1e12 / MAMF_FP8[part]
        rule = sustained_ratio(g.tdp_w, g.sm_count)
        h = harness_ratio(part, MAMF_FP8[part])
        out.append((part, cat, rule, h, rule / h - 1))
    first = statistics.mean(a / b * eff * HOPPER_FP8_PEAK / MAMF_FP8["GB200"]
                            for ref, eff in HOPPER_FP8.items()
                            for a, b in zip(AZURE_GB200_570_99, AZURE_FP8_SUSTAINED[ref]))
    rule = sustained_ratio(1200, 148)
    out.append(("GB200, driver 570.99", GB200_FP8_SUSTAINED_RATIO, rule, first, rule / first - 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what-if", action="store_true",
                    help="GB200 rows with GB200 at the power rule's ratio (the catalog before)")
    args = ap.parse_args(argv)

    print("Table 1: Azure harness (cuBLASLt fp8, 10,000 warm-up iterations) against the model\n")
    print("| part | m = n = k | measured TFLOP/s | model TFLOP/s | measured / model |")
    print("|---|---:|---:|---:|---:|")
    for part, n, meas, mod, r in rate_rows():
        print(f"| {part} | {n} | {meas:.1f} | {mod:.1f} | {r:.3f} |")

    print("\nTable 2: sustained / burst clock ratio of the Grace-Blackwell parts\n")
    print("| part | catalog | power rule | harness (via H100, H200) | rule / harness - 1 |")
    print("|---|---:|---:|---:|---:|")
    for part, cat, rule, h, err in ratio_rows():
        print(f"| {part} | {cat:.3f} | {rule:.3f} | {h:.3f} | {100 * err:+.1f} % |")

    if args.what_if:
        from experiments.blackwell_gemm_shapes import print_what_if, what_if_gb200
        rule = sustained_ratio(1200, 148)
        print(f"\nWhat-if: GB200 at the power rule's {rule:.3f} instead of the catalog's "
              f"{GB200_FP8_SUSTAINED_RATIO:.3f}\n")
        print_what_if(what_if_gb200(rule), "the power rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
