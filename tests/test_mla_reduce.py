"""MLA's column-parallel linears in the TP backward (docs/calibration.md §5.76): Megatron-Core
runs MLA's down projections replicated (``TELinear``, ``parallel_mode="duplicated"``) and its
up projections column-parallel (``linear_q_up_proj``, ``linear_kv_up_proj``, or
``linear_q_proj`` without a query latent), so each up projection re-gathers its own latent
input under SP beside its data-gradient GEMM and reduces its latent's data gradient beside
its weight-gradient GEMM: two pieces of widths ``q_lora_rank/h`` and ``kv_lora_rank/h``
(``layer_time.attention_column_widths``), priced by the same two rules
(``cost.stage.sp_regather_exposed``, ``cost.stage.dgrad_reduce_hidden``)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import gemm_shapes, gemm_time, layer_time, overlap_clock
from strategies.cost.stage import (dgrad_reduce_hidden, dgrad_reduce_pieces,
                                   dgrad_reduce_time, sp_regather_exposed,
                                   sp_regather_pieces, stage_costs)
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from tests.tp_backward_checks import bound, layer_comm, tp_job
from topologies.cluster import cluster_preset

NO_RD = replace(MEGATRON_CORE, dgrad_overlap="none")
NO_RG = replace(MEGATRON_CORE, sp_regather=False)
SP = "tp=4,pp=1,dp=2,ep=2,mbs=1,gbs=4,sp=true,overlap_grad_reduce=false"
SP2 = "tp=2,pp=1,dp=4,ep=4,mbs=1,gbs=8,sp=true,overlap_grad_reduce=false"
NO_SP = "tp=4,pp=1,dp=2,ep=2,mbs=1,gbs=4,sp=false,overlap_grad_reduce=false"


def _mla(spec: str, heads: int = 16, q_lora: bool = True, fw=MEGATRON_CORE):
    """DeepSeek-V3's shape cut to 4 layers (3 dense, 1 MoE of 16 experts, no MTP) and
    ``heads`` heads on one DGX H100: 16 heads make the up projections' weight gradients
    shorter than their reductions at tp 4 (exposed pieces), 128 longer (hidden ones)."""
    m = replace(model_preset("deepseek-v3"), num_layers=4, num_attention_heads=heads,
                num_experts=16, num_nextn_predict_layers=0)
    if not q_lora:
        m = replace(m, q_lora_rank=None)
    return make_job(m, cluster_preset("dgx-h100", 1), parse_plan(spec), framework=fw,
                    dtype="bf16")


def test_widths_follow_the_column_linears() -> None:
    """QKV reads the hidden state (1.0); MLA's up projections read their latents; without a
    query latent ``linear_q_proj`` reads the hidden state."""
    assert layer_time.attention_column_widths(model_preset("llama3-8b")) == (1.0,)
    v3 = model_preset("deepseek-v3")
    assert layer_time.attention_column_widths(v3) == (1536 / 7168, 512 / 7168)
    lite = replace(v3, q_lora_rank=None)
    assert layer_time.attention_column_widths(lite) == (1.0, 512 / 7168)


@pytest.mark.parametrize("spec,sp", [(SP, True), (NO_SP, False)])
def test_closed_form_of_one_mla_layer(spec: str, sp: bool) -> None:
    """One MLA layer, one sequence of 4096 tokens: q_up reduces ``T·q_lora`` bf16 elements
    beside its weight gradient ``(a·d_qk/t x T) @ (T x q_lora)``, kv_up ``T·kv_lora`` beside
    ``(a·(d_nope+d_v)/t x T) @ (T x kv_lora)``; under SP each re-gathers the same bytes
    beside its data gradient. The rules' sums are those pieces' closed forms, the counted
    hidden-width attention reduction replaced by the two (``t(1) - t_q - t_kv`` hidden)."""
    job = _mla(spec)
    m, c, tp = job.model, stage_costs(job), job.plan.tp
    T = 4096
    assert c.rd_bytes * c.attn_w == pytest.approx(2 * T * 1536, rel=1e-15)
    assert c.rd_bytes * c.attn_w2 == pytest.approx(2 * T * 512, rel=1e-15)
    parts = gemm_shapes.layer_gemm_parts(m, 1, tp, 1, job.plan.ep)
    assert [p for p, _ in parts[:4]] == ["attn", "mla_up", "attn", "mla_up"]
    assert parts[1][1][2:4] == (16 * 192 / tp, 1536) and parts[3][1][2:4] == (16 * 256 / tp, 512)
    units = gemm_time.gemm_units([g for _, g in parts], tp, job.cluster.gpu, "bf16", False,
                                 MEGATRON_CORE, shares=gemm_time.fixed_shares(parts, m, job.plan.ep,
                                                                              MEGATRON_CORE))
    assert float(overlap_clock.overlap_slowdown(tp, False, 1, 1)) == 1.0
    assert (c.rd_attn, c.rd_attn2) == (units[1][4], units[3][4])
    assert (c.rg_attn, c.rg_attn2) == (units[1][2] * units[1][3], units[3][2] * units[3][3])
    kind = "reduce_scatter" if sp else "allreduce"

    def t_red(w: float) -> float:
        return float(cm.collective_time(kind, c.rd_bytes * w, tp, 1, job.cluster))
    t_h, t_q, t_kv = t_red(1.0), t_red(c.attn_w), t_red(c.attn_w2)
    assert float(dgrad_reduce_time(c, tp, sp, job.cluster, c.attn_w)) == t_q
    attn = t_h - max(0.0, t_q - c.rd_attn) - max(0.0, t_kv - c.rd_attn2)
    want = (attn + c.rg_dense_n * min(t_h, c.rd_dense)
            + c.rg_shared_n * min(t_h, c.rd_shared))
    got = float(dgrad_reduce_hidden(lambda w: dgrad_reduce_time(c, tp, sp, job.cluster, w), c))
    assert got == pytest.approx(want, rel=1e-12)
    assert [s for s, _ in dgrad_reduce_pieces(c)] == [1.0, 0.75, 0.25]
    if sp:
        def t_ag(w: float) -> float:
            return float(cm.collective_time("allgather", c.rg_bytes * w, tp, 1, job.cluster))
        rg = (max(0.0, t_ag(c.attn_w) - c.rg_attn) + max(0.0, t_ag(c.attn_w2) - c.rg_attn2)
              + 0.75 * max(0.0, t_ag(1.0) - c.rg_dense)
              + 0.25 * max(0.0, t_ag(1.0) - c.rg_shared))
        assert float(sp_regather_exposed(t_ag, c)) == pytest.approx(rg, rel=1e-12)
        assert [w for _, w, _ in sp_regather_pieces(c)] == [c.attn_w, c.attn_w2, 1.0, 1.0]
    # the estimate's layer moves by exactly the hidden seconds: blocking, the attention's
    # reduction runs at the latents' widths too (``attn_tp_saved``, §5.81), so the async
    # path hides ``min(t, wgrad)`` of each piece beyond it
    off = replace(job, framework=NO_RD)
    assert layer_comm(off) - layer_comm(job) == pytest.approx(want - (t_h - t_q - t_kv),
                                                              rel=1e-9)


@pytest.mark.parametrize("spec", [SP, SP2, NO_SP])
@pytest.mark.parametrize("heads", [16, 128])
def test_estimate_meets_contention_free_simulation(spec: str, heads: int) -> None:
    """Each rule, switched off, moves the estimate and the contention-free simulation by the
    same seconds to 1e-9 (the builder carves each piece at its own width); 16 heads expose
    both up projections' reductions at tp 4 (and under SP their re-gathers), 128 hide them.
    The lower bound stays below the simulation."""
    job = _mla(spec, heads)
    c, tp = stage_costs(job), job.plan.tp
    ts = [float(dgrad_reduce_time(c, tp, job.plan.sp, job.cluster, w))
          for w in (c.attn_w, c.attn_w2)]
    exposed = [t > wg for t, wg in zip(ts, (c.rd_attn, c.rd_attn2))]
    if heads == 128:
        assert not any(exposed)
    elif tp == 4:
        assert all(exposed)
        if job.plan.sp:
            ag = [float(cm.collective_time("allgather", c.rg_bytes * w, tp, 1, job.cluster))
                  for w in (c.attn_w, c.attn_w2)]
            assert ag[0] > c.rg_attn and ag[1] > c.rg_attn2
    e_on, s_on = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    offs = (NO_RD, NO_RG) if job.plan.sp else (NO_RD,)
    for fw in offs:
        off = replace(job, framework=fw)
        e = e_on - estimate(off).step_time_s
        s = s_on - simulate(off, network="contention-free").step_time_s
        assert s == pytest.approx(e, rel=1e-9, abs=1e-15), fw.name
        # the reductions always hide some: at least the counted width the latents lack
        assert e < 0 or fw is NO_RG
    assert bound(job) <= s_on * (1 + 1e-9)


def test_query_without_latent() -> None:
    """Without ``q_lora_rank`` (DeepSeek-V2-Lite's shape) ``linear_q_proj`` reduces the
    hidden width and kv_up its latent: the counted collective is run as both, and the
    estimate and the contention-free simulation still agree to 1e-9."""
    job = _mla(NO_SP, q_lora=False)
    c = stage_costs(job)
    assert (c.attn_w, c.attn_w2) == (1.0, 512 / 7168)
    off = replace(job, framework=NO_RD)
    e = estimate(job).step_time_s - estimate(off).step_time_s
    s = (simulate(job, network="contention-free").step_time_s
         - simulate(off, network="contention-free").step_time_s)
    assert s == pytest.approx(e, rel=1e-9)


@pytest.mark.parametrize("spec", ["tp=8,pp=1,mbs=1,gbs=4,sp=true",
                                  "tp=4,pp=1,dp=2,mbs=1,gbs=8,sp=false"])
def test_dense_pieces_are_the_single_width_rule(spec: str) -> None:
    """A model without MLA has one attention piece of width 1 and none of width 0: the
    rules are ``sum share·min(t, wgrad)`` and ``sum share·max(0, t - dgrad)`` bit for bit."""
    job = tp_job(spec)
    c, sp = stage_costs(job), job.plan.sp
    assert (c.attn_w, c.attn_w2, c.rd_attn2, c.rg_attn2) == (1.0, 0.0, 0.0, 0.0)
    t = dgrad_reduce_time(c, job.plan.tp, sp, job.cluster)
    old = 0.0
    for share, wg in ((1.0, c.rd_attn), (c.rg_dense_n, c.rd_dense),
                      (c.rg_shared_n, c.rd_shared)):
        old = old + share * np.minimum(t, wg)
    new = dgrad_reduce_hidden(lambda w: dgrad_reduce_time(c, job.plan.tp, sp, job.cluster, w), c)
    assert float(new) == float(old)
    if sp:
        t_ag = float(cm.collective_time("allgather", c.rg_bytes, job.plan.tp, 1, job.cluster))
        old = 0.0
        for share, d in ((1.0, c.rg_attn), (c.rg_dense_n, c.rg_dense),
                         (c.rg_shared_n, c.rg_shared)):
            old = old + share * np.maximum(t_ag - d, 0.0)
        new = sp_regather_exposed(lambda w: cm.collective_time(
            "allgather", c.rg_bytes * w, job.plan.tp, 1, job.cluster), c)
        assert float(new) == float(old)
