"""A collective phase's flows started as one block (``FlowTable.start_block``) compute
exactly what the same flows started one by one compute: the same slots, rates, landing times,
link bytes, the block's callback at the place of its last flow's, and the other flows' ends
counted in ``quiet_events``; ``collectives._Run`` on a MoE plan keeps every record in order."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import simpy

from simulator.network.backend import ContentionFreeNetwork
from simulator.network.cluster_net import SimNetwork
from simulator.network.flow_table import FlowBlock
from simulator.network.flows import FlowNetwork
from simulator.network.queue_entry import call_at
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def star(rng: np.random.Generator, hosts: int) -> nx.DiGraph:
    """Hosts joined through one switch, each up and down link at its own bandwidth, and one
    two-hop detour per host (routes of two lengths)."""
    g = nx.DiGraph()
    for h in range(hosts):
        g.add_edge(h, "s", bandwidth=float(rng.choice([1e9, 2e9, 3e9])), latency=0.0)
        g.add_edge("s", h, bandwidth=float(rng.choice([1e9, 2.5e9])), latency=0.0)
    return g


def _plan(rng: np.random.Generator, hosts: int) -> list:
    """Starts: ``(time, pairs, sizes or size, label)``; one pair is a single flow."""
    out = []
    for k in range(int(rng.integers(4, 12))):
        t = float(rng.choice([0.0, 0.25, 0.5, 1.0, 1.5]))
        n = int(rng.integers(1, 9))
        pairs = []
        while len(pairs) < n:
            a, b = (int(x) for x in rng.integers(0, hosts, size=2))
            if a != b:
                pairs.append((a, b))
        sizes = rng.choice([1e8, 2e8, 5e8], size=n)
        out.append((t, pairs, float(sizes[0]) if rng.random() < 0.5 else sizes, f"b{k}"))
    return out


def _run(graph, plan, blocks: bool, cls=FlowNetwork):
    env = simpy.Environment()
    net = cls(env, graph)
    calls = []

    def start(t, pairs, sizes, label, _e):
        def fin(tag):
            calls.append((env.now, tag))
        links = [net.route(a, b)[1] for a, b in pairs]
        per = sizes if isinstance(sizes, np.ndarray) else [sizes] * len(pairs)
        if blocks:
            net.start_block(FlowBlock(links), sizes, fin, label)
            return
        left = [len(pairs)]

        def one(tag):                # what collectives._Run._landed does flow by flow
            left[0] -= 1
            if left[0]:
                net.quiet_events += 1
            else:
                fin(tag)
        for x, nb in zip(links, per):
            net._start_flow(x, float(nb), one if len(pairs) > 1 else fin, label, None)
    for t, pairs, sizes, label in plan:
        call_at(env, t, lambda e, a=(t, pairs, sizes, label): start(*a, e))
    env.run()
    return calls, net


@pytest.mark.parametrize("seed", range(40))
def test_a_block_is_its_flows_one_by_one(seed):
    rng = np.random.default_rng(seed)
    hosts = int(rng.integers(3, 7))
    graph, plan = star(rng, hosts), _plan(rng, hosts)
    one, net1 = _run(graph, plan, blocks=False)
    blk, net2 = _run(graph, plan, blocks=True)
    assert blk == one                                   # the same times, the same order
    assert len(blk) == len(plan)                        # one call per block
    assert net2.quiet_events == net1.quiet_events == sum(len(p) - 1 for _, p, _, _ in plan)
    assert net2._free == net1._free                     # the same slots, freed in order
    assert net2.link_bytes() == net1.link_bytes()       # bit for bit
    assert net2.recomputations == net1.recomputations
    assert net2._blocks_live == {}


def test_contention_free_block_calls_back_once():
    rng = np.random.default_rng(1)
    graph, plan = star(rng, 4), _plan(rng, 4)
    graph.graph["gpus_per_node"] = 1
    calls, net = _run(graph, plan, blocks=True, cls=ContentionFreeNetwork)
    assert sorted(label for _, label in calls) == sorted(label for *_, label in plan)
    assert net.quiet_events == sum(len(p) - 1 for _, p, _, _ in plan)


def test_flow_block_is_none_for_a_flow_to_itself():
    rng = np.random.default_rng(2)
    graph = star(rng, 3)
    graph.graph["gpus_per_node"] = 1
    net = SimNetwork(simpy.Environment(), graph)
    flows = [(0, 1), (1, 2)]
    block = net.flow_block(flows)
    assert block is not None and block is net.flow_block(flows)   # worked out once
    assert net.flow_block([(0, 1), (2, 2)]) is None


def test_moe_records_and_events_without_blocks(monkeypatch):
    """The MoE step (all-to-alls contending over the flow network) with phases started flow by
    flow (no ``flow_block``) and as blocks: the same records in the same order, events and
    metrics."""
    job = make_job(model_preset("mixtral-8x7b"), cluster_preset("dgx-h100", 2),
                   parse_plan("tp=2,pp=2,ep=4,gbs=32"))
    fast = simulate(job, fold=False)
    monkeypatch.delattr(SimNetwork, "flow_block")
    plain = simulate(job, fold=False)
    assert fast.records == plain.records
    assert (fast.events, fast.step_time_s) == (plain.events, plain.step_time_s)
    assert fast.metrics == plain.metrics
