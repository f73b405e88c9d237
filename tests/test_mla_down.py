"""MLA's column-parallel down projections of Megatron-Core core_v0.12.0-v0.13.1
(docs/calibration.md §5.85): ``linear_q_down_proj``/``linear_kv_down_proj`` are
``TEColumnParallelLinear`` (1c425a8313, 2025-02-24, until 720c8b40d8 2025-07-29 made them
``TELinear`` again), so under SP each all-gathers the hidden state, its output is gathered over
tp (``gather_from_tensor_model_parallel_region``) and re-split (``scatter_to_sequence_parallel_
region``, whose backward all-gathers), and each reduces its input gradient at the hidden width.
A stack fact (``FrameworkProfile.mla_down_proj``), priced in one rule
(``cost.stage.attn_down_ops``) the estimate reads and the simulator's builder compiles."""
from __future__ import annotations

from dataclasses import replace

import pytest

import simulator.program.builder as builder
import simulator.program.tensor_parallel as tensor_parallel
import strategies.cost.stage as stage
from strategies.cost import tp_collectives
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import attn_down_ops, stage_costs
from topologies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from tests.test_mla_forward import NO_RD, T, _plan
from tests.test_mla_reduce import _mla
from tests.tp_backward_checks import bound, layer_comm, tp_job

COL = replace(MEGATRON_CORE, mla_down_proj="column")
COL_NO_RD = replace(NO_RD, mla_down_proj="column")
H = 7168


def _closed_form(tp: int, sp: bool, cl, dgrads: tuple[float, ...] = (),
                 wgrads: tuple[float, ...] = ()) -> float:
    """Seconds per layer (forward + backward) the column layout adds over the replicated one:
    under SP two hidden-width all-gathers, the latents' tp gathers (1536 and 512 + 64) and
    less the rope key's own gather in the forward; two hidden-width reduce-scatters, the
    re-splits' gathers (1536 and 512) and less the rope key's reduce-scatter in the backward,
    and each down projection's re-gather of the hidden state beside its data-gradient GEMM of
    ``dgrads`` seconds, ``max(0, t_ag(H) - dgrad)`` (§5.97). Without SP the two tp gathers and
    two hidden-width all-reduces. Where the stack reduces asynchronously each hidden-width
    reduction hides ``min(t_red(H), wgrad)`` behind its weight gradient of ``wgrads`` seconds
    (§5.99; () where blocking)."""
    def t(kind: str, elems: float) -> float:
        return float(cm.collective_time(kind, 2 * T * elems, tp, 1, cl))
    red = t("reduce_scatter" if sp else "allreduce", H)
    hidden = sum(min(red, w) for w in wgrads)
    if not sp:
        return t("allgather", 1536) + t("allgather", 576) + 2 * t("allreduce", H) - hidden
    fwd = 2 * t("allgather", H) + t("allgather", 1536) + t("allgather", 576) \
        - t("allgather", 64)
    bwd = 2 * t("reduce_scatter", H) + t("allgather", 1536) + t("allgather", 512) \
        - t("reduce_scatter", 64) + sum(max(0.0, t("allgather", H) - d) for d in dgrads)
    return fwd + bwd - hidden


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
def test_ops_follow_the_code(tp: int, sp: bool) -> None:
    """The collectives per pass, their kinds and bytes (bf16, ``2·T·width``); none in the
    replicated layout; the rope key rides inside the kv gather (no own collective)."""
    col, rep = stage_costs(_mla(_plan(tp, sp), fw=COL)), stage_costs(_mla(_plan(tp, sp)))
    for fwd in (True, False):
        assert attn_down_ops(rep, sp, fwd) == ()
    assert col.tp_rope_w == 0.0 and rep.tp_rope_w == (64 / H if sp else 0.0)
    got = {fwd: [(k, pytest.approx(b / (2 * T), rel=1e-12)) for k, b in
                 attn_down_ops(col, sp, fwd)] for fwd in (True, False)}
    if sp:
        assert got[True] == [("allgather", H)] * 2 + [("allgather", 1536), ("allgather", 576)]
        assert got[False] == [("reduce_scatter", H)] * 2 + [("allgather", 1536),
                                                            ("allgather", 512)]
    else:
        assert got[True] == [("allgather", 1536), ("allgather", 576)]
        assert got[False] == [("allreduce", H)] * 2


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("fws", [(MEGATRON_CORE, COL), (NO_RD, COL_NO_RD)],
                         ids=["async", "blocking"])
