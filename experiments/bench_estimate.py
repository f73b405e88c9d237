"""Benchmark of the analytic estimator: the vectorised form's plans per second on one core,
and (``--scalar``) the one-plan ``estimate`` users wait on.

The batch is every feasible plan of GPT-3 175B on 128 DGX A100 (global batch 1536), of
Llama 3 8B on 2 DGX H100 and of Mixtral 8x7B on 2 DGX H100, repeated to ``--plans`` rows.
Also timed: the vectorised peak memory (``strategies.memory.arrays``) and the simulation
lower bound (``strategies.estimate.lower_bound``), the other two per-plan scores of ``paraplan search``.
Target: >= 20,000 plans/s for the estimate. Prints figures (``--json`` for a record).

``--scalar``: each figure in a fresh process, best of ``--repeat``, alternately in this tree
and ``--tree DIR`` (an earlier checkout, e.g. ``git archive main``) where given: the CPU ms of
``estimate(job)`` for six jobs (``SCALAR_JOBS``: dense without and with an interleaved
pipeline, MoE, DeepSeek-V3's uneven 16-stage pipeline, the published DeepSeek-V3 row's DualPipe
plan and a DualPipeV one, whose messages are replayed on their order), and of the published
row itself (its reference case, ``ROW_CHILD``), its first call in the process and the mean of 5
calls after it; the wall and CPU seconds of ``paraplan estimate`` on
the first job (``CLI``, bytecode cached by a warm-up run); and of
``experiments/reference_mape.py`` (every reference row through ``validate --no-sim``). Not a
test: figures depend on the host (the 1-minute load is printed).

    python experiments/bench_estimate.py
    python experiments/bench_estimate.py --plans 500000 --json
    python experiments/bench_estimate.py --scalar --tree /tmp/before --repeat 3
    python experiments/bench_estimate.py --scalar --tree /tmp/before --repeat 3 --no-mape
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
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


ROOT = Path(__file__).resolve().parents[1]
#: (label, model, cluster, plan) of the scalar figures; the first is also the CLI's
SCALAR_JOBS = [
    ("dense", "llama3-70b", "dgx-h100:8", "tp=8,pp=1,mbs=1,gbs=64"),
    ("dense-interleaved", "llama3-70b", "dgx-h100:8",
     "tp=8,pp=4,dp=2,mbs=1,gbs=64,schedule=interleaved,vpp=2"),
    ("moe", "mixtral-8x7b", "dgx-h100:4", "tp=2,pp=2,dp=8,ep=8,mbs=1,gbs=256"),
    ("dsv3-pp16-uneven", "deepseek-v3", "dgx-h100:128",
     "tp=1,pp=16,dp=64,ep=64,mbs=1,gbs=2048,first_stage_layers=1,last_stage_layers=4"),
    # the published DeepSeek-V3 row's plan (deepseekv3_report_h800_2048) under DualPipe: its
    # messages replayed on the order (message_replay, docs/calibration.md §5.225)
    ("dsv3-dualpipe-row", "deepseek-v3", "hgx-h800:256",
     "tp=1,pp=16,dp=128,ep=64,mbs=1,gbs=15360,schedule=dualpipe,recompute=selective,"
     "recompute_modules=layernorm+moe_act+mla_up_proj,moe_dispatcher=deepep,"
     "first_stage_layers=1,last_stage_layers=4"),
    ("llama-dualpipev", "llama3-8b", "dgx-h100:1", "tp=2,pp=4,mbs=1,gbs=16,schedule=dualpipev"),
]
#: the child program of the per-call figures (run in the tree; prints one JSON object)
SCALAR_CHILD = """
import json, sys, time
sys.path.insert(0, '.')
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
out = {}
for label, m, c, p in JOBS:
    name, nodes = c.split(':')
    job = make_job(model_preset(m), cluster_preset(name, int(nodes)), parse_plan(p))
    t0 = time.process_time(); estimate(job); t1 = time.process_time()
    for _ in range(5):
        estimate(job)
    out[label + ' first'] = (t1 - t0) * 1e3
    out[label + ' again'] = (time.process_time() - t1) / 5 * 1e3
