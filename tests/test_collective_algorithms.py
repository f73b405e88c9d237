"""``strategies.collectives``: one definition per algorithm gives the phases the engine runs and
the closed form the estimate and the bound use; one rule picks the algorithm everywhere."""
from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
import simpy

from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.network.flows import FlowNetwork
from simulator.network.stepwise_oracle import start_collective
from simulator.program.compiler import Layout
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies.collectives import all_to_all, hierarchical, ring
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import comm as cm
from strategies.estimate.bound.floors import group_floor
from strategies.job import make_job
from strategies import placement
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

REL = 1e-12
A100 = cluster_preset("dgx-a100", 2)
NVL = A100.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
NIC = A100.inter_node_bandwidth * cm.NETWORK_EFFICIENCY
LAT_IN, LAT_OUT = A100.intra_node_latency, A100.inter_node_latency
GRAPH = build_graph(A100)


def _engine_time(kind, group, nbytes, algo=None, streams=1):
    """Seconds the engine takes for ``streams`` copies of one collective over ``group``
    started together on separate streams (and channels), on the flows backend."""
    algo = algo or colls.algorithm_for(kind, group, A100.gpus_per_node)
    progs = {}
    for r in group:
        ops = {f"s{i}": (Collective(0, f"s{i}", kind, tuple(group), nbytes, algo, f"t{i}", "tp",
                                    "c"),) for i in range(streams)}
        progs[r] = Program(r, 0, ops)
    return run(progs, net=SimNetwork(simpy.Environment(), GRAPH, route)).step_time_s


# -- one definition -----------------------------------------------------------------
def test_steps_per_kind_are_one_table():
    assert [colls.steps(k, 8) for k in colls.KINDS] == [14, 7, 7, 1]
    assert colls.steps("allreduce", 1) == 0
    (ph,) = ring.phases("allgather", (0, 1, 2, 3), 8.0)
    assert ph.steps == colls.steps("allgather", 4) and ph.nbytes == 3 * 8.0 / 4
    with pytest.raises(ValueError, match="kind"):
        colls.steps("broadcast", 4)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather"])
def test_ring_alone_on_its_links_is_one_closed_form_everywhere(kind, n):
    """An intra-node ring: the engine, the estimate's comm model and the bound's floor all
    equal ``ring.time`` plus the call's own latency (``phase.CALL_LATENCY_S``, once a call),
    to floating-point precision."""
    S, passes = 48e6, colls.PASSES[kind]
    closed = ring.time(passes, S, n, NVL, LAT_IN)
    assert closed == pytest.approx(passes * (n - 1) / n * S / NVL + passes * (n - 1) * LAT_IN,
                                   rel=1e-15)
    assert _engine_time(kind, list(range(n)), S) == pytest.approx(closed + CALL, rel=REL)
    bw, lat = cm.group_bandwidth(A100, n, 1)
    assert cm.collective_time(kind, S, n, 1, A100) == pytest.approx(closed + CALL, rel=REL)
    assert ring.kind_time(kind, S, n, bw, lat) == pytest.approx(closed, rel=REL)
    assert float(group_floor(S, n, 1, passes, A100)) == pytest.approx(closed + CALL, rel=REL)


def test_hierarchical_alone_is_its_closed_form():
    """paraplan's hierarchical algorithm, asked for by name (the selector never picks it:
    NCCL has no such all-reduce, calibration §3.21), still runs as its closed form. Here
    (4 members on each of 2 nodes) it is faster than NCCL's flat ring, whose NICs carry
    ``2(n-1)/n`` of the buffer against its ``2(nodes-1)/nodes``: 7/8 against 1/2."""
    S, group = 40e6, [0, 2, 4, 6, 8, 10, 12, 14]          # 4 members on each of 2 nodes
    assert colls.algorithm_for("allreduce", group, 8) == colls.RING
    closed = hierarchical.time(2, S, 4, 2, NVL, LAT_IN, NIC, LAT_OUT)
    assert _engine_time("allreduce", group, S, algo=colls.HIERARCHICAL) == \
        pytest.approx(closed + CALL, rel=REL)
    flat = cm.collective_time("allreduce", S, 8, 2, A100)
    assert flat == pytest.approx(ring.striped_time(2, S, 8, 4, 2, NVL, LAT_IN, NIC,
                                                   LAT_OUT + LAT_IN, relay=True) + CALL, rel=REL)
    assert flat > closed + CALL


