"""ZB-1p and ZB-2p: the zero-bubble paper's automatic scheduling heuristic
(strategies/schedules/zb_auto.py): valid orders, the paper's bubble claims with free
communication, the memory limit, determinism, and the estimate's closed form."""
from __future__ import annotations

import random

import pytest

from strategies.errors import SpecError
from strategies.schedules import get_schedule, resolve_name
from strategies.schedules.analysis import free_comm_ranks
from strategies.schedules.stash import stash_moments
from strategies.schedules.zb_auto import AutoTimes, auto_schedule
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order


@pytest.mark.parametrize("name", ["zb-1p", "zb-2p"])
@pytest.mark.parametrize("p,m", [(1, 3), (2, 1), (3, 2), (4, 4), (4, 9), (6, 13)])
def test_valid_order(name, p, m):
    assert_valid_order(name, p, m, 1)
    assert_exchanges_pair_up(name, p, m, 1)


def test_names():
    assert resolve_name("zb-auto") == "zb-2p"
    assert get_schedule("zb-1p").limit(8) == 8.0 and get_schedule("zb-2p").limit(8) == 16.0
    with pytest.raises(SpecError):
        get_schedule("zb-2p").steps(0, 4, 8, vpp=2)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_2p_zero_bubble_equal_times(p):
    """The paper's claim: ``M_limit = 2p·M_B`` and ``T_F = T_B = T_W`` with free
    communication leave no bubble on any rank once ``m >= 2p``."""
    for m in (2 * p, 2 * p + 3, 3 * p):
        spans = free_comm_ranks("zb-2p", p, m, 1, 1.0, 2.0, t_w=1.0)
        assert [r.bubble for r in spans] == [0.0] * p
        assert all(r.busy == 3.0 * m for r in spans)


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_1p_equals_zb_h1(p):
    """``M_limit = p·M_B``, ``T_F = T_B = T_W``, free communication: the heuristic's worst
    rank idles as long as ZB-H1's, ``(p-1)(T_F + T_B - T_W)`` once ``m >= p``, and every
    rank as long as ZB-H1's once ``m > p`` (below, the heuristic does better on later
    ranks)."""
    for m in range(1, 3 * p + 1):
        auto = [r.bubble for r in free_comm_ranks("zb-1p", p, m, 1, 1.0, 2.0, t_w=1.0)]
        h1 = [r.bubble for r in free_comm_ranks("zb-h1", p, m, 1, 1.0, 2.0, t_w=1.0)]
        assert max(auto) == max(h1)
        assert all(a <= b for a, b in zip(auto, h1))
        if m > p:
            assert auto == h1
        if m >= p:
            assert max(auto) == (p - 1) * (1.0 + 1.0 - 1.0)


def _check_memory(res, times, limit):
    for order in res.orders:
        for n, pending in stash_moments(order):
            assert n + times.w_mem * pending <= limit + 1e-12


def test_memory_limit_random_times():
    """Each rank's activations in flight (``F`` whose ``B`` has not run, ``M_B`` each) and
    pending ``W`` (``M_W``) stay within the limit at every moment, for times, message time
    and ``M_W/M_B`` drawn at random; the orders are valid (every rank runs every step)."""
    rng = random.Random(13)
    for _ in range(40):
        p, m = rng.randint(2, 8), rng.randint(1, 24)
        t = AutoTimes(rng.uniform(0.2, 2), rng.uniform(0.2, 2), rng.uniform(0.05, 2),
                      rng.uniform(0, 0.5), rng.uniform(0, 1))
        for k in (1, 2):
            res = auto_schedule(p, m, t, float(k * p))
            _check_memory(res, t, k * p)
            for order in res.orders:
                assert sorted((s.kind, s.microbatch) for s in order) == sorted(
                    (kind, i) for kind in "FBW" for i in range(m))


def test_memory_limit_is_binding():
    """With ``W`` keeping nothing (``M_W = 0``) ZB-2p's first rank holds up to ``2p`` stashed
    forwards (twice 1F1B's), ZB-1p's at most ``p``."""
    t = AutoTimes(1.0, 1.0, 1.0, 0.0, 0.0)
    p, m = 4, 16
    peak1 = max(n for n, _ in stash_moments(auto_schedule(p, m, t, 1.0 * p).orders[0]))
    peak2 = max(n for n, _ in stash_moments(auto_schedule(p, m, t, 2.0 * p).orders[0]))
    assert peak1 == p and p < peak2 <= 2 * p


def test_deterministic():
    t = AutoTimes(1.0, 1.3, 0.7, 0.05, 0.8)
    a = auto_schedule(6, 20, t, 12.0)
    auto_schedule.cache_clear()
    b = auto_schedule(6, 20, t, 12.0)
    assert a is not b and a == b


def test_pipeline_span_is_free_comm_makespan():
    """The estimate's span for balanced stages is the heuristic's free-communication makespan
    of one iteration (the simulator's measure), to floating-point precision."""
    for name in ("zb-1p", "zb-2p"):
        s = get_schedule(name)
        for p, m in ((4, 8), (8, 20)):
            f, b, w = 1.0, 1.0, 1.0
            make = max(r.end for r in free_comm_ranks(name, p, m, 1, f, b + w, t_w=w))
            span = s.pipeline_span(m, f + b + w, p * (f + b + w), 1, w_share=w / 3,
                                   f_share=f / 3, pp=p)
            assert span == pytest.approx(make / 1.0, rel=1e-12)
            frac = s.bubble_fraction(p, m, 1, w_share=1 / 3)
            worst = max(r.end - r.start for r in free_comm_ranks(name, p, m, 1, f, b + w, t_w=w))
            assert frac == pytest.approx(worst / (3 * m) - 1, rel=1e-12, abs=1e-15)


def test_bad_times():
    with pytest.raises(SpecError, match="t_w"):
        AutoTimes(1.0, 1.0, -1.0)
    with pytest.raises(SpecError, match="w_mem"):
        AutoTimes(1.0, 1.0, 1.0, 0.0, 1.5)
