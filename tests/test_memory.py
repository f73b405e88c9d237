"""Memory estimator: Korthikanti 2022 closed forms, Figure 1, ZeRO, pipeline stashes, invariants."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.memory import activations as act
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.cost.system import DEFAULT_SYSTEM
from strategies.memory.scalar import (MemoryBreakdown, fits,
                               head_params_per_gpu, memory_by_stage, memory_components,
                               model_state_bytes_per_param, peak_memory, stage_memory)
from strategies.model import ModelSpec

FIXED_OTHER_BYTES, FRAGMENTATION = DEFAULT_SYSTEM.fixed_other_bytes, DEFAULT_SYSTEM.fragmentation
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.analysis import peak_stash
from topologies.cluster import cluster_preset
from topologies.gpus import GIB

EXACT = dict(rel=1e-12)
PUBLISHED = (Path(__file__).resolve().parents[1] / "strategies" / "reference" / "data"
             / "published.json")

# GPT-3 175B, Korthikanti Sec. 4-5: s=2048, b=1, h=12288, a=96, t=8
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H


def job_of(model, plan: str, nodes: int = 1, gbs: int | None = None, cluster: str = "dgx-a100"):
    if isinstance(model, str):
        model = model_preset(model)
    return make_job(model, cluster_preset(cluster, nodes), parse_plan(plan), global_batch=gbs)


def small_gpt(layers: int = 16) -> ModelSpec:
    return ModelSpec("small", layers, 512, 8, 2048, 1000, seq_length=256)


# ------------------------------------------------------------ §7 per-layer table

TABLE_7 = [  # (tp, sp, recompute, exact bytes, printed GiB, digits)
    (1, False, "none", SBH * (34 + 5 * A * S / H), 2.67, 2),
    (T, False, "none", SBH * (10 + 24 / T + 5 * A * S / (H * T)), 0.539, 3),
    (T, True, "none", SBH * (34 / T + 5 * A * S / (H * T)), 0.334, 3),
    (T, False, "selective", SBH * (10 + 24 / T), 0.305, 3),
    (T, True, "selective", 34 * SBH / T, 0.0996, 4),
    (T, False, "full", 2 * SBH, 0.047, 3),
]


@pytest.mark.parametrize("tp,sp,recompute,exact,printed,digits", TABLE_7)
def test_korthikanti_table_per_layer(tp, sp, recompute, exact, printed, digits):
    got = act.layer_activation_bytes(model_preset("gpt3-175b"), S, B, tp=tp, sp=sp,
                                     recompute=recompute, flash_attn=False)
    assert got == pytest.approx(exact, **EXACT)
    assert round(got / GIB, digits) == printed


def test_korthikanti_table_exact_gib():
    m = model_preset("gpt3-175b")
    gib = [act.layer_activation_bytes(m, S, B, tp=tp, sp=sp, recompute=rc, flash_attn=False) / GIB
           for tp, sp, rc, *_ in TABLE_7]
    assert gib == pytest.approx([2.671875, 0.5390625, 0.333984375, 0.3046875, 0.099609375,
                                 0.046875], **EXACT)


def test_full_recompute_with_sp_divides_by_t():
    m = model_preset("gpt3-175b")
    assert act.layer_activation_bytes(m, S, B, tp=T, sp=True, recompute="full") == \
        pytest.approx(2 * SBH / T, **EXACT)


def test_flash_attention_drops_score_term():
    m = model_preset("gpt3-175b")
    flash = act.layer_activation_bytes(m, S, B, tp=T, flash_attn=True)
    assert flash == pytest.approx(SBH * (10 + 24 / T), **EXACT)
    assert flash == act.layer_activation_bytes(m, S, B, tp=T, recompute="selective")


def test_terms_reduce_to_korthikanti_groups_for_gpt():
    terms = act.layer_activation_terms(model_preset("gpt3-175b"), S, B)
    by_kind = {k: sum(v for n, v in terms.items() if act.TERM_KINDS[n] == k)
               for k in ("seq", "tp", "score")}
    assert by_kind == {"seq": 10 * SBH, "tp": 24 * SBH, "score": 5 * A * S * S * B}
    assert set(terms) == set(act.TERM_KINDS)


def test_megatron_sp_selective_form_18_plus_4f_over_h():
    m = replace(small_gpt(), ffn_hidden_size=3 * 512)  # non-4h MLP, not gated
    s, b, h, f, t = 256, 2, 512, 3 * 512, 4
    got = act.layer_activation_bytes(m, s, b, tp=t, sp=True, recompute="selective")
    assert got == pytest.approx(s * b * h * (18 + 4 * f / h) / t, **EXACT)


def test_swiglu_and_gqa_terms():
    m = model_preset("llama3-70b")  # h=8192, a=64, kv=8, ffn=28672, swiglu
    s, b = 8192, 1
    terms = act.layer_activation_terms(m, s, b)
    assert terms["activation_input"] == 4 * s * b * 28672
    assert terms["fc2_input"] == 2 * s * b * 28672
    assert terms["k_v"] == 4 * s * b * 8 * 128
    got = act.layer_activation_bytes(m, s, b, tp=8, sp=True, recompute="selective")
    sbh = s * b * 8192
    # Llama trains without dropout: the replicated group is 8sbh (no two sbh masks)
    assert not m.dropout
    expected = (8 * sbh + 2 * sbh + 2 * sbh + 4 * s * b * 1024 + 6 * s * b * 28672) / 8
    assert got == pytest.approx(expected, **EXACT)
    with_masks = act.layer_activation_bytes(replace(m, dropout=True), s, b, tp=8, sp=True,
                                            recompute="selective")
    assert with_masks - got == pytest.approx(2 * sbh / 8, **EXACT)


def test_context_parallel_divides_by_cp():
    m = model_preset("gpt3-175b")
    for rc in ("none", "selective", "full", "op"):
        one = act.layer_activation_bytes(m, S, B, tp=T, sp=True, recompute=rc, flash_attn=False)
        four = act.layer_activation_bytes(m, S, B, tp=T, sp=True, cp=4, recompute=rc,
                                          flash_attn=False)
        assert four == pytest.approx(one / 4, **EXACT)


def test_moe_mlp_scales_with_topk():
    m2 = model_preset("mixtral-8x7b")
    m1 = replace(m2, moe_router_topk=1)
    s, b, h, f = 4096, 1, 4096, 14336
    diff = act.layer_activation_bytes(m2, s, b) - act.layer_activation_bytes(m1, s, b)
    assert diff == pytest.approx(s * b * (2 * h + 6 * f), **EXACT)  # one more expert's MLP


# ------------------------------------------------------------ Korthikanti Figure 1

def fig1_175b(**extra):
    plan = "tp=8,pp=8,schedule=interleaved,vpp=3,mbs=1,recompute=selective,sp=true"
    return job_of("gpt3-175b", plan + "".join(f",{k}={v}" for k, v in extra.items()), 8, 64)


def test_fig1_175b_first_stage_layers_exact():
    parts = memory_components(fig1_175b(), 0)
    assert parts["layers"].activations / GIB == pytest.approx(12.3515625, **EXACT)
    # The paper counts 12h² per layer; ModelSpec adds biases and norms (13h), so the
    # closed form is 45.5625 × (1 + 13/(12h)) and 45.5625 to 1e-4.
    state = parts["layers"].model_state / GIB
    assert state == pytest.approx(45.5625 * (1 + 13 / (12 * H)), **EXACT)
    assert state == pytest.approx(45.5625, rel=1e-4)
    assert round(parts["layers"].activations / GIB, 2) == 12.35


def test_fig1_175b_totals_with_embeddings():
    job = fig1_175b()
    stage, mem = peak_memory(job)
    assert stage == 0
    # Embedding activations (token ids + dropout mask) add 0.25 %; the embedding weights
    # ((V+s)·h/t parameters at 18 bytes) add 3.0 % to the model state.
    assert mem.activations / GIB == pytest.approx(12.3515625, rel=0.02)
    acts = mem.activations
    assert mem.model_state / GIB == pytest.approx(45.5625, rel=0.035)
    assert (mem.model_state + acts) / GIB == pytest.approx(45.5625 + 12.3515625, rel=0.03)
    assert fits(job)


@pytest.mark.parametrize("plan,flash,expected", [
    ("tp=8,mbs=4", False, 59.25),
    ("tp=8,mbs=4,sp=true,recompute=selective", True, 9.5625),
])
def test_fig1_22b(plan, flash, expected):
    job = job_of("gpt-22b", f"{plan},flash_attn={str(flash).lower()}", 1, 4)
    assert job.num_microbatches == 1 and job.plan.pp == 1
    assert memory_components(job, 0)["layers"].activations / GIB == pytest.approx(expected, **EXACT)


def _published(ident: str) -> dict:
    if not PUBLISHED.exists():
        pytest.skip(f"{PUBLISHED} not present")
    rows = {r["id"]: r for r in json.loads(PUBLISHED.read_text())}
    if ident not in rows:
        pytest.skip(f"{ident} not in {PUBLISHED}")
    return rows[ident]


@pytest.mark.parametrize("ident", ["korthikanti2022_530B_memory_fig1",
                                   "korthikanti2022_1T_memory_fig1",
                                   "korthikanti2022_175B_memory_fig1",
                                   "korthikanti2022_22B_memory_fig1"])
def test_fig1_published_rows(ident):
    row = _published(ident)
    md, pl, meas = row["model"], row["plan"], row["measured"]
    model = ModelSpec(md["name"], md["layers"], md["hidden"], md["heads"], md["ffn_hidden"],
                      md["vocab"], md["seq_len"])
    v = pl["virtual_stages"] or 1
    sched = f"schedule=interleaved,vpp={v}" if v > 1 else "schedule=1f1b"
    base = f"tp={pl['tp']},pp={pl['pp']},mbs={pl['microbatch']},{sched}"
    nodes = row["hardware"]["n_gpus"] // 8
    cases = {"tp_only_no_recompute": ",flash_attn=false",
             "tp_sp_selective": ",sp=true,recompute=selective"}
    for key, extra in cases.items():
        job = job_of(model, base + extra, nodes, pl["global_batch"])
        layers = memory_components(job, 0)["layers"]
        assert layers.activations / GIB == pytest.approx(meas["activations_gib"][key], **EXACT)
        # ModelSpec counts 4h norm parameters per layer on top of the paper's 12h²
        assert layers.model_state / GIB == pytest.approx(
            meas["params_grads_optimizer_gib"] * (1 + 4 / (12 * md["hidden"])), **EXACT)


# ------------------------------------------------------------ §8 model state, ZeRO

def test_18_bytes_per_param_175b():
    assert sum(model_state_bytes_per_param(0, 48)) == 18
    per_gpu = 12 * 96 * 12288 ** 2 / 64
    assert 18 * per_gpu / GIB == pytest.approx(45.5625, **EXACT)


def test_zero_paper_worked_values():
    psi, nd = 7.5e9, 64
    got = [sum(model_state_bytes_per_param(z, nd, grad_bytes=2)) * psi for z in range(4)]
    assert got == pytest.approx([120e9, 31.40625e9, 16.640625e9, 1.875e9], **EXACT)
    assert [f"{g / 1e9:.3g}" for g in got] == ["120", "31.4", "16.6", "1.88"]


def test_megatron_distributed_optimizer_bytes():
    assert model_state_bytes_per_param(1, 8) == (2, 4, 1.5)  # 6 + 12/d
    assert model_state_bytes_per_param(2, 4) == (2, 1, 3)
    assert model_state_bytes_per_param(3, 6) == pytest.approx((2 / 6, 4 / 6, 2))
    with pytest.raises(SpecError):
        model_state_bytes_per_param(4, 8)


def test_zero_stages_shrink_job_state():
    states = [stage_memory(job_of("gpt-7.5b", f"tp=1,zero={z}", 2, 64), 0) for z in range(4)]
    d = 16
    assert states[1].optimizer == pytest.approx(states[0].optimizer / d, **EXACT)
    assert states[2].grads == pytest.approx(states[0].grads / d, **EXACT)
    assert states[3].params == pytest.approx(states[0].params / d, **EXACT)
    assert [s.model_state for s in states] == sorted((s.model_state for s in states), reverse=True)
    # zero 2/3 add gradient buckets to `other`; zero 0/1 do not
    assert states[0].other - FRAGMENTATION * states[0].activations == pytest.approx(FIXED_OTHER_BYTES)
    assert states[2].other > FIXED_OTHER_BYTES + FRAGMENTATION * states[2].activations


def test_params_over_stages_sum_to_model():
    for name, plan, nodes in [("llama3-70b", "tp=8,pp=4", 4), ("gpt-7.5b", "tp=2,pp=4", 1),
                              ("mixtral-8x7b", "tp=2,pp=2,ep=2", 1)]:
        job = job_of(name, plan, nodes, 64)
        m, p = job.model, job.plan
        total = 0.0
        for s in range(p.pp):
            parts = memory_components(job, s)
            per_param = sum(model_state_bytes_per_param(0, 1))
            total += sum(x.model_state for x in parts.values()) / per_param
        expert = m.num_layers * m.num_experts * m.mlp_params_per_expert() if m.is_moe else 0
        tied_copy = m.vocab_size * m.hidden_size if m.tie_word_embeddings and p.pp > 1 else 0
        want = (m.num_params() - expert + tied_copy) / p.tp + expert / (p.tp * p.ep)
        assert total == pytest.approx(want, **EXACT)


def test_tied_head_only_on_pipelined_last_stage():
    j1 = job_of("gpt-7.5b", "tp=2", 1, 8)
    assert head_params_per_gpu(j1, 0) == 2 * 4096 / 2  # final norm only
    j2 = job_of("gpt-7.5b", "tp=2,pp=4", 1, 8)
    assert head_params_per_gpu(j2, 3) == (51200 * 4096 + 2 * 4096) / 2
    assert head_params_per_gpu(j2, 0) == 0


# ------------------------------------------------------------ pipeline stash

@pytest.mark.parametrize("pp,m", [(4, 8), (4, 2), (8, 8), (2, 16), (1, 4)])
def test_1f1b_stash_is_min_p_minus_r_m(pp, m):
    job = job_of(small_gpt(), f"pp={pp},schedule=1f1b", 1, m * 8 // pp)
    assert job.num_microbatches == m
    for r in range(pp):
        assert act.in_flight_microbatches(job, r) == min(pp - r, m)


@pytest.mark.parametrize("plan,m", [("pp=4,schedule=1f1b", 8), ("pp=4,schedule=gpipe", 8),
                                    ("pp=4,schedule=interleaved,vpp=2", 8),
                                    ("pp=4,schedule=interleaved,vpp=4", 12),
                                    ("pp=2,schedule=interleaved,vpp=2,microbatch_group_size=3", 5),
                                    ("pp=8,schedule=interleaved,vpp=2", 8)])
def test_in_flight_equals_schedule_peak_stash(plan, m):
    job = job_of(small_gpt(), plan, 1, m * job_dp(plan))
    p = job.plan
    fn = get_schedule(p.schedule)
    for r in range(p.pp):
        steps = fn(r, p.pp, m, p.vpp, p.microbatch_group_size)
        assert act.in_flight_microbatches(job, r) == peak_stash(steps)


def job_dp(plan: str) -> int:
    pp = int(plan.split("pp=")[1].split(",")[0])
    return 8 // pp


def test_stage_activations_are_stash_times_chunk_plus_transient():
    for plan in ("pp=4,schedule=interleaved,vpp=2", "pp=4,schedule=gpipe,recompute=full",
                 "pp=2,tp=2,sp=true,recompute=full", "pp=1"):
        job = job_of(small_gpt(), plan, 1, 16)
        for r in range(job.plan.pp):
            acts = sum(x.activations for x in memory_components(job, r).values())
            want = (act.in_flight_microbatches(job, r) * act.activation_bytes_per_chunk(job, r)
                    + act.transient_activation_bytes(job, r))
            assert acts == pytest.approx(want, **EXACT)
            assert acts == pytest.approx(act.stage_activation_bytes(job, r), **EXACT)


def test_gpipe_needs_more_than_1f1b():
    g = memory_by_stage(job_of(small_gpt(), "pp=4,schedule=gpipe", 1, 32))
    o = memory_by_stage(job_of(small_gpt(), "pp=4,schedule=1f1b", 1, 32))
    assert all(a.activations > b.activations for a, b in zip(g, o))
    assert peak_memory(job_of(small_gpt(), "pp=4,schedule=gpipe", 1, 32))[1].total > \
        peak_memory(job_of(small_gpt(), "pp=4,schedule=1f1b", 1, 32))[1].total


@pytest.mark.parametrize("pp,v,m", [(4, 2, 8), (4, 4, 16), (8, 3, 64), (2, 2, 6)])
def test_interleaved_factor(pp, v, m):
    l = pp * v * 2
    job = job_of(small_gpt(l), f"pp={pp},schedule=interleaved,vpp={v}", 1, m * 8 // pp)
    layers = memory_components(job, 0)["layers"].activations
    per_layer = act.job_layer_activation_bytes(job)
    assert layers == pytest.approx(l * per_layer * (1 + (pp - 1) / (pp * v)), **EXACT)


def test_full_recompute_adds_one_layer_working_set():
    job = job_of(small_gpt(), "pp=4,tp=2,sp=true,recompute=full", 1, 16)
    parts = memory_components(job, 0)
    s, b, h = 256, 1, 512
    assert parts["layers"].activations == pytest.approx(4 * 4 * 2 * s * b * h / 2, **EXACT)
    assert parts["recompute"].activations == pytest.approx(
        act.job_layer_activation_bytes(job, "none"), **EXACT)
    sel = memory_components(job_of(small_gpt(), "pp=4,tp=2,sp=true,recompute=selective", 1, 16), 0)
    assert sel["recompute"].activations == 0


def test_memory_grows_with_mbs():
    totals = [peak_memory(job_of("gpt-7.5b", f"tp=4,pp=2,mbs={b}", 1, 32))[1] for b in (1, 2, 4)]
    assert totals[0].activations < totals[1].activations < totals[2].activations
    assert totals[0].total < totals[1].total < totals[2].total


# ------------------------------------------------------------ API and sanity

def test_breakdown_gib_dict_and_sum():
    job = fig1_175b()
    for s in range(job.plan.pp):
        mem = stage_memory(job, s)
        d = mem.to_gib_dict()
        assert set(d) == {"peak_gib", "params_gib", "grads_gib", "optimizer_gib",
                          "activations_gib", "other_gib"}
        assert d["peak_gib"] == pytest.approx(mem.total / GIB, **EXACT)
        assert mem.other == pytest.approx(FIXED_OTHER_BYTES + FRAGMENTATION * mem.activations)
    assert MemoryBreakdown(1, 2, 3, 4, 5).total == 15
    assert memory_by_stage(job)[peak_memory(job)[0]].total == max(m.total for m in memory_by_stage(job))


def test_llama3_70b_sensible():
    job = job_of("llama3-70b", "tp=8,pp=4,mbs=1,sp=true,recompute=selective,zero=1", 8, 64,
                 cluster="dgx-h100")
    stages = memory_by_stage(job)
    for mem in stages:
        assert all(getattr(mem, f) > 0 for f in ("params", "grads", "optimizer", "activations"))
        assert 10 * GIB < mem.total < 80 * GIB
    params_gpu = sum(m.params for m in stages) / 2  # 2 bytes per bf16 parameter
    assert params_gpu * 8 == pytest.approx(job.model.num_params(), rel=1e-12)
    assert fits(job)
    assert not fits(job, headroom_bytes=80 * GIB)


def test_does_not_fit():
    job = job_of("gpt3-175b", "tp=8", 1, 8)
    assert not fits(job)
    assert peak_memory(job)[1].total > 8 * 80 * GIB / 8


def test_stage_out_of_range():
    job = job_of(small_gpt(), "pp=2", 1, 8)
    with pytest.raises(SpecError):
        stage_memory(job, 2)
    with pytest.raises(SpecError):
        act.activation_bytes_per_chunk(job, -1)
