"""gpt-oss's 128-token sliding-window layers at the fused kernel's rate cuDNN measures
(``strategies.cost.window_kernel``; docs/calibration.md §5.120): the class, the chips, the
closed form of the split, the MXFP8 composition, arrays against scalars, every other model
untouched, and the experiment's reader."""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import os

import numpy as np
import pytest

from strategies.cost import attention_counts, attention_grid, attention_time, window_kernel
from strategies.cost import fp8_attention as fa
from strategies.cost.fp8_attention import SEQS
from strategies.cost.hbm_rate import usable_hbm
from strategies.framework import DEFAULT
from strategies.presets import model_preset
from strategies.stacks.variants import with_fp8_attention
from topologies.gpus import get_gpu

REL = 1e-12
GPT_OSS = model_preset("gpt-oss-120b")
GB200, GB300 = get_gpu("GB200"), get_gpu("GB300")
B200, B300, H100 = get_gpu("B200-SXM-180GB"), get_gpu("B300-SXM-288GB"), get_gpu("H100-SXM5-80GB")


def _closed_form(m, b, tp, cp, gpu, slow=1.0):
    """The split by hand: full layers at the catalog rate times the kernel's grid factor of
    the full layers (``attention_grid.rate_factors``, §5.130) with their exposed
    exponentials, windowed layers' forward FLOPs at the measured fractions of the peak."""
    s, L, nw = m.seq_length, m.num_layers, m.num_windowed_layers
    full = attention_counts.score_elements(s, None, mode="kernel")
    win = attention_counts.score_elements(s, 128, "sliding", "kernel")
    per = 2 * b * m.num_attention_heads * 128 / (tp * cp)
    peak = gpu.peak("bf16")
    chip = "gb300" if gpu.name.startswith(("GB300", "B300")) else "gb200"
    ef = np.interp(math.log(s / cp), np.log(SEQS), window_kernel.EFFICIENCY[(chip, "64/64w128")][0])
    eb = np.interp(math.log(s / cp), np.log(SEQS), window_kernel.EFFICIENCY[(chip, "64/64w128")][1])
    f_full = per * full * (L - nw) / L
    f_win = per * win * nw / L
    g_f, g_b = attention_grid.rate_factors(m, b, tp, cp, gpu, "native", windows=False)
    t_full = slow * f_full / (peak * gpu.attention_efficiency)
    n_full = b * m.num_attention_heads / (tp * cp) * full * (L - nw) / L
    x = slow * n_full * gpu.exp_seconds_offset()
    fwd = t_full / g_f + attention_time.EXP_EXPOSED_FWD * x + slow * f_win / (peak * ef)
    bwd = (attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY * t_full / g_b
           + attention_time.EXP_EXPOSED_BWD * x
           + slow * attention_time.FLASH_BWD_FACTOR * f_win / (peak * eb))
    return fwd, bwd


