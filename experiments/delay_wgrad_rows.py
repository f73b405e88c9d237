#!/usr/bin/env python
"""Megatron-Core's ``delay_wgrad_compute`` on the reference rows that run the expert-parallel
overlap (docs/calibration.md §5.101): what the reader states for each row and from which
source, and the analytic step with the switch as stated against the other value (off is
Megatron-Core's default, what a Megatron-LM user passing only
``--overlap-moe-expert-parallel-comm`` runs).

    python experiments/delay_wgrad_rows.py      # Markdown table on stdout, a few seconds
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = "strategies/reference/data/"
FILES = ("heldout_2026b.json", "megatron_bridge_2604.json", "published_2026.json")


def rows() -> list[tuple]:
    """``(file, id, pp, delay_wgrad, its source, measured s, estimate as stated s, estimate
    with the other value s)`` of every overlap row that resolves."""
    out = []
    for f in FILES:
        entries = load_reference(DATA + f)
        for e in entries:
            case = case_from_entry(e, entries)
            job = case.job
            if job is None or not job.plan.ep_overlap:
                continue
            said = next(a for a in case.assumptions if a.startswith("delay_wgrad_compute="))
            why = said.split("(", 1)[1].split(":", 1)[0].split(";", 1)[0]
            other = replace(job, plan=replace(job.plan, delay_wgrad=not job.plan.delay_wgrad))
            out.append((f, e["id"], job.plan.pp, job.plan.delay_wgrad, why,
                        case.measured_step_s, estimate(job).step_time_s,
                        estimate(other).step_time_s))
    return out


def main() -> None:
    print("| file | row | pp | delay_wgrad | source | measured s | estimate s | other value s |"
          " other/stated − 1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f, rid, pp, dw, why, m, a, b in rows():
        print(f"| {f} | {rid} | {pp} | {str(dw).lower()} | {why} | {m:.3f} | {a:.4f} | "
              f"{b:.4f} | {100 * (b / a - 1):+.2f} % |")


if __name__ == "__main__":
    main()
