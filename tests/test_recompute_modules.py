"""Selective recomputation by module (Megatron-Core's ``--recompute-modules``; issue 13,
item 3): each module drops exactly its activation terms (docs/memory.md) and redoes exactly
its GEMMs (``gemm_shapes.layer_gemm_parts``); every choice lies between none and full."""
from __future__ import annotations

import pytest

from simulator.cli.main import main
from strategies.cost import flop_counts, gemm_shapes, token_counts
from strategies.cost.recompute import MODULES, modules_mask
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory import activations as act
from strategies.memory.scalar import memory_components, peak_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

GPT = ("gpt3-175b", ("dgx-a100", 8), "tp=8,pp=8,sp=true", 64)
LLAMA = ("llama2-70b", ("dgx-h100", 4), "tp=8,pp=4,sp=false", 64)
MIXTRAL = ("mixtral-8x7b", ("dgx-h100", 4), "tp=4,pp=4,ep=2,sp=true", 64)
DSV3 = ("deepseek-v3", ("dgx-h100", 8), "tp=8,pp=1,ep=8,sp=true", 64)
APPLIES = {GPT: ("core_attn", "layernorm", "mlp"), LLAMA: ("core_attn", "layernorm", "mlp"),
           MIXTRAL: ("core_attn", "layernorm", "moe_act", "moe"), DSV3: MODULES}


def _job(case, rc):
    model, cluster, plan, gbs = case
    return make_job(model_preset(model), cluster_preset(*cluster),
                    parse_plan(f"{plan},recompute={rc}"), global_batch=gbs)


def _sel(case, mods):
    return _job(case, "selective,recompute_modules=" + ",".join(mods))


@pytest.mark.parametrize("case", list(APPLIES), ids=lambda c: c[0])
def test_every_module_between_none_and_full(case):
    none, full = _job(case, "none"), _job(case, "full")
    t0, t1 = estimate(none).step_time_s, estimate(full).step_time_s
    a0 = act.job_layer_activation_bytes(none)
    m0, m1 = peak_memory(none)[1].total, peak_memory(full)[1].total
    choices = [(m,) for m in APPLIES[case]] + [APPLIES[case]]
    for mods in choices:
        job = _sel(case, mods)
        t, m = estimate(job).step_time_s, peak_memory(job)[1].total
        assert t0 <= t <= t1, mods
        assert m1 <= m <= m0 + 1e-9 * m0, mods
        if mods != ("core_attn",):         # FlashAttention: core_attn stores and redoes nothing
            assert act.job_layer_activation_bytes(job) < a0 and t > t0, mods


@pytest.mark.parametrize("case", list(APPLIES), ids=lambda c: c[0])
def test_saved_bytes_per_module_are_its_terms(case):
    """What a module saves per layer is the sum of its parts' terms (docs/memory.md), split
    as the stash is: closed forms per module below, and the same in the array model."""
    none = _job(case, "none")
    m, p, s = none.model, none.plan, none.seq_len
    t, sq = p.tp, (p.tp if p.sp else 1)
    sbh, sb = s * p.mbs * m.hidden_size, s * p.mbs
    w = gemm_shapes.mlp_part_widths(m)
    g = 4 if m.gated else 2
    k = m.moe_router_topk if m.is_moe else 1
    moe = m.layer_shares().get("moe", 0.0)
    want = {"core_attn": 0.0,                                  # FlashAttention on
            "layernorm": 4 * sbh / sq,
            "mlp": (g + 2) * sb * w["dense_mlp"] / t,
            "moe_act": 2 * sb * w["routed_mlp"] / t,
            "moe": ((g + 2) * sb * (w["routed_mlp"] + w["shared_mlp"]) / t
                    + 2 * sbh * moe * (k - 1) / sq),
            "shared_experts": (g + 2) * sb * w["shared_mlp"] / t,
            "mla_up_proj": (2 * sb * m.num_attention_heads * m.head_dim
                            + 2 * sb * m.kv_heads * (m.head_dim + m.v_dim)) / t
            # the latents after their norms, fused into the up projections (Megatron-Core's
            # TELayerNormColumnParallelLinear): redone from the latents before them
            + 2 * sb * ((m.q_lora_rank or 0) + (m.kv_lora_rank or 0)) / sq}
    # the moe module also drops what the routed tensors hold beyond the table as they run
    # (expert parallelism: the dispatched fc1 input on every GPU, activations.
    # routed_activation_bytes)
    load = token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, m, p.mbs, p.tp, p.cp,
                           p.expert_tp)
    table, real = act.routed_activation_bytes(m, s, p.mbs, p.tp, p.cp, p.sp, p.expert_tp, load)
    want["moe"] = want["moe"] + (real - table) * p.cp
    # moe_act frees fc2's input as the hottest rank holds it (Megatron-Core's
    # output-discarding checkpoint; docs/calibration.md §5.103)
    want["moe_act"] = want["moe_act"] * load
    a0 = act.job_layer_activation_bytes(none)
    for mod in APPLIES[case]:
        job = _sel(case, (mod,))
        saved = a0 - act.job_layer_activation_bytes(job)
        assert saved == pytest.approx(want[mod] / p.cp, rel=1e-12, abs=1e-6), mod
        comps = memory_components(job, 0)
        stash = act.in_flight_microbatches(job, 0) * act.chunk_layer_activation_bytes(job, 0)
        assert comps["layers"].activations == pytest.approx(stash, rel=1e-12)


