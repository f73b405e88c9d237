"""The engine on hand-built programs: overlap of streams, messages, collectives in closed
form (through the flow network and through the exclusive-link shortcut), contention,
deadlock detection."""
from __future__ import annotations

import pytest
import simpy

from simulator.engine.collectives import CollectiveRunner
from simulator.engine.core import run
from simulator.engine.deadlock import DeadlockError, UnmatchedSendError
from simulator.program.ops import Collective, Compute, Program, Recv, Send
from simulator.network.cluster_net import SimNetwork
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.collectives.ring import allreduce_time, reduce_scatter_time
from strategies.cost.comm import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

A100 = cluster_preset("dgx-a100", 2)
NVL = A100.intra_node_bandwidth * NVLINK_EFFICIENCY      # achievable bytes/s per GPU port
NIC = A100.inter_node_bandwidth * NETWORK_EFFICIENCY
LAT_IN, LAT_OUT = A100.intra_node_latency, A100.inter_node_latency
GRAPH = build_graph(A100)


def _net() -> SimNetwork:
    return SimNetwork(simpy.Environment(), GRAPH, route)


def _prog(rank, **streams) -> Program:
    return Program(rank, 0, {k.replace("_", "-"): tuple(v) for k, v in streams.items()})


def _coll(i, group, nbytes, kind="allreduce", algo="ring", tag="tp", stream="tp-comm", deps=()):
    return Collective(i, stream, kind, tuple(group), nbytes, algo, tag, "tp", f"{kind} {i}",
                      deps=deps)


def test_independent_streams_overlap_and_deps_order():
    prog = _prog(0, compute=[Compute(0, "compute", 2.0, "forward", "F0.c0"),
                             Compute(1, "compute", 1.0, "backward", "B0.c0")],
                 dp_comm=[Compute(2, "dp-comm", 2.5, "dp", "x", deps=(0,))])
    res = run({0: prog}, net=_net())
    assert res.step_time_s == pytest.approx(4.5)      # waits for op 0, then overlaps op 1
    by = {r.label: r for r in res.records}
    assert (by["x"].start, by["B0.c0"].start) == (pytest.approx(2.0), pytest.approx(2.0))


def test_message_between_nodes_closed_form_and_wait():
    nbytes = 1e9
    send = _prog(0, compute=[Compute(0, "compute", 1.0, "forward", "F0.c0")],
                 pp_comm=[Send(1, "pp-comm", 8, nbytes, "fwd", "send F0.c0", deps=(0,))])
    recv = _prog(8, pp_comm=[Recv(0, "pp-comm", 0, "fwd", "recv F0.c0")])
    res = run({0: send, 8: recv}, GRAPH, route)
    rec = {r.kind: r for r in res.records}
    assert rec["pp_recv"].end == pytest.approx(1.0 + LAT_OUT + nbytes / NIC, rel=1e-12)
    assert rec["pp_recv"].wait == pytest.approx(1.0)   # it waited a second for the sender
    assert rec["pp_send"].peer == 8 and rec["pp_recv"].peer == 0


@pytest.mark.parametrize("exclusive", [True, False])
def test_ring_allreduce_alone_is_the_closed_form(exclusive):
    nbytes, group = 64e6, list(range(8))
    progs = {r: _prog(r, tp_comm=[_coll(0, group, nbytes)]) for r in group}
    net = _net()
    if exclusive:
        res = run(progs, net=net)
    else:      # force the flow network: a second channel on the same links
        res = _run_without_shortcut(progs, net)
    assert res.step_time_s == pytest.approx(CALL + allreduce_time(nbytes, 8, NVL, LAT_IN),
                                            rel=1e-12)


def _run_without_shortcut(progs, net):
    import simulator.engine.core as eng
    saved = eng.exclusive_channels
    eng.exclusive_channels = lambda *a: {}
    try:
        return run(progs, net=net)
    finally:
        eng.exclusive_channels = saved


def test_repeat_scales_bytes_and_latency():
    """``repeat`` back-to-back calls: each pays its own call latency too."""
    group = [0, 1, 2, 3]
    op = Collective(0, "tp-comm", "reduce_scatter", tuple(group), 8e6, "ring", "tp", "tp", "rs",
                    repeat=3.0)
    res = run({r: _prog(r, tp_comm=[op]) for r in group}, net=_net())
    assert res.step_time_s == pytest.approx(3 * (CALL + reduce_scatter_time(8e6, 4, NVL, LAT_IN)),
                                            rel=1e-12)


def test_hierarchical_allreduce_closed_form():
    group, S = [0, 1, 8, 9], 40e6                      # two members in each of two nodes
    op = _coll(0, group, S, algo="hierarchical", tag="dp", stream="dp-comm")
    res = run({r: _prog(r, dp_comm=[op]) for r in group}, GRAPH, route)
    # intra reduce-scatter (2 ranks), inter all-reduce of S/2 (2 nodes), intra all-gather;
    # the inter-node rings of local ranks 0 and 1 use different rails
    want = (CALL + reduce_scatter_time(S, 2, NVL, LAT_IN)
            + allreduce_time(S / 2, 2, NIC, LAT_OUT)
            + reduce_scatter_time(S, 2, NVL, LAT_IN))
    assert res.step_time_s == pytest.approx(want, rel=1e-12)


