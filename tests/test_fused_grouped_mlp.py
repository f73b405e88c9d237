"""Transformer Engine's fused grouped MLP (``variants.with_fused_grouped_mlp``,
``variants.runs_eager_clamp``; docs/calibration.md §5.90): what a stack running it no longer
pays (the routed activation's own cast passes, TE's ``Fp8Padding`` copies, a fixed time per
expert GEMM, gpt-oss's eager clamp), and the reader applying it to the rows whose config
states it (``plan.fused_grouped_mlp``)."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from strategies.cost import elementwise_bytes, elementwise_time, hbm_rate
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.framework import DEFAULT, get_profile
from strategies.stacks.expert_gemm import TE_FUSED_GROUPED_MLP
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.stacks.variants import runs_eager_clamp, with_fused_grouped_mlp
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from topologies.gpus import get_gpu

REL = 1e-12
GPT_OSS = model_preset("gpt-oss-120b")
B200 = get_gpu("B200-SXM-180GB")
HELDOUT = "strategies/reference/data/heldout_2026b.json"
FUSED = with_fused_grouped_mlp(DEFAULT, "mxfp8")


def _rows() -> dict:
    return {e["id"]: e for e in load_reference(HELDOUT)}


def test_the_fused_stack_switches_off_what_the_kernel_fuses():
    assert DEFAULT.grouped_mlp_casts and DEFAULT.quant_padding and runs_eager_clamp(DEFAULT)
    assert not DEFAULT.fused_grouped_mlp
    assert FUSED.fused_grouped_mlp and not FUSED.grouped_mlp_casts and not FUSED.quant_padding
    assert FUSED.expert_gemm_launch == TE_FUSED_GROUPED_MLP
    assert FUSED.expert_gemm_launch.fixed_times(16) == 1.0
    assert DEFAULT.expert_gemm_launch.fixed_times(16) == 4.0       # TE's 4 streams
    assert FUSED.eager_variants and not runs_eager_clamp(FUSED)     # the RoPE stays eager
    assert with_fused_grouped_mlp(FUSED, "mxfp8") == FUSED          # idempotent
    assert with_fused_grouped_mlp(get_profile("nemo"), "mxfp8").fused_grouped_mlp


@pytest.mark.parametrize("name", ["torchtitan", "pytorch-eager", "jax-xla", "automodel"])
def test_stacks_without_te_grouped_mlp_refuse_it(name):
    fw = get_profile(name)
    with pytest.raises(SpecError) as e:
        with_fused_grouped_mlp(fw, "mxfp8")
    assert e.value.field == "fused_grouped_mlp" and e.value.value == fw.name
    assert "TEGroupedMLP" in e.value.rule
    assert not runs_eager_clamp(fw)


def test_fused_stack_drops_exactly_the_clamp_and_keeps_the_rope():
    """gpt-oss on the fused stack: the eager variants' time is the unfused RoPE's alone, and
    the eager stack's exceeds it by the clamp's bytes over HBM and its kernels' gaps."""
    hbm = hbm_rate.usable_hbm(B200)
    f, b = elementwise_time.eager_variant_time(GPT_OSS, 4, 1, 1, B200, fw=FUSED)
    rf, rb = elementwise_bytes.rope_unfused_bytes(GPT_OSS, 4, 1, 1)
    kf, kb = elementwise_bytes.eager_variant_kernels(GPT_OSS)
    cf_k, cb_k = elementwise_bytes.eager_variant_kernels(GPT_OSS, rope=False)
    assert (cf_k, cb_k) == (elementwise_bytes.CLAMP_KERNELS[0], elementwise_bytes.CLAMP_KERNELS[1])
    assert f == pytest.approx(rf / hbm + (kf - cf_k) * LAUNCH_GAP_S, rel=REL)
    assert b == pytest.approx(rb / hbm + (kb - cb_k) * LAUNCH_GAP_S, rel=REL)
    ef, eb = elementwise_time.eager_variant_time(GPT_OSS, 4, 1, 1, B200, fw=DEFAULT)
    cf, cb = elementwise_bytes.clamp_bytes(GPT_OSS, 4, 1, 1)
    assert ef - f == pytest.approx(cf / hbm + cf_k * LAUNCH_GAP_S, rel=1e-9)
    assert eb - b == pytest.approx(cb / hbm + cb_k * LAUNCH_GAP_S, rel=1e-9)
    # a selective recomputation of the activation reruns no eager clamp either
    assert elementwise_time.eager_variant_time(GPT_OSS, 4, 1, 1, B200, fw=FUSED,
                                               rope=False) == (0.0, 0.0)


