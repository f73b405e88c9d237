"""The GEMMs tensor parallelism leaves whole (MLA's down projections, the MoE router, a
shared-expert gate) at the shapes the stack runs them under sequence parallelism
(docs/calibration.md §5.99): Megatron-Core hands them the rank's sequence shard (``T/tp``
rows; the column-parallel down projections of core 0.12-0.13 ``T`` rows at ``w/tp``),
torchtitan gathers the input first (``T`` rows, full width). One rule
(``gemm_shapes.whole_gemm_split``, ``FrameworkProfile.sp_shard_whole_gemms``) the layer times read,
so the estimate and the simulator move together."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import gemm_shapes, gemm_time
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.stacks.megatron import MEGATRON_CORE, NEMO
from strategies.stacks.pytorch import TORCHTITAN
from tests.test_mla_forward import T, _plan
from tests.test_mla_reduce import _mla

H, E = 7168, 16
COL = replace(MEGATRON_CORE, mla_down_proj="column")
OFF = replace(MEGATRON_CORE, sp_shard_whole_gemms=False)
COL_OFF = replace(COL, sp_shard_whole_gemms=False)


def test_the_stacks_facts() -> None:
    """Megatron-Core and the stacks built on it shard them; torchtitan, eager PyTorch and
    XLA do not (the default profile field is False)."""
    assert MEGATRON_CORE.sp_shard_whole_gemms and NEMO.sp_shard_whole_gemms
    assert get_profile("megatron-bridge").sp_shard_whole_gemms
    for name in ("torchtitan", "pytorch-eager", "jax-xla", "megatron-deepspeed",
                 "megatron-lm-2021", "automodel"):
        assert not get_profile(name).sp_shard_whole_gemms, name
    assert not TORCHTITAN.sp_shard_whole_gemms


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("sp", [True, False])
def test_split_closed_form(tp: int, sp: bool) -> None:
    """``(rows, cols)``: ``tp`` rows where sharded under SP with tp > 1, ``tp`` columns where
    column-parallel with tp > 1, else 1; vectorised over plans bit for bit."""
    for shard in (True, False):
        for col in (True, False):
            rows, cols = gemm_shapes.whole_gemm_split(tp, sp, shard, col)
            assert rows == (tp if shard and sp and tp > 1 else 1.0)
            assert cols == (tp if col and tp > 1 else 1.0)
    tps, sps = np.array([1, 2, 4, 8, 2]), np.array([True, True, False, True, False])
    r, c = gemm_shapes.whole_gemm_split(tps, sps, True, True)
    for k in range(len(tps)):
        assert (r[k], c[k]) == gemm_shapes.whole_gemm_split(int(tps[k]), bool(sps[k]), True, True)


def _rep_and_router(job, fw) -> tuple[list, list]:
    """(the down projections' shapes, the router's) of ``job``'s MoE layer on stack ``fw``."""
    m, p = job.model, job.plan
    parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, "moe", p.expert_tp, 1.0,
                                         gemm_time.whole_split(p.tp, p.sp, fw))
    splits = [s for _, _, _, s in m.attention_linears()]
    down = [g[1:4] for i, (_, g) in enumerate(parts) if i < len(splits) and splits[i] == "rep"]
    router = [g[1:4] for _, g in parts if g[4] is None]
    return down, router


