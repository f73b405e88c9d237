#!/usr/bin/env python
"""The interleaved reference rows under Megatron-Core's ``overlap_p2p_comm`` against the
same rows with blocking batched calls (docs/calibration.md §5.68).

Run (about a minute, analytic only):

    python experiments/p2p_overlap.py            # per-file and per-stack summary
    python experiments/p2p_overlap.py --rows     # and every row

Per interleaved row whose stack runs ``overlap_p2p_comm`` (``FrameworkProfile``): the
estimate's error as modelled (the fill's and the drain's chain, ``2(pp·v − 1)`` messages,
plus each steady call's excess over its hiding pass) and with the same stack's calls
blocking (``overlap_p2p_comm=False``: ``Interleaved.exposed_messages`` exchanges).
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.pp_streams import pipelined_cases  # noqa: E402
from strategies.estimate import estimate  # noqa: E402


def rows() -> list[tuple]:
    """``(file, id, framework, pp, v, error %, blocking error %)`` of every interleaved row
    that runs on a stack with ``overlap_p2p_comm``."""
    out = []
    for path, entry, case, job in pipelined_cases():
        if job.plan.schedule != "interleaved" or not job.framework.overlap_p2p_comm:
            continue
        blocking = dataclasses.replace(job, framework=dataclasses.replace(
            job.framework, overlap_p2p_comm=False))
        err = 100 * (estimate(job).step_time_s / case.measured_step_s - 1)
        was = 100 * (estimate(blocking).step_time_s / case.measured_step_s - 1)
        out.append((os.path.basename(path), entry["id"], job.framework.name, job.plan.pp,
                    job.plan.vpp, err, was))
    return out


def summary(rs: list[tuple], key) -> list[tuple]:
    """``(group, n, MAPE blocking, MAPE overlapped, mean blocking, mean overlapped)``."""
    groups: dict = {}
    for r in rs:
        groups.setdefault(key(r), []).append(r)
    out = []
    for g, xs in sorted(groups.items()):
        n = len(xs)
        out.append((g, n, sum(abs(x[6]) for x in xs) / n, sum(abs(x[5]) for x in xs) / n,
                    sum(x[6] for x in xs) / n, sum(x[5] for x in xs) / n))
    return out


def main() -> None:
    rs = rows()
    print("| group | rows | MAPE blocking | MAPE overlapped | mean blocking | mean overlapped |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, key in (("all", lambda r: "all"), ("file", lambda r: r[0]),
                      ("stack", lambda r: r[2])):
        for g, n, mb, mo, eb, eo in summary(rs, key):
            print(f"| {g} | {n} | {mb:.2f} % | {mo:.2f} % | {eb:+.2f} % | {eo:+.2f} % |")
    if "--rows" in sys.argv[1:]:
        print("\n| file | run | stack | pp | v | blocking | overlapped |")
        print("|---|---|---|---:|---:|---:|---:|")
        for f, i, fw, pp, v, err, was in rs:
            print(f"| {f} | {i} | {fw} | {pp} | {v} | {was:+.1f} % | {err:+.1f} % |")


if __name__ == "__main__":
    main()
