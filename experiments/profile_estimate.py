"""Where a scalar ``estimate`` spends its time: two pipelined plans, Llama 3 70B tp4 pp8
interleaved (vpp 5) on 8 DGX H100 and DeepSeek-V3 as published_2026's DualPipe row runs it
(``report_deepseek``'s reference case). Prints, per plan, the process CPU ms of the first
estimate in the process (cold memos) and the mean of ``--repeat`` more, then with
``--profile`` cProfile's top functions (cumulative) over those repeats. ``--tree DIR`` runs
another checkout (``git archive COMMIT | tar -x -C DIR``); compare checkouts alternately:
CPU time moves with the machine's load. Asserts nothing.

    python experiments/profile_estimate.py --repeat 10
    python experiments/profile_estimate.py --tree /tmp/before --repeat 10
    python experiments/profile_estimate.py --repeat 20 --profile
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

_TREE = (sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1]
         else str(Path(__file__).resolve().parents[1]))
sys.path[:0] = [_TREE, os.path.join(_TREE, "experiments")]


def jobs() -> list:
    """``(name, job)`` of the two plans."""
    import report_deepseek as rd
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from strategies.reference.cases import case_from_entry
    from topologies.cluster import cluster_preset
    llama = make_job(model_preset("llama3-70b"), cluster_preset("dgx-h100", 8),
                     parse_plan("tp=4,pp=8,mbs=1,gbs=512,schedule=interleaved,vpp=5"))
    return [("llama3-70b tp4 pp8 vpp5", llama),
            ("deepseek-v3 published_2026", case_from_entry(*rd._entry()).job)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=None, help="run this checkout's estimator instead")
    ap.add_argument("--repeat", type=int, default=10, help="estimates after the first")
    ap.add_argument("--profile", action="store_true", help="cProfile the repeats")
    a = ap.parse_args()
    from strategies.estimate.scalar import estimate
    print(f"scalar estimate ({_TREE}): CPU ms, first / mean of {a.repeat} more")
    for name, job in jobs():
        t = time.process_time()
        step = estimate(job).step_time_s
        cold = time.process_time() - t
        prof = cProfile.Profile() if a.profile else None
        t = time.process_time()
        if prof:
            prof.enable()
        for _ in range(a.repeat):
            estimate(job)
        if prof:
            prof.disable()
        warm = (time.process_time() - t) / max(a.repeat, 1)
        print(f"  {name:28} step {step:.6f} s  {cold * 1e3:7.1f} / {warm * 1e3:6.1f} ms")
        if prof:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
