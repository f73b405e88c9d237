"""Async TP's own HBM passes on the compute stream (docs/calibration.md §5.94,
``cost.async_tp.fused_pass_time``): each fused all-gather copies the local shard into its
symmetric buffer before the first matmul, each fused reduce-scatter sums the ``tp`` partials
after the last, and in 16 bits the weight gradients copy the gathered tensors out of the
fused op's layout; the estimate and the contention-free simulation read them from the stage
costs."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import async_tp
from strategies.cost import hbm_rate
from strategies.estimate import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from tests.tp_backward_checks import SIM_CASES, assert_moves_with_simulation, tp_job

LAYERS = 4


def _pair(spec: str, fw=TORCHTITAN_COMPILE, dtype: str = "bf16", nodes: int = 1):
    """The async-TP job and the same job whose overlap is not async TP (the profile's
    ``tp_overlap`` is read by these passes only, besides the stack rules)."""
    return (tp_job(spec, layers=LAYERS, fw=fw, dtype=dtype, nodes=nodes),
            tp_job(spec, layers=LAYERS, fw=replace(fw, tp_overlap="userbuffers"), dtype=dtype,
                   nodes=nodes))


@pytest.mark.parametrize("tp,dtype,early,mbs", [(8, "bf16", True, 2),
                                                (4, "fp8-current", True, 2),
                                                (2, "bf16", False, 3), (8, "bf16", True, 1)])
def test_pass_seconds_closed_form(tp: int, dtype: str, early: bool, mbs: int) -> None:
    """``2·S·g/tp`` per all-gather, ``S·(1 + 1/tp)`` per reduce-scatter, ``S = 2·b·s·h``
    bytes over ``hbm``, ``g`` the gather's element share (½ for torchao's fp8 gathers);
    forward ``pairs`` of each, backward ``pairs`` all-gathers and, in 16 bits with ``b > 1``,
    ``2·pairs`` copies of ``2·S`` (the gathered tensors the weight gradients reshape), op
    rerun ``pairs`` all-gathers, full rerun the forward less one reduce-scatter where the
    checkpoint stops early."""
    job = tp_job("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0", layers=LAYERS)
    m, hbm, pairs = job.model, 2.0e12, 2.0
    fw = replace(TORCHTITAN_COMPILE, recompute_early_stop=early)
    f, b, op, full = async_tp.fused_pass_time(m, mbs, tp, 1, True, True, pairs, dtype, fw,
                                              hbm)
    s = 2 * mbs * m.seq_length * m.hidden_size / hbm
    g = 0.5 if dtype.startswith("fp8") else 1.0
    ag, rs = 2 * s * g / tp, s * (1 + 1 / tp)
    layout = 2 * s if (mbs > 1 and g == 1.0) else 0.0
    assert float(f) == pytest.approx(pairs * (ag + rs), rel=1e-12)
    assert float(b) == pytest.approx(pairs * ag + 2 * pairs * layout, rel=1e-12)
    assert float(op) == pytest.approx(pairs * ag, rel=1e-12)
    assert float(full) == pytest.approx(pairs * (ag + rs) - (rs if early else 0.0), rel=1e-12)


@pytest.mark.parametrize("tp,sp,tpo,fw", [(1, True, True, TORCHTITAN_COMPILE),
                                          (8, False, True, TORCHTITAN_COMPILE),
                                          (8, True, False, TORCHTITAN_COMPILE),
                                          (8, True, True, MEGATRON_CORE)])
def test_nothing_without_async_tp(tp: int, sp: bool, tpo: bool, fw) -> None:
    """No TP, no SP, no overlap, or overlap by Transformer Engine's userbuffers: 0."""
    m = tp_job(layers=LAYERS).model
    out = async_tp.fused_pass_time(m, 2, tp, 1, sp, tpo, 2.0, "bf16", fw, 2.0e12)
    assert all(float(np.asarray(v)) == 0.0 for v in out)


@pytest.mark.parametrize("fw,dtype,rc", [
    (TORCHTITAN_COMPILE, "bf16", "none"), (TORCHTITAN_COMPILE, "bf16", "op"),
    (TORCHTITAN_COMPILE, "bf16", "full"), (TORCHTITAN_COMPILE, "fp8-current", "op"),
    (TORCHTITAN, "fp8-current", "full")])
def test_closed_form_of_the_step(fw, dtype: str, rc: str) -> None:
    """One pipeline, no data parallelism: the step moves by ``m·L·(f + b + r)`` exactly,
    the passes being compute-stream work nothing hides (``L`` layers, ``m`` micro-batches;
    ``r`` per the recomputation)."""
    mbs, mb = 2, 3
    on, off = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc},"
                    "tp_comm_overlap=true", fw, dtype)
    m = on.model
    s = 2 * mbs * m.seq_length * m.hidden_size / hbm_rate.usable_hbm(on.cluster.gpu)
    g = 0.5 if dtype.startswith("fp8") else 1.0
    ag, rs = 2 * s * g / 8, s * (1 + 1 / 8)
    f, b = 2 * (ag + rs), 2 * ag + (4 * 2 * s if g == 1.0 else 0.0)   # mbs 2: layout copies
    r = {"none": 0.0, "op": 2 * ag, "full": f - rs}[rc]   # torchtitan's checkpoint stops early
    want = mb * LAYERS * (f + b + r)
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    assert want > 0


@pytest.mark.parametrize("spec,nodes", SIM_CASES)
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int) -> None:
    """The estimate and the contention-free simulation move by the same seconds; the bound
    stays below the simulation."""
    on, off = _pair(spec + ",tp_comm_overlap=true", nodes=nodes)
    assert_moves_with_simulation(on, off)
    assert simulate(on, network="contention-free").step_time_s == \
        simulate(on, network="contention-free").step_time_s


def test_vanilla_tp_unchanged() -> None:
    """Without overlap the torchtitan job does not read ``tp_overlap``: bit-identical."""
    on, off = _pair("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=op")
    assert estimate(on).step_time_s == estimate(off).step_time_s
    assert estimate(on).breakdown_s == estimate(off).breakdown_s
