"""The attention grid's list schedule (strategies/cost/attention_grid.py ``list_schedule``):
bit for bit the one-job-at-a-time heap it replaced, on random job lists, and through
``makespan`` and ``allgather_factor`` on random shapes (non-dyadic fixed costs included)."""
from __future__ import annotations

import dataclasses
import heapq
import random

import numpy as np
import pytest

from strategies.cost import attention_grid as ag


def heap_makespan(jobs: list[float], slots: int) -> float:
    """The list schedule one job at a time (the code ``list_schedule`` replaced)."""
    heap = [0.0] * slots
    for t in jobs:
        heapq.heapreplace(heap, heap[0] + t)
    return max(heap)


def gather_lengths(order: str, q: int, j: int, fwd: bool) -> list[int]:
    """One (batch, head)'s CTAs of query chunk ``j`` in the all-gather step, as taken."""
    one = ([j * q + i for i in range(1, q + 1)] if fwd
           else [q] * (j * q) + [q - u for u in range(q)])
    return sorted(one, reverse=order != "head_asc")


def heap_allgather(kernel: ag.GridKernel, groups: int, seq: int, cp: int, sms: int,
                   fwd: bool) -> float:
    """``allgather_factor`` as it was, one CTA at a time through a heap."""
    q = max(1, -(-int(seq) // (2 * cp * kernel.rows)))
    k, c0 = kernel.ctas_per_sm, kernel.fixed_tiles
    slots = sms * k
    useful = groups * ((2 * cp - 1) * q * q + q * (q + 1))
    worst = 0.0
    for r in range(cp):
        one = [gather_lengths(kernel.order, q, j, fwd) for j in (r, 2 * cp - 1 - r)]
        run = min(groups, max(1, ag.MAX_JOBS // sum(map(len, one))))
        heap = [0.0] * slots
        for lengths in one:
            for _ in range(run):
                for x in lengths:
                    heapq.heapreplace(heap, heap[0] + k * (x + c0))
        rest = (groups - run) * sum(sum(x) + c0 * len(x) for x in one) / sms
        worst = max(worst, max(heap) + rest)
    return useful / sms / worst


def heap_grid_makespan(kernel: ag.GridKernel, groups: int, tiles: int, sms: int,
                       cap: int = 0) -> float:
    """``makespan`` as it was, one CTA at a time through a heap."""
    k = kernel.ctas_per_sm
    one = [min(i, cap or tiles) for i in range(1, tiles + 1)]
    one = one if kernel.order == "head_asc" else one[::-1]
    c0 = kernel.fixed_tiles
    per_group = sum(one) + c0 * tiles
    run = min(groups, max(1, ag.MAX_JOBS // tiles))
    if kernel.order == "lpt":
        jobs = [x + c0 for x in sorted(one, reverse=True) for _ in range(run)]
    else:
        jobs = [x + c0 for _ in range(run) for x in one]
    return heap_makespan([k * t for t in jobs], min(sms * k, len(jobs))) \
        + (groups - run) * per_group / sms


def random_jobs(rng: random.Random) -> list[float]:
    """Job lists of the shapes the grid makes (long runs of equal CTAs, ascending and
    descending ramps, small tails) and of none (random floats), with dyadic and
    non-dyadic times."""
    c0 = rng.choice([0.0, 1.75, 2.75, 2.75 * (128 / 96) ** 2, 1 / 3, rng.uniform(0, 5)])
    jobs: list[float] = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.randrange(4)
        if kind == 0:
            jobs += [rng.randint(1, 300) + c0] * rng.randint(1, 700)
        elif kind == 1:
            a = rng.randint(1, 200)
            ramp = [x + c0 for x in range(a, a + rng.randint(1, 300))]
            jobs += ramp if rng.random() < 0.5 else ramp[::-1]
        elif kind == 2:
            jobs += [rng.uniform(0.01, 400.0) for _ in range(rng.randint(1, 400))]
        else:
            jobs += [x + c0 for x in rng.choices([1, 2, 3, 500], k=rng.randint(1, 300))]
    return jobs


@pytest.mark.parametrize("seed", range(40))
def test_list_schedule_equals_the_heap(seed):
    rng = random.Random(seed)
    for _ in range(10):
        jobs = random_jobs(rng)
        slots = rng.choice([1, 2, 3, 7, 16, 64, 108, 132, 148, 264])
        assert ag.list_schedule(np.array(jobs), slots) == heap_makespan(jobs, slots)


def test_list_schedule_rounds_and_batches_both_taken():
    """The cases above reach both fast paths: a long run of equal jobs after a spread
    larger than the job (rounds refused, batches then), and the heap fallback."""
    slots = 8
    jobs = [100.0] * 3 + [1.0] * 50 + [5.0, 0.5, 0.25] * 20 + [2.0] * 40
    assert ag.list_schedule(np.array(jobs), slots) == heap_makespan(jobs, slots)
    assert ag.list_schedule(np.array([]), slots) == 0.0


def kernels(rng: random.Random) -> ag.GridKernel:
    base = rng.choice([ag.CUDNN_FWD, ag.CUDNN_BWD, ag.FA2_FWD, ag.FA2_BWD])
    k = ag.at_head_dim(base, rng.choice([64, 128, 192, 256]))
    return dataclasses.replace(k, ctas_per_sm=rng.choice([1, 1, 2, 3]),
                               order=rng.choice([k.order, k.order, "lpt"]))


@pytest.mark.parametrize("seed", range(12))
def test_allgather_factor_equals_the_heap(seed, monkeypatch):
    monkeypatch.setattr(ag, "MAX_JOBS", 6000)     # the reference loop's time bounded
    rng = random.Random(100 + seed)
    for _ in range(6):
        k = kernels(rng)
        args = (k, rng.choice([1, 3, 8, 32, 96]), rng.choice([4096, 8192, 32768, 131072]),
                rng.choice([2, 3, 4, 8, 16]), rng.choice([8, 66, 132, 148]),
                rng.random() < 0.5)
        assert ag.allgather_factor.__wrapped__(*args) == heap_allgather(*args), args


@pytest.mark.parametrize("seed", range(12))
def test_makespan_equals_the_heap(seed, monkeypatch):
    monkeypatch.setattr(ag, "MAX_JOBS", 6000)
    rng = random.Random(200 + seed)
    for _ in range(8):
        k = kernels(rng)
        tiles = rng.choice([1, 5, 32, 128, 300])
        args = (k, rng.choice([1, 4, 16, 64, 200]), tiles, rng.choice([8, 108, 132]),
                rng.choice([0, 0, 1, 3, 17, tiles]))
        assert ag.makespan.__wrapped__(*args) == heap_grid_makespan(*args), args
