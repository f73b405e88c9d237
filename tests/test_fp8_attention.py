"""Transformer Engine's MXFP8 fused attention (``strategies.cost.fp8_attention``,
``variants.with_fp8_attention``; docs/calibration.md §5.98): cuDNN's measured BF16/MXFP8 time
ratios on the attention core, its Q/K/V and dO casts, the refusals, the reader's rows, the
estimate and the simulator moving together; and the 26.06 rows' bf16 gradient reduction."""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
import os

import pytest

from strategies.cost import attention_counts, attention_time, hbm_rate
from strategies.cost import fp8_attention as fa
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.framework import DEFAULT, get_profile
from strategies.stacks.variants import with_fp8_attention
from strategies.presets import model_preset
from strategies.reference.perf_harness import grad_reduce_in_fp32
from strategies.reference.cases import case_from_entry, load_reference
from topologies.gpus import get_gpu

REL = 1e-12
GB300, GB200 = get_gpu("GB300"), get_gpu("GB200")
B200, B300, H100 = get_gpu("B200-SXM-180GB"), get_gpu("B300-SXM-288GB"), get_gpu("H100-SXM5-80GB")
DSV3, GPT_OSS = model_preset("deepseek-v3"), model_preset("gpt-oss-120b")
QWEN = model_preset("qwen3-30b-a3b")
HELDOUT = "strategies/reference/data/heldout_2026b.json"
FP8A = with_fp8_attention(DEFAULT, "mxfp8", GB300)
CUDNN = "/work/.mirror/NVIDIA+cudnn-frontend/repo"


def _rows() -> dict:
    return {e["id"]: e for e in load_reference(HELDOUT)}


def test_chip_classes():
    assert fa.chip_class(GB300) == fa.chip_class(B300) == "gb300"
    assert fa.chip_class(GB200) == fa.chip_class(B200) == "gb200"
    assert fa.chip_class(H100) is None


def test_full_attention_factor_is_the_measured_ratio_at_a_measured_length():
    """DeepSeek-V3 (MLA, 192/128, no window) at 4096 tokens: exactly 1 / the benchmark's
    ratio; between two measured lengths, log-linear (the geometric mean's ratio is the mean)."""
    assert fa.full_class(DSV3) == "192/128" and fa.full_class(QWEN) == "128/128"
    f, b = fa.time_factors(DSV3, GB300, 4096)
    assert f == pytest.approx(1 / 1.582, rel=REL) and b == pytest.approx(1 / 1.332, rel=REL)
    f, b = fa.time_factors(DSV3, GB200, math.sqrt(4096 * 8192))
    assert f == pytest.approx(1 / ((1.368 + 1.400) / 2), rel=REL)
    assert b == pytest.approx(1 / ((1.291 + 1.253) / 2), rel=REL)
    f, _ = fa.time_factors(DSV3, GB300, 1024)              # below the range: the end value
    assert f == pytest.approx(1 / 1.614, rel=REL)


def test_windowed_layers_weigh_in_by_their_kernel_blocks():
    """gpt-oss: full layers at the 128/128 figures, 128-token windowed layers at the windowed
    ones, weighted by each kind's share of the causal kernel's score blocks."""
    s, L, nw = GPT_OSS.seq_length, GPT_OSS.num_layers, GPT_OSS.num_windowed_layers
    assert 0 < nw < L
    full = attention_counts.score_elements(s, None, mode="kernel") * (L - nw)
    win = attention_counts.score_elements(s, GPT_OSS.sliding_window, GPT_OSS.window_kind,
                                          "kernel") * nw
    w = win / (full + win)
    f, b = fa.time_factors(GPT_OSS, GB200, 4096)
    assert f == pytest.approx((1 - w) / 1.199 + w / 1.000, rel=REL)
    assert b == pytest.approx((1 - w) / 0.918 + w / 0.224, rel=REL)
    assert b > 1     # the windowed FP8 backward makes the mean layer's backward slower


