"""Work outside the search (reference plans, a mixed cluster's variants) runs on the workers
the search leaves idle (``simulator.search.executors.Backfill``), without changing what the
search evaluates or reports."""
from __future__ import annotations

import random

from simulator.search.executors import Backfill
from strategies.search.bound_ordered import bound_ordered_search


class ClockPool:
    """``capacity`` workers on a virtual clock; index ``i`` takes ``costs[i]`` seconds and
    returns ``times[i]``; keeps ``results`` like the real executors."""

    def __init__(self, times: dict, costs: dict, capacity: int) -> None:
        self.times, self.costs, self.capacity = times, costs, capacity
        self.clock = 0.0
        self.running: dict[int, float] = {}
        self.results: dict[int, dict] = {}
        self.started: dict[int, float] = {}

    def submit(self, i: int) -> None:
        self.running[i] = self.clock + self.costs[i]
        self.started[i] = self.clock

    def wait(self):
        self.clock = min(self.running.values())
        done = sorted(i for i, f in self.running.items() if f == self.clock)
        for i in done:
            del self.running[i]
            self.results[i] = {"step_time_s": self.times[i]}
        return [(i, self.times[i]) for i in done]

    def close(self, abort: bool = False) -> None:
        pass


def _case(n: int = 40):
    rng = random.Random(5)
    bounds = [rng.uniform(1.0, 2.0) for _ in range(n)]
    times = {i: b * rng.uniform(1.0, 1.5) for i, b in enumerate(bounds)}
    costs = {i: rng.choice([0.3, 1.0, 4.0]) for i in range(n)}
    times.update({-1: 9.0, -2: 8.0})
    costs.update({-1: 0.5, -2: 0.7})
    return bounds, times, costs


def test_extras_fill_idle_workers_and_change_nothing_the_search_does():
    bounds, times, costs = _case()
    alone = ClockPool(times, costs, 2)
    ref = bound_ordered_search(bounds, alone, k=3)
    search_end = alone.clock

    pool = ClockPool(times, costs, 2)
    ex = Backfill(pool, [-1, -2])
    out = bound_ordered_search(bounds, ex, k=3)
    assert (out.needed, out.ranked, out.kth) == (ref.needed, ref.ranked, ref.kth)
    assert sorted(out.evaluated) == sorted(ref.evaluated)      # no extra in the search
    ex.finish()
    assert {-1, -2} <= set(pool.results)
    # both extras started before the search's last result: on a worker it left idle
    assert max(pool.started[-1], pool.started[-2]) < search_end
    # and the whole took less than the search followed by the extras
    assert pool.clock < search_end + max(costs[-1], costs[-2])


def test_extras_started_before_the_search_change_nothing_it_does():
    """``run_search`` starts the reference plans on a pool before it scores the space
    (``Backfill(..., running=...)``): the search evaluates and reports the same, the extras'
    results are handed to no search ``wait``, and ``finish`` waits for them."""
    bounds, times, costs = _case()
    alone = ClockPool(times, costs, 2)
    ref = bound_ordered_search(bounds, alone, k=3)

    pool = ClockPool(times, costs, 2)
    for i in (-1, -2):
        pool.submit(i)
    ex = Backfill(pool, [], running=[-1, -2])
    out = bound_ordered_search(bounds, ex, k=3)
    assert (out.needed, out.ranked, out.kth) == (ref.needed, ref.ranked, ref.kth)
    assert sorted(out.evaluated) == sorted(ref.evaluated)
    assert pool.started[-1] == pool.started[-2] == 0.0
    ex.finish()
    assert {-1, -2} <= set(pool.results) and not ex.background and not ex.extra


def test_an_extra_waits_until_it_is_ready():
    bounds, times, costs = _case()
    pool = ClockPool(times, costs, 2)
    ex = Backfill(pool, [-1, -2], ready=lambda i: i == -2)
    bound_ordered_search(bounds, ex, k=3)
    assert -2 in pool.started and -1 not in pool.started
    ex.finish()
    assert {-1, -2} <= set(pool.results) and not ex.background and not ex.extra


def test_a_reference_plan_is_bounded_as_its_row_of_the_space():
    """The search backfills a reference plan once its bound is above the search's limit
    (then the search can no longer need that plan): the bound is the row's, bit for bit."""
    from simulator.search.run import SearchConfig, reference_bounds
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.framework import get_profile
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import cluster_preset
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 4)
    sp = enumerate_space(m, cl, 256, SpaceOptions())
    fw = get_profile(None)
    costs = estimate_arrays(m, cl, "bf16", sp.arrays, fw, None)["stage_costs"]
    bounds = step_time_lower_bound(m, cl, "bf16", sp.arrays, fw, None, costs=costs)
    rows = random.Random(2).sample(range(sp.size), 12)
    got = reference_bounds(SearchConfig(model=m, cluster=cl, gbs=256), fw,
                      [sp.plan(i) for i in rows])
    assert got == [float(bounds[i]) for i in rows]