def test_all_to_all_alone_is_its_closed_form():
    S, group = 8e6, list(range(4))
    want = all_to_all.time(S, 4, NVL, LAT_IN) + CALL
    assert _engine_time("alltoall", group, S) == pytest.approx(want, rel=REL)
    assert cm.collective_time("alltoall", S, 4, 1, A100) == pytest.approx(want, rel=REL)


def test_phases_match_the_lock_step_oracle():
    """The engine's one-flow-per-hop ring equals the oracle's step-by-step ring alone."""
    g = nx.DiGraph()
    for r in range(5):
        g.add_edge(r, "sw", bandwidth=1e9, latency=1e-6)
        g.add_edge("sw", r, bandwidth=1e9, latency=1e-6)
    env = simpy.Environment()
    env.run(start_collective(FlowNetwork(env, g), "ring_allreduce", range(5), 3e8))
    assert env.now == pytest.approx(ring.time(2, 3e8, 5, 1e9, 2e-6), rel=REL)


@pytest.mark.parametrize("G", [2, 4, 8])
@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather", "alltoall"])
def test_closed_form_is_the_phases_alone(kind, G):
    """Each algorithm's ``time`` is its own ``phases`` timed with nothing else on the wire
    (two link classes: in a node and across nodes), for many group shapes."""
    B_in, B_out, l_in, l_out = 3e11, 4e10, 1e-6, 4e-6
    node = lambda r: r // G                                    # noqa: E731
    bw = lambda a, b: B_in if node(a) == node(b) else B_out     # noqa: E731
    lat = lambda a, b: l_in if node(a) == node(b) else l_out    # noqa: E731
    S, checked = 7.3e7, 0
    for k, nodes, stride in itertools.product([1, 2, 4, 8], [1, 2, 3, 5], [1, 2]):
        if k * stride > G:
            continue
        group = [m * G + j * stride for m in range(nodes) for j in range(k)]
        n = len(group)
        if n < 2:
            continue
        algo = colls.algorithm_for(kind, group, G)
        alone = colls.seconds_alone(colls.phases_of(algo, kind, group, S, node), bw, lat, node)
        if algo == colls.ALL_TO_ALL:
            if nodes > 1:           # the closed form takes one port rate: the group's slowest
                continue
            want = all_to_all.time(S, n, B_in, l_in)
        elif nodes > 1 and k > 1:    # NCCL's flat ring, striped over the members
            want = ring.striped_time(colls.PASSES[kind], S, n, k, nodes, B_in, l_in, B_out,
                                     l_out)
            if kind != "alltoall":      # the hierarchical algorithm, by name
                hier = colls.phases_of(colls.HIERARCHICAL, kind, group, S, node)
                assert colls.seconds_alone(hier, bw, lat, node) == pytest.approx(
                    hierarchical.time(colls.PASSES[kind], S, k, nodes, B_in, l_in, B_out,
                                      l_out), rel=REL), (kind, group)
        else:
            one_node = nodes == 1
            want = ring.time(colls.PASSES[kind], S, n, B_in if one_node else B_out,
                             l_in if one_node else l_out)
        assert alone == pytest.approx(want, rel=REL), (kind, group)
        checked += 1
    assert checked


# -- sharing ------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_flows_sharing_a_link_each_get_one_nth(n):
    g = nx.DiGraph()
    g.add_edge("a", "b", bandwidth=2e9, latency=1e-6)
    env = simpy.Environment()
    net = FlowNetwork(env, g)
    ends = []
    for _ in range(n):
        net.transfer("a", "b", 1e9).callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([1e-6 + n * 1e9 / 2e9] * n, rel=REL)


