"""ZB-V (Qi et al., ICLR 2024, section 6): the V placement, the order of docs/schedules.md
(a golden row and a valid dependency order for every rank), the ``2p``-chunk stash on every
rank, the closed-form bubble against a free-communication simulation to floating-point
precision in the region it holds; plannable: the head on rank 0 in cost and memory, the
full simulator against the closed form, the bound below it."""
from __future__ import annotations

import itertools

import pytest

from strategies.errors import SpecError
from strategies.plan import parse_plan
from strategies.schedules import get_schedule, resolve_name
from strategies.schedules.analysis import (bubble_fraction_closed_form, free_comm_ranks,
                                           peak_stash)
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order

ZB = get_schedule("zb-v")


def test_v_placement():
    p = 4
    assert [ZB.virtual_stage(r, 0, p, 2) for r in range(p)] == [0, 1, 2, 3]
    assert [ZB.virtual_stage(r, 1, p, 2) for r in range(p)] == [7, 6, 5, 4]
    assert [ZB.rank_chunk(s, p, 2) for s in range(8)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1)]
    assert ZB.ends(p, 2) == (0, 0)                   # embedding and loss on the first rank
    assert ZB.peer(3, 0, 5, p, 2, "fwd", True) == 3  # the turn of the V stays on the rank
    assert ZB.peer(0, 1, 5, p, 2, "bwd", True) == 1
    assert resolve_name("zbv") == "zb-v"


def test_golden_p2_m4():
    """Rank 0 and rank 1 of p = 2 (torch's ``ScheduleZBVZeroBubble`` builds the same)."""
    row = lambda r: " ".join(map(str, ZB.steps(r, 2, 4, 2)))
    assert row(0) == ("F0.c0 F1.c0 F2.c0 F0.c1 B0.c1 W0.c1 F1.c1 B1.c1 W1.c1 F3.c0 B0.c0 W0.c0 "
                      "F2.c1 B2.c1 W2.c1 B1.c0 W1.c0 F3.c1 B3.c1 W3.c1 B2.c0 W2.c0 B3.c0 W3.c0")
    assert row(1) == ("F0.c0 F0.c1 F1.c0 F1.c1 B0.c1 W0.c1 F2.c0 B0.c0 W0.c0 F2.c1 B1.c1 W1.c1 "
                      "F3.c0 B1.c0 W1.c0 F3.c1 B2.c1 W2.c1 B2.c0 B3.c1 B3.c0 W2.c0 W3.c1 W3.c0")


@pytest.mark.parametrize("p,m", [(1, 1), (1, 3), (2, 1), (2, 3), (2, 6), (3, 2), (3, 5),
                                 (4, 4), (4, 7), (4, 10), (8, 15), (8, 16)])
def test_valid_dependency_order_and_stash(p, m):
    assert_valid_order("zb-v", p, m, 2)
    assert_exchanges_pair_up("zb-v", p, m, 2)
    for r in range(p):
        steps = ZB.steps(r, p, m, 2)
        assert ZB.in_flight(r, p, m, 2) == peak_stash(steps)
        if m >= 2 * p - 1:
            assert peak_stash(steps) == 2 * p        # balanced: p micro-batches' worth
        if m >= 2 * p:                               # a forward is left after the first B
            assert ZB.num_warmup(r, p, m, 2) == 2 * p - 1
            # §6: worker i = r+1 warms up with 2p-i forwards of chunk 0 and i-1 of chunk 1
            # (then the F1 that opens its first F1 B1 W1)
            head = steps[:next(k for k, s in enumerate(steps) if s.kind == "B")]
            assert [sum(s.chunk == c for s in head) for c in (0, 1)] == [2 * p - r - 1, r + 1]
    with pytest.raises(SpecError) as e:
        ZB.steps(0, p, m, 3)
    assert e.value.field == "vpp"


# chunk times (f, b, w): T_F = 2f, T_B = 2b (input gradient), T_W = 2w per stage
TIMES = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 1.0, 0.2), (0.5, 0.5, 0.5), (2.0, 2.0, 0.3)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(1, 2), (2, 3), (2, 8), (3, 5), (4, 7), (4, 8), (4, 13), (8, 15), (8, 16)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """Region ``m >= 2p-1``, ``T_F = T_B``, ``T_W <= T_F``: the worst rank idles
    ``(p-1)(f + b - 2w)`` inside its span (zero when equal, the paper's claim) and one
    iteration's makespan exceeds the ideal by ``(p-1)·max(f, f + b - 2w)``."""
    f, b, w = times
    ranks = free_comm_ranks("zb-v", p, m, 2, 2 * f, 2 * (b + w), t_w=2 * w)
    work = 2 * m * (f + b + w)
    assert all(r.busy == pytest.approx(work, rel=1e-12) for r in ranks)
    bubble = max(r.bubble for r in ranks)
    assert bubble == pytest.approx((p - 1) * (f + b - 2 * w), rel=1e-12, abs=1e-12)
    assert max(r.end for r in ranks) - work == pytest.approx(
        (p - 1) * max(f, f + b - 2 * w), rel=1e-12, abs=1e-12)
    assert bubble / work == pytest.approx(bubble_fraction_closed_form(
        "zb-v", p, m, 2, w / (f + b + w)), rel=1e-12, abs=1e-12)


def test_outside_the_region_the_closed_form_does_not_hold():
    """``T_F != T_B``: the simulated bubble differs from the formula (larger here)."""
    f, b, w, p, m = 1.5, 1.0, 0.4, 4, 8
    ranks = free_comm_ranks("zb-v", p, m, 2, 2 * f, 2 * (b + w), t_w=2 * w)
    assert max(r.bubble for r in ranks) > (p - 1) * (f + b - 2 * w) + 0.5


def test_plans_accept_it_with_two_chunks_only():
    assert parse_plan("tp=2,pp=4,vpp=2,gbs=16,schedule=zb-v").schedule == "zb-v"
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=4,vpp=4,gbs=16,schedule=zb-v")
    assert e.value.field == "vpp" and "vpp=2" in str(e.value)