def test_gpt_mlp_closed_forms():
    """GPT (f = 4h, not gated) under tp t: mlp saves 16sbh/t per layer and redoes
    fc1 + fc2, ``2·T·h·4h·2/t`` FLOPs; HFU's recomputed FLOPs are those over every layer."""
    job = _sel(GPT, ("mlp",))
    m, p = job.model, job.plan
    sbh = job.seq_len * p.mbs * m.hidden_size
    saved = act.job_layer_activation_bytes(_job(GPT, "none")) - act.job_layer_activation_bytes(job)
    assert saved == pytest.approx(16 * sbh / p.tp, rel=1e-12)
    T, h = job.seq_len * p.mbs, m.hidden_size
    mask = modules_mask(("mlp",))
    got = flop_counts.selective_recompute_flops_fwd(m, p.mbs, p.tp, p.cp, p.ep, mask)
    assert got == pytest.approx(2 * T * h * 4 * h * 2 / p.tp, rel=1e-12)
    extra = (flop_counts.hardware_flops_per_step(m, p.gbs, True, 1, modules=mask)
             - flop_counts.hardware_flops_per_step(m, p.gbs, True, 0))
    assert extra == pytest.approx(m.num_layers * 2 * p.gbs * T / p.mbs * h * 4 * h * 2,
                                  rel=1e-12)
    assert stage_costs(job).tp_per_layer_recompute == 1.0     # fc2's collective again


def test_modules_named_twice_count_once_and_default_is_core_attn():
    a = stage_costs(_sel(MIXTRAL, ("moe",)))
    b = stage_costs(_sel(MIXTRAL, ("moe", "moe_act")))
    assert a.layer_recompute == b.layer_recompute
    assert act.job_layer_activation_bytes(_sel(MIXTRAL, ("moe",))) == \
        act.job_layer_activation_bytes(_sel(MIXTRAL, ("moe_act", "moe")))
    default, named = _job(GPT, "selective"), _sel(GPT, ("core_attn",))
    assert estimate(default).step_time_s == estimate(named).step_time_s
    assert peak_memory(default)[1].total == peak_memory(named)[1].total


def test_unfused_attention_core_attn_drops_the_scores():
    """Without FlashAttention core_attn drops the ``5as²b/t`` score terms (Korthikanti)."""
    base = "tp=8,pp=8,sp=true,flash_attn=false"
    case = ("gpt3-175b", ("dgx-a100", 8), base, 64)
    none, sel = _job(case, "none"), _sel(case, ("core_attn",))
    m, s = none.model, none.seq_len
    saved = act.job_layer_activation_bytes(none) - act.job_layer_activation_bytes(sel)
    assert saved == pytest.approx(5 * m.num_attention_heads * s * s / 8, rel=1e-12)


def test_export_lists_the_modules():
    text, _ = megatron_args(_sel(DSV3, ("mlp", "layernorm", "mla_up_proj")))
    assert "--recompute-granularity selective" in text
    assert "--recompute-modules layernorm mlp mla_up_proj" in text


@pytest.mark.parametrize("framework,plan,field", [
    # torchtitan has no Megatron selective mode at all: the recompute rule refuses it first
    ("torchtitan", "tp=8,pp=8,recompute=selective,recompute_modules=mlp", "recompute"),
    ("megatron-lm-2021", "tp=8,pp=8,recompute=selective,recompute_modules=mlp",
     "recompute_modules"),
    ("torchtitan", "tp=8,pp=8,recompute=full,recompute_layers=2", "recompute_method"),
    ("megatron-deepspeed", "tp=8,pp=8,schedule=1f1b,recompute=full,recompute_layers=2",
     "recompute_method"),
])
def test_stacks_without_the_knob_refuse_it(framework, plan, field, capsys):
    rc = main(["estimate", "--model", "gpt3-175b", "--cluster", "dgx-a100:8", "--global-batch",
               "64", "--framework", framework, "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and field in err and framework in err


@pytest.mark.parametrize("rc", ["full,recompute_layers=2",
                                "full,recompute_layers=3,recompute_method=uniform",
                                "selective,recompute_modules=core_attn,layernorm,mlp"])
def test_bound_estimate_and_simulation_agree_in_order(rc):
    """The lower bound stays below the simulated step, and both sit between none and full."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.plan_arrays import PlanArrays
    case = ("gpt-1.7b", ("dgx-a100", 1), "tp=2,pp=4,sp=true", 16)
    m, cl = model_preset(case[0]), cluster_preset(*case[1])
    sim = {}
    for r in ("none", rc, "full"):
        job = _job(case, r)
        bound = float(step_time_lower_bound(m, cl, "bf16", PlanArrays.from_plans([job.plan]))[0])
        sim[r] = simulate(job).step_time_s
        assert bound <= sim[r] * (1 + 1e-9)
    assert sim["none"] < sim[rc] <= sim["full"] * (1 + 1e-12)


@pytest.mark.parametrize("rc,extra", [("none", 0), ("full", 8), ("full,recompute_layers=3", 3),
                                      ("selective,recompute_modules=moe", 8),
                                      ("selective,recompute_modules=moe_act", 0)])
def test_recomputed_moe_layers_run_their_all_to_all_again(rc, extra):
    """A recomputed MoE layer dispatches and combines its tokens again: per micro-batch and
    chunk of 8 layers, 8 all-to-all rounds forward, 8 backward and one per recomputed MoE
    layer (moe_act redoes only the activation, no exchange)."""
    from simulator.program.compiler import compile_job
    from simulator.program.ops import Collective
    job = _job(MIXTRAL, rc)
    prog = compile_job(job, ranks=[0])[0]
    rounds = sum(op.repeat for op in prog.ops()
                 if isinstance(op, Collective) and op.kind == "alltoall")
    assert rounds == pytest.approx(job.num_microbatches * (2 * 8 + extra), rel=1e-12)