@pytest.mark.parametrize("n", [2, 3])
def test_n_rings_on_the_same_ports_share_them(n):
    S, group = 64e6, list(range(8))
    steps = colls.steps("allreduce", 8)
    want = CALL + steps * LAT_IN + steps * (S / 8) / (NVL / n)
    assert _engine_time("allreduce", group, S, streams=n) == pytest.approx(want, rel=1e-9)


# -- one rule -----------------------------------------------------------------------
def test_selector_rule():
    G = 8
    assert colls.algorithm_for("allreduce", (0, 1, 2, 3), G) == colls.RING          # one node
    assert colls.algorithm_for("allreduce", (0, 8, 16), G) == colls.RING            # one per node
    assert colls.algorithm_for("allreduce", tuple(range(12)), G) == colls.RING      # 8 + 4
    # NCCL runs one flat ring across nodes (tuning.cc: no hierarchical algorithm; its
    # all-reduce tree is not modelled, calibration §3.21)
    assert colls.algorithm_for("allreduce", (0, 1, 8, 9), G) == colls.RING
    assert colls.algorithm_for("reduce_scatter", (0, 1, 8, 9), G) == colls.RING
    assert colls.algorithm_for("allgather", (0, 1, 8, 9), G) == colls.RING
    assert colls.algorithm_for("alltoall", (0, 1, 8, 9), G) == colls.ALL_TO_ALL
    with pytest.raises(ValueError, match="all_to_all"):
        colls.phases_of(colls.RING, "alltoall", (0, 1), 1.0, lambda r: 0)
    with pytest.raises(ValueError, match="not known"):
        colls.phases_of("tree", "allreduce", (0, 1), 1.0, lambda r: 0)


PLANS = [dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep)
         for tp, cp, pp, dp, ep in itertools.product([1, 2, 3, 4, 8], [1, 2, 3], [1, 2, 3],
                                                     [1, 2, 3, 4, 6, 8, 16], [1, 2, 4])
         if dp * cp % ep == 0 and tp * cp * pp * dp <= 512]


@pytest.mark.parametrize("gpus_per_node", [4, 8])
def test_pick_is_identical_in_the_compiler_the_estimate_and_the_bound(gpus_per_node):
    """For every group placement builds, the compiler's algorithm is the one the strided
    form (read by ``comm.collective_time`` and ``group_floor``) gives, unless that says
    ``mixed`` (a conservative answer: the layout may differ between groups of that shape);
    where the groups of one shape differ it says ``mixed``."""
    cl = cluster_preset("dgx-a100", 64)
    seen = {colls.RING: 0, colls.MIXED: 0}
    for kw in PLANS:
        plan = Plan(tp=kw["tp"], cp=kw["cp"], pp=kw["pp"], dp=kw["dp"], ep=kw["ep"])
        for dim, stride in (("tp", 1), ("cp", plan.tp), ("dp", plan.tp * plan.cp)):
            n = getattr(plan, dim)
            if n < 2:
                continue
            strided = str(colls.strided_algorithm(n, stride, gpus_per_node))
            seen[strided] += 1
            for kind in ("allreduce", "allgather"):
                strided = str(colls.strided_algorithm(n, stride, gpus_per_node, kind))
                picks = {colls.algorithm_for(kind, tuple(g), gpus_per_node)
                         for g in placement.groups(plan, dim)}
                if strided != colls.MIXED:
                    assert picks == {strided}, (kw, dim, kind)
                if len(picks) > 1:
                    assert strided == colls.MIXED, (kw, dim, kind)
    assert all(seen.values()), seen