def test_closed_form_and_simulation(tp: int, sp: bool, fws) -> None:
    """The layer's TP seconds move by exactly the closed form; the estimate and the
    contention-free simulation move by the same seconds to 1e-9 (the step need not grow:
    the column layout's GEMMs are ``1/tp`` of the replicated ones without SP, §5.99); the
    lower bound stays below the simulation."""
    rep, col = (_mla(_plan(tp, sp), fw=fw) for fw in fws)
    c = stage_costs(col)
    wgrads = (c.rd_down_q, c.rd_down_kv) if fws[1] is COL else ()
    assert all(w > 0 for w in (c.rd_down_q, c.rd_down_kv))
    want = _closed_form(tp, sp, rep.cluster, (c.rg_down_q, c.rg_down_kv), wgrads)
    assert want > 0
    assert layer_comm(col) - layer_comm(rep) == pytest.approx(want, rel=1e-9)
    e = estimate(col).step_time_s - estimate(rep).step_time_s
    s_col = simulate(col, network="contention-free").step_time_s
    s_rep = simulate(rep, network="contention-free").step_time_s
    assert s_col - s_rep == pytest.approx(e, rel=1e-9)
    assert bound(col) <= s_col * (1 + 1e-9) and bound(rep) <= s_rep * (1 + 1e-9)


def test_without_query_latent_and_pipeline() -> None:
    """Without ``q_lora_rank`` one down projection (kv) runs column-parallel; with pp 2
    the estimate and the contention-free simulation still move by the same seconds."""
    rep, col = (_mla(_plan(4, True), q_lora=False, fw=fw) for fw in (MEGATRON_CORE, COL))
    c = stage_costs(col)
    assert [k for k, _ in attn_down_ops(c, True, True)] == ["allgather", "allgather"]
    assert [k for k, _ in attn_down_ops(c, True, False)] == ["reduce_scatter", "allgather"]
    for a, b in ((rep, col), (_mla("tp=4,pp=2,mbs=1,gbs=4,sp=true"),
                              _mla("tp=4,pp=2,mbs=1,gbs=4,sp=true", fw=COL))):
        e = estimate(b).step_time_s - estimate(a).step_time_s
        s = (simulate(b, network="contention-free").step_time_s
             - simulate(a, network="contention-free").step_time_s)
        assert e > 0 and s == pytest.approx(e, rel=1e-9)


def test_other_jobs_bit_identical() -> None:
    """A model without MLA, and MLA at tp 1, are priced bit for bit as before."""
    dense = "tp=4,pp=1,dp=2,mbs=1,gbs=8,sp=true"
    a, b = tp_job(dense), tp_job(dense, fw=COL)
    assert estimate(b).step_time_s == estimate(a).step_time_s
    assert (simulate(b, network="contention-free").step_time_s
            == simulate(a, network="contention-free").step_time_s)
    one = "tp=1,pp=1,dp=8,ep=8,mbs=1,gbs=8"
    assert estimate(_mla(one, fw=COL)).step_time_s == estimate(_mla(one)).step_time_s


def test_bad_layout_named() -> None:
    with pytest.raises(SpecError, match="mla_down_proj"):
        replace(MEGATRON_CORE, mla_down_proj="row")


