"""cProfile of the DeepSeek-V3 report's simulation (``report_deepseek.py``'s job), smaller or full.

The report's plan (pp 16, ep 64, DualPipe, DeepEP, HAI-LLM's FP8 recipe on the padded
64-layer model) at ``--gbs`` sequences on ``--cluster``: the same shape at fewer
micro-batches or fewer nodes, to see where the engine's time goes at scale. Prints the CPU
seconds of ``simulate(job)``, the queue entries and records, a digest of the output (step
time, records in order, metrics: equal digests mean bit-identical results) and, with
``--profile``, the hottest functions by cumulative and own time. Asserts nothing.

    python experiments/profile_deepseek.py --gbs 4096 --schedule dualpipe     # the report's row
    python experiments/profile_deepseek.py --cluster hgx-h800:64 --plan-ep 32 --gbs 1024 --profile
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def build(cluster: str, gbs: int, schedule: str, ep: int | None):
    from report_deepseek import job_of, padded_model, reference_plan
    from strategies.hf_config import load_model_arg
    plan = reference_plan()
    if ep is not None:
        plan = ",".join(f"ep={ep}" if p.startswith("ep=") else p for p in plan.split(","))
    model, _ = padded_model(load_model_arg("deepseek-v3"), 16)
    return job_of(model, cluster, plan, schedule, gbs, "fp8-blockwise", "hai-llm")


def digest(res) -> str:
    h = hashlib.sha256()
    h.update(repr(res.step_time_s).encode())
    for r in res.records:
        h.update(repr(tuple(r)).encode())
    h.update(json.dumps(res.metrics, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", default="hgx-h800:256")
    ap.add_argument("--gbs", type=int, default=4096)
    ap.add_argument("--schedule", default="dualpipe")
    ap.add_argument("--plan-ep", type=int, default=None, help="replace the plan's ep")
    ap.add_argument("--profile", action="store_true", help="run under cProfile")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--link-series", action="store_true",
                    help="record each link's load over time, as paraplan simulate does")
    ap.add_argument("--dump", default=None, help="write the cProfile stats here")
    a = ap.parse_args()
    import simulator.simulate as sim
    from simulator.simulate import simulate
    job = build(a.cluster, a.gbs, a.schedule, a.plan_ep)
    spent: Counter = Counter()
    if not a.profile:            # CPU seconds by phase (profile_simulate.py's split)
        from simulator.engine import core
        from profile_search import timed
        timed(spent, "compile", sim, "compile_job")
        timed(spent, "metrics", sim, "derive_metrics")
        timed(spent, "engine setup", core.Engine, "__init__")
        timed(spent, "engine setup", core.Engine, "start")
        timed(spent, "run", sim.engine, "run")
    prof = cProfile.Profile() if a.profile else None
    c0, t0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    res = simulate(job, link_series=a.link_series)
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(f"{a.schedule} gbs {a.gbs} on {a.cluster}: step {res.step_time_s!r} s, "
          f"{res.events:,} queue entries, {len(res.records):,} records, {cpu:.2f} CPU s, "
          f"{wall:.2f} s wall, digest {digest(res)}")
    if spent:
        spent["event loop"] = spent.pop("run") - spent["engine setup"]
        spent["other"] = cpu - sum(spent.values())
        print("  CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in spent.items()))
    if prof:
        st = pstats.Stats(prof)
        if a.dump:
            st.dump_stats(a.dump)
        st.sort_stats("cumulative").print_stats(a.top)
        st.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
