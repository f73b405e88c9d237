"""The simulator takes the SMs in-flight collectives hold from the compute beside them
(``simulator.engine.sm_hold``, docs/calibration.md §5.159): one GEMM beside one collective
costs exactly ``sm_share.overlap_extra`` more, a rate that changes mid-op moves the op's end
as the closed form says, a copy-engine collective costs nothing, and with the switch off the
programs and the runs are what they were."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.engine.core import run
from simulator.network.backend import new_network
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Compute, Program
from simulator.simulate import simulate
from strategies.cost import sm_share
from strategies.cost.system import SystemConfig
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

SM = 132
GROUP = (0, 1)
GRAPH = build_graph(cluster_preset("dgx-h100", 1))
ON = SystemConfig(comm_sm_share=1.0)
LLAMA8 = replace(model_preset("llama3-8b"), num_layers=4, seq_length=2048)


def _coll(i: int, nbytes: float, sms: float, deps=()) -> Collective:
    return Collective(i, "dp-comm", "allreduce", GROUP, nbytes, "ring", f"dp{i}", "dp",
                      f"AR {i}", deps=deps, sms=sms)


def _run(streams, sm_of=True):
    """Run ``streams`` (stream -> ops, the same on both ranks) on the contention-free
    network; ``sm_of``: every rank an H100's ``SM`` SMs (else the charge off)."""
    progs = {r: Program(r, 0, dict(streams)) for r in GROUP}
    net = new_network(GRAPH, route, None, "contention-free")
    try:
        return run(progs, net=net, sm_of={r: SM for r in GROUP} if sm_of else None)
    finally:
        net.close()


def _ends(res, rank=0):
    return {x.label: (x.start, x.end) for x in res.records if x.rank == rank}


def _comm_seconds(nbytes: float) -> float:
    """The collective's own time (what holding SMs never changes)."""
    a, b = _ends(_run({"dp-comm": (_coll(0, nbytes, 0.0),)}))["AR 0"]
    return b - a


@pytest.mark.parametrize("k", [16, 20, 32])
@pytest.mark.parametrize("w_over_c", [0.3, 0.9, 1.0, 1.2, 4.0])
def test_one_gemm_beside_one_collective_is_the_closed_form(k, w_over_c):
    """A GEMM of ``W`` s and a collective of ``C`` s holding ``k`` SMs, both from 0: the
    step is ``max(W, C) + overlap_extra(C, W, sm, k)`` and the GEMM ends at
    ``W + min(C·k/sm, W·k/(sm − k))`` (1e-9)."""
    nbytes = 4e8
    c = _comm_seconds(nbytes)
    w = w_over_c * c
    res = _run({"compute": (Compute(10, "compute", w, "forward", "F"),),
                "dp-comm": (_coll(0, nbytes, k),)})
    extra = float(sm_share.overlap_extra(c, w, SM, k))
    assert res.step_time_s == pytest.approx(max(w, c) + extra, rel=1e-9, abs=1e-15)
    end = _ends(res)["F"][1]
    assert end == pytest.approx(w + min(c * k / SM, w * k / (SM - k)), rel=1e-9)
    assert _ends(res)["AR 0"][1] == pytest.approx(c, rel=1e-12)


def test_a_collective_starting_mid_gemm_moves_its_end():
    """A GEMM of ``W`` beside a first collective (``k1`` SMs, from 0, ``C1`` s), then two
    at once from its end (``k2`` and ``k3``, ``C2`` s each, on two streams): the GEMM's work
    is done piecewise at ``(sm − Σk)/sm`` and the rest at the full rate (1e-9)."""
    n1, n2 = 2e8, 3e8
    c1, c2 = _comm_seconds(n1), _comm_seconds(n2)
    k1, k2, k3 = 16, 20, 8
    w = 4.0 * (c1 + c2)
    ops = {"compute": (Compute(10, "compute", w, "forward", "F"),),
           "dp-comm": (_coll(0, n1, k1), _coll(1, n2, k2)),
           "ep-comm": (Collective(2, "ep-comm", "allreduce", GROUP, n2, "ring", "x", "ep",
                                  "X", deps=(0,), sms=k3),)}
    res = _run(ops)
    done = c1 * (SM - k1) / SM + c2 * (SM - k2 - k3) / SM     # work by C1 + C2
    assert _ends(res)["F"][1] == pytest.approx(c1 + c2 + (w - done), rel=1e-9)


def test_copy_engine_collective_costs_nothing():
    """A collective holding no SM (the copy engine, ``sms`` 0) leaves the GEMM beside it
    its full rate: the records are those of the run without the charge, bit for bit."""
    nbytes = 4e8
    ops = {"compute": (Compute(10, "compute", 1e-3, "forward", "F"),
                       Compute(11, "compute", 2e-3, "backward", "B")),
           "dp-comm": (_coll(0, nbytes, 0.0), _coll(1, nbytes, 0.0, deps=(10,)))}
    on, off = _run(ops), _run(ops, sm_of=False)
    assert on.records == off.records and on.step_time_s == off.step_time_s


def test_the_switch_off_compiles_no_sms_and_on_reads_window_sms():
    """Off (the default), every compiled collective holds 0 SMs and ``simulate`` is the
    engine without the charge; on, the data-parallel collectives hold NCCL's Hopper SMs
    (``sm_share.NCCL_SMS``), the one figure the estimate reads."""
    cl = cluster_preset("dgx-h100", 1)
    p = parse_plan("zero=3,gbs=32")
    off = compile_job(make_job(LLAMA8, cl, p))
    on = compile_job(make_job(LLAMA8, cl, p, system=ON))
    colls = lambda progs: [op for pr in progs.values() for ops in pr.streams.values()  # noqa
                           for op in ops if type(op) is Collective]
    assert colls(off) and all(op.sms == 0 for op in colls(off))
    # (the gradient norm's 4-byte all-reduce holds none: every rank waits on it, §5.202)
    assert {op.sms for op in colls(on) if op.category == "dp"
            and op.label != "grad norm all-reduce"} == {sm_share.NCCL_SMS["sm_90"]}


@pytest.mark.parametrize("plan", ["zero=3,gbs=32", "zero=1,gbs=32"])
def test_switch_on_slows_the_simulation_by_at_most_the_whole_compute(plan):
    """On, the contention-free simulation is slower than off, by less than its whole compute
    at ``sm/(sm − 16)`` would make it."""
    cl = cluster_preset("dgx-h100", 1)
    p = parse_plan(plan)
    off = simulate(make_job(LLAMA8, cl, p), network="contention-free")
    on = simulate(make_job(LLAMA8, cl, p, system=ON), network="contention-free")
    comp = off.metrics["breakdown_s"]["compute"]
    assert off.step_time_s < on.step_time_s < off.step_time_s + comp * 16 / (SM - 16)


def test_free_comm_holds_and_frees_at_once():
    """With instant communication a collective holds its SMs for no time: nothing moves."""
    progs = {r: Program(r, 0, {"compute": (Compute(10, "compute", 1e-3, "forward", "F"),),
                               "dp-comm": (_coll(0, 4e8, 16),)}) for r in GROUP}
    net = new_network(GRAPH, route, None, "contention-free")
    try:
        res = run(progs, net=net, free_comm=True, sm_of={r: SM for r in GROUP})
    finally:
        net.close()
    assert res.step_time_s == pytest.approx(1e-3, rel=1e-12)