def test_reader_sets_the_layout_from_the_container() -> None:
    """The dgxc-benchmarking DeepSeek-V3 rows ran NeMo 25.04.01 (Megatron-Core 0.12): the
    reader runs them with column-parallel down projections and says so with its source;
    the Megatron-Bridge 26.04 DeepSeek-V3 rows (core 0.17) keep the replicated layout; a row
    without MLA is left as it is."""
    import os

    from strategies.reference.cases import DATA, case_from_entry, load_reference
    from strategies.reference.entry_stack import mla_down_layout
    assert [mla_down_layout(v) for v in ((0, 11), (0, 12), (0, 13), (0, 14), (0, 17))] == [
        "replicated", "column", "column", "replicated", "replicated"]
    here = os.path.dirname(DATA)
    rows = load_reference(os.path.join(here, "dgxc_2505.json"))
    v3 = [case_from_entry(r) for r in rows if "deepseek_v3" in r["id"]]
    assert len(v3) == 5
    for case in v3:
        assert case.job.framework.mla_down_proj == "column"
        said = [a for a in case.assumptions if a.startswith("MLA down projections")]
        assert said and "NeMo 25.04 container: Megatron-Core 0.12" in said[0]
        assert "1c425a8313" in said[0]
    llama = next(case_from_entry(r) for r in rows if "llama" in r["id"])
    assert llama.job.framework.mla_down_proj == "replicated"
    assert not any(a.startswith("MLA down") for a in llama.assumptions)
    bridge = [case_from_entry(r) for r in load_reference(
        os.path.join(here, "megatron_bridge_2604.json")) if "deepseek" in r["id"].lower()]
    assert bridge and all(case.job is not None for case in bridge)
    for case in bridge:
        assert case.job.framework.mla_down_proj == "replicated"
        assert any("NeMo 26.04 container: Megatron-Core 0.17" in a for a in case.assumptions)


@pytest.mark.parametrize("fw", [MEGATRON_CORE, COL], ids=["replicated", "column"])
@pytest.mark.parametrize("sp", [True, False])
def test_full_recompute_reruns_the_forward_gathers(fw, sp: bool, monkeypatch) -> None:
    """Full recomputation reruns the attention forward's own gathers: exactly the rope key's
    gather (replicated, SP) or the down projections' forward collectives (column) per
    recomputed layer; switching the rerun off in both readers moves the estimate and the
    contention-free simulation by the same seconds to 1e-9, and the lower bound stays
    below the simulation."""
    full = _mla(_plan(4, sp, ",recompute=full"), fw=fw)
    c = stage_costs(full)
    assert c.tp_attn_full_rc == 1.0
    assert stage_costs(_mla(_plan(4, sp), fw=fw)).tp_attn_full_rc == 0.0
    cl = full.cluster

    def t(kind: str, elems: float) -> float:
        return float(cm.collective_time(kind, 2 * T * elems, 4, 1, cl))
    if fw is COL:
        want = (2 * t("allgather", H) if sp else 0.0) + t("allgather", 1536) \
            + t("allgather", 576)
    else:
        want = t("allgather", 64) if sp else 0.0
    got = float(stage.attn_full_rc_time(lambda k, n: cm.collective_time(k, n, 4, 1, cl), c, sp))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    on = layer_comm(full)
    e_on = estimate(full).step_time_s
    s_on = simulate(full, network="contention-free").step_time_s
    assert bound(full) <= s_on * (1 + 1e-9)
    monkeypatch.setattr(stage, "attn_full_rc_ops", lambda x, sp: ())
    monkeypatch.setattr(tp_collectives, "attn_full_rc_ops", lambda x, sp: ())
    monkeypatch.setattr(tensor_parallel, "attn_full_rc_ops", lambda x, sp: ())
    assert on - layer_comm(full) == pytest.approx(want, rel=1e-9, abs=1e-15)
    e = e_on - estimate(full).step_time_s
    s = s_on - simulate(full, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=1e-9, abs=1e-15)
    assert (e > 0) == (want > 0)


@pytest.mark.parametrize("fw", [MEGATRON_CORE, COL], ids=["replicated", "column"])
@pytest.mark.parametrize("spec", [_plan(4, True), _plan(2, True),
                                  "tp=4,pp=2,mbs=1,gbs=4,sp=true"])
