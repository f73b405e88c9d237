"""The default search's wall time on two idle workers, replayed on a virtual clock.

On a shared machine the wall time of ``paraplan search`` mostly measures the other users.
This benchmark measures what the search itself costs and replays its dispatch without them:

1. the parent's work before the first simulation (enumerate, estimate, bound: CPU seconds);
2. the CPU seconds of each simulation the search runs (``evaluate`` in this process,
   ``time.process_time``, each plan once, simulated when a replay first dispatches it);
3. ``bound_ordered_search`` over two virtual workers that take exactly those seconds, three
   ways: results taken in dispatch order (the search at commit 083f359), taken as they
   finish, and as they finish with the reference plans run on idle workers
   (``executors.Backfill``, what ``run_search`` does now).

The replayed wall is the parent's scoring plus the makespan of the two workers: what an
idle 2-core machine would show, less process start-up and the report.

    python experiments/bench_search_dispatch.py            # the README's default search
    python experiments/bench_search_dispatch.py --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.search.executors import Backfill, evaluate  # noqa: E402
from simulator.search.run import Rows, SearchConfig, reference_bounds, resolve_reference  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.lower_bound import step_time_lower_bound  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from strategies.search.bound_ordered import bound_ordered_search  # noqa: E402
from strategies.search.recommend import complexity  # noqa: E402
from strategies.search.plan_rows import plan_key  # noqa: E402
from strategies.search.space import SpaceOptions, enumerate_space  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402


class Clock:
    """``capacity`` virtual workers; ``cost(i)`` seconds each (measured on first use)."""

    def __init__(self, cost, time_of, capacity: int = 2) -> None:
        self.cost, self.time_of, self.capacity = cost, time_of, capacity
        self.now = 0.0
        self.running: dict[int, float] = {}
        self.results: dict[int, dict] = {}
        self.order: list[int] = []

    def submit(self, i: int) -> None:
        self.running[i] = self.now + self.cost(i)
        self.order.append(i)

    def wait(self) -> list[tuple[int, float]]:
        self.now = min(self.running.values())
        done = sorted(i for i, f in self.running.items() if f == self.now)
        for i in done:
            del self.running[i]
            self.results[i] = {"step_time_s": self.time_of(i)}
        return [(i, self.time_of(i)) for i in done]

    def close(self, abort: bool = False) -> None:
        pass


class InDispatchOrder:
    """The results of ``inner`` handed back one at a time in the order they were submitted
    (the search at commit 083f359 took them so): a result waits for earlier ones."""

    def __init__(self, inner) -> None:
        self.inner, self.capacity = inner, inner.capacity
        self.queue: list[int] = []
        self.arrived: dict[int, float] = {}

    def submit(self, i: int) -> None:
        self.inner.submit(i)
        self.queue.append(i)

    def wait(self) -> list[tuple[int, float]]:
        head = self.queue[0]
        while head not in self.arrived:
            self.arrived.update(self.inner.wait())
        self.queue.pop(0)
        return [(head, self.arrived.pop(head))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print a JSON record")
    a = ap.parse_args(argv)
    m, cl, gbs = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128), 1536
    from simulator.cli.search import REFERENCES
    cfg = SearchConfig(model=m, cluster=cl, gbs=gbs)
    refs = [r[1] for r in (resolve_reference(cfg, label, parse_plan(text))
                           for label, text in REFERENCES.get((m.name, cl.num_gpus), []))
            if r is not None]
    fw = get_profile(None)
    c0 = time.process_time()
    space = enumerate_space(m, cl, gbs, SpaceOptions())
    analytic = estimate_arrays(m, cl, "bf16", space.arrays, fw, None)
    bounds = step_time_lower_bound(m, cl, "bf16", space.arrays, fw, None,
                                   costs=analytic["stage_costs"]).tolist()
    scoring = time.process_time() - c0
    plans = Rows(space.size, space.plan)
    keys = Rows(space.size, lambda i: plan_key(plans[i]))
    cx = Rows(space.size, lambda i: complexity(plans[i], cl.gpus_per_node))
    measured: dict[int, tuple[float, float]] = {}

    def measure(i: int) -> tuple[float, float]:
        if i not in measured:
            plan = plans[i] if i >= 0 else refs[-i - 1]
            t0 = time.process_time()
            r = evaluate(m, cl, "bf16", None, None, False, plan)
            measured[i] = (time.process_time() - t0, r["step_time_s"])
        return measured[i]

    ref_bounds = reference_bounds(cfg, fw, refs)
    runs = {}
    for name in ("in dispatch order (083f359)", "as finished", "as finished + backfill"):
        clock = Clock(lambda i: measure(i)[0], lambda i: measure(i)[1])
        state: list = []
        if name.startswith("in dispatch"):
            ex: Any = InDispatchOrder(clock)
        elif name.endswith("backfill"):
            ex = Backfill(clock, [-j - 1 for j in range(len(refs))],
                          lambda i: bool(state) and ref_bounds[-i - 1] > state[0].limit())
        else:
            ex = clock
        out = bound_ordered_search(bounds, ex, k=5, tolerance=0.03, keys=keys, complexity=cx,
                                   on_result=lambda i, t, st: state.__setitem__(
                                       slice(None), [st]))
        if isinstance(ex, Backfill):
            ex.finish()
        else:                      # the references after the search, as before
            for j in range(len(refs)):
                clock.submit(-j - 1)
            while clock.running:
                clock.wait()
        runs[name] = {"makespan_s": clock.now, "wall_s": scoring + clock.now,
                      "simulations": len(clock.order), "needed": len(out.needed),
                      "ranked": [keys[i] for i in out.ranked]}
    rec = {"scoring_cpu_s": scoring, "simulation_cpu_s": sum(c for c, _ in measured.values()),
           "simulations_measured": len(measured), "load_1min": os.getloadavg()[0],
           "replays": runs}
    if a.json:
        print(json.dumps(rec))
        return 0
    print(f"parent before the first simulation: {scoring:.2f} CPU s; {len(measured)} "
          f"simulations measured, {rec['simulation_cpu_s']:.2f} CPU s in all "
          f"(1-minute load {rec['load_1min']:.1f} at the end)")
    for name, r in runs.items():
        print(f"  {name:29s} 2-worker makespan {r['makespan_s']:6.2f} s, replayed wall "
              f"{r['wall_s']:6.2f} s, {r['simulations']} simulations ({r['needed']} needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
