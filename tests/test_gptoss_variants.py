"""gpt-oss's eager kernels on Megatron-Core (``elementwise_bytes.clamp_bytes``,
``elementwise_bytes.rope_unfused_bytes``, ``elementwise_time.eager_variant_time``).

* The clamped SwiGLU (``swiglu_limit`` 7.0): Megatron-Core 0.15-0.17 clamps and concatenates
  the two halves of fc1's output in eager PyTorch before its fused quick-GEGLU: 16 bytes per
  element of the routed intermediate forward, 30 backward.
* YaRN RoPE with attention factor 1 + 0.1 ln 32: Megatron-Core falls back from Transformer
  Engine's fused RoPE to its unfused path: 24 bytes per rotated element forward, 28 backward,
  against the fused kernel's 4 and 8.
* Only where the stack runs Megatron-Core's model code (``FrameworkProfile.eager_variants``),
  and only for a model with the clamp or the YaRN factor: everything else is unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from strategies.cost import elementwise_bytes, elementwise_time, hbm_rate, layer_time
from strategies.errors import SpecError
from strategies.framework import DEFAULT, get_profile
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.hf_config import model_from_hf
from strategies.model import ModelSpec, yarn_attention_factor
from strategies.presets import model_preset
from topologies.gpus import get_gpu

REL = 1e-12
GPT_OSS = model_preset("gpt-oss-120b")
PLAIN = dataclasses.replace(GPT_OSS, activation_clamp=None, rope_attention_factor=1.0)
H100 = get_gpu("H100-SXM5-80GB")
HF = Path(__file__).parent / "data" / "hf" / "gpt_oss_120b.json"


def test_yarn_attention_factor_closed_forms():
    assert yarn_attention_factor(32.0) == pytest.approx(1 + 0.1 * math.log(32), rel=REL)
    assert yarn_attention_factor(40.0, 1.0, 1.0) == 1.0          # DeepSeek-V3's rope_scaling
    assert yarn_attention_factor(40.0, 0.707, 0.707) == pytest.approx(1.0, rel=REL)
    assert yarn_attention_factor(1.0) == 1.0 and yarn_attention_factor(0.5) == 1.0
    assert GPT_OSS.rope_attention_factor == pytest.approx(1.3465735902799727, rel=REL)
    assert GPT_OSS.activation_clamp == 7.0


def test_hf_config_reads_swiglu_limit_and_yarn():
    cfg = json.loads(HF.read_text())
    m = model_from_hf(cfg)
    assert m.activation_clamp == 7.0
    assert m.rope_attention_factor == GPT_OSS.rope_attention_factor
    # a plain model states it: null is none (absent is transformers' default, below)
    m0 = model_from_hf(dict(cfg, swiglu_limit=None, rope_scaling=None))
    assert m0.activation_clamp is None and m0.rope_attention_factor == 1.0
    given = dict(cfg, rope_scaling=dict(cfg["rope_scaling"], attention_factor=1.25))
    assert model_from_hf(given).rope_attention_factor == 1.25


def test_hf_config_without_the_keys_reads_transformers_defaults():
    """transformers' ``GptOssConfig`` (02b8f42b): ``swiglu_limit`` 7.0 and YaRN factor 32
    where the config leaves them out; so a config without them is the published model,
    and YaRN factor 1 is plain RoPE."""
    cfg = json.loads(HF.read_text())
    bare = {k: v for k, v in cfg.items() if k not in ("swiglu_limit", "rope_scaling")}
    m = model_from_hf(bare)
    assert m.activation_clamp == 7.0
    assert m.rope_attention_factor == pytest.approx(1 + 0.1 * math.log(32), rel=REL)
    assert m == model_from_hf(cfg)
    one = dict(bare, rope_scaling={"rope_type": "yarn", "factor": 1.0})
    assert model_from_hf(one).rope_attention_factor == 1.0


@pytest.mark.parametrize("patch,field", [
    ({"swiglu_limit": -1.0}, "swiglu_limit"),
    ({"swiglu_limit": "7"}, "swiglu_limit"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling.rope_type"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": True}}, "rope_scaling.factor"),
    ({"rope_scaling": [1, 2]}, "rope_scaling"),
])
def test_hf_config_bad_variants_name_the_field(patch, field):
    cfg = dict(json.loads(HF.read_text()), **patch)
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == field


def test_modelspec_refuses_clamp_without_gate_and_factor_without_rope():
    with pytest.raises(SpecError) as e:
        ModelSpec("x", 2, 64, 4, 256, 100, activation="gelu", activation_clamp=7.0)
    assert e.value.field == "activation_clamp"
    with pytest.raises(SpecError) as e:
        ModelSpec("x", 2, 64, 4, 256, 100, rope_attention_factor=1.3)
    assert e.value.field == "rope_attention_factor"
    with pytest.raises(SpecError) as e:
        dataclasses.replace(GPT_OSS, rope_attention_factor=0.0)
    assert e.value.field == "rope_attention_factor"


def test_clamp_bytes_closed_form():
    """gpt-oss-120b (every layer MoE, k=4, F_e=2880), b=4, s=4096: ``b·s·k·F_e`` routed
    intermediate elements per GPU (over t, times load), 16 bytes forward and 30 backward."""
    elems = 4 * 4096 * 4 * 2880
    f, b = elementwise_bytes.clamp_bytes(GPT_OSS, 4, 1, 1)
    assert (f, b) == (pytest.approx(16 * elems, rel=REL), pytest.approx(30 * elems, rel=REL))
    f2, b2 = elementwise_bytes.clamp_bytes(GPT_OSS, 4, 2, 2, load=1.5)
    assert (f2, b2) == (pytest.approx(16 * elems / 4 * 1.5, rel=REL),
                        pytest.approx(30 * elems / 4 * 1.5, rel=REL))


def test_rope_unfused_bytes_closed_form():
    """q (64 heads) and k (8 groups) of head size 64: 4608 rotated elements per token; the
    unfused path adds 24 - 4 bytes forward and 28 - 8 backward over the fused kernel."""
    n = 4 * 4096 * (64 + 8) * 64
    f, b = elementwise_bytes.rope_unfused_bytes(GPT_OSS, 4, 1, 1)
    assert (f, b) == (pytest.approx(20 * n, rel=REL), pytest.approx(20 * n, rel=REL))
    f2, _ = elementwise_bytes.rope_unfused_bytes(GPT_OSS, 4, 8, 1)
    assert f2 == pytest.approx(20 * n / 8, rel=REL)


def test_eager_variant_time_is_bytes_over_hbm_plus_launch_gaps():
    elems, n = 4 * 4096 * 4 * 2880, 4 * 4096 * 4608
    hbm = hbm_rate.usable_hbm(H100)
    f, b = elementwise_time.eager_variant_time(GPT_OSS, 4, 1, 1, H100)
    kf, kb = 3 + 2 * 11, 7 + 2 * 6
    assert elementwise_bytes.eager_variant_kernels(GPT_OSS) == (kf, kb)
    assert f == pytest.approx((16 * elems + 20 * n) / hbm + kf * LAUNCH_GAP_S, rel=REL)
    assert b == pytest.approx((30 * elems + 20 * n) / hbm + kb * LAUNCH_GAP_S, rel=REL)


def _layer(m, fw=DEFAULT, recompute=0, modules=0):
    return layer_time.layer_time(m, b=2, tp=1, cp=1, ep=8, sp=False, flash=True,
                                 recompute=recompute, gpu=H100, dtype="bf16", fw=fw,
                                 modules=modules)


def test_layer_time_adds_exactly_the_variant_time():
    """The clamp and the RoPE, and the two §5.163 terms the bridge's settings bring (the
    attention output's unfused bias add, the quick-GEGLU's synchronisation), which ``PLAIN``
    (no clamp) does not run."""
    from strategies.cost import moe_time
    with_v, without = _layer(GPT_OSS), _layer(PLAIN)
    vf, vb = elementwise_time.eager_variant_time(GPT_OSS, 2, 1, 1, H100)
    uf, ub = elementwise_time.attn_bias_add_time(GPT_OSS, 2, 1, 1, False, H100)
    sync = moe_time.geglu_sync_time(GPT_OSS, DEFAULT, H100)
    assert uf > 0 and ub > 0 and sync > 0
    assert with_v.fwd - without.fwd == pytest.approx(vf + uf + sync, rel=1e-9)
    assert with_v.bwd - without.bwd == pytest.approx(vb + ub, rel=1e-9)
    assert with_v.wgrad == without.wgrad


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "llama3-8b", "mixtral-8x7b"])
def test_models_without_variants_are_unchanged(name):
    """No clamp, no YaRN factor: nothing added, bit for bit, whatever the stack."""
    m = model_preset(name)
    assert m.activation_clamp is None and m.rope_attention_factor == 1.0
    assert elementwise_time.eager_variant_time(m, 2, 1, 1, H100) == (0.0, 0.0)
    off = dataclasses.replace(DEFAULT, eager_variants=False)
    a, b = _layer(m), _layer(m, fw=off)
    assert (a.fwd, a.bwd, a.recompute, a.wgrad) == (b.fwd, b.bwd, b.recompute, b.wgrad)


def test_gpt_oss_without_variants_matches_a_stack_that_does_not_run_them():
    off = dataclasses.replace(DEFAULT, eager_variants=False)
    a, b = _layer(PLAIN), _layer(GPT_OSS, fw=off)
    assert (a.fwd, a.bwd, a.recompute, a.wgrad) == (b.fwd, b.bwd, b.recompute, b.wgrad)


def test_only_megatron_core_stacks_run_them():
    for name in ("megatron-core", "nemo"):
        assert get_profile(name).eager_variants
    for name in ("torchtitan", "pytorch-eager", "jax-xla", "megatron-deepspeed"):
        fw = get_profile(name)
        assert not fw.eager_variants
        assert elementwise_time.eager_variant_time(GPT_OSS, 2, 1, 1, H100, fw=fw) == (0.0, 0.0)


def test_moe_act_recompute_reruns_the_clamp():
    """Selective recomputation of ``moe_act`` redoes the activation and its clamp forward."""
    from strategies.cost.recompute import modules_mask
    mask = modules_mask(("moe_act",))
    a, b = _layer(GPT_OSS, recompute=1, modules=mask), _layer(PLAIN, recompute=1, modules=mask)
    from strategies.cost import moe_time
    clamp = elementwise_bytes.clamp_bytes(GPT_OSS, 2, 1, 1)[0] / hbm_rate.usable_hbm(H100) \
        + elementwise_bytes.CLAMP_KERNELS[0] * LAUNCH_GAP_S \
        + moe_time.geglu_sync_time(GPT_OSS, DEFAULT, H100)     # the rerun syncs again
    assert a.recompute - b.recompute == pytest.approx(clamp, rel=1e-9)


def test_bridge_gpt_oss_rows_recompute_what_their_configs_name():
    """The v0.4.2 configs of GB200, B200 and H100 recompute ``layernorm`` and ``moe_act``;
    GB300's and B300's recompute nothing (``reference.bridge_recipes``)."""
    from strategies.reference.cases import case_from_entry, load_reference
    rows = {e["id"]: e for e in
            load_reference("strategies/reference/data/megatron_bridge_2604.json")}
    want = {"gb300": None, "gb200": ("layernorm", "moe_act"), "b300": None,
            "b200": ("layernorm", "moe_act"), "h100": ("layernorm", "moe_act")}
    for gpu, mods in want.items():
        job = case_from_entry(rows[f"mbridge260401_gptoss120b_{gpu}_64_bf16"]).job
        assert job.plan.recompute_modules == mods
        assert job.plan.recompute == ("selective" if mods else "none")
        assert job.model.activation_clamp == 7.0
        assert job.model.rope_attention_factor == GPT_OSS.rope_attention_factor


def test_scalar_and_array_stage_records_agree_for_gpt_oss():
    """The search's array record reads the same rule as the scalar one (estimate, bound and
    simulator share the stage record)."""
    from strategies.cost.stage import stage_cost_arrays, stage_costs
    from strategies.job import make_job
    from strategies.plan import Plan
    from strategies.plan_arrays import PlanArrays
    from topologies.cluster import cluster_preset
    plans = [Plan(ep=8, mbs=2, gbs=256), Plan(ep=8, mbs=1, gbs=256, recompute="selective",
                                             recompute_modules=("layernorm", "moe_act")),
             Plan(tp=2, ep=8, mbs=1, gbs=256, sp=True)]
    cl = cluster_preset("dgx-h100", 8)
    for p in plans:
        job = make_job(GPT_OSS, cl, p)
        sc = stage_costs(job)
        arr = stage_cost_arrays(job.model, job.cluster, job.dtype,
                                PlanArrays.from_plans([job.plan]),
                                job.framework, job.system)
        assert float(arr.layer_fwd[0]) == pytest.approx(sc.layer_fwd, rel=1e-9)
        assert float(arr.layer_bwd[0]) == pytest.approx(sc.layer_bwd, rel=1e-9)
