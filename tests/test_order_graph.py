"""The free-communication order built as arrays (``strategies.schedules.order_graph``) against
the dependency rule walked step by step (a plain dict builder here), the array-built orders
of ZB-V and the dual schedules against their documented counts, and the stash frontier on
columns against its definition."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.schedules import Schedule, Step, get_schedule
from strategies.schedules.analysis import free_comm_order
from strategies.schedules.combined import combined_steps
from strategies.schedules.stash import column_stash_frontier, stash_moments
from strategies.schedules.step import make_step, step_columns


def _reference(sched, pp, m, vpp, group=None, combined=False):
    """``(rank, sig, sigs, preds, bounds)`` walked step by step: an event per overlapped
    group, each waiting for its rank's previous event and its steps' dependencies."""
    progs = []
    for r in range(pp):
        steps = (combined_steps(sched.name, r, pp, m, vpp, group) if combined
                 else sched.steps(r, pp, m, vpp, group))
        cuts = [0] + [k + 1 for k, s in enumerate(steps) if not s.overlap]
        if cuts[-1] < len(steps):                 # a trailing linked run is a group too
            cuts.append(len(steps))
        progs.append([steps[a:b] for a, b in zip(cuts, cuts[1:])])
    last = sched.num_virtual_stages(pp, vpp) - 1

    def dep(s, pos):
        if s.kind == "W":
            return ("B", s.microbatch, pos)
        if s.kind == "F":
            return ("F", s.microbatch, pos - 1) if pos > 0 else None
        return ("F", s.microbatch, pos) if pos == last else ("B", s.microbatch, pos + 1)

    events, producer, sigs = [], {}, {}
    for r, prog in enumerate(progs):
        for i, g in enumerate(prog):
            e = len(events)
            keys, deps = [], []
            for s in g:
                pos = sched.virtual_stage(r, s.chunk, pp, vpp, s.microbatch)
                d = dep(s, pos)
                if d is not None and d not in keys:
                    deps.append(d)
                keys.append((s.kind, s.microbatch, pos))
            for k in keys:
                producer[k] = e
            sig = sigs.setdefault((r, tuple((s.kind, s.chunk) for s in g)), len(sigs))
            events.append((r, i, deps, sig))
    preds = []
    for e, (r, i, deps, _) in enumerate(events):
        ps = [e - 1] if i > 0 else []
        for d in deps:
            q = producer[d]
            if q not in ps and q != e:
                ps.append(q)
        preds.append(ps)
    level = [None] * len(events)
    while None in level:           # relax until every event has its predecessors' level
        for e, ps in enumerate(preds):
            if level[e] is None and all(level[q] is not None for q in ps):
                level[e] = 1 + max([level[q] for q in ps], default=-1)
    n = len(events)
    order = sorted(range(n), key=lambda e: (level[e], events[e][0]))
    where = {e: k for k, e in enumerate(order)}
    width = max([1] + [len(p) for p in preds])
    mat = [[where[q] for q in preds[e]] + [n] * (width - len(preds[e])) for e in order]
    lv = [level[e] for e in order]
    bounds = tuple(k for k in range(n) if k == 0 or lv[k] != lv[k - 1]) + (n,)
    return ([events[e][0] for e in order], [events[e][3] for e in order], tuple(sigs), mat,
            bounds)


class _RingByMicrobatch(Schedule):
    """GPipe's order on a ring whose odd micro-batches run the pipeline backwards (a
    placement that reads the micro-batch, so the order graph asks ``virtual_stage``)."""

    name = "test-ring-by-microbatch"

    def steps(self, stage, pp, m, vpp=1, group_size=None):
        return ([make_step("F", i, 0, False) for i in range(m)]
                + [make_step("B", i, 0, False) for i in reversed(range(m))])

    def virtual_stage(self, rank, chunk, pp, vpp, microbatch=0):
        return rank if microbatch % 2 == 0 else pp - 1 - rank


CASES = [("1f1b", 4, 8, 1, None, False), ("interleaved", 4, 8, 2, None, False),
         ("interleaved", 3, 7, 3, 4, False), ("interleaved", 4, 8, 2, None, True),
         ("zb-h1", 4, 9, 1, None, False), ("zb-h2", 3, 7, 1, None, False),
         ("zb-v", 3, 7, 2, None, False), ("dualpipev", 3, 8, 2, None, False),
         ("dualpipe", 4, 10, 1, None, False), ("gpipe", 2, 3, 1, None, False),
         ("zb-2p", 4, 8, 1, None, False), ("1f1b", 1, 3, 1, None, True)]


@pytest.mark.parametrize("name,pp,m,vpp,group,combined", CASES)
def test_order_graph_equals_the_step_by_step_walk(name, pp, m, vpp, group, combined):
    sched = get_schedule(name)
    got = free_comm_order(sched, pp, m, vpp, group, combined)
    rank, sig, sigs, mat, bounds = _reference(sched, pp, m, vpp, group, combined)
    assert got.rank.tolist() == rank and got.sig.tolist() == sig
    assert got.sigs == sigs and got.preds.tolist() == mat and got.bounds == bounds


def test_a_placement_read_per_microbatch_is_asked_per_step():
    sched = _RingByMicrobatch()
    got = free_comm_order(sched, 3, 4, 1)
    rank, sig, sigs, mat, bounds = _reference(sched, 3, 4, 1)
    assert got.preds.tolist() == mat and got.bounds == bounds
    # the same order on the plain ring waits for other steps
    ring = type("Ring", (_RingByMicrobatch,), {"virtual_stage": Schedule.virtual_stage})()
    assert free_comm_order(ring, 3, 4, 1).preds.tolist() != mat


def test_ranks_waiting_in_a_cycle_deadlock_by_name():
    class Crossed(Schedule):
        name = "test-crossed"

        def steps(self, stage, pp, m, vpp=1, group_size=None):
            f, b = Step("F", 0), Step("B", 0)
            return [b, f] if stage == 0 else [f, b]

    with pytest.raises(RuntimeError, match=r"deadlocks on ranks \[0, 1\] \(pp=2, m=1"):
        free_comm_order(Crossed(), 2, 1, 1)


def _zbv_walked(stage, pp, m):
    """ZB-V's order walked with counters (module docstring of ``zb_v``)."""
    p, r, n = pp, stage, max(2 * pp - 1, m)
    cnt = {(k, c): 0 for k in "FBW" for c in (0, 1)}
    out = []

    def add(*toks):
        for kind, c in toks:
            out.append(Step(kind, cnt[kind, int(c)], int(c)))
            cnt[kind, int(c)] += 1
    for _ in range(2 * (p - r) - 1):
        add("F0")
    for _ in range(r):
        add("F1", "F0")
    for _ in range(p - r):
        add("F1", "B1", "W1")
    while cnt["F", 1] < cnt["F", 0] or cnt["F", 0] < n:
        if cnt["F", 0] < n:
            add("F0")
        add("B0", "W0", "F1", "B1", "W1")
    for _ in range(r):
        add("B0", "B1")
    for _ in range(p - r):
        add("B0", "W0")
    while cnt["W", 1] < cnt["B", 1]:
        add("W1")
    while cnt["W", 0] < cnt["B", 0]:
        add("W0")
    return [s for s in out if s.microbatch < m]


