"""Multi-plane and rail-only scale-out networks: topology, routing, striping, closed forms,
faults and bad input (topologies.planes, topologies.routing.plane_routes, SimNetwork)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import simpy

from simulator.cli.main import main
from simulator.engine.core import run
from simulator.network import BACKEND_NAMES
from simulator.network.backend import new_network
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies.collectives import ring
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost.comm import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY, collective_time
from strategies.errors import SpecError
from topologies.cluster import cluster_from_mapping, cluster_preset
from topologies.faults import MAX_FACTOR, Faults
from topologies.graph import build_graph
from topologies.planes import plane_shares, striped_factor
from topologies.routing import path_bandwidth, plane_routes, route

REL = 1e-12
H100 = cluster_preset("dgx-h100", 2)
NVL = H100.intra_node_bandwidth * NVLINK_EFFICIENCY
LAT_IN, LAT_OUT = H100.intra_node_latency, H100.inter_node_latency


def _planes(k: int, nodes: int = 2, **kw):
    return replace(cluster_preset("dgx-h100", nodes), planes=k, **kw)


def _run(cluster, kind, group, nbytes, backend="flows", streams=1):
    """Engine seconds of ``streams`` copies of one collective started together."""
    algo = colls.algorithm_for(kind, group, cluster.gpus_per_node)
    progs = {r: Program(r, 0, {f"s{i}": (Collective(0, f"s{i}", kind, tuple(group), nbytes,
                                                    algo, f"t{i}", "tp", "c"),)
                               for i in range(streams)}) for r in group}
    net = new_network(build_graph(cluster), route, backend=backend)
    return run(progs, net=net).step_time_s


# ---------------------------------------------------------------- topology and routing

@pytest.mark.parametrize("k", [2, 4, 8])
def test_each_plane_has_its_own_switches_and_a_port_of_one_kth_of_the_nic(k):
    cl = _planes(k, nodes=64)
    g = build_graph(cl)
    leaves = {v for v in g if isinstance(v, tuple) and v[0] == "leaf"}
    spines = {v for v in g if isinstance(v, tuple) and v[0] == "spine"}
    assert {v[3] for v in leaves} == {v[3] for v in spines} == set(range(k))
    assert len(leaves) == k * 8 * 2 and len(spines) == k * 8    # planes x rails x leaves
    ports = [d["bandwidth"] for u, v, d in g.out_edges(("nic", 0, 3), data=True)
             if isinstance(v, tuple) and v[0] == "leaf"]
    assert ports == [H100.inter_node_bandwidth / k] * k
    assert not any(u[3] != v[3] for u, v in g.edges if isinstance(u, tuple) and
                   isinstance(v, tuple) and len(u) == len(v) == 4)   # no link joins planes


def test_plane_routes_stripe_evenly_over_healthy_planes():
    g = build_graph(_planes(4, nodes=64))
    routes = plane_routes(g, 1, 8 * 40 + 3)
    assert [s for _, s in routes] == [0.25] * 4
    assert [p[4][3] for p, _ in routes] == [0, 1, 2, 3]
    assert routes[0][0] == tuple(route(g, 1, 8 * 40 + 3))
    assert plane_routes(g, 1, 5) == ((tuple(route(g, 1, 5)), 1.0),)     # inside a node


def test_plane_shares_follow_the_degraded_plane():
    cl = _planes(2).with_faults(Faults.from_texts(degrade=["plane:1=4"]))
    g = build_graph(cl)
    shares = [s for _, s in plane_routes(g, 0, 8)]
    assert shares == pytest.approx([0.8, 0.2], rel=REL)
    assert plane_shares([3.0, 1.0]) == (0.75, 0.25)


def test_rail_only_relays_cross_rail_traffic_over_one_nvlink_hop():
    """Rail-only (Wang et al.): GPU 1 of node 0 to GPU 3 of node 1 crosses node 0's NVLink to
    GPU 3, then rail 3; the flow gets min(NVLink hop, rail link)."""
    cl = replace(cluster_preset("dgx-h100", 2), inter_node_topology="rail_only")
    g = build_graph(cl)
    path = route(g, 1, 11)
    assert path == [1, ("nvswitch", 0), 3, ("nic", 0, 3), ("leaf", 3, 0), ("nic", 1, 3), 11]
    assert path_bandwidth(g, path) == min(cl.intra_node_bandwidth, cl.inter_node_bandwidth)
    slow = replace(cl, intra_node_bandwidth=20e9)      # the NVLink hop is now the bottleneck
    assert path_bandwidth(build_graph(slow), route(build_graph(slow), 1, 11)) == 20e9


def test_rail_only_cross_rail_flow_alone_runs_at_the_slower_of_its_two_hops():
    for intra in (450e9, 20e9):
        cl = replace(cluster_preset("dgx-h100", 2), inter_node_topology="rail_only",
                     intra_node_bandwidth=intra)
        net = SimNetwork(simpy.Environment(), build_graph(cl), route)
        net.transfer(1, 11, 1e9)
        net.env.run()
        rate = min(intra * NVLINK_EFFICIENCY, cl.inter_node_bandwidth * NETWORK_EFFICIENCY)
        assert net.env.now == pytest.approx(LAT_IN + LAT_OUT + 1e9 / rate, rel=REL)


def test_rail_only_relay_contends_with_nvlink_traffic():
    """The relay hop shares GPU 1's NVLink port: a cross-rail flow and an NVLink flow from
    GPU 1 split it max-min fairly when NVLink is the bottleneck."""
    cl = replace(cluster_preset("dgx-h100", 2), inter_node_topology="rail_only",
                 intra_node_bandwidth=20e9)
    net = SimNetwork(simpy.Environment(), build_graph(cl), route, scale=False)
    ends = []
    for dst in (11, 2):
        net.flow(1, dst, 1e9).callbacks.append(lambda _e: ends.append(net.env.now))
    net.env.run()
    assert ends == pytest.approx([1e9 / 10e9] * 2, rel=REL)     # 20 GB/s / 2 flows each


# ---------------------------------------------------------------- closed forms

@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("k", [2, 4])
def test_ring_allreduce_on_k_planes_is_the_single_plane_form_with_k_times_the_port(backend, k):
    """One member per node: the ring's flows are striped over k planes of B/k each; the time
    is ring.time at k x (B/k) = B plus the call's own latency, what the estimate says, to
    floating-point precision."""
    S, group = 96e6, [0, 8, 16, 24]
    cl = _planes(k, nodes=4)
    port = cl.inter_node_bandwidth / k * NETWORK_EFFICIENCY
    closed = ring.time(2, S, 4, k * port, LAT_OUT) + CALL
    assert _run(cl, "allreduce", group, S, backend) == pytest.approx(closed, rel=REL)
    assert collective_time("allreduce", S, 4, 8, cl) == pytest.approx(closed, rel=REL)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_striped_allreduce_on_two_planes_matches_its_closed_form(backend):
    """4 members on each of 2 nodes: NCCL's flat ring striped over them (calibration §3.21),
    each member's NIC flow split over the 2 planes (together the NIC), the hop j -> j+1
    between nodes relayed through member j+1's NVLink port (rail fat tree)."""
    S, cl = 64e6, _planes(2, nodes=2)
    nic = cl.inter_node_bandwidth * NETWORK_EFFICIENCY
    closed = ring.striped_time(2, S, 8, 4, 2, NVL, LAT_IN, nic, LAT_OUT + LAT_IN, True) + CALL
    assert _run(cl, "allreduce", [0, 1, 2, 3, 8, 9, 10, 11], S, backend) == \
        pytest.approx(closed, rel=REL)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_flows_on_one_plane_link_get_one_nth_each(n):
    """n transfers between the same two NICs on a 2-plane network: each plane's port carries
    n sub-flows, each at 1/n of the port."""
    cl = _planes(2)
    net = SimNetwork(simpy.Environment(), build_graph(cl), route, scale=False)
    ends = []
    S = 1e9
    for _ in range(n):
        net.flow(0, 8, S).callbacks.append(lambda _e: ends.append(net.env.now))
    net.env.run()
    port = cl.inter_node_bandwidth / 2
    assert ends == pytest.approx([(S / 2) / (port / n)] * n, rel=REL)
    lb = net.link_bytes()
    assert lb[(("nic", 0, 0), ("leaf", 0, 0, 1))] == pytest.approx(n * S / 2, rel=REL)
    assert lb[(0, ("nic", 0, 0))] == pytest.approx(n * S, rel=REL)


