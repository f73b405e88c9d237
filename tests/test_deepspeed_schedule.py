"""DeepSpeed's pipeline engine (``TrainSchedule``) and blocking sends (issue 15, item 2)."""
from __future__ import annotations

import pytest

from simulator.engine.core import run
from simulator.program.ops import Compute, Program, Recv, Send
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.deepspeed_1f1b import train_schedule
from strategies.schedules.exchanges import pipeline_actions
from tests.test_simulate import _balanced, _job
from topologies.cluster import cluster_preset


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_lock_step_slots(pp, m):
    """2(m + pp - 1) slots; a stage runs forwards on its own parity, backwards on the other;
    every pass exactly once, in 1F1B's order."""
    ds = get_schedule("deepspeed-1f1b")
    for s in range(pp):
        slots = train_schedule(s, pp, m)
        assert len(slots) == 2 * (m + pp - 1)
        for k, slot in enumerate(slots):
            if slot is not None:
                assert (slot[0] == "F") == (k % 2 == s % 2)
        assert sorted(x for x in slots if x) == sorted([("F", i) for i in range(m)]
                                                        + [("B", i) for i in range(m)])
        assert [str(x) for x in ds.steps(s, pp, m)] == \
            [str(x) for x in get_schedule("1f1b").steps(s, pp, m)]


def test_exchanges_open_each_step_in_deepspeed_order():
    """A middle stage: a forward step sends the previous backward's gradient, then receives;
    a backward step receives its gradient, then sends the previous forward's output."""
    acts = [str(a) for a in pipeline_actions("deepspeed-1f1b", 1, 3, 3)]
    assert acts[:8] == ["X(recv fwd 0.0)", "F0.c0", "X(send fwd 0.0)", "X(recv fwd 1.0)",
                        "F1.c0", "X(recv bwd 0.0)", "X(send fwd 1.0)", "B0.c0"]


@pytest.mark.parametrize("pp,gbs", [(2, 16), (4, 32), (4, 64)])
def test_lock_step_costs_nothing_with_instant_messages(pp, gbs):
    """Neighbours meet once every two steps and each does one forward and one backward in
    between, so with instant messages the step is 1F1B's closed form (m + pp - 1)(t_F + t_B)."""
    job = _job(tp=2, pp=pp, schedule="deepspeed-1f1b", vpp=1, gbs=gbs,
               microbatch_group_size=None)
    costs = _balanced(job)
    res = simulate(job, free_comm=True, costs=costs)
    m, L = job.num_microbatches, job.model.num_layers // pp
    closed = (m + pp - 1) * L * (costs.layer_fwd + costs.layer_bwd)
    assert res.step_time_s == pytest.approx(closed, rel=1e-12)


def _pair(blocking: bool, recv_after: float):
    """Rank 0 sends 1 GB at t=0; rank 1 posts its receive after ``recv_after`` seconds."""
    import networkx as nx
    g = nx.DiGraph(gpus_per_node=8)
    g.add_edge(0, 1, bandwidth=1e9, latency=0.0)
    g.add_edge(1, 0, bandwidth=1e9, latency=0.0)
    p0 = Program(0, 0, {"pp-comm": (Send(0, "pp-comm", dst=1, nbytes=1e9, tag="t",
                                         blocking=blocking),)})
    p1 = Program(1, 1, {"compute": (Compute(0, "compute", recv_after, "forward", "F"),),
                        "pp-comm": (Recv(1, "pp-comm", src=0, tag="t", deps=(0,)),)})
    return run({0: p0, 1: p1}, g)


def test_blocking_send_waits_for_the_receive():
    eager, blocking = _pair(False, 2.0), _pair(True, 2.0)
    send = {r.kind: r for r in eager.records}["pp_send"]
    d = send.end                                       # the transfer alone on the link
    assert (send.start, send.wait) == (0.0, 0.0) and d > 0
    send = {r.kind: r for r in blocking.records}["pp_send"]
    assert (send.start, send.end, send.wait) == (0.0, 2.0 + d, 2.0)  # starts when posted
    recv = {r.kind: r for r in blocking.records}["pp_recv"]
    assert (recv.start, recv.end) == (2.0, 2.0 + d)
    # a receive posted first: the blocking send starts at once
    early = {r.kind: r for r in _pair(True, 0.0).records}["pp_send"]
    assert (early.start, early.end, early.wait) == (0.0, d, 0.0)


def test_megatron_deepspeed_runs_its_own_train_schedule():
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2)
    job = make_job(m, cl, parse_plan("tp=2,pp=2,gbs=32,flash_attn=false"),
                   framework="megatron-deepspeed")
    assert job.plan.schedule == "deepspeed-1f1b"
    assert make_job(m, cl, parse_plan("tp=2,pp=2,gbs=32")).plan.schedule == "1f1b"
    assert make_job(m, cl, parse_plan("tp=2,pp=2,gbs=32"),
                    framework="megatron-core").plan.schedule == "1f1b"
