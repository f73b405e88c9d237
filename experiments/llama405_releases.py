#!/usr/bin/env python
"""Llama 3.1 405B in per-tensor FP8 on GB200 (and B200), one model on one GPU across
NVIDIA's releases (docs/calibration.md §5.95): measured and modelled tokens per second per
GPU, each relative to the NeMo 25.04 row, so that what the plans change (the model) and what
the releases change (the rest) read apart.

    python experiments/llama405_releases.py
"""
from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import md_table  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import reference_cases  # noqa: E402

#: the row every other is read against: NeMo 25.04's GB200 table (tp4 pp8 cp2 vp8)
ANCHOR = "nemo2504_llama3405b_gb200_128"


def release_rows() -> list[dict[str, Any]]:
    """Every evaluated 405B row in per-tensor FP8 on GB200 or B200 (its id names the release):
    id, plan, measured and modelled tokens/s per GPU (global batch x sequence
    over step x GPUs), and both relative to ``ANCHOR``."""
    out = []
    for c in reference_cases():
        if c.job is None or "405" not in c.id or c.job.dtype not in ("fp8", "fp8-current"):
            continue
        if c.job.cluster.gpu.name not in ("GB200", "B200-SXM-180GB"):
            continue
        P, m = c.job.plan, c.job.model
        n = P.tp * P.pp * P.dp * P.cp
        tokens = P.gbs * m.seq_length / n
        out.append({"id": c.id, "plan": f"tp{P.tp} pp{P.pp} cp{P.cp} v{P.vpp} gbs{P.gbs} z{P.zero}",
                    "gpu": c.job.cluster.gpu.name, "meas": tokens / c.measured_step_s,
                    "est_s": estimate(c.job).step_time_s})
        out[-1]["model"] = tokens / out[-1]["est_s"]
    anchor = next(r for r in out if r["id"] == ANCHOR)
    for r in out:
        r["meas_rel"], r["model_rel"] = r["meas"] / anchor["meas"], r["model"] / anchor["model"]
    return out


def main() -> None:
    rows = release_rows()
    print(md_table(["row", "GPU", "plan", "measured tok/s/GPU", "model tok/s/GPU",
                    "measured / anchor", "model / anchor"],
                   [[r["id"], r["gpu"], r["plan"], f"{r['meas']:.0f}", f"{r['model']:.0f}",
                     f"{r['meas_rel']:.3f}", f"{r['model_rel']:.3f}"] for r in rows]))


if __name__ == "__main__":
    main()
