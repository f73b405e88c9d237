"""The order's stash moments counted with arrays (``schedules.stash``: count changes summed,
per-chunk counts packed into int64 words, distinct rows found by a hash checked exactly)
equal a step-by-step count of the same order: every schedule, overlapped groups, a trailing
linked run, orders whose counts go below zero, more chunks than the order uses."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.schedules import get_schedule
from strategies.schedules.registry import schedule_names
from strategies.schedules.stash import (chunk_stash_moments, first_distinct_columns,
                                        stash_frontier, stash_moments)
from strategies.schedules.step import Step, step_columns


def _walk(steps, chunks):
    """Step by step: ``(stashed, pending, after_forward)`` per chunk after each forward and
    after each group's backwards (the oracle)."""
    has_w = {(s.microbatch, s.chunk) for s in steps if s.kind == "W"}
    live, pend, out, group = [0] * chunks, [0] * chunks, [], []
    for s in steps:
        group.append(s)
        if s.overlap:
            continue
        bs = [g for g in group if g.kind == "B"]
        for g in bs:
            live[g.chunk] -= 1
            pend[g.chunk] += (g.microbatch, g.chunk) in has_w
        if bs:
            out.append((tuple(live), tuple(pend), False))
        for g in group:
            if g.kind == "F":
                live[g.chunk] += 1
                out.append((tuple(live), tuple(pend), True))
        for g in group:
            pend[g.chunk] -= g.kind == "W"
        group = []
    return out


def _distinct(walk, chunks):
    got = tuple(dict.fromkeys((n, w) for n, w, _ in walk))
    return got or ((tuple([0] * chunks), tuple([0] * chunks)),)


def _frontier(walk):
    best = []
    for n, w in sorted({(sum(a), sum(b)) for a, b, _ in walk}, key=lambda x: (-x[0], -x[1])):
        if not best or w > best[-1][1]:
            best.append((n, w))
    return tuple(best) or ((0, 0),)


def _orders():
    for name in schedule_names():
        sched = get_schedule(name)
        for pp, m, v in [(2, 4, 1), (4, 8, 2), (4, 12, 2), (3, 6, 2), (2, 64, 8)]:
            for stage in range(pp):
                try:
                    steps = sched.steps(stage, pp, m, v)
                except Exception:              # the schedule does not run these arguments
                    continue
                yield f"{name}-{pp}-{m}-{v}-{stage}", steps, sched.order_chunks(pp, v)


ORDERS = list(_orders())


def test_every_schedule_is_covered():
    assert all(any(k.startswith(n + "-") for k, _, _ in ORDERS) for n in schedule_names())
    assert any(s.overlap for _, steps, _ in ORDERS for s in steps)      # DualPipe's pairs


@pytest.mark.parametrize("key, steps, chunks", ORDERS, ids=[k for k, _, _ in ORDERS])
def test_moments_equal_the_step_by_step_count(key, steps, chunks):
    for c in (chunks, chunks + 3):
        walk = _walk(steps, c)
        assert chunk_stash_moments(steps, c) == _distinct(walk, c)
    walk = _walk(steps, chunks)
    assert stash_moments(steps) == [(sum(n), sum(w)) for n, w, f in walk if f]
    assert stash_frontier(steps) == _frontier(walk)


@pytest.mark.parametrize("steps", [
    [],
    [Step("F", 0, 0, True)],                                  # a linked run no step ends
    [Step("F", 0, 1), Step("F", 1, 1, True)],
    [Step("B", 0, 1), Step("W", 0, 1), Step("W", 3, 0)],      # counts below zero
    [Step("F", 0, 1), Step("B", 0, 1, True), Step("W", 0, 1), Step("F", 1, 0)],
])
def test_edge_orders(steps):
    for c in (2, 5):
        walk = _walk(steps, c)
        assert chunk_stash_moments(steps, c) == _distinct(walk, c)
    assert stash_frontier(steps) == _frontier(_walk(steps, 2))


def test_first_distinct_columns_exact_under_collisions():
    """Every column hashed alike (``mix`` zero) or only the first row read: the exact
    fallback still returns each distinct column's first index."""
    keys = np.random.default_rng(7).integers(-3, 3, size=(4, 300)).astype(np.int64)
    want = list(dict.fromkeys(map(tuple, keys.T.tolist())).keys())
    for mix in (None, np.zeros(4, dtype=np.int64), np.array([1, 0, 0, 0], dtype=np.int64)):
        got = first_distinct_columns(keys, mix)
        assert [tuple(keys[:, j]) for j in got] == want
        assert list(got) == sorted(got)


def _interleaved_oracle(stage, pp, m, vpp, g):
    """Forward ``k`` is virtual micro-batch ``k`` (groups of ``g`` micro-batches, chunk-major
    inside), backward ``k`` the same micro-batch on chunk ``vpp - 1 - c``; ``w`` warm-up
    forwards, then ``F(w+k) B(k)`` pairs, then the remaining backwards."""
    table = [(i, c) for start in range(0, m, g)
             for c in range(vpp) for i in range(start, min(start + g, m))]
    w = get_schedule("interleaved").num_warmup(stage, pp, m, vpp, g)
    fwd = [Step("F", i, c) for i, c in table]
    bwd = [Step("B", i, vpp - 1 - c) for i, c in table]
    out = fwd[:w]
    for k in range(len(fwd) - w):
        out += [fwd[w + k], bwd[k]]
    return out + bwd[len(fwd) - w:]


@pytest.mark.parametrize("pp, m, vpp, g", [(2, 4, 2, None), (4, 8, 2, None), (4, 8, 3, 4),
                                           (2, 5, 2, 3), (2, 17, 4, 5), (8, 24, 2, 8),
                                           (1, 5, 3, None), (1, 3, 2, 2), (3, 12, 2, 6)])
def test_interleaved_order_built_as_arrays(pp, m, vpp, g):
    """``Interleaved.order_columns`` (arrays) and its ``steps`` are the loop-built order;
    the schedule's per-chunk moments read off the columns equal those of the steps."""
    sched = get_schedule("interleaved")
    for stage in range(pp):
        want = _interleaved_oracle(stage, pp, m, vpp, g or pp)
        assert sched.steps(stage, pp, m, vpp, g) == want
        assert [a.tolist() for a in sched.order_columns(stage, pp, m, vpp, g)] == [
            a.tolist() for a in step_columns(want)]
        assert sched.chunk_stash_moments(stage, pp, m, vpp, g) == chunk_stash_moments(want, vpp)