def test_groups_of_one_shape_can_differ():
    plan = Plan(tp=1, cp=3, dp=4, pp=1)                  # dp groups 3 apart on 8-GPU nodes
    groups = [tuple(g) for g in placement.groups(plan, "dp")]
    assert [colls.algorithm_for("allreduce", g, 8) for g in groups] == [colls.RING] * 3
    # 3+1, 3+1 per node: one ring; 2+2: the ring striped over the two members of each node
    striped = [ring.phases("allreduce", g, 1.0, lambda r: r // 8)[0].remote_nbytes is not None
               for g in groups]
    assert striped == [False, False, True]
    assert str(colls.strided_algorithm(4, 3, 8)) == colls.MIXED


def test_compiled_ops_use_the_selector():
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                   Plan(tp=2, pp=1, dp=8, gbs=16))
    layout = Layout(job)
    from simulator.program.compiler import compile_job
    progs = compile_job(job, ranks=[0, 3])
    for rank, prog in progs.items():
        for op in prog.ops():
            if isinstance(op, Collective):
                assert op.algorithm == colls.algorithm_for(op.kind, op.group, 8) \
                    == layout.algorithm(op.group, op.kind)
    dp_ops = [op for op in progs[0].ops() if isinstance(op, Collective) and op.category == "dp"]
    assert dp_ops and {op.algorithm for op in dp_ops if op.kind == "allreduce"} \
        == {colls.RING}


def test_arrays_and_scalars_agree():
    n = np.array([1, 2, 4, 8])
    arr = ring.time(2, 1e6, n, 1e9, 1e-6)
    assert arr.tolist() == [float(ring.allreduce_time(1e6, int(k), 1e9, 1e-6)) for k in n]
    assert isinstance(ring.allreduce_time(1e6, 4, 1e9, 1e-6), float)


