"""What the engine and the compiler share to go faster must not change what they compute:
relabelled programs with shared collective ops equal programs compiled on their own, and
closed-form link bytes added when read equal the bytes added call by call."""
from __future__ import annotations

import numpy as np
import simpy

from simulator.network.cluster_net import SimNetwork
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route


def _job():
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                    Plan(tp=2, pp=2, dp=4, gbs=16))


def test_relabelled_programs_equal_programs_compiled_alone():
    job = _job()
    everything = compile_job(job)
    for rank in (0, 1, 3, 8, 13, 15):
        alone = compile_job(job, ranks=[rank])[rank]       # compiled, not relabelled
        assert everything[rank].streams == alone.streams


def test_ranks_of_one_group_share_their_collective_ops():
    progs = compile_job(_job())
    tp = lambda r: [op for op in progs[r].streams["tp-comm"] if type(op) is Collective]
    a, b, c = tp(2), tp(3), tp(4)                # 2 and 3: one tp group (relabelled); 4: another
    assert a and all(x is y for x, y in zip(a, b))
    assert all(x.group == (4, 5) and x is not y for x, y in zip(c, a))


def test_closed_form_bytes_added_when_read_equal_call_by_call_sums():
    graph = build_graph(cluster_preset("dgx-a100", 2))
    net = SimNetwork(simpy.Environment(), graph, route)
    rng = np.random.default_rng(7)
    expected = np.zeros(len(net.edges) + 1)
    for _ in range(200):
        idx = rng.integers(0, len(net.edges), size=int(rng.integers(1, 6)))
        nbytes = float(rng.uniform(1, 1e9))
        np.add.at(expected, idx, nbytes)               # the order the sums used to be made in
        net.count_solo(idx, nbytes)
    got = net.link_bytes()
    assert all(got[e] == expected[i] for i, e in enumerate(net.edges))   # bit for bit
    assert net.link_bytes() == got                       # reading twice adds nothing
