#!/usr/bin/env python
"""How far the expert path's host time would have to be from its measured value to explain
the MoE rows: the analytic MAPE per family with ``moe_time.EXPERT_HOST_S`` (TransformerEngine
issue #2897's GB200 measurement, per local expert) scaled by ``k``. A sensitivity study, not
a fit: the model keeps ``k = 1``.

Run (about a minute, analytic only):

    python experiments/moe_host_sensitivity.py        # Markdown table on stdout
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_residuals import FILES, family_rows  # noqa: E402
from strategies.cost import moe_time  # noqa: E402

SCALES = (0.0, 1.0, 4.0, 8.0, 16.0)
FAMILIES = ("DeepSeek-V3", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "gpt-oss-120b", "all MoE rows")


def main() -> None:
    base = moe_time.EXPERT_HOST_S
    print("| file | k | host us per local expert (fwd/bwd) | " + " | ".join(FAMILIES) + " |")
    print("|---|---|---|" + "---|" * len(FAMILIES))
    try:
        for path in FILES:
            for k in SCALES:
                moe_time.EXPERT_HOST_S = (k * base[0], k * base[1])
                got = {f: e for f, _, e in family_rows(path)}
                cells = " | ".join(f"{got[f]:.1f} %" if f in got else "-" for f in FAMILIES)
                print(f"| {os.path.basename(path)} | {k:g} | {k * base[0] * 1e6:.1f}/"
                      f"{k * base[1] * 1e6:.1f} | {cells} |")
    finally:
        moe_time.EXPERT_HOST_S = base


if __name__ == "__main__":
    main()
