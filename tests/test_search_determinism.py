"""The search reports the same thing whatever order the workers finish in.

``bound_ordered_search`` takes results as they finish (so no worker waits behind a slower
one); which candidates it evaluates speculatively then depends on that order, but what it
reports (``needed``, ``ranked``, ``pick``, ``pool``, ``kth``, ``best``) is a function of
the bounds and the times alone. End to end: ``search`` and ``whatif`` with ``--workers 2``
print the same JSON bytes twice, less ``wall_s`` and ``execution.simulations_run`` (the
wall-clock field and the count of simulations run, speculative ones included: docs/cli.md).
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main
from strategies.search.bound_ordered import SerialExecutor, bound_ordered_search

ROOT = Path(__file__).resolve().parent.parent


class ScrambledPool:
    """``capacity`` evaluations in flight; ``wait`` returns a random non-empty subset of
    them in a random order (a seeded stand-in for workers finishing whenever they do)."""

    def __init__(self, times, capacity: int, seed: int) -> None:
        self.times, self.capacity = times, capacity
        self.rng = random.Random(seed)
        self.inflight: list[int] = []

    def submit(self, index: int) -> None:
        self.inflight.append(index)

    def wait(self):
        self.rng.shuffle(self.inflight)
        n = self.rng.randint(1, len(self.inflight))
        done, self.inflight = self.inflight[:n], self.inflight[n:]
        return [(i, self.times[i]) for i in done]


class ClockPool:
    """``capacity`` workers on a virtual clock: candidate ``i`` takes ``costs[i]`` seconds;
    ``wait`` advances the clock to the next finish. Records, at each ``wait``, how many were
    in flight and how many had been submitted."""

    def __init__(self, times, costs, capacity: int) -> None:
        self.times, self.costs, self.capacity = times, costs, capacity
        self.clock = 0.0
        self.running: dict[int, float] = {}      # index -> finish time
        self.busy_at_wait: list[int] = []
        self.submitted: list[int] = []

    def submit(self, index: int) -> None:
        self.running[index] = self.clock + self.costs[index]
        self.submitted.append(index)

    def wait(self):
        self.busy_at_wait.append((len(self.running), len(self.submitted)))
        self.clock = min(self.running.values())
        done = sorted(i for i, f in self.running.items() if f == self.clock)
        for i in done:
            del self.running[i]
        return [(i, self.times[i]) for i in done]


def _case(n: int = 60, seed: int = 7):
    rng = random.Random(seed)
    bounds = [rng.uniform(1.0, 2.0) for _ in range(n)]
    times = [b * rng.uniform(1.0, 3.0) for b in bounds]
    cx = [(rng.randint(1, 4),) for _ in bounds]
    return bounds, times, cx


def _reported(out):
    return out.needed, out.ranked, out.pick, out.pool, out.kth, out.best


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("capacity", [2, 3, 5])
def test_what_is_reported_does_not_depend_on_the_finishing_order(capacity, k):
    """(k=1 on 5 workers evaluates 18, 19 or 21 of these candidates depending on the order;
    the reported fields are those of one worker, every time.)"""
    bounds, times, cx = _case()
    serial = bound_ordered_search(bounds, SerialExecutor(lambda i: times[i]), k=k,
                                  tolerance=0.05, complexity=cx)
    for seed in range(12):
        out = bound_ordered_search(bounds, ScrambledPool(times, capacity, seed), k=k,
                                   tolerance=0.05, complexity=cx)
        assert _reported(out) == _reported(serial)
        assert set(out.needed) <= set(out.evaluated)
        assert all(out.evaluated[i] == times[i] for i in out.evaluated)
    # the top-k is exact
    assert serial.ranked == sorted(range(len(times)), key=lambda i: times[i])[:k]


@pytest.mark.parametrize("capacity", [2, 3])
def test_no_worker_waits_behind_a_slower_one(capacity):
    """Without complexities a candidate once ruled out stays out (the k-th best only
    falls), so until the last dispatch every ``wait`` finds every worker busy: a result is
    taken when it finishes and its worker gets the next candidate at once. (Taking results
    in dispatch order left a worker idle behind a slower earlier dispatch.)"""
    bounds, times, _ = _case(80, seed=3)
    rng = random.Random(11)
    costs = [rng.choice([0.2, 1.0, 5.0]) for _ in bounds]
    pool = ClockPool(times, costs, capacity)
    out = bound_ordered_search(bounds, pool, k=3)
    last = len(pool.submitted)
    assert last > 2 * capacity
    before_last = [busy for busy, n in pool.busy_at_wait if n < last]
    assert before_last and all(b == capacity for b in before_last)
    assert out.ranked == sorted(range(len(times)), key=lambda i: times[i])[:3]


def _json_less_timing(args: list[str]) -> bytes:
    out = subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=ROOT,
                         capture_output=True, check=True, timeout=300).stdout
    return _less_timing(out)


def _less_timing(out: bytes) -> bytes:
    less = re.sub(rb'"wall_s": [0-9.eE+-]+', b'"wall_s": null', out)
    assert less.count(b'"wall_s": null') == 1      # the one wall-clock field, and only it
    less = re.sub(rb'"simulations_run": [0-9]+', b'"simulations_run": null', less)
    assert less.count(b'"simulations_run": null') == 1
    return less


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--global-batch", "32"],
    ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch", "16",
     "--max-mbs", "1", "--vary", "inter_node_gbps=100,400"],
], ids=["search", "whatif"])
def test_two_workers_print_the_same_json_bytes_twice(args, capsys):
    a, b = (_json_less_timing([*args, "--workers", "2", "--json"]) for _ in range(2))
    assert a == b
    rep = json.loads(a)
    if args[0] == "search":      # and the same as one worker's, but for the execution block
        # (one worker runs in this process: the two-worker runs above are the real processes)
        assert main([*args, "--workers", "1", "--json"]) == 0
        one = json.loads(_less_timing(capsys.readouterr().out.encode()))
        for r in (rep, one):
            r.pop("execution")
        assert rep == one