# -- NCCL's flat ring across nodes ---------------------------------------------------------
@pytest.mark.parametrize("kind", ["reduce_scatter", "allgather", "allreduce"])
def test_striped_ring_alone_is_its_closed_form_and_above_the_bound(kind):
    """Every ring kind over 4 members on each of 2 nodes: NCCL's flat ring in 4 channels
    striped over the members (each member's NIC carries one channel's bytes, its NVLink port
    three), ``p(nodes-1)`` steps at the network's latency and ``p(n-nodes)`` at NVLink's
    (``p`` passes: 2 for the all-reduce, tuning.cc's ``2(nodes-1)`` inter steps); the engine,
    the estimate and the bound agree, and the bound is below."""
    S, group, p = 40e6, [0, 2, 4, 6, 8, 10, 12, 14], colls.PASSES[kind]
    assert colls.algorithm_for(kind, group, 8) == colls.RING
    (ph,) = ring.phases(kind, group, S, lambda r: r // 8)
    assert (ph.steps, ph.local_steps) == (p, 6 * p) and len(ph.flows) == 16
    assert ph.remote_nbytes == pytest.approx(p * 7 / 8 * S / 4, rel=1e-15)
    assert ph.nbytes == pytest.approx(3 * ph.remote_nbytes, rel=1e-15)
    # member j's hop between nodes goes to member j+1 of the next node, another rail on
    # this rail-optimised fat tree: relayed over NVLink through member j+1 of its own node
    # (one more flow on member j's NVLink port, one more intra-node latency)
    closed = ring.striped_time(p, S, 8, 4, 2, NVL, LAT_IN, NIC, LAT_OUT + LAT_IN, relay=True)
    assert closed == pytest.approx(p * (7 / 8 * S / 4 * max(4 / NVL, 1 / NIC) + LAT_OUT
                                        + 7 * LAT_IN), rel=1e-15)
    assert _engine_time(kind, group, S) == pytest.approx(closed + CALL, rel=REL)
    assert cm.collective_time(kind, S, 8, 2, A100) == pytest.approx(closed + CALL, rel=REL)
    floor = float(group_floor(S, 8, 2, p, A100))
    assert floor == pytest.approx(ring.striped_time(p, S, 8, 4, 2, NVL, min(LAT_IN, LAT_OUT),
                                                    NIC, min(LAT_IN, LAT_OUT)) + CALL, rel=REL)
    assert floor < closed + CALL


def test_allreduce_costs_a_reduce_scatter_and_an_all_gather_across_nodes():
    """The artefact §3.21 left: with the all-reduce hierarchical (barrier-separated NVLink
    and NIC phases, summed) and the reduce-scatter / all-gather striped rings, plain DP's
    all-reduce cost ~2x ZeRO's reduce-scatter + all-gather of the same bytes. NCCL runs all
    three as the one striped ring, so the all-reduce is their sum exactly but for one call's
    own latency (one call, not two: ``phase.CALL_LATENCY_S``), and it is below the
    hierarchical sum for large buffers on 8-GPU nodes (NVLink and NIC time overlap)."""
    for nodes in (2, 4, 16):
        n, S = 8 * nodes, 256e6
        ar = cm.collective_time("allreduce", S, n, 1, A100)
        rs_ag = cm.collective_time("reduce_scatter", S, n, 1, A100) \
            + cm.collective_time("allgather", S, n, 1, A100)
        assert ar + CALL == pytest.approx(rs_ag, rel=REL)
        hier = hierarchical.time(2, S, 8, nodes, NVL, LAT_IN, NIC, LAT_OUT)
        assert ar < hier


def test_flat_ring_latency_counts_only_the_steps_between_nodes_at_the_network():
    """NCCL's latency (tuning.cc): ``(n-1) - (nodes-1)`` steps at the intra-node latency; the
    hierarchical form paid ``k-1``; a group with one member per node pays every step at the
    network's, a group in one node every step at NVLink's."""
    n, k, nodes = 64, 8, 8
    t0 = ring.striped_time(1, 0.0, n, k, nodes, NVL, LAT_IN, NIC, LAT_OUT)
    assert t0 == pytest.approx((nodes - 1) * LAT_OUT + (n - nodes) * LAT_IN, rel=1e-15)
    assert t0 - hierarchical.time(1, 0.0, k, nodes, NVL, LAT_IN, NIC, LAT_OUT) == \
        pytest.approx((nodes - 1) * (k - 1) * LAT_IN, rel=1e-12)
    assert ring.time(1, 0.0, 8, NIC, LAT_OUT) == pytest.approx(7 * LAT_OUT, rel=1e-15)


def test_seconds_alone_refuses_striped_phases_without_nodes():
    ph = ring.phases("allgather", (0, 1, 8, 9), 8.0, lambda r: r // 8)
    with pytest.raises(ValueError, match="node_of"):
        colls.seconds_alone(ph, lambda a, b: 1.0, lambda a, b: 1.0)


def test_striped_ring_without_relays_on_a_fat_tree():
    """On a fat tree (no rails) the hop between nodes goes straight to the NIC: ``k_in = k-1``
    and the network's latency alone; the engine equals ``striped_time`` and the estimate."""
    from dataclasses import replace
    cl = replace(cluster_preset("dgx-a100", 2), inter_node_topology="fat_tree")
    graph = build_graph(cl)
    S, group = 40e6, list(range(16))
    progs = {r: Program(r, 0, {"s": (Collective(0, "s", "allgather", tuple(group), S,
                                                colls.RING, "t", "dp", "c"),)})
             for r in group}
    t = run(progs, net=SimNetwork(simpy.Environment(), graph, route)).step_time_s
    closed = ring.striped_time(1, S, 16, 8, 2, NVL, LAT_IN, NIC, LAT_OUT)
    assert closed == pytest.approx(15 / 16 * S / 8 * max(7 / NVL, 1 / NIC) + LAT_OUT
                                   + 14 * LAT_IN, rel=1e-15)
    assert t == pytest.approx(closed + CALL, rel=REL)
    assert cm.collective_time("allgather", S, 16, 1, cl) == pytest.approx(closed + CALL,
                                                                           rel=REL)
