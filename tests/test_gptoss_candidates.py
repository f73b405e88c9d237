"""``experiments/gptoss_candidates.py`` (docs/calibration.md §5.175): what each candidate for
gpt-oss-120b's miss would have to be to hold it alone, read from the model's own terms."""
from __future__ import annotations

import pytest

from experiments import gptoss_candidates as gc
from strategies.cost import attention_counts
from strategies.estimate import estimate

ROWS = dict(gc.gptoss_rows())


def test_every_megatron_bridge_gptoss_row_is_read():
    assert sorted(ROWS) == sorted([
        "mbridge260401_gptoss120b_gb300_64_bf16", "mbridge260401_gptoss120b_gb200_64_bf16",
        "mbridge260401_gptoss120b_b300_64_bf16", "mbridge260401_gptoss120b_b200_64_bf16",
        "mbridge260401_gptoss120b_h100_64_bf16", "mbridge2606_gptoss120b_gb300_64_mxfp8",
        "mbridge2606_gptoss120b_gb200_64_mxfp8", "mbridge2606_gptoss120b_b300_64_mxfp8",
        "mbridge2511_gptoss120b_gb200_64_bf16"])


@pytest.mark.parametrize("rid", ["mbridge260401_gptoss120b_gb300_64_bf16",
                                 "mbridge260401_gptoss120b_h100_64_bf16"])
def test_needed_figures_invert_the_miss(rid):
    c = gc.candidates(ROWS[rid])
    assert c["miss"] > 0
    assert c["attn"] * c["attn_x"] == pytest.approx(c["attn"] + c["miss"], rel=1e-12)
    assert c["gemm_frac"] * c["experts"] == pytest.approx(
        c["gemm_frac_needed"] * (c["experts"] + c["miss"]), rel=1e-12)
    assert 0 < c["full"] < c["attn"]
    assert c["full"] * c["full_x"] == pytest.approx(c["full"] + c["miss"], rel=1e-12)
    assert c["a2a_rate"] * c["a2a"] == pytest.approx(
        c["a2a_rate_needed"] * (c["a2a"] + c["miss"]), rel=1e-12)


def test_miss_is_the_estimate_per_layer_and_micro_batch():
    case = ROWS["mbridge260401_gptoss120b_gb300_64_bf16"]
    est = estimate(case.job)
    per = est.num_microbatches * case.job.model.num_layers / case.job.plan.pp
    c = gc.candidates(case)
    assert c["miss"] == pytest.approx((case.measured_step_s - est.step_time_s) / per, rel=1e-12)


def test_all_to_all_is_the_estimates_where_nothing_hides_it():
    """Without Megatron-Core's overlapped 1F1B the estimate exposes the four all-to-alls
    whole; with it (the 26.04 GB200 row) less."""
    gb300 = gc.candidates(ROWS["mbridge260401_gptoss120b_gb300_64_bf16"])
    gb200 = gc.candidates(ROWS["mbridge260401_gptoss120b_gb200_64_bf16"])
    assert not ROWS["mbridge260401_gptoss120b_gb300_64_bf16"].job.plan.ep_overlap
    assert gb300["a2a_exposed"] == pytest.approx(gb300["a2a"], rel=1e-9)
    assert ROWS["mbridge260401_gptoss120b_gb200_64_bf16"].job.plan.ep_overlap
    assert gb200["a2a_exposed"] < 0.5 * gb200["a2a"]


def test_unfused_saved_probabilities_closed_form():
    """bf16 probabilities of 64 heads over the 4096² square, mbs 4, 36 layers on one stage:
    more than the GB300's memory, so the unfused path could not have run there."""
    case = ROWS["mbridge260401_gptoss120b_gb300_64_bf16"]
    c = gc.candidates(case)
    assert c["unfused_saved"] == pytest.approx(2.0 * 64 * 4096 ** 2 * 4 * 36, rel=1e-12)
    assert c["unfused_saved"] > c["gpu_mem"]
    m, p = case.job.model, case.job.plan
    assert attention_counts.score_elements_per_gpu(m, p.mbs, p.tp, p.cp) == 64 * 4096 ** 2 * 4


def test_windows_of_128_and_129_keys_run_the_same_kernel_blocks():
    """Megatron-Bridge 0.2.0's (128, 0) and 0.4.2's (127, 0): 129 and 128 keys, two 128-key
    blocks per query tile either way; 130 keys would reach a third."""
    for s in (4096, 8192):
        w128 = attention_counts.score_elements(s, 128, mode="kernel")
        assert attention_counts.score_elements(s, 129, mode="kernel") == w128
        assert attention_counts.score_elements(s, 130, mode="kernel") > w128
