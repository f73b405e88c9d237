"""MLA's tensor-parallel collectives at the latents' widths in the forward and in the blocking
backward (docs/calibration.md §5.81): Megatron-Core's MLA (``transformer/
multi_latent_attention.py``, core_v0.14-v0.17) runs its down projections replicated
(``TELinear``, ``parallel_mode="duplicated"``) and its up projections column-parallel, so
under SP the forward all-gathers the ``q_lora_rank`` and ``kv_lora_rank`` latents (each up
projection's own gather) instead of the hidden state, and the backward reduces their data
gradients at those widths; the row side (``linear_proj``) stays at the hidden width. One rule
(``cost.stage.attn_tp_swap``/``attn_tp_saved``) read by the estimate, the lower bound and the
simulator's program builder (``tensor_parallel._tp_ops``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

import simulator.program.builder as builder
import simulator.program.tensor_parallel as tensor_parallel
import strategies.cost.stage as stage
from strategies.cost import tp_collectives
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import attn_tp_saved, attn_tp_swap, stage_costs, tp_kind_bytes
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from tests.test_mla_reduce import _mla
from tests.tp_backward_checks import bound, layer_comm, tp_job

NO_RD = replace(MEGATRON_CORE, dgrad_overlap="none")
T = 4096                        # tokens of one micro-batch (mbs 1, DeepSeek-V3's 4096)
W_Q, W_KV = 1536 / 7168, 512 / 7168


def _plan(tp: int, sp: bool, extra: str = "") -> str:
    dp = 8 // tp
    return (f"tp={tp},pp=1,dp={dp},ep={dp},mbs=1,gbs={dp},sp={str(sp).lower()},"
            f"overlap_grad_reduce=false{extra}")


@pytest.fixture
def rule_off(monkeypatch):
    """The rule switched off where each reader looks it up: no swap, every attention
    collective at the hidden width (main before §5.81)."""
    def off() -> None:
        monkeypatch.setattr(stage, "attn_tp_swap", lambda x, sp, fwd: None)
        monkeypatch.setattr(tp_collectives, "attn_tp_swap", lambda x, sp, fwd: None)
        monkeypatch.setattr(tensor_parallel, "attn_tp_swap", lambda x, sp, fwd: None)
    return off


def test_swaps_follow_the_code() -> None:
    """SP: the forward's all-gather and the backward's reduce-scatter at the latents'
    widths; without SP no forward column collective, the backward's all-reduce at them;
    a model without MLA (and MLA at tp 1 has no collective to swap: tp_bytes 0) none."""
    c = stage_costs(_mla(_plan(4, True)))
    assert attn_tp_swap(c, True, True) == ("allgather", (W_Q, W_KV))
    assert attn_tp_swap(c, True, False) == ("reduce_scatter", (W_Q, W_KV))
    assert attn_tp_swap(c, False, True) is None
    assert attn_tp_swap(c, False, False) == ("allreduce", (W_Q, W_KV))
    dense = stage_costs(tp_job())
    for sp in (True, False):
        for fwd in (True, False):
            assert attn_tp_swap(dense, sp, fwd) is None
            assert attn_tp_saved(lambda k, b: 1.0, dense, sp, fwd) == 0.0


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("fw", [MEGATRON_CORE, NO_RD], ids=["async", "blocking"])
def test_closed_form_per_collective(tp: int, sp: bool, fw, rule_off) -> None:
    """Each collective's bytes (``2·T·width`` bf16) and the estimate's layer moving by
    exactly the pieces' closed form: under SP the forward's all-gather
    ``t_ag(2T·7168) - t_ag(2T·1536) - t_ag(2T·512)``; where the backward's reduction is
    blocking the same with the reduce-scatter (SP) or all-reduce (without); the
    asynchronous one is §5.76's and does not move."""
    job = _mla(_plan(tp, sp), fw=fw)
    c, cl = stage_costs(job), job.cluster
    assert tp_kind_bytes(c, "allgather") == 2 * T * 7168
    assert tp_kind_bytes(c, "reduce_scatter") == 2 * T * 7168
    assert (W_Q * 2 * T * 7168, W_KV * 2 * T * 7168) == pytest.approx((2 * T * 1536,
                                                                      2 * T * 512), rel=1e-15)

    def t(kind: str, n: float) -> float:
        return float(cm.collective_time(kind, n, tp, 1, cl))

    def saved(kind: str) -> float:
        return t(kind, 2 * T * 7168) - t(kind, 2 * T * 1536) - t(kind, 2 * T * 512)
    want = saved("allgather") if sp else 0.0
    if fw is NO_RD:
        want += saved("reduce_scatter" if sp else "allreduce")
    for fwd in (True, False):
        got = float(attn_tp_saved(t, c, sp, fwd))
        assert got == pytest.approx(saved("allgather") if fwd and sp else 0.0 if fwd else
                                    saved("reduce_scatter" if sp else "allreduce"), rel=1e-15)
    assert want >= 0.0
    on = layer_comm(job)
    rule_off()
    assert layer_comm(job) - on == pytest.approx(want, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("fw", [MEGATRON_CORE, NO_RD], ids=["async", "blocking"])
def test_estimate_meets_contention_free_simulation(tp: int, sp: bool, fw, rule_off) -> None:
    """The rule moves the estimate and the contention-free simulation by the same seconds to
    1e-9 (the builder compiles each latent collective at its own width and the pair's
    partner at the rest of its bytes); the lower bound stays below the simulation."""
    job = _mla(_plan(tp, sp), fw=fw)
    e_on, s_on = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    assert bound(job) <= s_on * (1 + 1e-9)
    rule_off()
    e = estimate(job).step_time_s - e_on
    s = simulate(job, network="contention-free").step_time_s - s_on
    assert s == pytest.approx(e, rel=1e-9, abs=1e-15)
    assert (e > 0) == (sp or fw is NO_RD)


@pytest.mark.parametrize("spec", [_plan(4, True, ",tp_comm_overlap=true"),
                                  _plan(4, True, ",recompute=full"),
                                  "tp=4,pp=2,mbs=1,gbs=4,sp=true"])
def test_overlap_recompute_pipeline(spec: str, rule_off) -> None:
    """Under TP overlap (its chunks split the same pieces), full recomputation (the rerun
    forward's collectives stay at the hidden width in both) and pipelining, the estimate and
    the contention-free simulation move by the same seconds to 1e-9."""
    job = _mla(spec)
    e_on, s_on = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    assert bound(job) <= s_on * (1 + 1e-9)
    rule_off()
    e = estimate(job).step_time_s - e_on
    s = simulate(job, network="contention-free").step_time_s - s_on
    assert e > 0 and s == pytest.approx(e, rel=1e-9)


def test_fp8_gathers_quantised_latents(rule_off) -> None:
    """In fp8 under SP the forward all-gathers the quantised latents (1 byte each) and the
    pair's reduce-scatter stays bf16: the swap's bytes follow ``tp_ag_bytes``, and the
    estimate and the contention-free simulation still agree to 1e-9."""
    job = replace(_mla(_plan(4, True), fw=NO_RD), dtype="fp8")
    c = stage_costs(job)
    assert tp_kind_bytes(c, "allgather") == T * 7168
    assert tp_kind_bytes(c, "reduce_scatter") == 2 * T * 7168
    e_on, s_on = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    rule_off()
    e = estimate(job).step_time_s - e_on
    s = simulate(job, network="contention-free").step_time_s - s_on
    assert e > 0 and s == pytest.approx(e, rel=1e-9)


def test_dense_layers_compile_as_before() -> None:
    """Without MLA the builder's TP collectives are the hidden-width pairs, nothing else."""
    job = tp_job("tp=4,pp=1,dp=2,mbs=1,gbs=8,sp=true")
    c = stage_costs(job)
    b = builder.ProgramBuilder.__new__(builder.ProgramBuilder)
    b.c, b.p = c, job.plan
    for fwd in (True, False):
        assert b._tp_ops(3.0, 1.5, fwd) == [("reduce_scatter", c.tp_bytes, 3.0),
                                            ("allgather", c.tp_bytes, 3.0)]


@pytest.mark.parametrize("sp", [True, False])
def test_recomputed_up_projections_gather_again(sp: bool) -> None:
    """Selective ``mla_up_proj`` recomputation reruns each up projection's forward, its SP
    all-gather of the latent included (``CheckpointWithoutOutput`` over
    ``qkv_up_proj_and_rope_apply``): against ``core_attn`` (no TP collective rerun) the
    layer's TP seconds grow by exactly ``t_ag(2T·1536) + t_ag(2T·512)`` under SP and not at
    all without; the estimate and the contention-free simulation move by the same seconds
    to 1e-9, and the lower bound stays below the simulation."""
    base = _plan(4, sp, ",recompute=selective,recompute_modules=")
    up, attn = _mla(base + "mla_up_proj"), _mla(base + "core_attn")
    c = stage_costs(up)
    assert c.tp_attn_rc == (1.0 if sp else 0.0) and stage_costs(attn).tp_attn_rc == 0.0

    def t_ag(n: float) -> float:
        return float(cm.collective_time("allgather", n, 4, 1, up.cluster))
    want = t_ag(2 * T * 1536) + t_ag(2 * T * 512) if sp else 0.0
    assert float(stage.attn_rc_gathers(lambda k, n: cm.collective_time(k, n, 4, 1, up.cluster),
                                       c)) == pytest.approx(want, rel=1e-15)
    assert layer_comm(up) - layer_comm(attn) == pytest.approx(want, rel=1e-9, abs=1e-15)
    e = estimate(up).step_time_s - estimate(attn).step_time_s
    s_up = simulate(up, network="contention-free").step_time_s
    s = s_up - simulate(attn, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=1e-9)
    assert bound(up) <= s_up * (1 + 1e-9)


def test_arrays_mix_plans_as_one_by_one() -> None:
    """The vectorised estimate over plans that differ in tp, SP, the stack's reduction path
    and the recomputed modules gives each plan's own figure (the rule's ``np.where`` picks
    per plan): the step of each equals the one-plan estimate bit for bit."""
    import numpy as np

    from strategies.estimate.analytic import estimate_arrays
    from strategies.plan_arrays import PlanArrays
    specs = [_plan(4, True), _plan(4, False), _plan(2, True, ",tp_comm_overlap=true"),
             _plan(4, True, ",recompute=selective,recompute_modules=mla_up_proj"),
             "tp=1,pp=1,dp=8,ep=8,mbs=1,gbs=8"]
    jobs = [_mla(s) for s in specs]
    m, cl = jobs[0].model, jobs[0].cluster
    many = estimate_arrays(m, cl, "bf16", PlanArrays.from_plans([j.plan for j in jobs]),
                           MEGATRON_CORE)
    for k, j in enumerate(jobs):
        one = estimate_arrays(m, cl, "bf16", PlanArrays.of_plan(j.plan), MEGATRON_CORE)
        assert float(np.ravel(many["step_time_s"])[k]) == float(np.ravel(one["step_time_s"])[0])


@pytest.fixture
def rope_off(monkeypatch):
    """MLA's rope key collective switched off in both readers."""
    def off() -> None:
        monkeypatch.setattr(stage, "attn_rope_bytes", lambda x: 0.0 * x.tp_rope_w)
        monkeypatch.setattr(tp_collectives, "attn_rope_bytes", lambda x: 0.0 * x.tp_rope_w)
        monkeypatch.setattr(builder, "attn_rope_bytes", lambda x: 0.0)
    return off


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
def test_rope_key_gathered_on_its_own(tp: int, sp: bool, rope_off) -> None:
    """Under SP the rope key (64 bf16 elements per token) is all-gathered in the forward and
    reduce-scattered in the backward on its own (``gather_from_sequence_parallel_region``),
    in fp8 too: the layer's TP seconds carry exactly ``t_ag(2T·64) + t_rs(2T·64)``, nothing
    without SP; the estimate and the contention-free simulation agree on it to 1e-9."""
    job = _mla(_plan(tp, sp))
    c = stage_costs(job)
    assert c.tp_rope_w == (64 / 7168 if sp else 0.0)
    assert stage.attn_rope_bytes(c) == pytest.approx(2 * T * 64 if sp else 0.0, rel=1e-15)
    if sp:
        fp8 = stage_costs(replace(job, dtype="fp8"))
        assert stage.attn_rope_bytes(fp8) == pytest.approx(2 * T * 64, rel=1e-15)

    def t(kind: str, n: float) -> float:
        return float(cm.collective_time(kind, n, tp, 1, job.cluster))
    want = t("allgather", 2 * T * 64) + t("reduce_scatter", 2 * T * 64) if sp else 0.0
    on = layer_comm(job)
    e_on, s_on = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    rope_off()
    assert on - layer_comm(job) == pytest.approx(want, rel=1e-9, abs=1e-15)
    e = e_on - estimate(job).step_time_s
    s = s_on - simulate(job, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=1e-9, abs=1e-15)
    assert (e > 0) == sp
