"""Per-expert quantisation launches of Transformer Engine's ``GroupedLinear``
(``quantise.expert_quantise_kernels``, ``moe_time.expert_quantise_time``; docs/calibration.md
§5.59): ``split_quantize`` runs one fused cast-transpose over every local expert for
delayed-scaling fp8, and ``n`` kernels per expert otherwise (current scaling 3: amax, scale,
cast; block scaling and MXFP8 1, docs/calibration.md §5.171). Closed forms to floating-point precision; delayed scaling, 16 bits, dense models and
stacks without ``GroupedLinear`` unchanged bit for bit; the estimate's and the simulator's
stage record carry the same seconds."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import layer_time, moe_time
from strategies.cost import measured, quantise
from strategies.cost.stage import stage_costs
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

QWEN = model_preset("qwen3-30b-a3b")                      # 128 experts, every layer MoE


def test_current_scaling_closed_form_and_vectorised():
    ep = np.array([1, 2, 8, 16, 128])
    f, b = quantise.expert_quantise_kernels(QWEN, ep, "fp8-current", True)
    k = 128 / ep
    want = 2 * (3 * k - 1)                                 # two casts a pass, 3 kernels/expert
    np.testing.assert_array_equal(f, want)
    np.testing.assert_array_equal(b, want)
    for i, e in enumerate(ep):                             # scalar = array, bit for bit
        assert quantise.expert_quantise_kernels(QWEN, int(e), "fp8-current", True) == \
            (want[i], want[i])


def test_kernels_of_E_experts_are_E_times_one_experts_less_the_fused_launch():
    one = quantise.SPLIT_QUANTIZE_KERNELS["fp8-current"] * 2      # per pass, one expert
    for ep in (1, 4, 32):
        k = QWEN.num_experts // ep
        f, _ = quantise.expert_quantise_kernels(QWEN, ep, "fp8-current", True)
        assert f + 2 == k * one                            # + the two launches already counted


def test_delayed_bf16_dense_and_fused_stacks_add_nothing():
    for dtype in ("fp8", "fp8-delayed", "bf16", "nvfp4"):
        assert quantise.expert_quantise_kernels(QWEN, 8, dtype, True) == (0.0, 0.0)
    assert quantise.expert_quantise_kernels(QWEN, 8, "fp8-current", False) == (0.0, 0.0)
    dense = model_preset("llama3-8b")
    assert quantise.expert_quantise_kernels(dense, 1, "fp8-current", True) == (0.0, 0.0)


def test_moe_share_scales_the_mean_layer():
    d = model_preset("deepseek-v3")                        # 3 dense layers of 61
    share = d.layer_shares()["moe"]
    f, _ = quantise.expert_quantise_kernels(d, 32, "fp8-blockwise", True)
    assert f == pytest.approx(share * 2 * (d.num_experts / 32 - 1), rel=1e-15)


def test_time_is_kernels_times_the_launch_gap_and_layer_time_carries_it():
    gpu, mc = get_gpu("H100"), get_profile("megatron-core")
    k_f, k_b = quantise.expert_quantise_kernels(QWEN, 16, "fp8-current", True)
    gap = measured.launch_gap(gpu, mc.launch_gap_s)
    assert moe_time.expert_quantise_time(QWEN, 16, gpu, "fp8-current", mc) == (k_f * gap, k_b * gap)
    assert moe_time.expert_quantise_time(QWEN, 16, gpu, "fp8-current",
                                         replace(mc, grouped_mlp_casts=False)) == (0.0, 0.0)
    kw = dict(b=1, tp=1, cp=1, ep=16, sp=False, flash=True, recompute=0, gpu=gpu,
              dtype="fp8-current", dispatcher=0, graphed=True, fw=mc)
    on = layer_time.layer_time(QWEN, **kw)
    saved = dict(quantise.SPLIT_QUANTIZE_KERNELS)
    try:
        quantise.SPLIT_QUANTIZE_KERNELS.clear()
        off = layer_time.layer_time(QWEN, **kw)
    finally:
        quantise.SPLIT_QUANTIZE_KERNELS.update(saved)
    assert on.fwd - off.fwd == pytest.approx(k_f * gap, rel=1e-9)
    assert on.bwd - off.bwd == pytest.approx(k_b * gap, rel=1e-9)
    assert layer_time.layer_time(QWEN, **{**kw, "dtype": "fp8"}).fwd == \
        layer_time.layer_time(QWEN, **{**kw, "dtype": "fp8"}).fwd     # deterministic


def test_stage_record_and_simulation_read_the_rule():
    m = replace(QWEN, name="qwen3-4l", num_layers=4)
    job = make_job(m, cluster_preset("dgx-h100", 1),
                   Plan(tp=1, pp=1, dp=8, ep=8, mbs=1, gbs=16), dtype="fp8-current",
                   framework="megatron-core")
    gap = measured.launch_gap(job.cluster.gpu, job.framework.launch_gap_s)
    k_f, _ = quantise.expert_quantise_kernels(m, 8, "fp8-current", True)
    on_sc, on_sim = stage_costs(job), simulate(job).step_time_s
    saved = dict(quantise.SPLIT_QUANTIZE_KERNELS)
    try:
        quantise.SPLIT_QUANTIZE_KERNELS.clear()
        off_sc, off_sim = stage_costs(job), simulate(job).step_time_s
    finally:
        quantise.SPLIT_QUANTIZE_KERNELS.update(saved)
    assert float(on_sc.layer_fwd - off_sc.layer_fwd) == pytest.approx(k_f * gap, rel=1e-6)
    assert on_sim > off_sim


def test_mxfp8_quantises_each_split_with_one_kernel():
    """TE <= 2.16 ``split_quantize`` over MXFP8 quantisers: bulk allocation, then one
    ``nvte_quantize_v2`` per split (row- and column-wise from the one kernel), so a cast
    over ``k`` local experts launches ``k`` kernels, ``k - 1`` beyond the fused count."""
    assert quantise.SPLIT_QUANTIZE_KERNELS["mxfp8"] == 1
    ep = np.array([1, 2, 8, 16, 128])
    f, b = quantise.expert_quantise_kernels(QWEN, ep, "mxfp8", True)
    want = 2 * (128 / ep - 1)
    np.testing.assert_array_equal(f, want)
    np.testing.assert_array_equal(b, want)
    assert quantise.expert_quantise_kernels(QWEN, 128, "mxfp8", True) == (0.0, 0.0)
    assert quantise.expert_quantise_kernels(QWEN, 8, "mxfp8", False) == (0.0, 0.0)
    gpu, nemo = get_gpu("B200"), get_profile("nemo")
    gap = measured.launch_gap(gpu, nemo.launch_gap_s)
    t_f, t_b = moe_time.expert_quantise_time(QWEN, 8, gpu, "mxfp8", nemo)
    assert t_f == pytest.approx(30 * gap, rel=1e-15)       # 16 local experts: 2 x 15
    assert t_b == pytest.approx(30 * gap, rel=1e-15)


def test_mxfp8_stage_record_and_simulation_move_together():
    m = replace(QWEN, name="qwen3-4l", num_layers=4)
    job = make_job(m, cluster_preset("dgx-b200", 1),
                   Plan(tp=1, pp=1, dp=8, ep=8, mbs=1, gbs=16, moe_dispatcher="hybridep"),
                   dtype="mxfp8", framework="nemo")
    gap = measured.launch_gap(job.cluster.gpu, job.framework.launch_gap_s)
    k_f, k_b = quantise.expert_quantise_kernels(m, 8, "mxfp8", True)
    on_sc, on_sim = stage_costs(job), simulate(job).step_time_s
    saved = dict(quantise.SPLIT_QUANTIZE_KERNELS)
    try:
        del quantise.SPLIT_QUANTIZE_KERNELS["mxfp8"]
        off_sc, off_sim = stage_costs(job), simulate(job).step_time_s
    finally:
        quantise.SPLIT_QUANTIZE_KERNELS.clear()
        quantise.SPLIT_QUANTIZE_KERNELS.update(saved)
    assert float(on_sc.layer_fwd - off_sc.layer_fwd) == pytest.approx(k_f * gap, rel=1e-6)
    assert float(on_sc.layer_bwd - off_sc.layer_bwd) == pytest.approx(k_b * gap, rel=1e-6)
    assert on_sim > off_sim
