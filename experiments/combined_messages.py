#!/usr/bin/env python
"""Megatron-Core's combined 1F1B rows (``ep_overlap``, pp > 1): what the pipeline messages
leave between the estimate and the contention-free simulation (docs/calibration.md §5.91).

Run (about half a minute):

    python experiments/combined_messages.py
    python experiments/combined_messages.py --microbatches 32
    python experiments/combined_messages.py --zero head_fwd

For each row, at the given micro-batches (``simulator.extend.with_microbatches``): the
estimate and the contention-free simulation, then both without the pipeline messages (the
estimate less its ``pp_comm``; the simulation with no point-to-point bytes), and the
seconds of messages each exposes (the difference). ``--zero FIELD``: the simulation with
that stage-cost field 0 (e.g. ``head_fwd``, to see whether the LM head's forward, which the
builder runs before a pair's backward message and Megatron after it, holds the messages).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.extend import with_microbatches  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

ROWS = (("heldout_2026b", "mbridge2606_qwen3235ba22b_gb200_256_mxfp8"),
        ("megatron_bridge_2604", "mbridge260401_qwen3235ba22b_h100_256_fp8"),
        ("megatron_bridge_2604", "mbridge260401_deepseekv3_b200_256_mxfp8"))


def main(m: int, zero: str | None = None) -> None:
    print("| row | estimate s | simulated s | sim/est − 1 | without messages: estimate s "
          "| simulated s | sim/est − 1 | messages: estimate s | simulated s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    notes: list[str] = []
    for name, rid in ROWS:
        data = load_reference(f"strategies/reference/data/{name}.json")
        job = with_microbatches(case_from_entry(next(e for e in data if e["id"] == rid),
                                                data).job, m)
        r = estimate(job)
        c = stage_costs(job)
        c = replace(c, **{zero: 0.0}) if zero else c
        e, s = r.step_time_s, simulate(job, network="contention-free", costs=c).step_time_s
        e0 = e - r.breakdown_s["pp_comm"]
        s0 = simulate(job, network="contention-free",
                      costs=replace(c, p2p_bytes=0.0)).step_time_s
        print(f"| `{rid}` | {e:.5f} | {s:.5f} | {100 * (s / e - 1):+.2f} % | {e0:.5f} | "
              f"{s0:.5f} | {100 * (s0 / e0 - 1):+.2f} % | {e - e0:.5f} | {s - s0:.5f} |",
              flush=True)
        notes.append(hop_line(job, c))
    print()
    for line in notes:
        print(line)


def hop_line(job, c) -> str:
    """One message's seconds inside a node, the path's mean (``comm.path_p2p_time`` over the
    schedule's hops, what the estimate charges each message) and the delayed attention
    weight gradient that hides a steady call (``dw_attn``)."""
    from strategies.cost import comm as cm
    from strategies.schedules import get_schedule
    p = job.plan
    stride = p.tp * p.cp * p.dp
    hops = get_schedule(p.schedule).path_hops(p.pp, p.vpp)
    inside = float(cm.p2p_time(c.p2p_bytes, job.cluster, 0))
    path = float(cm.path_p2p_time(c.p2p_bytes, job.cluster, stride, hops))
    return (f"{job.plan.short()}: one message inside a node {inside * 1e3:.4f} ms, the path's "
            f"mean {path * 1e3:.4f} ms, dw_attn {c.dw_attn * 1e3:.4f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--microbatches", type=int, default=16,
                    help="micro-batches per pipeline (default 16)")
    ap.add_argument("--zero", default=None,
                    help="a stage-cost field set to 0 in the simulation (e.g. head_fwd)")
    a = ap.parse_args()
    main(a.microbatches, a.zero)