@pytest.mark.parametrize("tp", [2, 4])
def test_shapes_per_stack(tp: int) -> None:
    """DeepSeek-V3's down projections (1536 and 512 + 64 wide, 7168 deep) and router (16
    experts here): Megatron-Core's replicated layout under SP ``(T/tp, w, H)`` and
    ``(T/tp, E, H)``; its column layout ``(T, w/tp, H)`` and the router still ``T/tp``;
    without SP (replicated) and on torchtitan all ``T`` rows at the full width; without SP the
    column layout keeps ``w/tp``."""
    sp_job, no_sp = _mla(_plan(tp, True)), _mla(_plan(tp, False))
    full = ([(T, 1536, H), (T, 576, H)], [(T, E, H)])
    assert _rep_and_router(sp_job, MEGATRON_CORE) == (
        [(T / tp, 1536, H), (T / tp, 576, H)], [(T / tp, E, H)])
    assert _rep_and_router(sp_job, COL) == (
        [(T, 1536 / tp, H), (T, 576 / tp, H)], [(T / tp, E, H)])
    assert _rep_and_router(sp_job, TORCHTITAN) == full
    assert _rep_and_router(no_sp, MEGATRON_CORE) == full
    assert _rep_and_router(no_sp, COL) == ([(T, 1536 / tp, H), (T, 576 / tp, H)], [(T, E, H)])
    # the default argument is the old whole shape, every other GEMM untouched
    m, p = sp_job.model, sp_job.plan
    old = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, None, p.expert_tp)
    new = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, None, p.expert_tp,
                                       whole=gemm_time.whole_split(p.tp, p.sp, MEGATRON_CORE))
    splits = [s for _, _, _, s in m.attention_linears()]
    moved = [i for i, ((_, a), (_, b)) in enumerate(zip(old, new)) if a != b]
    assert moved == [i for i, s in enumerate(splits) if s == "rep"] + \
        [i for i, (_, g) in enumerate(old) if g[4] is None]
    assert len(old) == len(new) and [a for a, _ in old] == [b for b, _ in new]


def _gemm_delta(job, fw_on, fw_off) -> tuple[float, float]:
    """(forward, backward) seconds of the mean layer's GEMMs at ``fw_on``'s shapes less at
    ``fw_off``'s, priced by ``gemm_units`` (before the record's clock factor)."""
    m, p, cl = job.model, job.plan, job.cluster
    out = []
    for fw in (fw_on, fw_off):
        # (the routed experts' load moves no GEMM that changes: 1)
        parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, None, p.expert_tp, 1.0,
                                             gemm_time.whole_split(p.tp, p.sp, fw))
        units = gemm_time.gemm_units([g for _, g in parts], p.tp, cl.gpu, "bf16", False, fw,
                                     job.system, shares=gemm_time.fixed_shares(parts, m, p.ep, fw))
        n = [g[0] for _, g in parts]
        out.append((gemm_time.units_time_fwd(n, units), gemm_time.units_time_bwd(n, units)[0]))
    return out[0][0] - out[1][0], out[0][1] - out[1][1]


def _arrays(job) -> tuple[float, float]:
    """(the clock factor the job's layer GEMMs run at, their forward seconds):
    ``StageCostArrays.slowdown`` and ``gemm_fwd``."""
    from strategies.cost.stage import stage_cost_arrays
    from strategies.plan_arrays import PlanArrays
    x = stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                          job.framework, job.system)
    return float(np.ravel(x.slowdown)[0]), float(np.ravel(x.gemm_fwd)[0])


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("fws", [(MEGATRON_CORE, OFF), (COL, COL_OFF)], ids=["rep", "col"])
def test_layer_moves_by_the_gemms(tp: int, fws) -> None:
    """The mean layer's forward and backward move by exactly the re-priced GEMMs (1e-12),
    and get shorter; the layer's GEMM forward (what hides TP traffic) by the same."""
    on, off = (_mla(_plan(tp, True), fw=fw) for fw in fws)
    c_on, c_off = stage_costs(on), stage_costs(off)
    d_f, d_b = _gemm_delta(on, *fws)
    (slow, g_on), (_, g_off) = _arrays(on), _arrays(off)
    assert d_f < 0 and d_b < 0
    assert g_on - g_off == pytest.approx(slow * d_f, rel=1e-12)
    assert c_on.layer_fwd - c_off.layer_fwd == pytest.approx(slow * d_f, rel=1e-12)
    assert c_on.layer_bwd - c_off.layer_bwd == pytest.approx(slow * d_b, rel=1e-12)


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("fws", [(MEGATRON_CORE, OFF), (COL, COL_OFF)], ids=["rep", "col"])
def test_estimate_and_simulation_move_together(tp: int, fws) -> None:
    """The step gets shorter; the estimate and the contention-free simulation move by the
    same seconds to 1e-9."""
    on, off = (_mla(_plan(tp, True), fw=fw) for fw in fws)
    e = estimate(on).step_time_s - estimate(off).step_time_s
    s = simulate(on, network="contention-free").step_time_s \
        - simulate(off, network="contention-free").step_time_s
    assert e < 0
    assert s == pytest.approx(e, rel=1e-9)


