"""Benchmark of ``paraplan search`` on GPT-3 175B, 128 DGX A100 (1,024 GPUs), global batch 1536.

Reports the analytic scoring rate (enumerate + prune + estimate + bound, plans per second),
how many plans were simulated, the wall time of the whole search with 2 workers (target
< 60 s on 2 cores) and with 1 worker, and the best plan against the Megatron-LM paper's.
Each search runs in its own process (``paraplan search --json``), as a user would run it.

    python experiments/bench_search.py                 # 2 workers, then 1
    python experiments/bench_search.py --workers 2     # just one run
    python experiments/bench_search.py --scoring-only  # the scoring's CPU seconds alone
    python experiments/bench_search.py --workers 2 --compare-exact --repeat 2
        # each run twice, alternately with --exact (every micro-batch simulated: the search
        # before the affine extension) and without (the default)
    python experiments/bench_search.py --workers 2 --schedules all
        # the search with every schedule (zero-bubble family, DualPipe(V)) enumerated
    python experiments/bench_search.py --case long-context --workers 2 --repeat 3
        # Llama 3 8B at 131,072 tokens on one DGX H100 under Megatron-Core (every K/V
        # exchange offered: the all-gather's grid schedule, attention_grid.list_schedule),
        # the median of 3 printed; --case moe-long: Qwen3-30B-A3B at 32,768 tokens on 4 H100s
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ARGS = ["search", "--model", "gpt3-175b", "--cluster", "dgx-a100:128", "--global-batch", "1536",
        "--json"]
#: the searches timed (``--case``): the README's, and two long-context ones under a named stack
CASES = {
    "default": ARGS,
    "long-context": ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:8", "--seq-len",
                     "131072", "--global-batch", "64", "--framework", "megatron-core", "--json"],
    "moe-long": ["search", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:4", "--seq-len",
                 "32768", "--global-batch", "32", "--framework", "megatron-core", "--json"],
}


def scoring_rate(schedules: str = "default") -> dict:
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.analytic import estimate_arrays
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import cluster_preset
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    t0, c0 = time.perf_counter(), time.process_time()
    sp = enumerate_space(m, cl, 1536, SpaceOptions(schedules=schedules))
    estimate_arrays(m, cl, "bf16", sp.cols)
    step_time_lower_bound(m, cl, "bf16", sp.cols)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"raw_plans": sp.raw, "feasible": sp.size, "scoring_wall_s": wall,
            "scoring_cpu_s": cpu, "raw_plans_per_s": sp.raw / wall}


def search(workers: int, exact: bool = False, schedules: str = "default",
           case: str = "default") -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "simulator.cli", *CASES[case], "--workers",
                          str(workers), "--schedules", schedules] + (["--exact"] if exact else []), cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the search and its workers
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rep = json.loads(out)
    best = rep["plans"][0]
    return {"workers": workers, "exact": exact, "process_wall_s": wall, "cpu_s": cpu,
            "search_wall_s": rep["wall_s"], "extended": rep["evaluated"].get("extended", 0),
            "simulated": rep["evaluated"]["simulated"],
            "simulations_run": rep["execution"]["simulations_run"],
            "best": best["label"], "best_step_s": best["step_time_s"],
            "recommended": rep["recommended"]["label"],
            "references": {r["label"]: r["step_time_s"] for r in rep["references"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, action="append",
                    help="worker counts to time (default: 2 then 1)")
    ap.add_argument("--compare-exact", action="store_true",
                    help="also time each run with --exact (no affine extension)")
    ap.add_argument("--repeat", type=int, default=1, help="times each run is repeated")
    ap.add_argument("--schedules", choices=("default", "all"), default="default",
                    help="the search's --schedules (default: gpipe, 1f1b, interleaved)")
    ap.add_argument("--scoring-only", action="store_true",
                    help="time the analytic scoring alone (this process's CPU seconds, "
                         "imports excluded), no search")
    ap.add_argument("--case", choices=tuple(CASES), default="default",
                    help="the search timed (default: GPT-3 175B on dgx-a100:128; the analytic "
                         "scoring rate is timed for it alone)")
    ap.add_argument("--json", action="store_true", help="print a JSON record")
    args = ap.parse_args()
    rate = scoring_rate(args.schedules) if args.case == "default" else None
    if args.scoring_only and rate is None:
        ap.error("--scoring-only times the default case only")
    if args.scoring_only:
        print(json.dumps(rate) if args.json else
              f"analytic scoring ({args.schedules}): {rate['raw_plans']:,} plans enumerated, "
              f"{rate['feasible']:,} feasible, {rate['scoring_cpu_s']:.3f} CPU s "
              f"({rate['scoring_wall_s']:.3f} s wall)")
        return
    modes = [True, False] if args.compare_exact else [False]
    runs = [search(w, exact, args.schedules, args.case) for w in (args.workers or [2, 1])
            for _ in range(args.repeat) for exact in modes]
    if args.json:
        print(json.dumps({"scoring": rate, "runs": runs, "cores": os.cpu_count()}, indent=2))
        return
    print(f"case: {args.case} ({' '.join(CASES[args.case][1:-1])}); schedules: {args.schedules}")
    if rate is not None:
        print(f"analytic scoring: {rate['raw_plans']:,} plans enumerated, {rate['feasible']:,} "
              f"feasible, in {rate['scoring_wall_s']:.2f} s, {rate['scoring_cpu_s']:.2f} CPU s "
              f"({rate['raw_plans_per_s']:,.0f} plans/s, including enumeration and pruning)")
    print(f"\n{'workers':>7} {'mode':>8} {'wall s':>7} {'CPU s':>7} {'simulated':>9} "
          f"{'extended':>8} {'runs':>5}  best plan")
    for r in runs:
        print(f"{r['workers']:>7} {'exact' if r['exact'] else 'extended':>8} "
              f"{r['process_wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['simulated']:>9} "
              f"{r['extended']:>8} "
              f"{r['simulations_run']:>5}  {r['best']} ({r['best_step_s']:.3f} s)")
    if args.repeat > 1:
        for w in args.workers or [2, 1]:
            for exact in modes:
                rs = [r for r in runs if r["workers"] == w and r["exact"] == exact]
                print(f"median of {len(rs)} ({w} workers, "
                      f"{'exact' if exact else 'extended'}): "
                      f"{statistics.median(r['process_wall_s'] for r in rs):.1f} s wall, "
                      f"{statistics.median(r['cpu_s'] for r in rs):.1f} CPU s")
    for label, t in runs[0]["references"].items():
        print(f"reference {label}: {t:.3f} s ({100 * (t / runs[0]['best_step_s'] - 1):+.1f}% vs best)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"({os.cpu_count()} cores; 1-minute load average {load:.1f} at the end: wall times "
          f"on a loaded machine vary, CPU seconds (the search and its workers) less)")


if __name__ == "__main__":
    main()