def test_cast_bytes_closed_form():
    m, b, tp, cp = QWEN, 2, 2, 1
    per = 4 + 1 / 16
    tok = b * m.seq_length / cp
    q = m.num_attention_heads * m.head_dim / tp
    kv = 2 * m.kv_heads * m.head_dim / tp
    f, bw = fa.cast_bytes(m, b, tp, cp)
    assert f == pytest.approx(tok * (q + kv) * per, rel=REL)
    assert bw == pytest.approx(tok * q * per, rel=REL)
    f, _ = fa.cast_bytes(DSV3, 1, 1, 1)                    # MLA: K per head, V 128 wide
    a = DSV3.num_attention_heads
    assert f == pytest.approx(DSV3.seq_length * a * (2 * 192 + 128) * per, rel=REL)


def test_attention_time_is_the_bf16_time_scaled_plus_the_casts():
    # gpt-oss's 128-token windowed layers run at cuDNN's measured rate, each kind over its own
    # ratio (tests/test_window_kernel.py); the mean-layer factor holds where one rate does
    for m, gpu in ((DSV3, GB300), (QWEN, B300)):
        fw = with_fp8_attention(DEFAULT, "mxfp8", gpu)
        f0, b0 = attention_time.attention_time_fwd(m, 2, 1, 1, True, gpu, fw=DEFAULT)
        f1, b1 = attention_time.attention_time_fwd(m, 2, 1, 1, True, gpu, fw=fw)
        kf, kb = fa.time_factors(m, gpu, m.seq_length)
        cf, cb = fa.cast_bytes(m, 2, 1, 1)
        hbm = hbm_rate.usable_hbm(gpu)
        assert f1 == pytest.approx(f0 * kf + cf / hbm, rel=REL)
        assert b1 == pytest.approx(b0 * kb + cb / hbm, rel=REL)
        # the unfused path is not TE's fused attention: unchanged
        assert attention_time.attention_time_fwd(m, 2, 1, 1, False, gpu, fw=fw) == \
            attention_time.attention_time_fwd(m, 2, 1, 1, False, gpu, fw=DEFAULT)


def test_refusals_name_field_value_and_rule():
    # the field and value the user set (the plan's fp8_attention=true); the rule names the
    # precision, chip or stack that refuses it
    with pytest.raises(SpecError) as e:
        with_fp8_attention(DEFAULT, "fp8", GB300)
    assert e.value.field == "fp8_attention" and e.value.value is True
    assert "needs dtype mxfp8, not 'fp8'" in e.value.rule
    with pytest.raises(SpecError) as e:
        with_fp8_attention(DEFAULT, "mxfp8", H100)
    assert e.value.value is True and "sm 100" in e.value.rule and H100.name in e.value.rule
    fw = get_profile("torchtitan")
    with pytest.raises(SpecError) as e:
        with_fp8_attention(fw, "mxfp8", GB300)
    assert e.value.value is True and repr(fw.name) in e.value.rule
    assert FP8A.fp8_attention and not DEFAULT.fp8_attention


def test_reader_reads_the_stated_switch():
    rows = _rows()
    on = [r for r in rows.values() if r.get("plan", {}).get("fp8_attention") is True]
    assert len(on) == 9
    for e in on:
        case = case_from_entry(e)
        assert case.job.framework.fp8_attention
        assert any("MXFP8 fused attention" in n for n in case.assumptions)
    for rid in ("mbridge2606_deepseekv3_gb200_256_mxfp8", "mbridge2606_gptoss120b_b300_64_mxfp8"):
        assert rows[rid]["plan"]["fp8_attention"] is False
        assert not case_from_entry(rows[rid]).job.framework.fp8_attention


def test_stated_outside_mxfp8_is_said_and_not_modelled():
    e = copy.deepcopy(_rows()["mbridge2606_qwen330ba3b_gb300_8_mxfp8"])
    e["precision"] = "bf16"
    case = case_from_entry(e)
    assert not case.job.framework.fp8_attention
    assert any(n.startswith("fp8_attention stated but not modelled") for n in case.assumptions)


