"""The dense MLP's activation casts on Megatron-Core (strategies/cost/quantise.py,
``FrameworkProfile.mlp_act_casts``, docs/calibration.md §5.118): Megatron-Core's ``MLP`` runs
its own ``bias_swiglu_impl`` (bf16) between fc1 (``te.LayerNormLinear``) and fc2
(``te.Linear``), so fc2's input and fc1's incoming gradient are cast by passes of their own.
Closed forms to floating-point precision; stacks that fuse the casts keep their figures."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import elementwise_time, hbm_rate, quantise
from strategies.framework import get_profile
from strategies.presets import model_preset
from strategies.stacks.variants import with_fused_grouped_mlp
from topologies.gpus import get_gpu
from topologies.precision import PRECISIONS


def test_dense_activation_casts_move_from_fused_to_unfused_closed_form():
    m = model_preset("llama3-70b")                   # dense, gated
    b, tp, cp = 1, 4, 1
    T = b * m.seq_length
    f_act = T * m.ffn_hidden_size / tp               # fc2's input
    b_act = 2 * f_act                                # fc1's dY: both halves of the gate
    (ff0, fu0), (bf0, bu0) = quantise.layer_cast_elements(m, b, tp, cp, True)
    (ff1, fu1), (bf1, bu1) = quantise.layer_cast_elements(m, b, tp, cp, True, False, True)
    assert ff0 - ff1 == pytest.approx(f_act, rel=1e-15)
    assert fu1 - fu0 == pytest.approx(f_act, rel=1e-15)
    assert bf0 - bf1 == pytest.approx(b_act, rel=1e-15)
    assert bu1 - bu0 == pytest.approx(b_act, rel=1e-15)
    # the norm-fed inputs (QKV, fc1) stay fused: nothing else is fused in a dense layer
    assert bf1 == 0.0
    assert ff1 == pytest.approx(2 * T * m.hidden_size / tp, rel=1e-15)


def test_shared_experts_follow_the_dense_switch_routed_their_own():
    m = model_preset("deepseek-v3")                  # 3 dense layers of 61, one shared expert
    b, tp, cp = 1, 2, 1
    T = b * m.seq_length
    share = m.layer_shares()
    dense_f = share["dense"] * T * m.ffn_hidden_size / tp \
        + share["moe"] * T * m.num_shared_experts * m.shared_ffn / tp
    base = quantise.layer_cast_elements(m, b, tp, cp, True, True)
    (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, b, tp, cp, True, True, True)
    assert fu - base[0][1] == pytest.approx(dense_f, rel=1e-13)
    assert bu - base[1][1] == pytest.approx(2 * dense_f, rel=1e-13)
    # with both switches on no activation cast is fused
    assert bf == pytest.approx(0.0, abs=1e-6)


def test_cast_time_difference_is_the_unfused_surcharge():
    m, gpu = model_preset("llama3-70b"), get_gpu("GB200")
    mc = get_profile("megatron-core")
    off = replace(mc, mlp_act_casts=False)
    b, tp = 2, 4
    T = b * m.seq_length
    moved_f, moved_b = T * m.ffn_hidden_size / tp, 2 * T * m.ffn_hidden_size / tp
    hbm = hbm_rate.usable_hbm(gpu)
    for dtype in ("fp8", "fp8-current", "mxfp8"):
        p, c = PRECISIONS[dtype], gpu.cast_copies(dtype)
        extra = p.cast_bytes(c, False) - p.cast_bytes(c, True)
        on_f, on_b = elementwise_time.cast_time(m, b, tp, 1, True, gpu, dtype, fw=mc)
        off_f, off_b = elementwise_time.cast_time(m, b, tp, 1, True, gpu, dtype, fw=off)
        assert on_f - off_f == pytest.approx(moved_f * extra / hbm, rel=1e-12)
        assert on_b - off_b == pytest.approx(moved_b * extra / hbm, rel=1e-12)
    # current scaling: the unfused cast reads once more for its amax (2 B per element)
    p, c = PRECISIONS["fp8-current"], gpu.cast_copies("fp8-current")
    assert p.cast_bytes(c, False) - p.cast_bytes(c, True) == 2.0
    # 16 bits and nvfp4 (whose producer never computes the amax) are unchanged
    for dtype in ("bf16", "nvfp4"):
        assert elementwise_time.cast_time(m, b, tp, 1, True, gpu, dtype, fw=mc) == \
            elementwise_time.cast_time(m, b, tp, 1, True, gpu, dtype, fw=off)


def test_profiles():
    assert get_profile("megatron-core").mlp_act_casts and get_profile("nemo").mlp_act_casts
    assert not get_profile("hai-llm").mlp_act_casts
    assert not get_profile("torchtitan").mlp_act_casts
    # Megatron-Bridge's op fuser builds the dense MLPs as TEFusedMLP: fused again
    assert not with_fused_grouped_mlp(get_profile("megatron-core"), "mxfp8").mlp_act_casts


def test_vectorised_over_the_switch():
    m = model_preset("llama3-8b")
    on = np.array([False, True, False])
    (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, 1, 2, 1, True, False, on)
    for i, flag in enumerate(on):
        (ff_i, fu_i), (bf_i, bu_i) = quantise.layer_cast_elements(m, 1, 2, 1, True, False,
                                                                  bool(flag))
        assert (ff[i], fu[i], bf[i], bu[i]) == (ff_i, fu_i, bf_i, bu_i)