def _a100(job):
    """``job`` on one DGX A100 (slower GEMMs, NVLink 3: the down projections' weight
    gradients outlast their reductions at tp 2, where on the H100 they do not)."""
    from strategies.job import make_job
    from topologies.cluster import cluster_preset
    return make_job(job.model, cluster_preset("dgx-a100", 1), job.plan,
                    framework=job.framework, dtype="bf16")


@pytest.mark.parametrize("on_a100", [False, True], ids=["h100", "a100"])
@pytest.mark.parametrize("sp", [True, False])
def test_down_reductions_beside_their_wgrad(on_a100: bool, sp: bool) -> None:
    """§5.99: the column-parallel down projections' input-gradient reductions run beside
    their weight-gradient GEMMs (``rd_down_q``/``rd_down_kv``: the ``(768, 7168)`` and
    ``(288, 7168)`` weight gradients over ``T`` rows at tp 2, the record's clock factor):
    ``down_reduce_hidden`` is ``sum min(t_red(H), wgrad)``, none in the replicated layout or
    where the stack reduces blocking; the estimate and the contention-free simulation move by
    the same seconds from the replicated layout (1e-9) where the pieces are exposed (H100;
    A100 without SP) and where the query one is hidden (A100 under SP)."""
    from strategies.cost.stage import (dgrad_reduce_time, down_reduce_hidden,
                                       down_reduce_pieces)
    from tests.test_mla_down import COL_NO_RD
    col, rep = _mla(_plan(2, sp), fw=COL), _mla(_plan(2, sp))
    if on_a100:
        col, rep = _a100(col), _a100(rep)
    c, p = stage_costs(col), col.plan
    parts = gemm_shapes.layer_gemm_parts(col.model, p.mbs, p.tp, p.cp, p.ep, None, p.expert_tp,
                                         1.0, gemm_time.whole_split(p.tp, p.sp, COL))
    units = gemm_time.gemm_units([g for _, g in parts], p.tp, col.cluster.gpu, "bf16", False,
                                 COL, col.system,
                                 shares=gemm_time.fixed_shares(parts, col.model, p.ep, COL))
    slow = _arrays(col)[0]
    assert [g[1:4] for _, g in parts[:4:2]] == [(T, 768, H), (T, 288, H)]
    assert (c.rd_down_q, c.rd_down_kv) == pytest.approx(
        (slow * units[0][4], slow * units[2][4]), rel=1e-12)
    assert down_reduce_pieces(c) == (c.rd_down_q, c.rd_down_kv)
    assert down_reduce_pieces(stage_costs(rep)) == ()
    t = float(dgrad_reduce_time(c, 2, sp, col.cluster, 1.0))
    got = float(down_reduce_hidden(lambda w: dgrad_reduce_time(c, 2, sp, col.cluster, w), c))
    assert got == pytest.approx(min(t, c.rd_down_q) + min(t, c.rd_down_kv), rel=1e-12)
    assert (c.rd_down_q >= t) == (on_a100 and sp)     # the all-reduce is twice as long
    blocking = stage_costs(replace(col, framework=COL_NO_RD))
    assert float(down_reduce_hidden(
        lambda w: dgrad_reduce_time(blocking, 2, sp, col.cluster, w), blocking)) == 0.0
    e = estimate(col).step_time_s - estimate(rep).step_time_s
    s = simulate(col, network="contention-free").step_time_s \
        - simulate(rep, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=1e-9)
