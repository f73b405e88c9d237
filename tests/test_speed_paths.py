"""Shortcuts that must give what the long way gives, bit for bit and shape for shape:
``dp_groups.dp_parts_sum`` without an expert part to price, ``maxmin.max_min_memo``, and the
compiler's kept schedule actions."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.network.maxmin import max_min_memo, max_min_rates, solved
from simulator.program import compiler
from strategies.cost.comm.collective import collective_time
from strategies.cost.comm.dp_groups import dp_parts, dp_parts_sum, expert_copies
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset


def _long_way(parts, cost):
    """``dp_parts_sum`` as it was: the expert part priced and masked out everywhere."""
    (d, n_d, s_d), (e, n_e, s_e) = parts
    on = expert_copies(parts)
    return cost(d, n_d, s_d) + np.where(on, cost(e, np.where(on, n_e, 2.0),
                                                 np.where(on, s_e, 1.0)), 0.0)


@pytest.mark.parametrize("shape", ["scalar", "rows", "bytes_rows", "ep_rows"])
@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather"])
def test_dp_parts_sum_without_experts_is_the_long_way(shape, kind):
    cl = cluster_preset("dgx-a100", 16)
    tp, dp, bpp = 8, 16, 2.0
    params, eparams, ep = 1.2e9, 0.0, 1
    if shape != "scalar":
        tp, dp = np.array([1, 2, 4, 8]), np.array([128, 64, 32, 16])
    if shape == "bytes_rows":
        bpp = np.array([2.0, 4.0, 2.0, 4.0])
    if shape == "ep_rows":            # experts, but no expert-data-parallel copies anywhere
        eparams, ep = 4e8, 128       # tp·dp = 128 on every row: each expert held once
    parts = dp_parts(params, eparams, tp, 1, dp, ep, 1)
    assert not np.any(expert_copies(parts))

    def cost(p, n, s):
        return collective_time(kind, bpp * p, n, s, cl)
    fast, slow = dp_parts_sum(parts, cost), _long_way(parts, cost)
    assert type(fast) is type(slow) and np.shape(fast) == np.shape(slow)
    assert np.array_equal(fast, slow)


def test_dp_parts_sum_with_experts_prices_them():
    cl = cluster_preset("dgx-h100", 8)
    parts = dp_parts(2e9, 1.5e9, np.array([1, 2]), 1, np.array([64, 32]), 8, 1)
    assert np.all(expert_copies(parts))

    def cost(p, n, s):
        return collective_time("reduce_scatter", 2.0 * p, n, s, cl)
    assert np.array_equal(dp_parts_sum(parts, cost), _long_way(parts, cost))
    assert np.all(dp_parts_sum(parts, cost) > cost(parts[0][0], parts[0][1], parts[0][2]))


def test_max_min_memo_gives_the_solver_rates_and_keeps_them():
    cap = np.array([1.0, 2.0, 3.0, np.inf])
    links = np.array([[0, 1, 3], [0, 3, 3], [1, 2, 3]])
    memo = solved(cap)
    a = max_min_memo(memo, cap, links)
    assert np.array_equal(a, max_min_rates(cap, links))
    assert max_min_memo(memo, cap, links) is a          # the second time from the memo
    assert solved(cap.copy()) is memo                    # one memo per capacity vector
    # the same bytes in another shape are another flow set
    pairs = np.array([[0, 1], [3, 3], [1, 2]])
    rows = pairs.reshape(2, 3)
    assert pairs.tobytes() == rows.tobytes()
    assert np.array_equal(max_min_memo(memo, cap, pairs), max_min_rates(cap, pairs))
    assert np.array_equal(max_min_memo(memo, cap, rows), max_min_rates(cap, rows))
    other = solved(np.array([2.0, 2.0, 3.0, np.inf]))
    assert other is not memo
    assert np.array_equal(max_min_memo(other, np.array([2.0, 2.0, 3.0, np.inf]), links),
                          max_min_rates(np.array([2.0, 2.0, 3.0, np.inf]), links))


def test_kept_schedule_actions_are_the_schedule_s():
    sched = get_schedule("interleaved")
    for overlapped, flush in ((False, False), (True, False), (True, True)):
        for stage in range(4):
            want = sched.overlapped_actions(stage, 4, 8, 2, None, flush) if overlapped \
                else sched.actions(stage, 4, 8, 2, None)
            kept = compiler._actions("interleaved", overlapped, flush, stage, 4, 8, 2, None)
            assert kept == tuple(want)
            assert compiler._actions("interleaved", overlapped, flush, stage, 4, 8, 2,
                                     None) is kept
