"""The engine's network interface (``simulator.network.backend``): the ``flows`` and the
``contention-free`` backends, from ``simulate(...)`` and from the CLI."""
from __future__ import annotations

import dataclasses
import json

import networkx as nx
import pytest
import simpy

from simulator.cli.main import main
from simulator.engine.core import run
from simulator.network import BACKEND_NAMES
from simulator.network.backend import (BACKENDS, ContentionFreeNetwork, NetworkBackend,
                                       new_network)
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Collective, Program
from simulator.simulate import simulate
from strategies import collectives as colls
from strategies.collectives import all_to_all, ring
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost.comm import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

REL = 1e-12
A100 = cluster_preset("dgx-a100", 2)
NVL = A100.intra_node_bandwidth * NVLINK_EFFICIENCY
NIC = A100.inter_node_bandwidth * NETWORK_EFFICIENCY
LAT_IN, LAT_OUT = A100.intra_node_latency, A100.inter_node_latency
GRAPH = build_graph(A100)


def _run(kind, group, nbytes, backend, streams=1):
    """Engine seconds of ``streams`` copies of one collective started together."""
    algo = colls.algorithm_for(kind, group, A100.gpus_per_node)
    progs = {r: Program(r, 0, {f"s{i}": (Collective(0, f"s{i}", kind, tuple(group), nbytes,
                                                    algo, f"t{i}", "tp", "c"),)
                               for i in range(streams)}) for r in group}
    return run(progs, net=new_network(GRAPH, route, backend=backend)).step_time_s


def test_backends_implement_the_protocol():
    assert BACKEND_NAMES == tuple(BACKENDS) and BACKEND_NAMES[0] == "flows"
    for name in BACKEND_NAMES:
        net = new_network(GRAPH, route, backend=name)
        assert isinstance(net, NetworkBackend)
    assert new_network(GRAPH, route).shares_links
    assert not new_network(GRAPH, route, backend="contention-free").shares_links
    with pytest.raises(ValueError, match="contention-free"):
        new_network(GRAPH, route, backend="ns3")


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("kind, group, closed", [
    ("allreduce", range(8), lambda S: ring.time(2, S, 8, NVL, LAT_IN)),
    ("reduce_scatter", range(4), lambda S: ring.time(1, S, 4, NVL, LAT_IN)),
    ("allreduce", (0, 8), lambda S: ring.time(2, S, 2, NIC, LAT_OUT)),
    # NCCL's flat ring striped over the members of each node (no hierarchical algorithm:
    # NCCL has none, calibration §3.21); its hop between nodes, local GPU j to j+1,
    # changes rail on this rail fat tree: relayed (one more NVLink latency and flow)
    ("allreduce", (0, 1, 2, 3, 8, 9, 10, 11),
     lambda S: ring.striped_time(2, S, 8, 4, 2, NVL, LAT_IN, NIC, LAT_OUT + LAT_IN, True)),
    ("allgather", (0, 1, 8, 9),
     lambda S: ring.striped_time(1, S, 4, 2, 2, NVL, LAT_IN, NIC, LAT_OUT + LAT_IN, True)),
    ("alltoall", range(8), lambda S: all_to_all.time(S, 8, NVL, LAT_IN)),
])
def test_isolated_collective_is_the_analytic_time_on_both_backends(backend, kind, group, closed):
    S = 96e6
    """Alone, either backend takes the algorithm's closed form plus the call's own latency
    (``phase.CALL_LATENCY_S``)."""
    assert _run(kind, list(group), S, backend) == pytest.approx(closed(S) + CALL, rel=REL)


def test_only_the_flows_backend_shares_links():
    S, steps = 64e6, colls.steps("allreduce", 8)
    alone = CALL + ring.time(2, S, 8, NVL, LAT_IN)
    assert _run("allreduce", list(range(8)), S, "contention-free", streams=3) == \
        pytest.approx(alone, rel=REL)
    assert _run("allreduce", list(range(8)), S, "flows", streams=3) == \
        pytest.approx(CALL + steps * LAT_IN + 3 * steps * (S / 8) / NVL, rel=1e-9)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_contention_free_flows_each_get_the_bottleneck_rate(n):
    g = nx.DiGraph()
    g.add_edge("a", "s", bandwidth=4e9, latency=1e-6)
    g.add_edge("s", "b", bandwidth=1e9, latency=0.0)
    env = simpy.Environment()
    net = ContentionFreeNetwork(env, g, scale=False)
    ends = []
    for _ in range(n):
        net.transfer("a", "b", 2e9).callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([1e-6 + 2.0] * n, rel=REL)
    assert net.link_bytes() == {("a", "s"): n * 2e9, ("s", "b"): n * 2e9}
    shared = SimNetwork(simpy.Environment(), g, scale=False)
    shared.transfer("a", "b", 2e9)
    shared.env.run()
    assert shared.env.now == pytest.approx(1e-6 + 2.0, rel=REL)   # alone: the same


