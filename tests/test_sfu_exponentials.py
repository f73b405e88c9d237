"""The special-function units' exponential rate in the fused attention kernel (GPU.exp_rate,
attention_time.EXP_EXPOSED_FWD/_BWD; docs/calibration.md §5.60)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import attention_counts, attention_grid, attention_time, window_kernel
from strategies.presets import model_preset
from topologies.errors import SpecError
from topologies.gpus import GPUS, get_gpu, gpu_from_mapping, gpu_to_mapping
from topologies.gpus.spec import ATTN_EXP_REF_RATE, BLACKWELL_ULTRA_EXP_RATE


def _with_rate(name: str, rate: float | None):
    return dataclasses.replace(get_gpu(name), exp_rate=rate)


@pytest.mark.parametrize("model,b,tp,cp", [("llama3-70b", 1, 4, 1), ("deepseek-v3", 2, 2, 2),
                                           ("gpt-oss-120b", 1, 1, 1)])
def test_doubled_sfu_moves_attention_by_the_exposed_exponentials(model, b, tp, cp):
    """An attention-only op on a GPU whose SFU runs at twice the reference rate: the forward
    loses EXP_EXPOSED_FWD and the backward EXP_EXPOSED_BWD of the reference exponential
    time, n/(2R) (n: one exponential per score element the causal kernel computes)."""
    m = model_preset(model)
    slow = 1.07
    ref = _with_rate("GB200", ATTN_EXP_REF_RATE)
    fast = _with_rate("GB200", 2 * ATTN_EXP_REF_RATE)
    f0, b0 = attention_time.attention_time_fwd(m, b, tp, cp, True, ref, slow)
    f1, b1 = attention_time.attention_time_fwd(m, b, tp, cp, True, fast, slow)
    n = b * m.num_attention_heads / (tp * cp) * attention_counts.mean_score_elements(m, "kernel")
    saved = slow * n / (2 * ATTN_EXP_REF_RATE)
    measured = window_kernel.window_efficiency(m, ref, m.seq_length) is not None
    if measured:   # gpt-oss's 128-token windows at cuDNN's measured rate, which holds the
        # chip's own exponentials (docs/calibration.md §5.120): the full layers' share moves
        saved *= 1.0 - attention_counts.window_share(m)
    assert float(f0 - f1) == pytest.approx(attention_time.EXP_EXPOSED_FWD * saved, rel=1e-9)
    assert float(b0 - b1) == pytest.approx(attention_time.EXP_EXPOSED_BWD * saved, rel=1e-9)
    if measured:   # its catalog share: tests/test_window_kernel.py
        return
    # the share it moves by is the exponentials' share of the catalog time (at the kernel's
    # grid factor for the shape, §5.130)
    g_f, _ = attention_grid.rate_factors(m, b, tp, cp, ref, "native")
    peak = ref.peak("bf16") * ref.attention_efficiency * g_f
    t_cat = slow * attention_counts.attn_core_flops_fwd(m, b, tp, cp, True) / peak
    assert float(f0) == pytest.approx(t_cat, rel=1e-12)
    assert float(f1 / f0) == pytest.approx(1 - attention_time.EXP_EXPOSED_FWD * saved / t_cat,
                                           rel=1e-12)


def test_exponential_count_is_the_flops_over_flops_per_score():
    for name in ("llama3-70b", "deepseek-v3", "gpt-oss-120b"):
        m = model_preset(name)
        n = attention_counts.attn_exponentials_fwd(m, 2, 4, 2)
        f = attention_counts.attn_core_flops_fwd(m, 2, 4, 2, True)
        assert n == pytest.approx(f / (2 * (m.head_dim + m.v_dim)), rel=1e-12)


def test_reference_rate_and_unset_rate_are_bit_identical():
    """The term is exactly 0 where exp_rate is unset or at the reference (Hopper, Ampere, AMD,
    B200 and GB200 keep their figures bit for bit); arrays as scalars."""
    m = model_preset("llama3.1-405b")
    b = np.array([1.0, 2.0, 4.0])
    for name in ("GB200", "B200"):
        g = get_gpu(name)
        assert g.exp_rate == ATTN_EXP_REF_RATE and g.exp_seconds_offset() == 0.0
        a = attention_time.attention_time_fwd(m, b, 8, 1, True, g)
        z = attention_time.attention_time_fwd(m, b, 8, 1, True, _with_rate(name, None))
        assert all(np.array_equal(x, y) for x, y in zip(a, z))
    for g in GPUS.values():
        if not g.name.startswith(("B", "GB")):
            assert g.exp_rate is None and g.exp_seconds_offset() == 0.0, g.name


def test_blackwell_ultra_catalog_and_array_form():
    for name in ("B300-SXM-288GB", "GB300"):
        assert get_gpu(name).exp_rate == BLACKWELL_ULTRA_EXP_RATE == 10.7e12
    m = model_preset("llama3-70b")
    g = get_gpu("GB300")
    b = np.array([1.0, 2.0])
    arr = attention_time.attention_time_fwd(m, b, np.array([4, 8]), 1, True, g)
    for i in range(2):
        one = attention_time.attention_time_fwd(m, float(b[i]), (4, 8)[i], 1, True, g)
        assert float(arr[0][i]) == float(one[0]) and float(arr[1][i]) == float(one[1])
    # faster than GB200 (same bf16 peak and efficiency) in both passes
    f3, b3 = attention_time.attention_time_fwd(m, 1, 4, 1, True, g)
    f2, b2 = attention_time.attention_time_fwd(m, 1, 4, 1, True, get_gpu("GB200"))
    assert float(f3) < float(f2) and float(b3) < float(b2)


@pytest.mark.parametrize("bad", [0.0, -1.0, 2e15, True, "fast"])
def test_exp_rate_validated(bad):
    with pytest.raises(SpecError) as e:
        _with_rate("GB300", bad)
    assert "gpu.exp_rate" in str(e.value)


def test_yaml_key_round_trip_and_validation():
    d = {"name": "myblackwell", "bf16_tflops": 2500, "hbm_gib": 180, "hbm_tbps": 8,
         "exp_tera_per_s": 10.7}
    g = gpu_from_mapping(d)
    assert g.exp_rate == pytest.approx(10.7e12)
    assert gpu_from_mapping(gpu_to_mapping(g)) == g
    assert "exp_tera_per_s" not in gpu_to_mapping(gpu_from_mapping(
        {k: v for k, v in d.items() if k != "exp_tera_per_s"}))
    for bad in (0, -3, "x"):
        with pytest.raises(SpecError) as e:
            gpu_from_mapping({**d, "exp_tera_per_s": bad})
        assert "gpu.exp_tera_per_s" in str(e.value)


def test_pairs_experiment_model_ratio_is_the_closed_form():
    """experiments/sfu_attention_pairs.py's model column: GB200/GB300 time of a fused pass,
    1 / (g0/g1 - w·g0·n·(1/R0 - 1/R1)/t) with t the catalog time, n = F/(2(d_qk + d_v)) and
    g0, g1 the kernel's grid factors on GB200's 148 and GB300's 160 SMs (§5.130) times its
    head-dim factor at d_qk + d_v (§5.131; the experiment's shape: batch 1, the preset's heads and sequence)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "experiments" / "sfu_attention_pairs.py"
    spec = importlib.util.spec_from_file_location("sfu_attention_pairs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = get_gpu("GB200")
    dx = 1 / ATTN_EXP_REF_RATE - 1 / BLACKWELL_ULTRA_EXP_RATE
    g1 = get_gpu("GB300")
    for dq, dv in ((128, 128), (192, 128), (64, 64)):
        m = model_preset("deepseek-v3" if dq != dv else "llama3-70b")
        g0f, g0b = attention_grid.shape_factors(g, "native", m.num_attention_heads,
                                                m.seq_length, dq + dv)
        g1f, g1b = attention_grid.shape_factors(g1, "native", m.num_attention_heads,
                                                m.seq_length, dq + dv)
        per_flop = 1 / (g.peak("bf16") * g.attention_efficiency)   # catalog s per FLOP
        share = dx / (2 * (dq + dv)) / per_flop
        assert mod.model_ratio(dq, dv, False) == pytest.approx(
            1 / (g0f / g1f - attention_time.EXP_EXPOSED_FWD * share * g0f), rel=1e-12)
        bwd = attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY
        assert mod.model_ratio(dq, dv, True) == pytest.approx(
            1 / (g0b / g1b - attention_time.EXP_EXPOSED_BWD * share * g0b / bwd), rel=1e-12)
