#!/usr/bin/env python
"""Does a fused attention kernel's rate follow its heads or its grid, ``batch × heads``?
Reads ``experiments/device_probes.py``'s JSON (the same kernel at batch 1, 2, 4 × heads
4 ... 32) and prints, per kernel and sequence, each point's forward and backward fraction of
the catalog GPU's bf16 peak grouped by ``batch·heads``, then the spread (max/min - 1) of the
forward rate among the points of one product against that among the points of one head
count (docs/calibration.md §5.128). Asserts nothing; a second.

    python experiments/attention_batch_heads.py docs/measurements/h200_2026-11-29/run2/probes.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost.attention_time import FLASH_BWD_FACTOR  # noqa: E402
from strategies.cost.measured import attention_flops_fwd  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402


def rates(points: list[dict], peak: float) -> list[tuple[str, int, int, int, float, float]]:
    """``(kernel, seq, batch, heads, fwd, bwd)`` fractions of ``peak`` (backward: the cost
    model's convention, ``FLASH_BWD_FACTOR`` times the forward FLOPs)."""
    out = []
    for p in points:
        if p.get("fwd_seconds") is None:
            continue
        f = attention_flops_fwd(p["batch"], p["heads"], p["seq"], p["head_dim"], p["causal"])
        out.append((p["kernel"], p["seq"], p["batch"], p["heads"], f / p["fwd_seconds"] / peak,
                    FLASH_BWD_FACTOR * f / p["bwd_seconds"] / peak))
    return out


def spread(groups: dict) -> float:
    """Largest ``max/min - 1`` over the groups of two or more rates."""
    return max((max(v) / min(v) - 1 for v in groups.values() if len(v) > 1), default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probes", help="device_probes.py's JSON")
    ap.add_argument("--gpu", default="H200", help="the catalog GPU whose bf16 peak (default H200)")
    a = ap.parse_args(argv)
    with open(a.probes) as fh:
        doc = json.load(fh)
    peak = get_gpu(a.gpu).peak("bf16")
    rows = rates(doc["attention"], peak)
    print(f"{doc.get('device', '?')}: fraction of the bf16 peak ({peak / 1e12:.1f} TFLOP/s), "
          "forward / backward")
    for kernel, seq in sorted({(r[0], r[1]) for r in rows}):
        sub = sorted((r for r in rows if (r[0], r[1]) == (kernel, seq)),
                     key=lambda r: (r[2] * r[3], r[2]))
        print(f"\n{kernel} seq {seq}")
        for _, _, b, h, f, bw in sub:
            print(f"  b*h {b * h:4d}  (b{b}, h{h:2d})  {f:.3f} / {bw:.3f}")
        by_grid, by_heads = defaultdict(list), defaultdict(list)
        for _, _, b, h, f, _ in sub:
            by_grid[b * h].append(f)
            by_heads[h].append(f)
        print(f"  forward spread at one batch*heads {100 * spread(by_grid):5.1f} %, "
              f"at one head count {100 * spread(by_heads):5.1f} %")
    if doc.get("launch_gap"):
        g = doc["launch_gap"]
        print(f"\nlaunch gap: eager {g['eager_s'] * 1e6:.2f} us, graph {g['graph_s'] * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
