#!/usr/bin/env python
"""DeepSpeed's pipeline engine as MT-NLG and BLOOM ran it (docs/calibration.md §5.28).

Run (about a minute):

    python experiments/deepspeed_engine.py

First table: the lock step's messages on the critical path by the kind of rank that bounds
the steady state (one layer moved onto the first, a middle or the last rank of a 48-layer
GPT-1.7B alone on one node, tp 1, dp 1; ``p2p_exchange_count.counts``: the step's change
between 300 and 30 GB/s NVLink over that of one message's time) against
``DeepSpeed1F1B.bottleneck_messages`` and the estimate; ``old`` is the count charged before,
``2(m + p − 1)``.

Second table: the Megatron-DeepSpeed pipeline rows (``published.json``,
``classic_papers.json``): micro-batches, one message's time and the all-gather after it, the
kind of rank whose path the estimate charges (``terms.messages.ranked_messages``), the seconds the
messages cost under the old count and now, and the engine's second all-gather per backward
(``PartitionedTensor.full`` of the stage's own output in ``_exec_backward_pass``, not charged)
times the micro-batches, against the measured step's miss (estimate minus measured).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "experiments"))

from p2p_exchange_count import counts, layers  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from strategies.schedules import get_schedule  # noqa: E402

DS = get_schedule("deepspeed-1f1b")
GRID = [(p, m) for p in (2, 3, 4, 8) for m in (1, 2, 4, 8, 16)]
KINDS = (("first", 0), ("middle", 1), ("last", 2))
FILES = ("published.json", "classic_papers.json")


def grid_table() -> None:
    print("| p | m | slowest rank | closed form | estimate | simulation | old |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for p, m in GRID:
        for name, k in KINDS:
            if k == 1 and p < 3:
                continue
            e, s = counts("deepspeed-1f1b", 1, p, m, layers(p, k))
            cf = float(DS.bottleneck_messages(m, p, 1, k))
            print(f"| {p} | {m} | {name} | {cf:.0f} | {e:.2f} | {s:.2f} | {2 * (m + p - 1)} |")


def rows_table() -> None:
    print("\n| row | m | p | message ms | gather ms | path | old s | now s | 2nd gather s "
          "| miss s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for f in FILES:
        data = load_reference(os.path.join(ROOT, "strategies", "reference", "data", f))
        for c in data:
            case = case_from_entry(c, data)
            job = case.job
            if job is None or job.plan.schedule != "deepspeed-1f1b" or job.plan.pp < 2:
                continue
            p, sc, m = job.plan, stage_costs(job), job.num_microbatches
            tau = float(cm.p2p_time(sc.p2p_bytes, job.cluster, p.tp * p.cp * p.dp))
            ag = float(cm.collective_time("allgather", sc.p2p_gather_bytes, p.tp, 1,
                                          job.cluster)) if sc.p2p_gather_bytes > 0 else 0.0
            est = estimate(job)
            now = est.breakdown_s["pp_comm"]
            n = now / (tau + ag)
            path = next((nm for nm, k in KINDS
                         if abs(float(DS.bottleneck_messages(m, p.pp, 1, k)) - n) < 0.5), "between")
            old = 2 * (m + p.pp - 1) * (tau + ag)
            miss = est.step_time_s - case.measured_step_s
            print(f"| {case.id} | {m} | {p.pp} | {tau * 1e3:.3f} | {ag * 1e3:.3f} | {path} | "
                  f"{old:.3f} | {now:.3f} | {ag * m:.3f} | {miss:+.2f} |")


def main() -> int:
    grid_table()
    rows_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
