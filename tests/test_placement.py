"""Rank placement: Megatron's golden groups, invariants over a grid of plans and orders."""
from __future__ import annotations

import itertools

import pytest

from strategies.errors import SpecError
from strategies.placement import (DEFAULT_ORDER, DIMS, coords_of, groups, parse_order, rank_of,
                                  tp_crosses_node, world_size)
from strategies.plan import Plan

ORDERS = ["-".join(p) for p in itertools.permutations(DIMS)]
GRID = [Plan(tp=tp, cp=cp, dp=dp, pp=pp)
        for tp, cp, dp, pp in itertools.product((1, 2, 4, 8), (1, 2), (1, 2, 3, 4), (1, 2, 4))]


def test_megatron_golden_16_gpus_tp2_pp4():
    """The example in Megatron-LM's ``initialize_model_parallel`` docstring."""
    p = Plan(tp=2, pp=4, dp=2)
    assert groups(p, "tp") == [[2 * i, 2 * i + 1] for i in range(8)]
    assert groups(p, "pp") == [[i, i + 4, i + 8, i + 12] for i in range(4)]
    assert groups(p, "dp") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14],
                               [13, 15]]
    assert groups(p, "cp") == [[r] for r in range(16)]


def test_context_parallel_sits_between_tp_and_dp():
    p = Plan(tp=2, cp=2, dp=2)
    assert groups(p, "cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups(p, "dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert rank_of(p, 1, 1, 1, 0) == 7


@pytest.mark.parametrize("plan", GRID, ids=lambda p: p.short())
def test_groups_partition_ranks_with_the_right_sizes(plan):
    n = world_size(plan)
    for dim in DIMS:
        gs = groups(plan, dim)
        size = getattr(plan, dim)
        assert len(gs) == n // size and all(len(g) == size for g in gs)
        assert sorted(r for g in gs for r in g) == list(range(n))
        for g in gs:  # ordered by rank in that dimension, all other coordinates equal
            cs = [coords_of(plan, r) for r in g]
            assert [c[dim] for c in cs] == list(range(size))
            assert all({k: v for k, v in c.items() if k != dim} ==
                       {k: v for k, v in cs[0].items() if k != dim} for c in cs)


@pytest.mark.parametrize("plan", GRID, ids=lambda p: p.short())
def test_tp_groups_are_consecutive_and_inside_a_node(plan):
    for g in groups(plan, "tp"):
        assert g == list(range(g[0], g[0] + plan.tp))
        if plan.tp <= 8:  # tp is a power of two here, so it divides 8
            assert len({r // 8 for r in g}) == 1
    assert tp_crosses_node(plan, 8) is (plan.tp > 8)


@pytest.mark.parametrize("order", ORDERS)
def test_rank_of_and_coords_of_are_inverse(order):
    for plan in GRID[::5]:
        n = world_size(plan)
        seen = set()
        for r in range(n):
            c = coords_of(plan, r, order)
            assert rank_of(plan, c["tp"], c["cp"], c["dp"], c["pp"], order) == r
            seen.add(tuple(c.values()))
        assert len(seen) == n
        for dim in DIMS:
            gs = groups(plan, dim, order)
            assert sorted(r for g in gs for r in g) == list(range(n))
            assert all([coords_of(plan, r, order)[dim] for r in g] == list(range(len(g)))
                       for g in gs)


def test_innermost_dimension_is_consecutive_for_any_order():
    p = Plan(tp=2, cp=2, dp=3, pp=2)
    for order in ORDERS:
        first = parse_order(order)[0]
        assert all(g == list(range(g[0], g[0] + len(g))) for g in groups(p, first, order))


def test_expert_groups():
    assert groups(Plan(tp=2, dp=4, ep=2), "ep") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups(Plan(tp=1, dp=8, ep=4), "ep") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # cp and dp are flattened (cp inner) before cutting ep blocks
    assert groups(Plan(cp=2, dp=2, ep=4), "ep") == [[0, 1, 2, 3]]
    p = Plan(tp=2, cp=2, dp=4, pp=2, ep=4)
    gs = groups(p, "ep")
    assert len(gs) == 32 // 4 and sorted(r for g in gs for r in g) == list(range(32))
    for g in gs:
        cs = [coords_of(p, r) for r in g]
        assert len({(c["tp"], c["pp"]) for c in cs}) == 1
    assert groups(Plan(dp=4, ep=1), "ep") == [[r] for r in range(4)]


def test_tp_crosses_node():
    assert not tp_crosses_node(Plan(tp=8, dp=2), 8)
    assert tp_crosses_node(Plan(tp=16, dp=1), 8)
    assert tp_crosses_node(Plan(tp=3, dp=8), 8)          # the block 6, 7, 8 straddles nodes
    assert not tp_crosses_node(Plan(tp=2, dp=2), 8, "dp-tp-cp-pp")
    assert tp_crosses_node(Plan(tp=2, dp=2), 2, "dp-tp-cp-pp")   # tp group [0, 2]


def test_with_a_job():
    from strategies.job import make_job
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    job = make_job(model_preset("llama3-70b"), cluster_preset("dgx-h100", 4), Plan(tp=8, pp=2),
                   global_batch=64)
    assert job.plan.dp == 2 and DEFAULT_ORDER == "tp-cp-dp-pp"
    assert groups(job.plan, "pp")[0] == [0, 16]
    assert not tp_crosses_node(job.plan, job.cluster.gpus_per_node)


@pytest.mark.parametrize("call,field", [
    (lambda: groups(Plan(tp=2), "tp"), "dp"),
    (lambda: groups(Plan(dp=2), "xp"), "dim"),
    (lambda: groups(Plan(dp=3, ep=2), "ep"), "ep"),
    (lambda: rank_of(Plan(tp=2, dp=1), 2, 0, 0, 0), "tp_rank"),
    (lambda: coords_of(Plan(tp=2, dp=1), 2), "rank"),
    (lambda: parse_order("tp-dp-pp"), "order"),
    (lambda: parse_order("tp-tp-dp-pp"), "order"),
    (lambda: tp_crosses_node(Plan(dp=1), 0), "gpus_per_node"),
])
def test_errors_name_the_field(call, field):
    with pytest.raises(SpecError) as e:
        call()
    assert e.value.field == field
