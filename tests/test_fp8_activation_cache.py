"""DeepSeek-V3's memory facts as properties of the stack (``--framework hai-llm``): activations
cached in FP8 (E5M6 after the attention) and BF16 AdamW moments (arXiv 2412.19437 §3.3.3;
docs/memory.md, docs/calibration.md §5.23). Closed forms to 1e-12, the array model equal to
the scalar one, and the other stacks unchanged."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from strategies.hf_config import load_model_arg
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import peak_memory_arrays, rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "tests", "data", "tiny_mla_moe.yaml")
MODS = ("layernorm", "mla_up_proj", "moe_act")
FP8 = 1 + 4 / 128                      # fp8-blockwise: 1 B + a fp32 scale per 1x128 tile
E5M6 = 12 / 8 + 4 / 128


def _moe():
    return model_preset("deepseek-v3").of_kind("moe")


def test_cache_bytes_only_for_the_stack_that_caches_and_a_quantised_dtype():
    assert act.activation_cache_bytes(True, "fp8-blockwise") == FP8
    assert act.activation_cache_bytes(True, "bf16") is None
    assert act.activation_cache_bytes(False, "fp8-blockwise") is None
    assert act.E5M6_BYTES == E5M6


def test_fp8_cached_moe_layer_closed_form():
    """One DeepSeek-V3 MoE layer under RMSNorm, MLA up-projection and SwiGLU-output
    recomputation (report §3.2.3, §3.3.3), s = 4096, b = 1, t = 1, per token: the norm inputs
    2h each in bf16, the attention output in E5M6, the k - 1 dispatched copies beyond the
    recomputed norm's (fp8), the SwiGLU inputs of routed and shared experts (fp8), the
    shared expert's fc2 input (fp8), the latents before their norms (bf16; after them: the
    up projections' inputs, recomputed with them, §5.40) and the rope key (bf16)."""
    m = _moe()
    s = 4096
    h, k, fe, fs = m.hidden_size, m.moe_router_topk, m.expert_ffn, m.num_shared_experts * m.shared_ffn
    lat = m.q_lora_rank + m.kv_lora_rank
    r = FP8 / 2
    per_token = (2 * h + 2 * h                                      # ln1, ln2 inputs
                 + E5M6 * m.num_attention_heads * m.v_dim           # out-projection input
                 + 2 * h * (k - 1) * r                              # dispatched copies
                 + 4 * (k * fe + fs) * r                            # SwiGLU inputs
                 + 2 * fs * r                                       # shared fc2 input
                 + 2 * lat + 2 * m.qk_rope_head_dim)                # MLA latents, rope key
    got = act.layer_activation_bytes(m, s, 1, recompute="selective", modules=MODS, cache=FP8)
    assert got == pytest.approx(s * per_token, rel=1e-12)
    bf16 = act.layer_activation_bytes(m, s, 1, recompute="selective", modules=MODS)
    assert got < 0.62 * bf16          # the cache is what moves DeepSeek's stash


def test_fp8_cached_pending_weight_gradient_closed_form():
    """A pending W of one MoE layer: its GEMMs' inputs as cached and the output gradients
    the FP8 Wgrad reads (report Figure 6), per token."""
    m = _moe()
    s = 4096
    h, k, fe, fs = m.hidden_size, m.moe_router_topk, m.expert_ffn, m.num_shared_experts * m.shared_ffn
    lat = m.q_lora_rank + m.kv_lora_rank
    a, d, dv = m.num_attention_heads, m.head_dim, m.v_dim
    r = FP8 / 2
    inputs = (2 * h * r + E5M6 * a * dv + 2 * h * k * r + 2 * (k * fe + fs) * r
              + 2 * lat + 2 * lat * r + 2 * m.qk_rope_head_dim)
    grads = r * (2 * a * d + 2 * m.kv_heads * (d + dv) + 2 * h + 4 * (k * fe + fs) + 2 * h * k)
    got = act.layer_wgrad_bytes(m, s, 1, cache=FP8)
    assert got == pytest.approx(s * (inputs + grads), rel=1e-12)


def test_dense_layer_keeps_its_swiglu_input_in_bf16():
    """Only the MoE's SwiGLU inputs are cached in FP8 (§3.3.3 (2)); a dense layer's fc1
    output stays 16-bit, its fc2 input (a Linear's input) is FP8."""
    m = model_preset("deepseek-v3").of_kind("dense")
    t = act.layer_activation_terms(m, 4096, 1)
    c = act.layer_activation_terms(m, 4096, 1, cache=FP8)
    assert c["activation_input"] == t["activation_input"]
    assert c["fc2_input"] == pytest.approx(t["fc2_input"] * FP8 / 2, rel=1e-12)
    assert c["ln1_input"] == t["ln1_input"] and c["q"] == t["q"]


