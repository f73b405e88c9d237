"""Benchmark of the simulator on the 2,496-GPU MLPerf row's shape (docs/calibration.md §5.228):
unfolded data-parallel rings over NVLink domains that hold different member counts.

* ``analogue`` (default): Llama 3 8B, ``gb200-nvl72:624x16`` (2,496 GPUs, 64-GPU domains),
  ``tp=4,cp=2,pp=8,dp=39``, interleaved vpp 2, gbs 312 (8 micro-batches), FP8: the row's
  parallel layout (624 of 2,496 ranks simulated after tp folds, dp·cp groups of 78 ranks
  over 5 domains, 16+16+16+16+14 and 2+16+16+16+12 members) on a small model and few
  micro-batches (360k events, about 8 CPU s).
* ``row``: the row itself (``heldout_mlperf_llama.json``'s ``..._gb200_2496``, the job
  ``case_from_entry`` builds; several CPU minutes).

Each timing runs in its own process (``--other TREE``: another checkout, e.g. ``git archive
main``, timed with this harness, alternately with this one, ``--rounds`` times). Prints the
CPU seconds of ``simulate`` per round and their medians, the step time, the event count and a
digest of the records and metrics, which must agree between the trees when a change is meant
to keep outputs bit for bit. ``--solver`` times the max-min solver alone: the analogue's
sequence of ``maxmin.max_min_memo`` calls (each flow set the flow network had not rated
before, in order) is recorded once in this process and replayed through each tree's
``simulator/network/maxmin.py`` alternately (a fresh process-wide memo each pass), with the
count of answers that differ from this tree's in the run. Asserts nothing.

    python experiments/bench_uneven_row.py
    python experiments/bench_uneven_row.py --other /tmp/before --rounds 3
    python experiments/bench_uneven_row.py --solver --other /tmp/before --rounds 3
    python experiments/bench_uneven_row.py --case row
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANALOGUE = ("llama3-8b", "gb200-nvl72:624x16",
            "tp=4,cp=2,pp=8,dp=39,mbs=1,gbs=312,schedule=interleaved,vpp=2", "fp8")
ROW = "mlperf50_llama31405b_carinangpu2496ngc2504nemo_gb200_2496"

# run in a child process with the tree first on the path: build the job, simulate, print JSON
CHILD = r"""
import hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
case = sys.argv[2]
if case == "row":
    from strategies.reference.cases import case_from_entry, load_reference
    rows = load_reference(sys.argv[1] + "/strategies/reference/data/heldout_mlperf_llama.json")
    job = case_from_entry([r for r in rows if r["id"] == sys.argv[3]][0], rows).job
else:
    from strategies.job import make_job
    from strategies.plan.parse import parse_plan
    from topologies.cluster.arg import parse_cluster_arg
    from strategies.hf_config import load_model_arg
    model, cluster, plan, dtype = json.loads(sys.argv[3])
    job = make_job(load_model_arg(model), parse_cluster_arg(cluster), parse_plan(plan),
                   dtype=dtype)
from simulator.simulate import simulate
c0 = time.process_time(); t0 = time.perf_counter()
res = simulate(job)
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
h = hashlib.sha256()
for r in res.records:
    h.update(repr(tuple(r)).encode())
h.update(repr(sorted((k, repr(v)) for k, v in res.metrics.items() if k != "wall_s")).encode())
print(json.dumps(dict(cpu_s=cpu, wall_s=wall, step_time_s=repr(res.step_time_s),
                      events=res.events, ranks=len(res.simulated_ranks), digest=h.hexdigest()[:16])))
"""


def time_once(tree: Path, case: str) -> dict:
    """One simulation of ``case`` by the checkout at ``tree`` in a fresh process."""
    arg = ROW if case == "row" else json.dumps(ANALOGUE)
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), case, arg], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def record_solves() -> tuple:
    """The analogue's ``max_min_memo`` calls in order: (capacity, [(links, rates)])."""
    sys.path.insert(0, str(ROOT))
    import simulator.network.flows as flows
    from simulator.simulate import simulate
    from strategies.hf_config import load_model_arg
    from strategies.job import make_job
    from strategies.plan.parse import parse_plan
    from topologies.cluster.arg import parse_cluster_arg
    model, cluster, plan, dtype = ANALOGUE
    job = make_job(load_model_arg(model), parse_cluster_arg(cluster), parse_plan(plan),
                   dtype=dtype)
    calls, caps, memo = [], [], flows.max_min_memo

    def kept(solved: dict, capacity, links):
        rates = memo(solved, capacity, links)
        caps.append(capacity)
        calls.append((links.copy(), rates.copy()))
        return rates
    flows.max_min_memo = kept
    try:
        simulate(job)
    finally:
        flows.max_min_memo = memo
    assert all(c is caps[0] for c in caps)      # one network, one capacity vector
    return caps[0], calls


def time_solver(trees: list, rounds: int) -> None:
    """Replay the analogue's solves through each tree's ``maxmin`` (CPU seconds a pass)."""
    capacity, calls = record_solves()
    mods = {}
    for name, tree in trees:
        spec = importlib.util.spec_from_file_location(
            f"maxmin_{name}", tree / "simulator" / "network" / "maxmin.py")
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    cpu: dict[str, list[float]] = {name: [] for name, _ in trees}
    for k in range(rounds):
        for name, _ in (trees if k % 2 == 0 else trees[::-1]):
            m = mods[name]
            if hasattr(m, "forget"):
                m.forget()
            else:           # a tree before ``maxmin.forget``: its memo emptied by hand
                getattr(m, "_solved").clear()
                getattr(m, "_room")[0] = getattr(m, "_SOLVED_BYTES")
            solved = m.solved(capacity)
            c0 = time.process_time()
            out = [m.max_min_memo(solved, capacity, links) for links, _ in calls]
            cpu[name].append(time.process_time() - c0)
            differ = sum(a.tobytes() != r.tobytes() for a, (_, r) in zip(out, calls))
            print(f"round {k + 1} {name:5s} cpu {cpu[name][-1]:6.2f} s for {len(calls)} "
                  f"solves ({max(c[0].shape[0] for c in calls)} flows at most), "
                  f"{differ} answers differ from this tree's", flush=True)
    for name, xs in cpu.items():
        print(f"{name}: median cpu {statistics.median(xs):.2f} s over {len(xs)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=("analogue", "row"), default="analogue")
    ap.add_argument("--other", type=Path, default=None, help="another checkout, timed alternately")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--solver", action="store_true",
                    help="time the max-min solver alone on the analogue's recorded flow sets")
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("other", a.other.resolve())] if a.other else [])
    if a.solver:
        time_solver(trees, a.rounds)
        return
    cpu: dict[str, list[float]] = {name: [] for name, _ in trees}
    for k in range(a.rounds):
        for name, tree in (trees if k % 2 == 0 else trees[::-1]):
            r = time_once(tree, a.case)
            cpu[name].append(r["cpu_s"])
            print(f"round {k + 1} {name:5s} cpu {r['cpu_s']:7.2f} s  wall {r['wall_s']:7.2f} s  "
                  f"step {r['step_time_s']}  events {r['events']}  ranks {r['ranks']}  "
                  f"digest {r['digest']}", flush=True)
    for name, xs in cpu.items():
        print(f"{name}: median cpu {statistics.median(xs):.2f} s over {len(xs)}")


if __name__ == "__main__":
    main()
