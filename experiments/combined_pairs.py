#!/usr/bin/env python
"""Megatron-Core's combined 1F1B with pipelining (``ep_overlap``, pp > 1) on the reference
rows: the estimate against the simulation (docs/calibration.md §5.82).

Run (about a minute):

    python experiments/combined_pairs.py
    python experiments/combined_pairs.py --files heldout_2026b --contention-free
    python experiments/combined_pairs.py --contention-free --unpipelined

For every row of the given reference files whose job runs the combined order with
pipelining: the measured step, the estimate, the simulated step as ``validate`` obtains it
(flows, folded, extended where ``simulator.extend`` may), each one's error, and
simulated/estimate − 1; ``--contention-free`` simulates on the contention-free backend
instead (the estimate's own network). ``python experiments/pipeline_hops.py --row FILE:ID``
splits one row into free communication, contention-free and flows, term by term.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.extend import extended_step_time  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILES = ("heldout_2026b", "megatron_bridge_2604", "published_2026")


def rows(files: tuple[str, ...], contention_free: bool, unpipelined: bool = False) -> None:
    print("| row | plan | measured s | estimate s (err) | simulated s (err) | sim/est − 1 |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in files:
        data = load_reference(f"strategies/reference/data/{name}.json")
        for entry in data:
            case = case_from_entry(entry, data)
            job = case.job
            if job is None or not job.plan.ep_overlap or (job.plan.pp > 1) == unpipelined:
                continue
            e = estimate(job).step_time_s
            if contention_free:
                s = simulate(job, network="contention-free", figures_only=True).step_time_s
            else:
                s, _ = extended_step_time(job, False)
            meas = case.measured_step_s
            err = (lambda x: f"{100 * (x - meas) / meas:+.1f} %") if meas else (lambda x: "")
            plan = job.plan.short().replace("|", "\\|")
            print(f"| `{name}:{case.id}` | {plan} | {meas or float('nan'):.3f} | "
                  f"{e:.4f} ({err(e)}) | {s:.4f} ({err(s)}) | {100 * (s / e - 1):+.2f} % |",
                  flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=",".join(FILES),
                    help="comma-separated reference files (without .json)")
    ap.add_argument("--contention-free", action="store_true",
                    help="simulate on the contention-free backend")
    ap.add_argument("--unpipelined", action="store_true",
                    help="the rows that run the combined order without pipelining instead")
    a = ap.parse_args()
    rows(tuple(f for f in a.files.split(",") if f), a.contention_free, a.unpipelined)
