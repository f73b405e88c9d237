"""Runs of compute ops that end with one queue entry (issue 17): the engine ends a run of
consecutive compute ops on a stream that nothing waits on (and whose dependencies are done)
with a single SimPy queue entry, and emits each op's record with the start and end it would
have had op by op, the same floating-point sums."""
from __future__ import annotations

import simpy

from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Compute, Program
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

GRAPH = build_graph(cluster_preset("dgx-a100", 1))
# durations whose running sums round (0.1 + 0.2 != 0.3 in binary floating point)
SECONDS = (0.1, 0.2, 0.3, 1e-9, 7.7, 1 / 3, 0.1, 2.5e-3, 0.7)


def _run(streams: dict) -> tuple:
    prog = Program(0, 0, {k: tuple(v) for k, v in streams.items()})
    return run({0: prog}, net=SimNetwork(simpy.Environment(), GRAPH, route))


def _compute(extra_deps: dict | None = None) -> list[Compute]:
    """The compute stream: op 100 first (it waits on op 0 of the other stream), op 103 waits
    on op 0 too (done by then), op 106 on op 1 (a later op of the other stream)."""
    deps = {100: (0,), 103: (0,), 106: (1,)}
    deps.update(extra_deps or {})
    return [Compute(100 + k, "compute", s, "forward", f"F{k}.c0", microbatch=k,
                    deps=deps.get(100 + k, ())) for k, s in enumerate(SECONDS)]


def _side() -> list[Compute]:
    return [Compute(0, "dp-comm", 0.05, "optimizer", "warm"),
            Compute(1, "dp-comm", 9.0, "optimizer", "late", deps=(0,))]


def _watchers() -> list[Compute]:
    """One zero-length op per compute op, each waiting on it: every compute op is then waited
    on, so each ends with its own queue entry (the op-by-op reference)."""
    return [Compute(200 + k, "tp-comm", 0.0, "tp", f"w{k}", deps=(100 + k,))
            for k in range(len(SECONDS))]


def _compute_records(res) -> list:
    return [r for r in res.records if r.stream == "compute"]


def test_a_run_of_compute_ops_has_the_op_by_op_start_and_end_times():
    batched = _run({"compute": _compute(), "dp-comm": _side()})
    op_by_op = _run({"compute": _compute(), "dp-comm": _side(), "tp-comm": _watchers()})
    a, b = _compute_records(batched), _compute_records(op_by_op)
    assert [(r.label, r.start, r.end) for r in a] == [(r.label, r.start, r.end) for r in b]
    assert a == b                                # every field, bit for bit
    # fewer queue entries: the runs F0-F5 (F3's dependency is done when F0 starts) and F6-F8
    # (F6 waits for op 1, 9 s in) against one entry per op
    assert batched.events < op_by_op.events
    # the closed form: each op starts when the one before it ends, the sums taken in order,
    # except F6, which waits for op 1 (0.05 + 9.0)
    t = 0.05
    for rec, s in zip(a, SECONDS):
        if rec.label == "F6.c0":
            t = 0.05 + 9.0
        assert (rec.start, rec.end) == (t, t + s)
        t = t + s


def test_a_run_ends_at_an_op_another_stream_waits_on():
    """An op another stream waits on ends the run: the waiting op starts at its end exactly."""
    after = [Compute(2, "pp-comm", 1.0, "dp", "after F2", deps=(102,))]
    res = _run({"compute": _compute(), "dp-comm": _side(), "pp-comm": after})
    by = {r.label: r for r in res.records}
    assert by["after F2"].start == by["F2.c0"].end == ((0.05 + 0.1) + 0.2) + 0.3
    ref = _run({"compute": _compute(), "dp-comm": _side(), "pp-comm": after,
                "tp-comm": _watchers()})
    assert _compute_records(res) == _compute_records(ref)
    assert res.events < ref.events


def test_runs_are_deterministic():
    """The same programs give the same records in the same order and the same entry count."""
    a = _run({"compute": _compute(), "dp-comm": _side(), "tp-comm": _watchers()[::2]})
    b = _run({"compute": _compute(), "dp-comm": _side(), "tp-comm": _watchers()[::2]})
    assert a.records == b.records and a.events == b.events
