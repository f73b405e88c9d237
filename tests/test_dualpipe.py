"""DualPipe (DeepSeek-V3 §3.2.1; deepseek-ai/DualPipe ``DualPipe``): two directions over the
same ranks (placement by micro-batch parity), the eight-step order (a golden row derived by
hand, mirror symmetry, a valid dependency order on every rank), the overlapped pairs, the
stash that differs by rank (``p + 1`` on the middle ranks, ``p`` elsewhere), the closed-form
bubble against a free-communication simulation to floating-point precision in the region it
holds and DeepSeek's published form at ``F = B = W``; the rules (plans: tests/test_dualpipe_plan.py)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.plan import parse_plan
from strategies.schedules import Step, get_schedule
from strategies.schedules.analysis import (bubble_fraction_closed_form, free_comm_ranks,
                                           peak_stash)
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order

DP = get_schedule("dualpipe")


def test_two_directions():
    p = 4
    assert [DP.virtual_stage(r, 0, p, 1, 6) for r in range(p)] == [0, 1, 2, 3]
    assert [DP.virtual_stage(r, 1, p, 1, 7) for r in range(p)] == [3, 2, 1, 0]
    assert DP.ends(p, 1, 0) == (0, 3) and DP.ends(p, 1, 1) == (3, 0)
    assert DP.peer(1, 1, 5, p, 1, "fwd", True) == 0      # direction 1 flows to lower ranks
    assert DP.rank_chunk(0, p, 1, 5) == (3, 1)


def test_golden_p2_m4():
    """Steps 1-8 of docs/schedules.md worked by hand for rank 0 (the turning rank: its first
    main-step pair runs one after the other)."""
    assert " ".join(map(str, DP.steps(0, 2, 4))) == (
        "F0.c0 F1.c1 F2.c0 B1.c1 W1.c1 F3.c1& B0.c0& W0.c0 B3.c1 W3.c1 B2.c0 W2.c0")


def mirror(s: Step) -> Step:
    return Step(s.kind, s.microbatch ^ 1, 1 - s.chunk, s.overlap)


@pytest.mark.parametrize("p,m", [(2, 4), (2, 10), (4, 8), (4, 12), (6, 12), (6, 18),
                                 (8, 16), (8, 22)])
def test_valid_order_mirror_pairs_and_stash(p, m):
    assert_valid_order("dualpipe", p, m, 1)
    assert_exchanges_pair_up("dualpipe", p, m, 1)
    for r in range(p):
        steps = DP.steps(r, p, m)
        assert [mirror(s) for s in steps] == DP.steps(p - 1 - r, p, m)
        assert sum(s.kind == "F" and s.chunk == 0 for s in steps) == m // 2
        for k, s in enumerate(steps):
            if s.overlap and s.kind == "F":
                pair = steps[k:k + 3]
                assert [t.kind for t in pair] == ["F", "B", "W"] and not pair[2].overlap
        middle = min(r, p - 1 - r) == p // 2 - 1
        assert DP.in_flight(r, p, m) == peak_stash(steps) == p + middle
        assert DP.num_warmup(r, p, m) == p - 1 + middle
    st = np.arange(p)
    assert DP.in_flight_array(st, p, m, 1).tolist() == [DP.in_flight(r, p, m)
                                                       for r in range(p)]


TIMES = [(1.0, 1.0), (1.0, 0.5), (1.0, 0.2), (0.5, 0.5), (2.0, 0.3), (1.3, 1.0)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(2, 4), (2, 8), (4, 8), (4, 14), (6, 12), (8, 16), (8, 24)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """Region ``m >= 2p`` (even), ``T_F = T_B``, ``T_W <= T_F``, no compute overlap in a
    pair: with ``n = p/2`` the worst (edge) rank idles ``max(3(n-1)f - n·w, 2(n-1)f)``;
    DeepSeek's ``(PP/2-1)(F&B + B - 3W)`` bounds it, with equality at ``F = B = W``."""
    f, w = times
    n = p // 2
    ranks = free_comm_ranks("dualpipe", p, m, 1, f, f + w, t_w=w)
    work = m * (2 * f + w)
    assert all(r.busy == pytest.approx(work, rel=1e-12) for r in ranks)
    bubble = max(r.bubble for r in ranks)
    assert bubble == pytest.approx(max(3 * (n - 1) * f - n * w, 2 * (n - 1) * f),
                                   rel=1e-12, abs=1e-12)
    assert ranks[0].bubble == pytest.approx(bubble, rel=1e-12, abs=1e-12)
    assert bubble / work == pytest.approx(bubble_fraction_closed_form(
        "dualpipe", p, m, 1, w / (2 * f + w)), rel=1e-12, abs=1e-12)
    deepseek = (n - 1) * ((2 * f + w) + (f + w) - 3 * w)
    assert bubble <= deepseek + 1e-12
    if w == f:
        assert bubble == pytest.approx(deepseek, rel=1e-12, abs=1e-12)


def test_rules():
    for args, field in [((0, 3, 6), "pp"), ((0, 4, 6), "num_microbatches"),
                        ((0, 4, 9), "num_microbatches")]:
        with pytest.raises(SpecError) as e:
            DP.steps(*args)
        assert e.value.field == field
    with pytest.raises(SpecError) as e:
        DP.steps(0, 4, 8, 2)
    assert e.value.field == "vpp"
    assert parse_plan("tp=2,pp=4,gbs=16,schedule=dualpipe").schedule == "dualpipe"
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=3,gbs=16,schedule=dualpipe")
    assert e.value.field == "pp" and "even pp" in str(e.value)
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=2,gbs=16,schedule=dualpipe,layers_per_stage=10/14")
    assert e.value.field == "layers_per_stage" and "pp-1-r" in str(e.value)
    assert DP.valid(np.array([4, 3]), np.array([8, 8]), np.array([1, 1])).tolist() == \
        [True, False]
