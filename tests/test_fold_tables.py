"""The tables a simulation works out once and reads many times: the folding's group table,
the compiler's group index, and the real route's latency that folding keeps."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.fold import GROUP_DIMS, fold_spec, group_table, make_link_map
from simulator.network.backend import new_network
from simulator.fold_stats import stats_checked
from simulator.program.compiler import Layout, stats_groups
from simulator.simulate import graph_of
from strategies import placement
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.routing import route

PLANS = [dict(tp=2, pp=2, dp=4, cp=2, mbs=1, gbs=16),
         dict(tp=1, pp=1, dp=32, ep=8, mbs=1, gbs=32),
         dict(tp=4, pp=2, dp=4, mbs=1, gbs=8, zero=1)]
MODELS = ["llama2-7b", "mixtral-8x7b", "llama2-7b"]


def _job(i: int):
    return make_job(model_preset(MODELS[i]), cluster_preset("hgx-h800", 4), Plan(**PLANS[i]))


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_group_table_is_the_placement_groups(i):
    job = _job(i)
    table = group_table(job)
    want = [d for d in GROUP_DIMS if len(placement.groups(job.plan, d)[0]) > 1]
    # the gradient norm's ring last, where the programs hold it (simulator.fold_stats)
    assert stats_checked(job) == (i != 1)          # dp alone: groups of one rank
    if stats_checked(job):
        assert table[-1][0] == "stats" and not table[-1][2]
        assert table[-1][1].tolist() == [list(g) for g in stats_groups(job.plan)]
        table = table[:-1]
    assert len(table) == len(want)
    for (dim, rows, as_set, canon), d in zip(table, want):
        assert dim == d and rows.tolist() == placement.groups(job.plan, d)
        assert as_set == (d in ("ep", "cpa"))
        assert canon == {tuple(sorted(g)) if as_set else tuple(g[g.index(min(g)):] +
                                                                g[:g.index(min(g))])
                         for g in placement.groups(job.plan, d)}


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_layout_index_names_each_ranks_own_group(i):
    job = _job(i)
    layout = Layout(job)
    n = placement.world_size(job.plan)
    for d in GROUP_DIMS + ("pp",):
        groups = placement.groups(job.plan, d)
        for r in range(n):
            g = layout.group(d, r)
            assert r in g and list(g) in groups


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_folded_latency_is_the_real_routes(i):
    job = _job(i)
    spec = fold_spec(job)
    assert spec.folded
    graph = graph_of(job.cluster)
    net = new_network(graph, route, make_link_map(job, spec.rep_of), "flows")
    plain = new_network(graph, route, None, "flows")
    try:
        n = placement.world_size(job.plan)
        for a, b in [(0, n - 1), (n - 1, 0), (1, 9), (3, 17), (5, 5)]:
            assert net.latency(a, b) == plain.latency(a, b)
            if a != b:
                assert net.latency(a, b) == net.route(a, b)[2] > 0
                real, folded = net.real_route(a, b), net.route(a, b)
                assert real[0] == plain.route(a, b)[0] == folded[0]     # the same nodes
                assert np.array_equal(real[1], plain.route(a, b)[1])    # the unmapped links
                assert np.array_equal(folded[1], net.links(a, b))
    finally:
        net.close()
        plain.close()


@pytest.mark.parametrize("k", [None, 2, 4])
@pytest.mark.parametrize("order", ["tp-cp-dp-pp", "tp-dp-cp-pp"])
def test_cp_levels_cut_each_cp_group(k, order):
    """``cpa``: ``k`` consecutive members of each CP group; ``cpr``: its members ``k`` apart."""
    plan = Plan(tp=2, cp=8, dp=3, pp=2, hierarchical_cp=k,
                cp_comm="a2a+p2p" if k else None)
    kk = k or 1
    cpa, cpr = [], []
    for g in placement.groups(plan, "cp", order):
        cpa += [g[i:i + kk] for i in range(0, 8, kk)]
        cpr += [g[j::kk] for j in range(kk)]
    assert placement.cp_level_groups(plan, "cpa", order) == sorted(cpa)
    assert placement.cp_level_groups(plan, "cpr", order) == sorted(cpr)
