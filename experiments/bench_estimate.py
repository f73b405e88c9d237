"""Benchmark of the vectorised analytic estimator: plans estimated per second on one core.

The batch is every feasible plan of GPT-3 175B on 128 DGX A100 (global batch 1536), of
Llama 3 8B on 2 DGX H100 and of Mixtral 8x7B on 2 DGX H100, repeated to ``--plans`` rows.
Also timed: the vectorised peak memory (``strategies.memory.arrays``) and the simulation
lower bound (``strategies.estimate.lower_bound``), the other two per-plan scores of ``paraplan search``.
Target: >= 20,000 plans/s for the estimate. Prints figures (``--json`` for a record).

    python experiments/bench_estimate.py
    python experiments/bench_estimate.py --plans 500000 --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")          # one core, whatever numpy links
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np  # noqa: E402

from strategies.estimate.lower_bound import step_time_lower_bound  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.memory.arrays import peak_memory_arrays  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from strategies.search.space import enumerate_space  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

CASES = [("gpt3-175b", "dgx-a100", 128, 1536), ("llama3-8b", "dgx-h100", 2, 64),
         ("mixtral-8x7b", "dgx-h100", 2, 64)]


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(n_plans: int, repeat: int) -> list[dict]:
    out = []
    for name, cl_name, nodes, gbs in CASES:
        m, cl = model_preset(name), cluster_preset(cl_name, nodes)
        sp = enumerate_space(m, cl, gbs)
        reps = -(-n_plans // sp.size)
        cols = {k: np.tile(v, reps)[:n_plans] for k, v in sp.cols.items()}
        t_est = best_of(lambda: estimate_arrays(m, cl, "bf16", cols), repeat)
        t_mem = best_of(lambda: peak_memory_arrays(m, cols), repeat)
        t_bnd = best_of(lambda: step_time_lower_bound(m, cl, "bf16", cols), repeat)
        out.append({"case": f"{name} on {cl.name}", "feasible_plans": sp.size,
                    "batch": n_plans, "estimate_s": t_est, "estimate_plans_per_s": n_plans / t_est,
                    "memory_plans_per_s": n_plans / t_mem, "bound_plans_per_s": n_plans / t_bnd,
                    "all_three_plans_per_s": n_plans / (t_est + t_mem + t_bnd)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plans", type=int, default=200_000, help="rows per batch (200,000)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (3)")
    ap.add_argument("--json", action="store_true", help="print a JSON record")
    args = ap.parse_args()
    rows = bench(args.plans, args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'case':<34} {'batch':>8} {'estimate/s':>11} {'memory/s':>11} {'bound/s':>11} "
          f"{'all three/s':>11}")
    for r in rows:
        print(f"{r['case']:<34} {r['batch']:>8,} {r['estimate_plans_per_s']:>11,.0f} "
              f"{r['memory_plans_per_s']:>11,.0f} {r['bound_plans_per_s']:>11,.0f} "
              f"{r['all_three_plans_per_s']:>11,.0f}")


if __name__ == "__main__":
    main()