def _job(framework, dtype="fp8-blockwise", schedule="dualpipe"):
    plan = parse_plan("tp=1,pp=6,ep=4,zero=1,mbs=1,recompute=selective,"
                      f"recompute_modules=layernorm+mla_up_proj+moe_act,schedule={schedule}")
    return make_job(load_model_arg(TOY), cluster_preset("hgx-h800", 3), plan,
                    global_batch=64, dtype=dtype, framework=framework)


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b", "zb-h1"])
def test_array_model_equals_scalar_with_the_cache(schedule):
    """The search's memory (``rank_memory_arrays``, ``peak_memory_arrays`` given the stack's
    cache and optimizer bytes) equals ``memory_by_stage`` on every rank."""
    job = _job("hai-llm", schedule=schedule)
    assert act.job_activation_cache(job) == FP8
    P = PlanArrays.from_plans([job.plan])
    kw = dict(loss_bytes=job.framework.loss.peak_bytes, act_cache=FP8, optimizer_bytes=8.0,
              dispatch_bytes=act.job_dispatch_bytes(job))
    stages = [b.total for b in memory_by_stage(job)]
    for s, want in enumerate(stages):
        got = float(rank_memory_arrays(job.model, P, s, job.dtype, job.system,
                                       job.cluster.gpu, **kw)[0])
        assert got == pytest.approx(want, rel=1e-9), s
    peak = float(peak_memory_arrays(job.model, P, job.dtype, job.system, job.cluster.gpu,
                                    **kw)[0])
    assert peak == pytest.approx(max(stages), rel=1e-9)


def test_bf16_moments_are_two_thirds_of_the_optimizer_and_nothing_else_moves_in_bf16():
    """hai-llm's optimizer state: fp32 master + bf16 m, v = 8 B against 12 (every stage,
    every origin); in bf16 no activation is cached low, so the layers' stash equals
    Megatron-Core's (the loss's buffers differ by stack, ``FrameworkProfile.loss``)."""
    hai, mc = _job("hai-llm", "bf16"), _job(None, "bf16")
    for s in range(hai.plan.pp):
        a, b = memory_components(hai, s), memory_components(mc, s)
        for origin in a:
            assert a[origin].optimizer == pytest.approx(b[origin].optimizer * 8 / 12, rel=1e-12)
            assert a[origin].params == b[origin].params
            assert a[origin].grads == b[origin].grads
            if origin in ("layers", "embedding", "recompute"):
                assert a[origin].activations == b[origin].activations


def test_other_stacks_keep_the_16_bit_table():
    job = _job(None)
    assert act.job_activation_cache(job) is None
    assert job.framework.optimizer_state_bytes is None


def test_deepseek_v3_report_plan_fits_but_its_end_ranks():
    """DeepSeek-V3's published plan (docs/reports/deepseek_v3.md) under DualPipe on H800
    (the preset's usable 79.6 GiB): with the facts every middle rank fits, and without
    the cache or the bf16 moments it did not; the end ranks (each copy's 4 layers of the
    padded model with the embedding, the head and the MTP module) still do not
    (docs/calibration.md §5.23)."""
    model = load_model_arg(os.path.join(ROOT, "docs", "reports", "deepseek_v3_model.json"))
    plan = parse_plan("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,"
                      "recompute_modules=layernorm+mla_up_proj+moe_act,moe_dispatcher=deepep,"
                      "schedule=dualpipe,gbs=4096")
    job = make_job(model, cluster_preset("hgx-h800", 256), plan, dtype="fp8-blockwise",
                   framework="hai-llm")
    hbm = job.cluster.min_hbm_bytes
    stages = [b.total for b in memory_by_stage(job)]
    assert all(x <= hbm for x in stages[1:-1])
    assert stages[0] > hbm and stages[-1] > hbm
    without = replace(job, framework=replace(job.framework, fp8_activation_cache=False,
                                             optimizer_state_bytes=None))
    assert all(b.total > hbm for b in memory_by_stage(without))


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_simulated_activation_peak_reads_the_cache(schedule):
    """The simulator's activation track (``activation_memory_json``'s ``peak_bytes``) equals
    ``memory_by_stage``'s activations on every rank with the cache, and is below the 16-bit
    table's."""
    from simulator.output.metrics_json import activation_memory_json
    from simulator.simulate import simulate
    job = _job("hai-llm", schedule=schedule)
    stages = memory_by_stage(job)
    rows = activation_memory_json(simulate(job), job)
    assert rows
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r
    bf16 = memory_by_stage(replace(job, framework=replace(job.framework,
                                                          fp8_activation_cache=False)))
    assert all(a.activations < b.activations for a, b in zip(stages, bf16))
