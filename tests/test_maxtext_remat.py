"""MaxText's remat policies (issue 15, jax-xla; docs/calibration.md §3.17).

A policy saves some named tensors of the layer; JAX recomputes what the backward reads and is
not saved, dead-code-eliminating the rest, so the MLP's down projection is never rerun and the
fused attention's forward reruns when its output (``context``) is not saved. The DGXC
v24.11.1 MaxText Llama 2 70B recipe saves Q/K/V and the output projection (and ``mlpwo`` in
bf16): selective recomputation of core_attn, layernorm and mlp.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from strategies.cost import attention_counts, flop_counts
from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.gemm_shapes import early_stop_gemms
from strategies.cost.gemm_time import gemms_time_fwd
from strategies.cost.layer_time import early_stop_saving, layer_time, selective_time
from strategies.cost.recompute import modules_mask
from strategies.errors import SpecError
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.job import make_job
from strategies.launch import export
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import DATA, case_from_entry
from strategies.remat_policies import (NAMES, POLICIES, custom_policy, policy_recompute,
                                       recompute_of)
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

LLAMA = model_preset("llama3-70b")
H100 = get_gpu("H100")
ALL = ("core_attn", "layernorm", "mlp")


@pytest.mark.parametrize("policy, want", [
    ("full", ("full", ())),
    ("save_dot_except_mlpwi", ("selective", ALL)),
    ("save_dot_except_mlp", ("selective", ALL)),       # mlpwo is never read: same recompute
    ("minimal", ("selective", ("core_attn", "layernorm"))),
    ("save_dot_with_context_except_mlp", ("selective", ("layernorm", "mlp"))),
    ("minimal_with_context", ("none", ())),
])
def test_named_policies_map_to_modules(policy, want):
    assert policy_recompute(policy) == want


@pytest.mark.parametrize("policy", ["save_qkv_proj", "save_out_proj"])
def test_policies_that_rerun_a_projection_are_refused(policy):
    with pytest.raises(SpecError) as e:
        policy_recompute(policy)
    assert e.value.field == "remat_policy" and policy in str(e.value)


def test_unknown_names_are_refused():
    with pytest.raises(SpecError, match="not a MaxText checkpoint name"):
        recompute_of(("query_proj", "attn_scores"))
    with pytest.raises(SpecError, match="must be one of"):
        policy_recompute("save_everything")
    assert set(POLICIES["minimal_with_context"]) == set(NAMES)


@pytest.mark.parametrize("mods", [("core_attn", "layernorm"), ("layernorm", "mlp"), ALL])
def test_custom_policy_round_trips(mods):
    """The custom keys the exporter writes come back as the same modules."""
    keys = custom_policy(mods)
    assert keys["remat_policy"] == "custom" and keys["mlpwo"] == "remat"
    saved = [n for n in NAMES if keys[n] == "device"]
    assert recompute_of(saved) == ("selective", mods)


@pytest.mark.parametrize("tp", [1, 4])
def test_mlp_recompute_flops_skip_the_down_projection(tp):
    """Closed form (gated MLP): the gate and up projections, ``2·(2·T·h·F/t)``, without
    the down projection's ``2·T·h·F/t``."""
    b = 2
    T, h, F = b * LLAMA.seq_length, LLAMA.hidden_size, LLAMA.ffn_hidden_size
    mask = modules_mask(("mlp",))
    dce = flop_counts.selective_recompute_flops_fwd(LLAMA, b, tp, 1, 1, mask, early_stop=True)
    whole = flop_counts.selective_recompute_flops_fwd(LLAMA, b, tp, 1, 1, mask)
    assert dce == pytest.approx(2 * 2 * T * h * F / tp, rel=1e-14)
    assert whole == pytest.approx(3 * 2 * T * h * F / tp, rel=1e-14)


def _sel(fw, mods, flash=True, dtype="bf16", b=2):
    a_f, _ = attention_time_fwd(LLAMA, b, 1, 1, flash, H100, 1.0, fw)
    return selective_time(LLAMA, b=b, tp=1, cp=1, ep=1, sp=False, flash=flash, a_f=a_f,
                          modules=modules_mask(mods), gpu=H100, dtype=dtype, fw=fw), a_f


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_mlp_recompute_time_is_megatrons_less_the_down_projection(dtype):
    jax, _ = _sel(JAX_XLA, ("mlp",), dtype=dtype)
    core, _ = _sel(MEGATRON_CORE, ("mlp",), dtype=dtype)
    down = gemms_time_fwd(early_stop_gemms(LLAMA, 2, 1, 1, 1), 1, H100, dtype)
    assert early_stop_saving(LLAMA, 2, 1, 1, 1, H100, dtype, fw=JAX_XLA) == down > 0
    assert jax == pytest.approx(core - down, rel=1e-12)