def test_only_the_measured_shape_on_blackwell_is_read():
    assert window_kernel.window_class(GPT_OSS) == "64/64w128"
    for gpu in (GB200, GB300, B200, B300):
        assert window_kernel.window_efficiency(GPT_OSS, gpu, 4096) is not None
    assert window_kernel.window_efficiency(GPT_OSS, H100, 4096) is None      # no timing
    for change in ({"sliding_window": 256}, {"window_kind": "chunked"}, {"kv_channels": 128},
                   {"sliding_window": None}):
        assert window_kernel.window_class(dataclasses.replace(GPT_OSS, **change)) is None
    for name in ("llama3-70b", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x22b"):
        assert window_kernel.window_class(model_preset(name)) is None


def test_efficiency_at_the_measured_points_and_between():
    for chip, gpu in (("gb200", GB200), ("gb300", GB300)):
        f, b = window_kernel.EFFICIENCY[(chip, "64/64w128")]
        for i, s in enumerate(SEQS):
            ef, eb = window_kernel.window_efficiency(GPT_OSS, gpu, s)
            assert (float(ef), float(eb)) == (pytest.approx(f[i], rel=REL),
                                              pytest.approx(b[i], rel=REL))
        ef, _ = window_kernel.window_efficiency(GPT_OSS, gpu, math.sqrt(4096 * 8192))
        assert float(ef) == pytest.approx((f[1] + f[2]) / 2, rel=REL)    # log-linear
        assert float(window_kernel.window_efficiency(GPT_OSS, gpu, 1024)[0]) == f[0]


@pytest.mark.parametrize("gpu", [GB200, GB300, B200, B300])
@pytest.mark.parametrize("b,tp,cp", [(4, 1, 1), (1, 2, 1), (2, 1, 2)])
def test_attention_time_is_the_split_closed_form(gpu, b, tp, cp):
    f, bw = attention_time.attention_time_fwd(GPT_OSS, b, tp, cp, True, gpu, 1.03)
    cf, cb = _closed_form(GPT_OSS, b, tp, cp, gpu, 1.03)
    assert float(f) == pytest.approx(cf, rel=REL)
    assert float(bw) == pytest.approx(cb, rel=REL)


def test_the_windowed_layers_get_slower_than_the_catalog():
    """The measured rate (12-16 % of the peak) is below the catalog's 0.55: every Blackwell
    chip's gpt-oss attention grows, forward and backward."""
    off = dataclasses.replace(GPT_OSS, sliding_window=127)      # same band, no measured class
    for gpu in (GB200, GB300, B200, B300):
        f1, b1 = attention_time.attention_time_fwd(GPT_OSS, 4, 1, 1, True, gpu)
        f0, b0 = attention_time.attention_time_fwd(off, 4, 1, 1, True, gpu)
        assert f1 > f0 and b1 > b0


def test_mxfp8_divides_each_kind_by_its_own_ratio():
    fw = with_fp8_attention(DEFAULT, "mxfp8", GB200)
    f1, b1 = attention_time.attention_time_fwd(GPT_OSS, 2, 1, 1, True, GB200, fw=fw)
    (rf, rb), (wf, wb) = fa.kind_ratios(GPT_OSS, GB200, GPT_OSS.seq_length)
    # the full layers' share alone: the same model with no windowed layer priced at the
    # measured rate (GB200: no exponential offset), times the full layers' share of the blocks
    w = attention_counts.window_share(GPT_OSS)
    g_f, g_b = attention_grid.rate_factors(GPT_OSS, 2, 1, 1, GB200, "native", windows=False)
    t_mean = attention_counts.attn_core_flops_fwd(GPT_OSS, 2, 1, 1, True) \
        / (GB200.peak("bf16") * GB200.attention_efficiency)
    f_full = (1 - w) * t_mean / g_f
    b_full = attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY \
        * (1 - w) * t_mean / g_b
    f0, b0 = _closed_form(GPT_OSS, 2, 1, 1, GB200)
    f_win, b_win = f0 - f_full, b0 - b_full
    cf, cb = fa.cast_bytes(GPT_OSS, 2, 1, 1)
    hbm = usable_hbm(GB200)
    assert float(f1) == pytest.approx(f_full / rf + f_win / wf + cf / hbm, rel=1e-9)
    assert float(b1) == pytest.approx(b_full / rb + b_win / wb + cb / hbm, rel=1e-9)
    # the windowed MXFP8 backward is then cuDNN's measured MXFP8 time of the shape
    assert b_win / wb > 4 * b_win


def test_fp8_time_factors_unchanged_by_the_refactor():
    s, L, nw = GPT_OSS.seq_length, GPT_OSS.num_layers, GPT_OSS.num_windowed_layers
    full = attention_counts.score_elements(s, None, mode="kernel") * (L - nw)
    win = attention_counts.score_elements(s, 128, "sliding", "kernel") * nw
    assert attention_counts.window_share(GPT_OSS) == win / (full + win)
    assert attention_counts.window_share(model_preset("llama3-70b")) == 0.0


def test_arrays_equal_scalars():
    b = np.array([1, 2, 4, 4]); tp = np.array([1, 1, 2, 1]); cp = np.array([1, 2, 1, 1])
    flash = np.array([True, True, True, False])
    fa_, ba_ = attention_time.attention_time_fwd(GPT_OSS, b, tp, cp, flash, GB300)
    for i in range(len(b)):
        f, bw = attention_time.attention_time_fwd(GPT_OSS, int(b[i]), int(tp[i]), int(cp[i]),
                                                  bool(flash[i]), GB300)
        assert float(fa_[i]) == float(f) and float(ba_[i]) == float(bw)


def test_other_models_and_hopper_are_the_catalog_rate():
    """No measured window: the attention core is the catalog's closed form over the kernel's
    grid factor of the mean layer, windowed layers' grid included (§5.130), bit for bit."""
    for name, gpu in (("llama3-70b", GB200), ("qwen3-30b-a3b", B200), ("gpt-oss-120b", H100)):
        m = model_preset(name)
        f, _ = attention_time.attention_time_fwd(m, 2, 1, 1, True, gpu)
        t = attention_counts.attn_core_flops_fwd(m, 2, 1, 1, True) \
            / (gpu.peak("bf16") * gpu.attention_efficiency)
        g_f, _ = attention_grid.rate_factors(m, 2, 1, 1, gpu, "native")
        assert float(f) == t / g_f


def _experiment():
    path = os.path.join(os.path.dirname(__file__), "..", "experiments", "window_kernel_rates.py")
    spec = importlib.util.spec_from_file_location("window_kernel_rates", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_experiment_reads_bf16_non_deterministic_causal_rows():
    mod = _experiment()
    base = {"success": "True", "data_type": "bfloat16", "deterministic_bwd": "False",
            "attn_mask": "top_left", "q_seqlen": "4096", "profile_pass": "fwd"}
    rows = [base, {**base, "data_type": "mxfp8"}, {**base, "deterministic_bwd": "True"},
            {**base, "success": "False"}, {"data_type": "bfloat16"}]
    assert list(mod.bf16_times(rows)) == [(4096, "fwd")]


def test_experiment_efficiency_inverts_the_model():
    """A benchmark row timed at exactly the model's measured-window time reads back the table's
    efficiency."""
    mod = _experiment()
    r = {"q_seqlen": "8192", "batch_size": "2", "num_q_heads": "128", "num_kv_heads": "128",
         "head_dim_qk": "64", "sliding_window_size": "128", "profile_pass": "bwd"}
    r["time_ms"] = str(mod.model_ms(r, "GB300"))
    e = mod.efficiency(r, GB300.peak("bf16"))
    assert e == pytest.approx(window_kernel.EFFICIENCY[("gb300", "64/64w128")][1][2], rel=1e-9)