print(json.dumps(out))
"""


#: the published DeepSeek-V3 row itself (its reference case's job: 64 layers, hai-llm, FP8), in
#: a child of its own so that no other job warms its DualPipe order
ROW_CHILD = """
import json, sys, time
sys.path.insert(0, '.')
from strategies.estimate.scalar import estimate
from strategies.reference.cases import reference_cases
job = next(c.job for c in reference_cases(['strategies/reference/data/published_2026.json'])
           if c.id == 'deepseekv3_report_h800_2048')
t0 = time.process_time(); estimate(job); t1 = time.process_time()
for _ in range(5):
    estimate(job)
print(json.dumps({'dsv3 row case first': (t1 - t0) * 1e3,
                  'dsv3 row case again': (time.process_time() - t1) / 5 * 1e3}))
"""


def child(tree: Path, argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run ``argv`` in ``tree``: (wall s, CPU s of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    got = subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, got.stdout


def scalar_figures(tree: Path, mape: bool = True) -> dict[str, float]:
    """One round of the scalar figures in ``tree`` (each in a fresh process); ``mape``:
    ``reference_mape.py``'s too."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    prog = f"JOBS = {SCALAR_JOBS!r}\n" + SCALAR_CHILD
    out = {k + " ms": v for k, v in
           json.loads(child(tree, [sys.executable, "-c", prog], env)[2].splitlines()[-1]).items()}
    out.update({k + " ms": v for k, v in json.loads(
        child(tree, [sys.executable, "-c", ROW_CHILD], env)[2].splitlines()[-1]).items()})
    _, m, c, p = SCALAR_JOBS[0]
    cli = [sys.executable, "-m", "simulator.cli", "estimate", "--model", m, "--cluster", c,
           "--plan", p]
    cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    child(tree, cli, cached)                # writes the bytecode the timed run reads
    out["cli estimate wall s"], out["cli estimate cpu s"], _ = child(tree, cli, cached)
    if not mape:
        return out
    wall, cpu, _ = child(tree, [sys.executable, "experiments/reference_mape.py"], env)
    out["reference_mape wall s"], out["reference_mape cpu s"] = wall, cpu
    return out


def scalar_main(tree: str | None, repeat: int, as_json: bool, mape: bool = True) -> None:
    """Best of ``repeat`` rounds of ``scalar_figures``, alternately in each tree."""
    trees = [("this", ROOT)] + ([("before", Path(tree))] if tree else [])
    best: dict[str, dict[str, float]] = {name: {} for name, _ in trees}
    loads = []
    for _ in range(repeat):
        for name, path in trees:
            loads.append(os.getloadavg()[0])
            for k, v in scalar_figures(path, mape).items():
                best[name][k] = min(v, best[name].get(k, v))
    if as_json:
        print(json.dumps({"best_of": repeat, "load": [min(loads), max(loads)], **best},
                         indent=2))
        return
    print(f"scalar estimate (best of {repeat}; 1-min load {min(loads):.1f}-{max(loads):.1f})")
    print(f"{'figure':34}" + "".join(f"{name:>10}" for name, _ in trees))
    for k in best["this"]:
        print(f"{k:34}" + "".join(f"{best[name][k]:10.3f}" for name, _ in trees))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plans", type=int, default=200_000, help="rows per batch (200,000)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (3)")
    ap.add_argument("--json", action="store_true", help="print a JSON record")
    ap.add_argument("--scalar", action="store_true",
                    help="the one-plan estimate's figures (fresh processes) instead")
    ap.add_argument("--tree", help="with --scalar: an earlier checkout, run alternately")
    ap.add_argument("--no-mape", action="store_true",
                    help="with --scalar: leave reference_mape.py out (35 s a round)")
    args = ap.parse_args()
    if args.scalar:
        scalar_main(args.tree, args.repeat, args.json, not args.no_mape)
        return
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