@pytest.mark.parametrize("pp,m", [(1, 1), (1, 4), (2, 2), (2, 3), (3, 5), (4, 7), (4, 16),
                                  (5, 9)])
def test_zb_v_columns_equal_the_counted_walk(pp, m):
    sched = get_schedule("zb-v")
    for r in range(pp):
        assert sched.steps(r, pp, m, 2) == _zbv_walked(r, pp, m)


@pytest.mark.parametrize("name,pp,m", [("dualpipev", 1, 2), ("dualpipev", 2, 4),
                                       ("dualpipev", 3, 9), ("dualpipev", 4, 8),
                                       ("dualpipe", 2, 4), ("dualpipe", 4, 12),
                                       ("dualpipe", 6, 12)])
def test_dual_orders_run_every_pass_once_and_each_w_after_its_b(name, pp, m):
    sched = get_schedule(name)
    for r in range(pp):
        steps = sched.steps(r, pp, m)
        vpp = 2 if name == "dualpipev" else 1
        per_kind = {k: sorted((s.microbatch, s.chunk) for s in steps if s.kind == k)
                    for k in "FBW"}
        assert per_kind["F"] == per_kind["B"] == per_kind["W"]
        assert len(per_kind["F"]) == (2 * m if vpp == 2 else m)
        at = {(s.kind, s.microbatch, s.chunk): i for i, s in enumerate(steps)}
        assert all(at["W", i, c] > at["B", i, c] > at["F", i, c] for i, c in per_kind["F"])
        # an overlapped group is a forward, then a backward and its W
        for i, s in enumerate(steps):
            if s.overlap and s.kind == "F":
                assert steps[i + 1].kind == "B" and steps[i + 1].overlap
                assert (steps[i + 2].kind, steps[i + 2].microbatch) == ("W", steps[i + 1].microbatch)


def _frontier_walked(steps):
    """The undominated ``(stashed, pending W)`` moments after each forward and each
    backward of an order without overlapped groups, most stashed first."""
    w_of = {(s.microbatch, s.chunk) for s in steps if s.kind == "W"}
    n = w = 0
    moments = set()
    for s in steps:
        if s.kind == "F":
            n += 1
        elif s.kind == "B":
            n -= 1
            w += (s.microbatch, s.chunk) in w_of
        else:
            w -= 1
            continue
        moments.add((n, w))
    best = []
    for n, w in sorted(moments, key=lambda x: (-x[0], -x[1])):
        if not best or w > best[-1][1]:
            best.append((n, w))
    return tuple(best)


@pytest.mark.parametrize("name,pp,m", [("zb-h1", 4, 8), ("zb-h2", 4, 8), ("zb-2p", 4, 9),
                                       ("zb-v", 3, 5), ("zb-v", 2, 8), ("1f1b", 4, 3),
                                       ("interleaved", 2, 4)])
def test_column_stash_frontier_keeps_the_undominated_moments(name, pp, m):
    sched = get_schedule(name)
    vpp = 2 if name in ("zb-v", "interleaved") else 1
    for r in range(pp):
        steps = sched.steps(r, pp, m, vpp)
        assert column_stash_frontier(step_columns(steps)) == _frontier_walked(steps)
        assert sched.stash_frontier(r, pp, m, vpp)[0][0] == max(n for n, _ in
                                                                stash_moments(steps))