def _job(**kw):
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", kw.pop("nodes", 1)),
                    Plan(**kw))


def test_simulate_selects_the_backend():
    job = _job(nodes=2, tp=2, pp=2, dp=4, gbs=16)
    flows = simulate(job)
    free = simulate(job, network="contention-free")
    # (never slower; to the last bits the two backends sum the same seconds in other orders)
    assert free.step_time_s <= flows.step_time_s * (1 + 1e-12)
    assert free.metrics["link_utilisation"] and free.events > 0
    # one tensor-parallel group per node and nothing else on the wire: identical
    solo = _job(tp=8, pp=1, dp=1, gbs=4)
    assert simulate(solo, network="contention-free").step_time_s == \
        pytest.approx(simulate(solo).step_time_s, rel=REL)
    with pytest.raises(SpecError, match="network.*must be one of flows, contention-free"):
        simulate(job, network="ns3")


def test_cli_network_flag(capsys):
    args = ["simulate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--plan",
            "tp=2,pp=2", "--global-batch", "8", "--json"]
    assert main(args + ["--network", "contention-free"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    flows = json.loads(capsys.readouterr().out)
    assert free["simulated"] and 0 < free["step_time_s"] <= flows["step_time_s"]
    assert (free["network"], flows["network"]) == ("contention-free", "flows")
    assert main(args + ["--network", "ns3"]) == 2
    err = capsys.readouterr().err
    assert "--network" in err and "ns3" in err and err.count("\n") == 1


class _Direct:
    """A toy all-reduce registered from this test module: every member sends its whole
    buffer to every other member at once (one latency), each port shared by its n-1 flows."""

    @staticmethod
    def phases(kind, group, nbytes, node_of=None):
        g = tuple(group)
        return [colls.Phase(tuple((a, b) for a in g for b in g if a != b), nbytes, 1)]

    @staticmethod
    def time(nbytes, n, bw, lat):
        return (n - 1) * nbytes / bw + lat


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_registered_algorithm_runs_in_the_engine(backend):
    colls.register("direct_test", _Direct)
    try:
        with pytest.raises(ValueError, match="already registered"):
            colls.register("direct_test", _Direct)
        group, S = list(range(4)), 8e6
        progs = {r: Program(r, 0, {"s": (Collective(0, "s", "allreduce", tuple(group), S,
                                                    "direct_test", "t", "tp", "c"),)})
                 for r in group}
        t = run(progs, net=new_network(GRAPH, route, backend=backend)).step_time_s
        want = _Direct.time(S, 4, NVL, LAT_IN)
        assert t == pytest.approx(want + CALL, rel=REL)      # the engine adds the call's own
        ph = _Direct.phases("allreduce", group, S)
        assert colls.seconds_alone(ph, lambda a, b: NVL, lambda a, b: LAT_IN) == \
            pytest.approx(want, rel=REL)
    finally:
        del colls.ALGORITHMS["direct_test"]
    with pytest.raises(ValueError, match="needs a callable 'phases'"):
        colls.register("broken", object())


# a DeepSeek-V3-shaped toy (MLA, shared expert, a dense first layer, node-limited routing)
_DSV3 = dataclasses.replace(model_preset("deepseek-v3"), num_layers=4, first_k_dense_replace=1,
                            num_nextn_predict_layers=0, seq_length=1024)


@pytest.mark.parametrize("model, nodes, plan", [
    (_DSV3, 2, "ep=16,gbs=32,moe_dispatcher=deepep"),
    (_DSV3, 4, "pp=2,ep=16,gbs=32,moe_dispatcher=deepep,schedule=interleaved,vpp=2,"
               "ep_overlap=true"),
    (_DSV3, 4, "pp=2,ep=16,gbs=32,moe_dispatcher=deepep,recompute=full"),
    (_DSV3, 2, "pp=2,ep=8,gbs=32"),
    ("gpt-1.7b", 2, "tp=2,pp=2,gbs=32,zero=1"),
])
def test_contention_free_is_a_lower_bound_on_flows(model, nodes, plan):
    """The same programs with every message alone on the network cannot run slower than with
    flows sharing links: MoE plans with expert all-to-alls between nodes (DeepEP's
    deduplicated, node-limited ones, whose every member must carry the same remote share:
    ``compiler.relabel`` once dropped it, and contention-free came out slower), and a dense
    plan."""
    m = model_preset(model) if isinstance(model, str) else model
    job = make_job(m, cluster_preset("hgx-h800", nodes), parse_plan(plan))
    flows = simulate(job).step_time_s
    free = simulate(job, network="contention-free").step_time_s
    assert free <= flows * (1 + 1e-12), (plan, free, flows)