def test_core_attn_reruns_the_fused_forward_only_where_the_stack_does():
    jax, a_f = _sel(JAX_XLA, ("core_attn",))
    core, _ = _sel(MEGATRON_CORE, ("core_attn",))
    # Megatron-Core's core_attn checkpoint reruns the fused kernel too (§5.188); Megatron-
    # DeepSpeed's ParallelAttention runs FlashAttention outside its checkpoint: no rerun
    legacy, _ = _sel(MEGATRON_DEEPSPEED, ("core_attn",))
    assert a_f > 0 and jax == pytest.approx(a_f, rel=1e-15)
    assert core == pytest.approx(a_f, rel=1e-15) and legacy == 0.0
    # without FlashAttention both redo the unfused core; Megatron-Core's (Transformer
    # Engine's) also rebuilds its causal mask on the rerun (§5.135), which JAX does not
    jax_plain = _sel(JAX_XLA, ("core_attn",), flash=False)[0]
    core_plain = _sel(MEGATRON_CORE, ("core_attn",), flash=False)[0]
    maskless = replace(MEGATRON_CORE, unfused_mask_bytes=0.0)
    assert jax_plain == pytest.approx(_sel(maskless, ("core_attn",), flash=False)[0], rel=1e-15)
    assert core_plain > jax_plain


def test_hardware_flops_count_the_rerun_attention():
    gbs, mask = 8, modules_mask(("core_attn",))
    plain = flop_counts.hardware_flops_per_step(LLAMA, gbs, True, 1, modules=mask)
    rerun = flop_counts.hardware_flops_per_step(LLAMA, gbs, True, 1, modules=mask, flash_rerun=True)
    attn = attention_counts.attn_core_flops_fwd(LLAMA, gbs, 1, 1, False) * LLAMA.num_layers
    assert plain == flop_counts.model_flops_per_step(LLAMA, gbs)
    assert rerun - plain == pytest.approx(attn, rel=1e-12)


def test_policy_lies_between_none_and_full():
    """The recipe's policy costs more than no recomputation and less than full, in the layer
    time the estimate and the simulator read."""
    def rc(r, mods=()):
        return layer_time(LLAMA, b=2, tp=1, cp=1, ep=1, sp=False, flash=True, recompute=r,
                          gpu=H100, dtype="fp8", fw=JAX_XLA, modules=modules_mask(mods)).recompute
    assert 0 < rc(1, ALL) < rc(2)


def _entries(word):
    with open(DATA) as f:
        data = json.load(f)
    return data, [e for e in data if word in e["id"]]


def test_dgxc_maxtext_rows_take_the_recipes_policy():
    data, rows = _entries("dgxc_maxtext")
    assert len(rows) == 12
    for e in rows:
        case = case_from_entry(e, data)
        assert case.job.plan.recompute == "selective"
        assert case.job.plan.recompute_modules == ALL
        note = [a for a in case.assumptions if a.startswith("recompute=")]
        assert len(note) == 1 and "configure.sh @v24.11.1" in note[0]
        assert ("mlpwo" in note[0]) == ("bf16" in e["id"])


def test_maxtext_export_writes_the_custom_policy():
    job = make_job(LLAMA, cluster_preset("dgx-h100", 2),
                   parse_plan("mbs=1,gbs=16,zero=3,recompute=selective,"
                              "recompute_modules=core_attn+layernorm+mlp"), framework="jax-xla")
    cfg = yaml.safe_load(export("maxtext", job)[0])
    assert cfg["remat_policy"] == "custom"
    assert cfg["context"] == cfg["mlpwi_0"] == cfg["mlpwi_1"] == "remat"
    assert cfg["query_proj"] == cfg["out_proj"] == "device"
    plain = make_job(LLAMA, cluster_preset("dgx-h100", 2),
                     parse_plan("mbs=1,gbs=16,zero=3,recompute=selective"), framework="jax-xla")
    assert yaml.safe_load(export("maxtext", plain)[0])["remat_policy"] == "minimal"


@pytest.mark.parametrize("fw", [JAX_XLA, MEGATRON_CORE])
def test_layer_time_prices_the_early_stop_once(fw, monkeypatch):
    """``layer_time`` prices the GEMM an early-stopping checkpoint skips once and hands it to
    ``selective_time`` (the same seconds as ``selective_time`` pricing it itself)."""
    from strategies.cost import layer_time as ct
    calls = []
    real = ct.early_stop_saving

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    kw = dict(b=2, tp=1, cp=1, ep=1, sp=False, flash=True, gpu=H100, dtype="bf16", fw=fw,
              modules=modules_mask(ALL))
    monkeypatch.setattr(ct, "early_stop_saving", counted)
    lt = ct.layer_time(LLAMA, recompute=1, **kw)
    assert len(calls) == 1
    a_f, _ = attention_time_fwd(LLAMA, 2, 1, 1, True, H100, 1.0, fw)
    alone = selective_time(LLAMA, b=2, tp=1, cp=1, ep=1, sp=False, flash=True, a_f=a_f,
                           modules=modules_mask(ALL), gpu=H100, dtype="bf16", fw=fw)
    assert len(calls) == 2 and lt.recompute == alone