@pytest.mark.parametrize("value", ["yes", 1, [True]])
def test_a_non_boolean_statement_skips_the_row_naming_the_field(value):
    e = copy.deepcopy(_rows()["mbridge2606_qwen330ba3b_gb300_8_mxfp8"])
    e["plan"]["fp8_attention"] = value
    case = case_from_entry(e)
    assert case.job is None and "plan.fp8_attention" in case.skipped


def test_the_reader_s_job_is_the_rule_applied():
    e = _rows()["mbridge2606_deepseekv3_gb300_256_mxfp8"]
    on = case_from_entry(e).job
    off = copy.deepcopy(e)
    off["plan"]["fp8_attention"] = False
    job = case_from_entry(off).job
    again = dataclasses.replace(job, framework=with_fp8_attention(job.framework, "mxfp8", GB300))
    assert estimate(again).step_time_s == estimate(on).step_time_s
    assert estimate(on).step_time_s < estimate(job).step_time_s     # 192/128: FP8 faster


def test_estimate_and_simulation_move_together():
    """One rule through the stage record: a one-stage job's contention-free simulation moves
    by what the estimate moves."""
    from simulator.studies.validate import simulated_step_time
    from strategies.job import make_job
    from strategies.plan import Plan
    from topologies.cluster import cluster_preset
    cl = cluster_preset("dgx-b200", 1)
    a = make_job(QWEN, cl, Plan(ep=8, mbs=1, gbs=16, moe_dispatcher="hybridep"), dtype="mxfp8")
    b = dataclasses.replace(a, framework=with_fp8_attention(a.framework, "mxfp8", B200))
    d_est = estimate(b).step_time_s - estimate(a).step_time_s
    d_sim = simulated_step_time(b)[0] - simulated_step_time(a)[0]
    assert d_est != 0
    assert d_sim == pytest.approx(d_est, rel=1e-9)


@pytest.mark.skipif(not os.path.isdir(CUDNN), reason="no cudnn-frontend mirror")
def test_the_table_is_the_benchmark_s():
    path = os.path.join(os.path.dirname(__file__), "..", "experiments",
                        "fp8_attention_ratios.py")
    spec = importlib.util.spec_from_file_location("fp8_attention_ratios", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.mxfp8_table(CUDNN) == fa.RATIOS


def test_26_06_rows_reduce_gradients_in_bf16():
    rows = _rows()
    bridge = [r for r in rows.values() if r["id"].startswith("mbridge2606_")]
    assert len(bridge) == 20
    assert all(grad_reduce_in_fp32(r) is False for r in bridge)
    assert all(grad_reduce_in_fp32(r) is None for r in rows.values()
               if r["id"].startswith("torchtitan"))


def test_the_plan_switch_applies_the_rule_and_refuses_what_it_cannot_run():
    from strategies.job import make_job
    from strategies.plan import Plan
    from topologies.cluster import cluster_preset
    cl = cluster_preset("dgx-b200", 1)
    plan = Plan(ep=8, mbs=1, gbs=16, fp8_attention=True)
    job = make_job(QWEN, cl, plan, dtype="mxfp8")
    off = make_job(QWEN, cl, dataclasses.replace(plan, fp8_attention=False), dtype="mxfp8")
    assert job.framework == with_fp8_attention(off.framework, "mxfp8", B200)
    assert "fp8a" in job.plan.short() and "fp8a" not in off.plan.short()
    with pytest.raises(SpecError) as e:
        make_job(QWEN, cl, plan, dtype="bf16")
    assert e.value.field == "fp8_attention" and e.value.value is True
    assert "not 'bf16'" in e.value.rule
    with pytest.raises(SpecError) as e:
        make_job(model_preset("llama3-8b"), cl, Plan(mbs=1, gbs=16, fp8_attention=True),
                 dtype="mxfp8", framework="torchtitan")
    assert e.value.field == "fp8_attention" and e.value.value is True
    assert "'torchtitan'" in e.value.rule