# ---------------------------------------------------------------- faults

@pytest.mark.parametrize("f", [2.0, 4.0, MAX_FACTOR])
def test_degraded_plane_leaves_the_other_planes_bandwidth(f):
    """Plane 1 of 2 at 1/f: a transfer alone takes S / (port (1 + 1/f)); the estimate's
    striped factor says the same; a failed plane (MAX_FACTOR) leaves about half."""
    cl = _planes(2).with_faults(Faults.from_texts(degrade=[f"plane:1={f}"]))
    net = SimNetwork(simpy.Environment(), build_graph(cl), route, scale=False)
    S = 1e9
    net.flow(0, 8, S)
    net.env.run()
    port = cl.inter_node_bandwidth / 2
    assert net.env.now == pytest.approx(S / (port * (1 + 1 / f)), rel=1e-9)
    assert striped_factor(2, {1: f}) == pytest.approx(2 / (1 + 1 / f), rel=REL)
    assert cl.faults.bandwidth_factors(cl.planes) == (1.0, pytest.approx(2 / (1 + 1 / f)))


def test_a_failed_plane_slows_a_network_bound_step_and_the_estimate_agrees():
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import Plan
    from strategies.presets import model_preset
    m = model_preset("llama3-8b").with_seq_length(2048)
    base = _planes(2, nodes=2)
    failed = base.with_faults(Faults.from_texts(degrade=["plane:0=1e6"]))
    plan = Plan(tp=1, pp=1, dp=16, mbs=1, gbs=16)
    t0, t1 = (simulate(make_job(m, c, plan)).step_time_s for c in (base, failed))
    assert t1 > t0


