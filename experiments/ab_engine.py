"""A/B the event engine: this checkout's ``simulator.engine.core.run`` against another
checkout's, alternately in one process, on the same compiled programs and a fresh network each
run, so that both sides see the same process, the same inputs and (nearly) the same machine load.

Prints per run the CPU seconds of ``run`` (the event loop and the records), the step time and the
record count (which must agree: the change under test must not move a result); asserts nothing.
Only ``core.py`` is taken from the other checkout (the rest of the engine is this checkout's).

    git archive 7852871 | tar -x -C /tmp/b
    python experiments/ab_engine.py --other /tmp/b --case 175b-full --rounds 3
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from bench_simulate import CASES, make
    import simulator.simulate as sim
    from simulator.engine import core as this
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--other", required=True, help="another checkout (git archive | tar -x)")
    ap.add_argument("--case", default="175b-full", choices=sorted(CASES))
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    path = Path(a.other) / "simulator" / "engine" / "core.py"
    if not path.is_file():
        ap.error(f"--other {a.other!r}: no simulator/engine/core.py in it")
    spec = importlib.util.spec_from_file_location("other_core", path)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    job, fold = make(a.case)
    fs = sim.fold_spec(job, fold)
    programs = sim.compile_job(job, ranks=fs.reps, granularity="chunk")
    graph = sim.graph_of(job.cluster)
    link_map = sim.make_link_map(job, fs.rep_of) if fs.folded else None
    spent: dict[str, list[float]] = {"other": [], "this": []}
    for _ in range(a.rounds):
        for name, mod in (("other", other), ("this", this)):
            net = sim.new_network(graph, sim.route, link_map, "flows")
            gc.collect()
            c0 = time.process_time()
            res = mod.run(programs, net=net, num_ranks=len(fs.rep_of), rank_map=fs.rank_map())
            spent[name].append(time.process_time() - c0)
            print(f"{name:5} {spent[name][-1]:7.2f} CPU s  {res.events:,} events  "
                  f"step {res.step_time_s!r} s  {len(res.records):,} records", flush=True)
    print(f"best: other {min(spent['other']):.2f} CPU s, this {min(spent['this']):.2f} CPU s "
          f"({min(spent['other']) / min(spent['this']):.2f}x)")


if __name__ == "__main__":
    main()