def test_all_to_all_in_a_node():
    group, S = list(range(4)), 8e6
    op = Collective(0, "ep-comm", "alltoall", tuple(group), S, "all_to_all", "ep", "ep", "a2a")
    res = run({r: _prog(r, ep_comm=[op]) for r in group}, net=_net())
    assert res.step_time_s == pytest.approx(CALL + LAT_IN + 3 / 4 * S / NVL, rel=1e-12)


def test_contention_slows_both_channels():
    """Two rings over the same GPUs on two streams share the NVSwitch ports."""
    group, S = list(range(8)), 64e6
    a, b = _coll(0, group, S, tag="tp"), _coll(1, group, S, tag="x", stream="dp-comm")
    res = run({r: _prog(r, tp_comm=[a], dp_comm=[b]) for r in group}, net=_net())
    alone = CALL + allreduce_time(S, 8, NVL, LAT_IN)
    assert res.step_time_s == pytest.approx(alone + 14 * S / 8 / NVL, rel=1e-9)


def test_free_comm_is_instant():
    progs = {r: _prog(r, tp_comm=[_coll(0, range(8), 1e9)]) for r in range(8)}
    assert run(progs, net=_net(), free_comm=True).step_time_s == 0.0


def test_deadlock_is_detected_and_named():
    """Both ranks receive before they send."""
    progs = {r: _prog(r, pp_comm=[Recv(0, "pp-comm", 1 - r, "fwd", f"recv on {r}"),
                                  Send(1, "pp-comm", 1 - r, 1e6, "fwd", f"send on {r}")])
             for r in (0, 1)}
    with pytest.raises(DeadlockError) as err:
        run(progs, net=_net())
    msg = str(err.value)
    assert "rank 0 stream pp-comm" in msg and "'recv on 0'" in msg and "rank 1" in msg
    assert "message from rank 1" in msg


def test_unreceived_message_is_reported():
    progs = {0: _prog(0, pp_comm=[Send(0, "pp-comm", 1, 1e6, "fwd", "send")]), 1: _prog(1)}
    with pytest.raises(UnmatchedSendError, match="rank 0 -> rank 1 tag 'fwd'"):
        run(progs, net=_net())


def test_missing_collective_member_is_a_deadlock():
    progs = {0: _prog(0, tp_comm=[_coll(0, [0, 1], 1e6)]), 1: _prog(1, compute=[])}
    with pytest.raises(DeadlockError, match="rank 0 stream tp-comm op 0 'allreduce 0'"):
        run(progs, net=_net())


def test_mismatched_collective_is_refused():
    progs = {0: _prog(0, tp_comm=[_coll(0, [0, 1], 1e6)]),
             1: _prog(1, tp_comm=[_coll(0, [0, 1], 2e6)])}
    with pytest.raises(ValueError, match="does not match"):
        run(progs, net=_net())


def test_stepwise_ring_from_collectives_module():
    op = Collective(0, "tp-comm", "allreduce", tuple(range(4)), 8e6, "ring_stepwise", "tp", "tp",
                    "ar", repeat=2.0)
    res = run({r: _prog(r, tp_comm=[op]) for r in range(4)}, GRAPH, route)
    assert res.step_time_s == pytest.approx(2 * allreduce_time(8e6, 4, NVL, LAT_IN), rel=1e-9)


def test_runner_phases_fold_to_issuers():
    net = _net()
    runner = CollectiveRunner(net, {0}, lambda r: r // 8, lambda op: False)
    (lat, flows, nbytes), = runner.phases(_coll(0, range(8), 8e6))
    assert flows == [(0, 1)]
    assert nbytes == pytest.approx(14 * 1e6) and lat == pytest.approx(CALL + 14 * LAT_IN)


def test_the_event_loop_processes_simpy_events_in_order_and_counts_compute_ends():
    """The engine's loop (``Environment.step`` written out) runs other SimPy events among the
    compute ends in time order, counts every queue entry, and a failed event stops the run with
    its error, as SimPy's step does."""
    net = _net()
    seen = []
    net.env.timeout(1.5).callbacks.append(lambda ev: seen.append(ev.env.now))
    # F1 waits on F0 (a dependency), so each compute op ends with its own queue entry
    prog = _prog(0, compute=[Compute(0, "compute", 1.0, "forward", "F0.c0"),
                             Compute(1, "compute", 1.0, "forward", "F1.c0", deps=(0,))])
    res = run({0: prog}, net=net)
    assert seen == [1.5] and res.events == 3 and res.step_time_s == 2.0
    # without it the two are one run of compute ops: one entry for both, the same records
    net = _net()
    net.env.timeout(1.5).callbacks.append(lambda ev: seen.append(ev.env.now))
    chained = _prog(0, compute=[Compute(0, "compute", 1.0, "forward", "F0.c0"),
                                Compute(1, "compute", 1.0, "forward", "F1.c0")])
    again = run({0: chained}, net=net)
    assert seen == [1.5, 1.5] and again.events == 2 and again.records == res.records
    net = _net()
    net.env.timeout(0.5).callbacks.append(
        lambda ev: ev.env.event().fail(KeyError("from a callback")))
    with pytest.raises(KeyError, match="from a callback"):
        run({0: prog}, net=net)