# ---------------------------------------------------------------- files and bad input

def test_cluster_file_network_section_round_trips():
    cl = cluster_from_mapping({"preset": "dgx-b300", "nodes": 4,
                               "network": {"kind": "multi_plane", "planes": 2}})
    assert cl.planes == 2 and cl.inter_node_topology == "rail_fat_tree"
    d = cl.to_dict()
    assert d["network"] == {"kind": "multi_plane", "planes": 2,
                            "plane_topology": "rail_fat_tree"}
    assert cluster_from_mapping(d) == cl
    assert cluster_preset("dgx-b300-2plane", 4).planes == 2
    ro = cluster_from_mapping({"preset": "dgx-h100", "nodes": 4, "network": {"kind": "rail_only"}})
    assert ro.inter_node_topology == "rail_only" and ro.planes == 1
    assert cluster_from_mapping(ro.to_dict()) == ro


@pytest.mark.parametrize("network, field, words", [
    ({"kind": "multi_plane", "planes": 0}, "network.planes", "integer >= 2"),
    ({"kind": "multi_plane", "planes": -2}, "network.planes", "integer >= 2"),
    ({"kind": "multi_plane", "planes": 3}, "network.planes", "whole number of Gb/s"),
    ({"kind": "multi_plane", "planes": 32}, "network.planes", "1..16"),
    ({"kind": "multi_plane", "planes": 2, "plane_topology": "torus"},
     "network.plane_topology", "rail_fat_tree"),
    ({"kind": "rail_only", "planes": 2}, "network.planes", "only with kind: multi_plane"),
    ({"kind": "clos"}, "network.kind", "must be one of"),
    ({"kind": "multi_plane", "speed": 2}, "network", "unknown key"),
])
def test_bad_network_sections_name_the_field_and_the_rule(network, field, words):
    with pytest.raises(SpecError) as e:
        cluster_from_mapping({"preset": "dgx-h100", "nodes": 2, "network": network})
    assert e.value.field == field and words in e.value.rule


def test_rail_only_needs_a_one_hop_node_fabric():
    with pytest.raises(SpecError, match="rail-only network forwards cross-rail traffic"):
        cluster_from_mapping({"preset": "dgx-h100", "nodes": 2, "intra_node_topology": "ring",
                              "network": {"kind": "rail_only"}})


@pytest.mark.parametrize("text, words", [
    ("plane:2=2", "no such plane: the network has planes 0..1"),
    ("nic:0.1.1-leaf:1.0.1=2", "a NIC has no plane"),
])
def test_bad_plane_faults_are_refused(text, words):
    with pytest.raises(SpecError, match=words):
        _planes(2).with_faults(Faults.from_texts(degrade=[text]))


def test_plane_fault_on_a_single_plane_network_is_refused():
    with pytest.raises(SpecError, match="needs a multi-plane network"):
        cluster_preset("dgx-h100", 2).with_faults(Faults.from_texts(degrade=["plane:0=2"]))


def test_cli_exits_2_naming_the_planes(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("preset: dgx-h100\nnodes: 2\nnetwork: {kind: multi_plane, planes: 0}\n")
    assert main(["estimate", "--model", "llama3-8b", "--cluster", str(f),
                 "--plan", "tp=8,gbs=16"]) == 2
    err = capsys.readouterr().err
    assert "network.planes=0" in err and "Traceback" not in err


def test_folded_simulation_of_a_multi_plane_cluster_is_exact():
    """Symmetry folding maps every plane's hops onto the representative's: the folded step
    equals the unfolded one, and both equal the single-plane step (same NIC bandwidth)."""
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import Plan
    from strategies.presets import model_preset
    m = model_preset("gpt-1.7b")
    plan = Plan(tp=2, pp=2, dp=4, mbs=1, gbs=16)
    two = make_job(m, _planes(2, nodes=2), plan)
    folded, full = simulate(two), simulate(two, fold=False)
    assert folded.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    one = simulate(make_job(m, cluster_preset("dgx-h100", 2), plan))
    assert folded.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)
