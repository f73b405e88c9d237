"""One path rule for transfers between nodes (topologies.routing: ``relays``,
``transfer_rate``, ``transfer_latency``) read by the routes the simulator follows, the
estimate (strategies.cost.comm) and the bound: every GPU pair's simulated transfer alone
equals the rule, and the estimate's collective and point-to-point times equal the engine's
for a collective alone on rail fat tree, rail-only, fat tree and multi-plane networks, to
floating-point precision."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy

from simulator.engine.core import run
from simulator.network import BACKEND_NAMES
from simulator.network.backend import new_network
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies.collectives import ring
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import comm as cm
from strategies.estimate.bound.floors import nic_rate_cap
from topologies.cluster import cluster_preset
from topologies.graph import build_graph, rails
from topologies.routing import (fabric_hop_share, relays, route, transfer_latency,
                                transfer_rate)

REL = 1e-12
NVL_EFF, NET_EFF = cm.NVLINK_EFFICIENCY, cm.NETWORK_EFFICIENCY


def _cluster(kind: str, nodes: int = 2, preset: str = "dgx-h100", **kw):
    """``kind``: an inter-node topology, or ``NAME+planes`` for a 2-plane network of it."""
    topo, _, planes = kind.partition("+")
    return replace(cluster_preset(preset, nodes), inter_node_topology=topo,
                   planes=2 if planes else 1, **kw)


KINDS = ["rail_fat_tree", "rail_only", "fat_tree", "rail_fat_tree+planes",
         "rail_only+planes", "fat_tree+planes"]


def _rule(cl, a: int, b: int, crosses: bool, nvl: float = 1.0, net: float = 1.0):
    """(bytes/s, latency s) of a transfer from local GPU a to local GPU b by the rule, at
    the given efficiencies of the two link classes (1: line rates)."""
    relay = relays(cl.inter_node_topology, rails(cl), a, b)
    hop = cl.intra_node_bandwidth * fabric_hop_share(cl.intra_node_topology,
                                                     cl.gpus_per_node) * nvl
    rate = transfer_rate(hop, cl.inter_node_bandwidth * net, crosses, relay, cl.planes)
    return rate, transfer_latency(cl.intra_node_latency, cl.inter_node_latency, crosses, relay)


# ---------------------------------------------------------------- every pair, alone

@pytest.mark.parametrize("kind", KINDS + ["torus"])
@pytest.mark.parametrize("fabric", ["nvswitch", "slow-nvlink", "mesh"])
def test_every_transfer_alone_takes_what_the_path_rule_says(kind, fabric):
    """Each GPU of node 0 to every GPU of nodes 0 and 1, alone on the network (line rates):
    the route's time is the rule's latency plus S over the rule's rate, to 1e-12; the
    relay (rail topologies, destination on another rail) is there exactly when the rule
    says, with its NVLink hop the bottleneck where NVLink is slower than the NIC."""
    cl = {"mesh": lambda: _cluster(kind, preset="mi300x"),
          "slow-nvlink": lambda: _cluster(kind, intra_node_bandwidth=20e9),
          "nvswitch": lambda: _cluster(kind)}[fabric]()
    g, S = cl.gpus_per_node, 1e9
    graph = build_graph(cl)
    for src in range(g):
        for dst in range(2 * g):
            if dst == src:
                continue
            net = SimNetwork(simpy.Environment(), graph, route, scale=False)
            net.transfer(src, dst, S)
            net.env.run()
            crosses = dst >= g
            rate, lat = _rule(cl, src, dst % g, crosses)
            assert net.env.now == pytest.approx(lat + S / rate, rel=REL), (src, dst)
            relayed = crosses and route(graph, src, dst)[1] != ("nic", 0, src % rails(cl))
            assert relayed == bool(crosses and relays(cl.inter_node_topology, rails(cl),
                                                      src, dst % g))


def test_rail_only_relay_is_the_bottleneck_only_when_nvlink_is_slower():
    fast, slow = _cluster("rail_only"), _cluster("rail_only", intra_node_bandwidth=20e9)
    assert _rule(fast, 1, 3, True)[0] == fast.inter_node_bandwidth
    assert _rule(slow, 1, 3, True)[0] == 20e9
    assert _rule(slow, 3, 3, True)[0] == slow.inter_node_bandwidth     # same rail: no relay
    assert _rule(_cluster("fat_tree", intra_node_bandwidth=20e9), 1, 3, True)[0] == \
        fast.inter_node_bandwidth                                      # no rails: no relay


# ---------------------------------------------------------------- the estimate = the engine

def _engine(cluster, kind, group, nbytes, backend="flows"):
    algo = colls.algorithm_for(kind, group, cluster.gpus_per_node)
    progs = {r: Program(r, 0, {"s": (Collective(0, "s", kind, tuple(group), nbytes, algo,
                                                 "t", "dp", "c"),)}) for r in group}
    return run(progs, net=new_network(build_graph(cluster), route, backend=backend)).step_time_s


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coll", ["allreduce", "reduce_scatter", "allgather"])
def test_ring_one_member_per_node_estimate_equals_engine(kind, coll, backend):
    """A data-parallel ring, one member per node (stride 8 over 4 nodes): on one rail, no
    relay; the plane ports striped back to one NIC. Closed form ring.time at the NIC, plus
    the call's own latency (``phase.CALL_LATENCY_S``)."""
    cl, S = _cluster(kind, nodes=4), 96e6
    closed = ring.kind_time(coll, S, 4, cl.inter_node_bandwidth * NET_EFF,
                            cl.inter_node_latency) + CALL
    assert cm.collective_time(coll, S, 4, 8, cl) == pytest.approx(closed, rel=REL)
    assert _engine(cl, coll, [0, 8, 16, 24], S, backend) == pytest.approx(closed, rel=REL)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("coll", ["allreduce", "reduce_scatter", "allgather"])
