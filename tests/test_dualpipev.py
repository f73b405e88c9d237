"""DualPipeV (deepseek-ai/DualPipe ``DualPipeV``; torch ``ScheduleDualPipeV``): the eight-step
order on the V placement (golden rows derived by hand from the steps, a valid dependency
order on every rank), the overlapped pairs, the stash (``2p``, ``2p + 1`` on the last rank),
the closed-form bubble against a free-communication simulation to floating-point precision
in the region it holds, DeepSeek's published form at ``F = B = W``; plans refuse it."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.plan import parse_plan
from strategies.schedules import get_schedule
from strategies.schedules.analysis import (bubble_fraction_closed_form, free_comm_ranks,
                                           peak_stash)
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order

DV = get_schedule("dualpipev")


def row(r: int, p: int, m: int) -> str:
    return " ".join(map(str, DV.steps(r, p, m, 2)))


def test_golden_p2_m4():
    """Steps 1-8 of docs/schedules.md worked by hand (``&``: overlapped with the next step).
    Rank 1 turns the V: its first main-step pair runs one after the other."""
    assert row(0, 2, 4) == (
        "F0.c0 F1.c0 F2.c0 F0.c1 B0.c1 W0.c1 F1.c1 F3.c0& B1.c1& W1.c1 F2.c1& B0.c0& W0.c0 "
        "B2.c1 W2.c1 F3.c1& B1.c0& W1.c0 B3.c1 W3.c1 B2.c0 W2.c0 B3.c0 W3.c0")
    assert row(1, 2, 4) == (
        "F0.c0 F0.c1 F1.c0 F1.c1 F2.c0 B0.c1 W0.c1 F2.c1& B0.c0& W0.c0 F3.c0& B1.c1& W1.c1 "
        "F3.c1& B1.c0& W1.c0 B2.c1 W2.c1 B2.c0 W2.c0 B3.c1 B3.c0 W3.c1 W3.c0")


@pytest.mark.parametrize("p,m", [(1, 2), (1, 5), (2, 4), (2, 7), (3, 6), (4, 8), (4, 11),
                                 (5, 10), (8, 16), (8, 24)])
def test_valid_order_pairs_and_stash(p, m):
    assert_valid_order("dualpipev", p, m, 2)
    assert_exchanges_pair_up("dualpipev", p, m, 2)
    for r in range(p):
        steps = DV.steps(r, p, m, 2)
        # every overlapped group is a forward with a whole backward of another micro-batch
        groups, cur = [], []
        for s in steps:
            cur.append(s)
            if not s.overlap:
                groups.append(cur)
                cur = []
        pairs = [g for g in groups if len(g) > 1]
        for g in pairs:
            assert [s.kind for s in g] == ["F", "B", "W"]
            assert g[1].microbatch == g[2].microbatch and g[1].chunk == g[2].chunk
            assert (g[0].microbatch, g[0].chunk) != (g[1].microbatch, g[1].chunk)
        assert len(pairs) == 2 * (m - 2 * p + r + 1) - (r == p - 1) + (p - r - 1)
        assert DV.in_flight(r, p, m, 2) == peak_stash(steps) == 2 * p + (r == p - 1)
        assert DV.num_warmup(r, p, m, 2) == 2 * p - 1 + (r == p - 1)
    st = np.arange(p)
    assert DV.in_flight_array(st, p, m, 2).tolist() == [DV.in_flight(r, p, m, 2)
                                                       for r in range(p)]


# chunk times (f, w) with b = f (input gradient); T = 2x per stage
TIMES = [(1.0, 1.0), (1.0, 0.5), (1.0, 0.2), (0.5, 0.5), (2.0, 0.3), (1.3, 1.0)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(1, 2), (2, 4), (2, 9), (3, 6), (4, 8), (4, 13), (8, 16), (8, 20)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """Region ``m >= 2p``, ``T_F = T_B``, ``T_W <= T_F``, no compute overlap in a pair:
    the worst rank idles ``max(3(p-1)f - p·w, 2(p-1)f)`` chunk-times inside its span;
    DeepSeek's ``(PP/2-1)(F&B + B - 3W)`` (``PP = 2p``, ``B`` the whole backward) bounds it,
    with equality at ``f = b = w``."""
    f, w = times
    ranks = free_comm_ranks("dualpipev", p, m, 2, 2 * f, 2 * (f + w), t_w=2 * w)
    work = 2 * m * (2 * f + w)
    assert all(r.busy == pytest.approx(work, rel=1e-12) for r in ranks)
    bubble = max(r.bubble for r in ranks)
    assert bubble == pytest.approx(max(3 * (p - 1) * f - p * w, 2 * (p - 1) * f),
                                   rel=1e-12, abs=1e-12)
    assert bubble / work == pytest.approx(bubble_fraction_closed_form(
        "dualpipev", p, m, 2, w / (2 * f + w)), rel=1e-12, abs=1e-12)
    deepseek = (p - 1) * ((f + f + w) + (f + w) - 3 * w)
    assert bubble <= deepseek + 1e-12
    if w == f:
        assert bubble == pytest.approx(deepseek, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("p,hidden", [(2, 0.5), (4, 0.25), (4, 1.0), (8, 0.5)])
def test_overlap_shortens_the_bubble_within_deepseeks_bound(p, hidden):
    """``F&B < F + B``: the pairs hide part of their compute; the bubble shrinks and stays
    under ``(PP/2-1)(F&B + B - 3W)``."""
    f = w = 1.0
    fb = 3 * f - hidden * f
    free = max(r.bubble for r in free_comm_ranks("dualpipev", p, 4 * p, 2, 2, 4, t_w=2))
    ranks = free_comm_ranks("dualpipev", p, 4 * p, 2, 2, 4, t_w=2, t_fb=2 * fb)
    bubble = max(r.bubble for r in ranks)
    assert bubble < free
    assert bubble <= (p - 1) * (fb + 2 * f - 3 * w) + 1e-12


def test_rules():
    """Its rules (``m >= 2pp``, ``vpp = 2``); plans with two chunks are accepted
    (tests/test_dualpipe_plan.py plans them)."""
    with pytest.raises(SpecError) as e:
        DV.steps(0, 4, 7, 2)
    assert e.value.field == "num_microbatches" and "2*pp=8" in str(e.value)
    with pytest.raises(SpecError) as e:
        DV.steps(0, 4, 8, 1)
    assert e.value.field == "vpp"
    assert parse_plan("tp=2,pp=4,vpp=2,gbs=16,schedule=dualpipev").schedule == "dualpipev"
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=4,vpp=3,gbs=16,schedule=dualpipev")
    assert e.value.field == "vpp" and "vpp=2" in str(e.value)
    assert DV.valid(np.array([4, 4]), np.array([7, 8]), np.array([2, 2])).tolist() == [False, True]
