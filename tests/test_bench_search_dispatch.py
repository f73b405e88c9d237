"""experiments/bench_search_dispatch.py's replay: the old policy (results taken in dispatch
order) rebuilt as an executor wrapper reports what taking them as they finish reports, and
on some cases leaves a worker idle (a later finish)."""
from __future__ import annotations

import random

from experiments.bench_search_dispatch import Clock, InDispatchOrder
from strategies.search.bound_ordered import bound_ordered_search


def test_dispatch_order_replay_reports_the_same_and_shows_idle_workers():
    rng = random.Random(4)
    slower = 0
    for _ in range(30):
        n = 40
        bounds = [rng.uniform(1.0, 2.0) for _ in range(n)]
        times = [b * rng.uniform(1.0, 1.3) for b in bounds]
        costs = [rng.choice([0.2, 1.0, 6.0]) for _ in range(n)]
        fast = Clock(costs.__getitem__, times.__getitem__)
        a = bound_ordered_search(bounds, fast, k=5, tolerance=0.03)
        old = Clock(costs.__getitem__, times.__getitem__)
        b = bound_ordered_search(bounds, InDispatchOrder(old), k=5, tolerance=0.03)
        assert (a.needed, a.ranked, a.kth) == (b.needed, b.ranked, b.kth)
        # the needed work is the same; taking results in dispatch order can only idle workers
        needed_cost = sum(costs[i] for i in a.needed)
        assert fast.now >= needed_cost / 2 - 1e-9
        if old.now > fast.now + 1e-9:
            slower += 1
    assert slower > 0          # the replay does show the idle workers somewhere