def test_sp_marked_gradients_all_reduced_once_per_step(fw, spec: str, monkeypatch) -> None:
    """Under SP the replicated down projections' and the latent norms' gradients (the norms'
    only with column-parallel down projections) are all-reduced over tp once per step, in
    fp32 main-gradient bytes: the step grows by exactly one all-reduce of the stage's
    layers' bytes in the estimate and in the contention-free simulation (to 1e-9); nothing
    without SP."""
    job = _mla(spec, fw=fw)
    p = job.plan
    c = stage_costs(job)
    per_layer = 7168 * (1536 + 576) + 1536 + 512 if fw is MEGATRON_CORE else 1536 + 512
    assert c.tp_rep_grad_bytes == 4 * per_layer
    assert stage_costs(_mla(_plan(4, False), fw=fw)).tp_rep_grad_bytes == 0.0
    layers = 4 // p.pp
    want = float(cm.collective_time("allreduce", 4 * per_layer * layers, p.tp, 1, job.cluster))
    e_on = estimate(job).step_time_s
    s_on = simulate(job, network="contention-free").step_time_s
    assert bound(job) <= s_on * (1 + 1e-9)
    monkeypatch.setattr(stage, "sp_grad_allreduce_bytes", lambda x, n: 0.0 * n)
    monkeypatch.setattr(tp_collectives, "sp_grad_allreduce_bytes", lambda x, n: 0.0 * n)
    monkeypatch.setattr(builder, "sp_grad_allreduce_bytes", lambda x, n: 0.0)
    import strategies.estimate.terms.tail as tail
    monkeypatch.setattr(tail, "sp_grad_allreduce_bytes", lambda x, n: 0.0 * n)
    e = e_on - estimate(job).step_time_s
    s = s_on - simulate(job, network="contention-free").step_time_s
    assert e == pytest.approx(want, rel=1e-9)
    assert s == pytest.approx(e, rel=1e-9)


def test_regather_pieces_and_arrays() -> None:
    """§5.97: under SP the column layout adds two re-gathers of width 1 beside the down
    projections' data-gradient GEMMs, priced as ``gemm_units`` prices those GEMMs (``T`` rows,
    ``w/tp`` wide, ``H`` deep: the column-parallel shape, §5.99); none in the replicated
    layout, none without a query latent for q;
    the vectorised estimate over mixed column plans equals each plan's own bit for bit."""
    import numpy as np

    from strategies.cost import gemm_shapes, gemm_time
    from strategies.cost.stage import sp_regather_pieces
    from strategies.estimate.analytic import estimate_arrays
    from strategies.plan_arrays import PlanArrays
    job = _mla(_plan(2, True), fw=COL)
    c, p = stage_costs(job), job.plan
    parts = gemm_shapes.layer_gemm_parts(job.model, p.mbs, p.tp, p.cp, p.ep, None, p.expert_tp,
                                         whole=gemm_time.whole_split(p.tp, p.sp, COL))
    units = gemm_time.gemm_units([g for _, g in parts], p.tp, job.cluster.gpu, "bf16",
                                 fw=COL, system=job.system,
                                 shares=gemm_time.fixed_shares(parts, job.model, p.ep, COL))
    want = [g[0] * u[2] * u[3] for (_, g), u, (_, _, _, s) in
            zip(parts, units, job.model.attention_linears()) if s == "rep"]
    assert [g[1:4] for (_, g), (_, _, _, s) in zip(parts, job.model.attention_linears())
            if s == "rep"] == [(T, 1536 / 2, H), (T, 576 / 2, H)]
    assert (c.rg_down_q, c.rg_down_kv) == pytest.approx(tuple(want), rel=1e-12)
    assert sp_regather_pieces(c)[-2:] == ((1.0, 1.0, c.rg_down_q), (1.0, 1.0, c.rg_down_kv))
    rep = stage_costs(_mla(_plan(2, True)))
    assert (rep.rg_down_qw, rep.rg_down_kvw) == (0.0, 0.0)
    assert len(sp_regather_pieces(rep)) == len(sp_regather_pieces(c)) - 2
    noq = stage_costs(_mla(_plan(2, True), q_lora=False, fw=COL))
    assert (noq.rg_down_qw, noq.rg_down_kvw, noq.rg_down_q) == (0.0, 1.0, 0.0)
    specs = [_plan(4, True), _plan(4, False), _plan(2, True), "tp=1,pp=1,dp=8,ep=8,mbs=1,gbs=8"]
    jobs = [_mla(s, fw=COL) for s in specs]
    m, cl = jobs[0].model, jobs[0].cluster
    many = estimate_arrays(m, cl, "bf16", PlanArrays.from_plans([j.plan for j in jobs]), COL)
    for k, j in enumerate(jobs):
        one = estimate_arrays(m, cl, "bf16", PlanArrays.of_plan(j.plan), COL)
        assert float(np.ravel(many["step_time_s"])[k]) == float(np.ravel(one["step_time_s"])[0])