def test_striped_ring_estimate_equals_engine(kind, coll, backend):
    """16 ranks on 2 nodes: NCCL's flat ring striped over the 8 members of each node, the
    all-reduce too (no hierarchical all-reduce: NCCL has none; calibration §3.21), member
    j's hop between nodes to member j+1 of the next node, relayed where that changes rail.
    Closed form ``ring.striped_time``; the estimate and the engine equal it on every
    topology and backend (the contention-free one striping the NIC flows over the planes)."""
    cl, S, p = _cluster(kind), 64e6, colls.PASSES[coll]
    relay = bool(relays(cl.inter_node_topology, rails(cl), 0, 1))
    rate, lat = _rule(cl, 0, 1, True, NVL_EFF, NET_EFF)
    closed = ring.striped_time(p, S, 16, 8, 2, cl.intra_node_bandwidth * NVL_EFF,
                               cl.intra_node_latency, rate, lat, relay) + CALL
    assert cm.collective_time(coll, S, 16, 1, cl) == pytest.approx(closed, rel=REL)
    assert _engine(cl, coll, list(range(16)), S, backend) == pytest.approx(closed, rel=REL)
    if coll == "allreduce":    # the bytes of a reduce-scatter then an all-gather (ZeRO vs DP),
        # in one call
        assert closed + CALL == pytest.approx(cm.collective_time("reduce_scatter", S, 16, 1, cl)
                                       + cm.collective_time("allgather", S, 16, 1, cl),
                                       rel=REL)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("intra", [None, 20e9])
@pytest.mark.parametrize("stride", [4, 8, 12])
def test_pipeline_hop_estimate_equals_the_simulated_transfer(kind, intra, stride):
    """The estimate's point-to-point time of a pipeline hop ``stride`` ranks on equals the
    simulated transfer alone from GPU 0: in the node for stride 4; between nodes on one rail
    for 8; for 12 from local 0 to local 4 of node 1, which relays on rail topologies (the
    extra NVLink hop's rate and latency) and not on a fat tree."""
    cl = _cluster(kind) if intra is None else _cluster(kind, intra_node_bandwidth=intra)
    S, src = 1e8, 0
    net = SimNetwork(simpy.Environment(), build_graph(cl), route)
    net.transfer(src, src + stride, S)
    net.env.run()
    assert float(cm.p2p_time(S, cl, stride)) == pytest.approx(net.env.now, rel=REL)
    rate, lat = _rule(cl, src, (src + stride) % 8, stride >= 8, NVL_EFF, NET_EFF)
    assert net.env.now == pytest.approx(lat + S / rate, rel=REL)
    if kind.startswith("rail") and stride == 12:
        assert lat == cl.intra_node_latency + cl.inter_node_latency
        assert rate == min(cl.intra_node_bandwidth * NVL_EFF, cl.inter_node_bandwidth * NET_EFF)


def test_p2p_estimate_is_vectorised_over_strides():
    cl = _cluster("rail_only", intra_node_bandwidth=20e9)
    strides = np.array([4.0, 8.0, 12.0, 16.0])
    got = cm.p2p_time(1e8, cl, strides)
    assert got.tolist() == [float(cm.p2p_time(1e8, cl, s)) for s in strides]
    assert got[2] > got[1] == got[3]        # only the cross-rail hop relays


@pytest.mark.parametrize("kind", KINDS)
def test_bound_nic_rate_is_the_fastest_path_between_nodes(kind):
    """The bound's NIC cap is the rule's rate of a path between nodes without a relay: no
    transfer between nodes runs faster (every pair above is at most this)."""
    cl = _cluster(kind)
    cap = nic_rate_cap(cl)
    assert cap == pytest.approx(cl.inter_node_bandwidth * NET_EFF, rel=REL)
    assert all(_rule(cl, a, b, True, NVL_EFF, NET_EFF)[0] <= cap
               for a in range(8) for b in range(8))
