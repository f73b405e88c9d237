"""Routed experts' activation casts on Megatron-Core (strategies/cost/quantise.py,
``FrameworkProfile.grouped_mlp_casts``): Transformer Engine's ``GroupedLinear`` quantises
fc2's input and fc1's incoming gradient in passes of their own, since the activation is the
stack's bf16 kernel. Closed forms to floating-point precision; dense layers, 16-bit
precisions and stacks whose expert kernels fuse the casts are unchanged bit for bit."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import elementwise_time, hbm_rate, layer_time, moe_bytes, moe_time
from strategies.cost import quantise
from strategies.framework import get_profile
from strategies.presets import model_preset
from topologies.gpus import get_gpu
from topologies.precision import PRECISIONS


def test_routed_activation_casts_move_from_fused_to_unfused_closed_form():
    m = model_preset("qwen3-30b-a3b")                 # every layer MoE, gated, top-8
    b, tp, cp = 2, 1, 1
    T = b * m.seq_length
    f_act = T * m.moe_router_topk * m.expert_ffn / tp  # fc2's input, per micro-batch
    b_act = 2 * f_act                                 # fc1's dY: both halves of the gate
    (ff0, fu0), (bf0, bu0) = quantise.layer_cast_elements(m, b, tp, cp, False)
    (ff1, fu1), (bf1, bu1) = quantise.layer_cast_elements(m, b, tp, cp, False, True)
    assert ff0 - ff1 == pytest.approx(f_act, rel=1e-15)
    assert fu1 - fu0 == pytest.approx(f_act, rel=1e-15)
    assert bf0 - bf1 == pytest.approx(b_act, rel=1e-15)
    assert bu1 - bu0 == pytest.approx(b_act, rel=1e-15)
    # the totals are the same elements, only who casts them changes
    assert ff0 + fu0 == pytest.approx(ff1 + fu1, rel=1e-15)
    assert bf0 + bu0 == pytest.approx(bf1 + bu1, rel=1e-15)


def test_mean_layer_share_and_shared_experts_stay_fused():
    m = model_preset("deepseek-v3")                   # 3 dense layers of 61, one shared expert
    b, tp, cp = 1, 2, 1
    T = b * m.seq_length
    share = m.layer_shares()["moe"]
    f_act = share * T * m.moe_router_topk * m.expert_ffn / tp
    (ff0, fu0), (bf0, bu0) = quantise.layer_cast_elements(m, b, tp, cp, True)
    (ff1, fu1), (bf1, bu1) = quantise.layer_cast_elements(m, b, tp, cp, True, True)
    assert fu1 - fu0 == pytest.approx(f_act, rel=1e-13)
    assert bu1 - bu0 == pytest.approx(2 * f_act, rel=1e-13)
    assert ff0 - ff1 == pytest.approx(f_act, rel=1e-13)
    assert bf0 - bf1 == pytest.approx(2 * f_act, rel=1e-13)


def test_dense_model_is_unchanged_bit_for_bit():
    m = model_preset("llama3-8b")
    assert quantise.layer_cast_elements(m, 2, 4, 1, True, True) == \
        quantise.layer_cast_elements(m, 2, 4, 1, True)


def test_vectorised_over_the_switch():
    m = model_preset("qwen3-30b-a3b")
    on = np.array([False, True, False])
    (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, 1, 1, 1, False, on)
    for i, flag in enumerate(on):
        (ff_i, fu_i), (bf_i, bu_i) = quantise.layer_cast_elements(m, 1, 1, 1, False, bool(flag))
        assert (ff[i], fu[i], bf[i], bu[i]) == (ff_i, fu_i, bf_i, bu_i)


@pytest.mark.parametrize("dtype", ["mxfp8", "fp8", "fp8-current", "nvfp4"])
def test_cast_time_charges_the_unfused_bytes_by_stack(dtype):
    m, gpu = model_preset("qwen3-30b-a3b"), get_gpu("GB200")
    b = 4
    f_act = b * m.seq_length * m.moe_router_topk * m.expert_ffn
    p, c = PRECISIONS[dtype], gpu.cast_copies(dtype)
    extra = p.cast_bytes(c, False) - p.cast_bytes(c, True)   # per element moved out of the kernel
    hbm = hbm_rate.usable_hbm(gpu)
    mc_f, mc_b = elementwise_time.cast_time(m, b, 1, 1, False, gpu, dtype,
                                            fw=get_profile("megatron-core"))
    hai_f, hai_b = elementwise_time.cast_time(m, b, 1, 1, False, gpu, dtype,
                                              fw=get_profile("hai-llm"))
    assert get_profile("nemo").grouped_mlp_casts and not get_profile("hai-llm").grouped_mlp_casts
    assert mc_f - hai_f == pytest.approx(f_act * extra / hbm, rel=1e-12)
    assert mc_b - hai_b == pytest.approx(2 * f_act * extra / hbm, rel=1e-12)
    assert elementwise_time.cast_time(m, b, 1, 1, False, gpu, "bf16",
                                      fw=get_profile("nemo")) == (0.0, 0.0)


def test_layer_time_carries_the_cast_in_forward_and_backward():
    m, gpu = model_preset("qwen3-30b-a3b"), get_gpu("GB200")
    kw = dict(b=4, tp=1, cp=1, ep=8, sp=False, flash=True, recompute=0, gpu=gpu,
              dtype="mxfp8")
    mc = layer_time.layer_time(m, fw=get_profile("megatron-core"), **kw)
    base = layer_time.layer_time(
        m, fw=replace(get_profile("megatron-core"), grouped_mlp_casts=False), **kw)
    c1 = elementwise_time.cast_time(m, 4, 1, 1, False, gpu, "mxfp8",
                                    fw=get_profile("megatron-core"))
    c0 = elementwise_time.cast_time(m, 4, 1, 1, False, gpu, "mxfp8", fw=get_profile("hai-llm"))
    # and GroupedLinear's per-split MXFP8 quantise launches (docs/calibration.md §5.171)
    k_f, k_b = moe_time.expert_quantise_time(m, 8, gpu, "mxfp8", get_profile("megatron-core"))
    assert k_f > 0 and k_b > 0
    assert mc.fwd - base.fwd == pytest.approx(c1[0] - c0[0] + k_f, rel=1e-9)
    assert mc.bwd - base.bwd == pytest.approx(c1[1] - c0[1] + k_b, rel=1e-9)


def test_expert_pad_bytes_closed_form():
    m = model_preset("qwen3-30b-a3b")                 # every layer MoE
    b, tp, cp = 4, 1, 1
    T = b * m.seq_length
    R = 2.0 * T * m.moe_router_topk * m.hidden_size   # bf16 routed copies, etp 1
    f, bw = moe_bytes.expert_pad_bytes(m, b, tp, cp)
    assert f == pytest.approx(4 * R, rel=1e-15)       # pad the input, unpad the output
    assert bw == pytest.approx(4 * R, rel=1e-15)      # their inverses on the gradients
    d = model_preset("deepseek-v3")                   # 3 dense layers of 61: the MoE share
    f_d, _ = moe_bytes.expert_pad_bytes(d, 1, 1, 1, load=1.5, etp=2)
    R_d = 2.0 * d.seq_length * d.moe_router_topk * d.hidden_size * 1.5
    assert f_d == pytest.approx(d.layer_shares()["moe"] * 2 * (R_d + 2 * R_d), rel=1e-13)
    assert moe_bytes.expert_pad_bytes(model_preset("llama3-8b"), 1, 1, 1) == (0.0, 0.0)


def test_expert_pad_time_by_stack_and_precision():
    m, gpu = model_preset("qwen3-30b-a3b"), get_gpu("GB200")
    f, bw = moe_bytes.expert_pad_bytes(m, 4, 1, 1)
    hbm = hbm_rate.usable_hbm(gpu)
    nemo = get_profile("nemo")
    assert nemo.quant_padding and not get_profile("hai-llm").quant_padding
    assert moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=nemo) == \
        pytest.approx((f / hbm, bw / hbm), rel=1e-15)
    assert moe_time.expert_pad_time(m, 4, 1, 1, gpu, "bf16", fw=nemo) == (0.0, 0.0)
    assert moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8",
                                    fw=get_profile("hai-llm")) == (0.0, 0.0)


def test_layer_time_carries_the_padding():
    m, gpu = model_preset("qwen3-30b-a3b"), get_gpu("GB200")
    kw = dict(b=4, tp=1, cp=1, ep=8, sp=False, flash=True, recompute=0, gpu=gpu,
              dtype="mxfp8", dispatcher=0)
    mc = get_profile("megatron-core")
    on = layer_time.layer_time(m, fw=mc, **kw)
    off = layer_time.layer_time(m, fw=replace(mc, quant_padding=False), **kw)
    q_f, q_b = moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=mc)
    assert on.fwd - off.fwd == pytest.approx(q_f, rel=1e-9)
    assert on.bwd - off.bwd == pytest.approx(q_b, rel=1e-9)
    # full recomputation reruns the forward's padding
    full_on = layer_time.layer_time(m, fw=mc, **{**kw, "recompute": 2}).recompute
    full_off = layer_time.layer_time(m, fw=replace(mc, quant_padding=False),
                                     **{**kw, "recompute": 2})
    assert full_on - full_off.recompute == pytest.approx(q_f, rel=1e-9)


def test_hybridep_pads_in_its_dispatch():
    """HybridEP lays each local expert's rows out at the quantised GEMM's alignment
    (``moe_bytes.DISPATCH_PADS``), so Transformer Engine's padding copies nothing: no
    padding time for it, the same for the alltoall dispatcher and DeepEP; vectorised."""
    m, gpu = model_preset("qwen3-30b-a3b"), get_gpu("GB200")
    nemo = get_profile("nemo")
    f, bw = moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=nemo, dispatcher=0)
    assert f > 0 and bw > 0
    assert moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=nemo, dispatcher=1) == (f, bw)
    assert moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=nemo, dispatcher=2) == (0.0, 0.0)
    vf, vb = moe_time.expert_pad_time(m, 4, 1, 1, gpu, "mxfp8", fw=nemo,
                                      dispatcher=np.array([0, 1, 2]))
    assert list(vf) == [f, f, 0.0] and list(vb) == [bw, bw, 0.0]
    # the layer under HybridEP is the same whether or not the stack pads
    kw = dict(b=4, tp=1, cp=1, ep=8, sp=False, flash=True, recompute=2, gpu=gpu,
              dtype="mxfp8", dispatcher=2)
    on = layer_time.layer_time(m, fw=nemo, **kw)
    off = layer_time.layer_time(m, fw=replace(nemo, quant_padding=False), **kw)
    assert (on.fwd, on.bwd, on.recompute) == (off.fwd, off.bwd, off.recompute)