def test_reader_applies_the_stated_fused_mlp():
    rows = _rows()
    for rid in ("mbridge2606_qwen330ba3b_gb300_8_mxfp8", "mbridge2606_gptoss120b_gb200_64_mxfp8",
                "mbridge2606_deepseekv3_gb300_256_mxfp8"):
        assert rows[rid]["plan"]["fused_grouped_mlp"] is True
        case = case_from_entry(rows[rid])
        assert case.job.framework.fused_grouped_mlp
        assert any("fused grouped MLP" in n for n in case.assumptions)
    for rid in ("mbridge2606_gptoss120b_b300_64_mxfp8", "mbridge2606_qwen330ba3b_h100_16_fp8"):
        assert rows[rid]["plan"]["fused_grouped_mlp"] is False
        job = case_from_entry(rows[rid]).job
        assert not job.framework.fused_grouped_mlp and job.framework.grouped_mlp_casts


def test_a_stated_fused_mlp_outside_mxfp8_is_said_and_not_modelled():
    e = copy.deepcopy(_rows()["mbridge2606_qwen330ba3b_gb300_8_mxfp8"])
    e["precision"] = "bf16"
    case = case_from_entry(e)
    assert not case.job.framework.fused_grouped_mlp and case.job.framework.grouped_mlp_casts
    assert any(n.startswith("fused_grouped_mlp stated but not modelled") for n in case.assumptions)
    # the note is the stack rule's own refusal: the reader holds no copy of the rule
    with pytest.raises(SpecError) as e:
        with_fused_grouped_mlp(case.job.framework, case.job.dtype)
    assert any(str(e.value) in n for n in case.assumptions)


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp8-blockwise", "nvfp4"])
def test_a_precision_other_than_mxfp8_is_refused_with_field_value_and_rule(dtype):
    """TE's fused grouped MLP is its MXFP8 path: any other precision is refused by the rule
    beside the switch (as ``with_fp8_attention`` refuses one), naming the field, the value
    and the rule, on a stack that runs it at MXFP8 and on one already switched."""
    for fw in (DEFAULT, FUSED):
        with pytest.raises(ValueError) as e:
            with_fused_grouped_mlp(fw, dtype)
        assert isinstance(e.value, SpecError)
        assert e.value.field == "fused_grouped_mlp" and e.value.value == dtype
        assert "needs dtype mxfp8" in e.value.rule
        assert str(e.value).startswith(f"fused_grouped_mlp={dtype!r}: ")


def test_the_reader_s_job_is_the_stack_rule_applied_and_runs_faster():
    """The row's estimate is the one of its unfused job with ``with_fused_grouped_mlp``
    applied, bit for bit, and faster than the unfused job (casts, padding, fixed times)."""
    e = _rows()["mbridge2606_qwen330ba3b_gb300_8_mxfp8"]
    fused = case_from_entry(e).job
    off = copy.deepcopy(e)
    off["plan"]["fused_grouped_mlp"] = False
    unfused = case_from_entry(off).job
    assert not unfused.framework.fused_grouped_mlp
    again = dataclasses.replace(unfused, framework=with_fused_grouped_mlp(unfused.framework,
                                                                        unfused.dtype))
    assert estimate(again).step_time_s == estimate(fused).step_time_s
    assert estimate(fused).step_time_s < estimate(unfused).step_time_s


def test_estimate_and_simulation_move_together():
    """One rule, read through the stage record: the contention-free simulation of a
    one-stage job moves by what the estimate moves (pp = 1: micro-batches x layers x the
    layer's change)."""
    from simulator.studies.validate import simulated_step_time
    from strategies.job import make_job
    from strategies.plan import Plan
    from topologies.cluster import cluster_preset
    m = model_preset("qwen3-30b-a3b")
    cl = cluster_preset("dgx-b200", 1)
    plan = Plan(ep=8, mbs=1, gbs=16, moe_dispatcher="hybridep")
    a = make_job(m, cl, plan, dtype="mxfp8")
    b = dataclasses.replace(a, framework=with_fused_grouped_mlp(a.framework, a.dtype))
    d_est = estimate(a).step_time_s - estimate(b).step_time_s
    d_sim = simulated_step_time(a)[0] - simulated_step_time(b)[0]
    assert d_est > 0
    assert d_sim == pytest.approx(d_est, rel=1e-9)


@pytest.mark.parametrize("value", ["yes", 1, 0.0, [True]])
def test_a_non_boolean_statement_skips_the_row_naming_the_field(value):
    e = copy.deepcopy(_rows()["mbridge2606_qwen330ba3b_gb300_8_mxfp8"])
    e["plan"]["fused_grouped_mlp"] = value
    case = case_from_entry(e)
    assert case.job is None
    assert "plan.fused_grouped_mlp" in case.skipped and "true or false" in case.skipped
