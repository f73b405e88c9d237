"""The Mamba-2 mixer's cost (``strategies.cost.mamba_mixer``): the SSD scan's FLOPs closed form
against a direct count over its chunks, its GEMM shapes per tensor-parallel rank, and the
refused plans (tp not dividing heads and groups, context parallelism)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import mamba_mixer as mx
from strategies.errors import SpecError
from strategies.presets import model_preset


def _direct_ssd_flops(s: int, Q: int, N: int, P: int, H: float, G: float,
                      backward: bool = False) -> float:
    """The SSD kernels' FLOPs counted chunk by chunk (one sequence of ``s`` tokens), each
    kernel of ``_mamba_chunk_scan_combined_fwd`` / ``_bwd`` one line."""
    n, start = 0.0, 0
    while start < s:
        q = min(Q, s - start)
        n += G * 2 * q * q * N          # _bmm_chunk_fwd: C·Bᵀ per group (recomputed backward)
        n += H * 2 * q * N * P          # _chunk_state_fwd: Bᵀ·x per head (recomputed backward)
        n += H * 2 * N * P              # _state_passing_fwd: one multiply-add per element
        if not backward:
            n += H * 2 * q * q * P      # _chunk_scan_fwd: (L∘CBᵀ)·x
            n += H * 2 * q * N * P      # _chunk_scan_fwd: C·h
        else:
            n += H * 2 * q * N * P      # _chunk_scan_bwd_dstates: Cᵀ·dout
            n += H * 2 * N * P          # _state_passing_bwd
            n += H * 2 * q * q * P      # _chunk_scan_chunk_state_bwd_dx: (L∘CBᵀ)ᵀ·dout
            n += H * 2 * q * N * P      # ... and B·dstates
            n += H * 2 * q * N * P      # _chunk_state_bwd_db: xᵀ·dstates
            n += H * 2 * q * N * P      # _chunk_scan_bwd_dC: dout·states
            n += H * 2 * q * q * P      # _chunk_scan_bwd_dcb: dout·xᵀ
            n += G * 2 * 2 * q * q * N  # _bmm_chunk_bwd twice: dB and dC from dCB
            n += H * 2 * q * q * P      # _chunk_scan_bwd_ddAcs_stable: dout·xᵀ again
        start += q
    return n


@pytest.mark.parametrize("name,seq,tp", [("nemotron-h-56b", 8192, 8), ("nemotron-h-8b", 8192, 1),
                                         ("nemotron-h-8b", 4000, 2),   # a partial last chunk
                                         ("nemotron3-nano-30b-a3b", 129, 4)])
@pytest.mark.parametrize("backward", [False, True])
def test_ssd_flops_closed_form_is_the_direct_count(name, seq, tp, backward):
    m = model_preset(name).with_seq_length(seq)
    H, G = m.mamba_num_heads / tp, m.mamba_num_groups / tp
    direct = 3 * _direct_ssd_flops(seq, m.mamba_chunk_size, m.mamba_state_dim,
                                   m.mamba_head_dim, H, G, backward)
    got = float(mx.ssd_flops(m, 3, tp, backward=backward))
    assert abs(got - direct) <= 1e-12 * direct


def test_ssd_flops_vectorised_over_plans():
    m = model_preset("nemotron-h-8b")
    tp = np.array([1, 2, 4, 8])
    got = mx.ssd_flops(m, 1, tp)
    assert np.allclose(got * tp, got[0], rtol=1e-12)          # heads and groups split over tp


def test_gemm_shapes_per_rank():
    m = model_preset("nemotron-h-56b")
    (c1, T1, n1, k1, r1), (c2, T2, n2, k2, r2) = mx.mamba_gemms(m, 1, 8)
    # in_proj 8192 -> 2*16384 + 2*8*256 + 256 = 37120 split over 8; out_proj 16384/8 -> 8192
    assert (T1, n1, k1, r1) == (8192, 37120 / 8, 8192, False)
    assert (T2, n2, k2, r2) == (8192, 8192, 16384 / 8, True)
    flops = sum(2 * c * M * N * K for c, M, N, K, _ in mx.mamba_gemms(m, 1, 1))
    assert flops == 2 * 8192 * (8192 * 37120 + 16384 * 8192)


def test_scan_time_is_the_roofline_over_the_measured_efficiency():
    from strategies.cost.mamba_kernels import scan_factor
    from topologies.gpus import get_gpu
    m = model_preset("nemotron-h-56b")
    g = get_gpu("h100")
    for bwd in (False, True):
        t = mx.scan_time(m, 1, 8, 1, g, 3e12, bwd)
        extra = mx.ssd_eager_bytes_bwd(m, 1, 8, 1, g.sm_count) if bwd else 0.0
        roof = max(mx.ssd_flops(m, 1, 8, backward=bwd) / (g.peak("bf16") * g.attention_efficiency),
                   mx.ssd_bytes(m, 1, 8, backward=bwd) / 3e12)
        assert t == pytest.approx(roof * scan_factor(8192, 1, 32, 128, g) + extra / 3e12,
                                  rel=1e-12)
        assert scan_factor(8192, 1, 32, 128, g) > 1.5      # below the roofline, measured
    # H100 at 3 TB/s: the 56B's scan is HBM-bound both ways (states of 256 x 64 per head)
    assert mx.ssd_bytes(m, 1, 8) / 3e12 > mx.ssd_flops(m, 1, 8) / (g.peak("bf16") * 0.55)


def test_backward_eager_bytes_closed_form():
    """One rank of the 56B at tp 8 on 132 SMs: 64 chunks x 32 heads = 2048 programs, 16 heads
    a program, 2 splits; per token (8·2 + 2)·2·G·N + 8·2·G·Q + 80·H with G 1, N 256, Q 128,
    H 32, plus the conv's recomputation pass, 2·conv_dim/tp = 2·20480/8 bytes."""
    m = model_preset("nemotron-h-56b")
    assert mx.head_splits(1, 64, 32, 1, 132) == 2
    assert mx.head_splits(1, 64, 32, 1, 10_000) == 32      # one head a program
    assert mx.head_splits(4, 64, 32, 1, 132) == 1          # a whole group a program
    want = 8192 * (18 * 2 * 256 + 16 * 128 + 80 * 32 + 2 * 2560)
    assert mx.ssd_eager_bytes_bwd(m, 1, 8, 1, 132) == pytest.approx(want, rel=1e-12)


def test_shape_bytes_without_the_gate():
    """The forward without z reads x once less and writes one output: 2 X fewer per token."""
    s, H, G, P, N, Q = 8192, 128, 1, 64, 128, 256
    d = mx.shape_bytes(s, 1, H, G, P, N, Q) - mx.shape_bytes(s, 1, H, G, P, N, Q, gate=False)
    assert d == pytest.approx(s * 2 * H * P * 2, rel=1e-12)


def test_ssd_bytes_per_token_table():
    """The traffic table summed by hand for one rank of the 56B at tp 8 (H 32, P 64, G 1,
    N 256, Q 128; per token: X 4096 B, BC 512 B, CBt 512 B, H 128 B, S 16384 B): the forward's
    states passed in 16 bits (3 S), the backward's C·Bᵀ residuals read in fp32 (17 BC) and its
    cumsum backward 3 H (§5.160)."""
    m = model_preset("nemotron-h-56b")
    per = {False: 5 * 4096 + 4 * 512 + 2 * 512 + 6.5 * 128 + 3 * 16384,
           True: 17 * 4096 + 17 * 512 + 6 * 512 + 21.5 * 128 + 8.5 * 16384}
    for bwd, want in per.items():
        assert mx.ssd_bytes(m, 1, 8, backward=bwd) == pytest.approx(8192 * want, rel=1e-12)


@pytest.mark.parametrize("tp,ok", [(1, True), (2, True), (8, True), (16, False), (3, False)])
def test_tp_must_divide_heads_and_groups(tp, ok):
    m = model_preset("nemotron-h-56b")          # 256 heads, 8 groups
    if ok:
        mx.check_tp(m, tp)
    else:
        with pytest.raises(SpecError) as e:
            mx.check_tp(m, tp)
        assert e.value.field == "plan.tp" and "mamba_num_" in str(e.value)


def test_context_parallelism_refused_with_mamba_layers():
    with pytest.raises(SpecError) as e:
        mx.check_cp(model_preset("nemotron-h-8b"), 2)
    assert e.value.field == "plan.cp"
    mx.check_cp(model_preset("nemotron-h-8b"), 1)
    mx.check_cp(model_preset("llama3-8b"), 2)


def test_saved_terms_closed_form():
    """One mixer layer, one sequence of 8192: the pre-norm's and in_proj's inputs (2·s·h
    16-bit each, ``mamba_seq``) and zxBCdt, the combined function's pre-gate ``out_x``, the
    norm's input and the norm's output (``mamba_tp``, §5.165: three ``d_inner`` tensors);
    memory.layer_terms splits them (``mamba_seq`` by t only with SP)."""
    m = model_preset("nemotron-h-8b")
    t = mx.saved_terms(m, 8192, 1)
    assert t == {"mamba_seq": 8192 * 2 * 2 * 4096,
                 "mamba_tp": 8192 * 2 * (m.mamba_in_proj_width + 3 * m.mamba_d_inner)}


def test_saved_terms_56b_rank_grow_by_one_d_inner():
    """At the Nemotron-H 56B's rank (tp 8, one sequence of 8192) the third ``d_inner`` tensor
    is 8192 · 2 · 16384 / 8 bytes (33.5 MB) a Mamba layer and micro-batch."""
    m = model_preset("nemotron-h-56b")
    t = mx.saved_terms(m, 8192, 1)["mamba_tp"] / 8
    assert t == 8192 * 2 * (37120 + 3 * 16384) / 8
    assert t - 8192 * 2 * (37120 + 2 * 16384) / 8 == 33554432


def test_elementwise_bytes_copy_the_mixer_layout_only_with_several_sequences():
    """conv and gated norm: 2·conv + 2·d_inner per token; with b > 1 the two layout copies
    (in_proj's output and the scan's output) add 2·(in_proj_width + d_inner), per rank."""
    m = model_preset("nemotron-h-56b")
    one = mx.mixer_elementwise_bytes_fwd(m, 1, 8)
    assert one == pytest.approx(8192 * 2 * (2 * 20480 + 2 * 16384) / 8, rel=1e-12)
    two = mx.mixer_elementwise_bytes_fwd(m, 2, 8)
    assert two == pytest.approx(2 * one + 2 * 8192 * 2 * 2 * (37120 + 16384) / 8, rel=1e-12)


def test_fp8_casts_of_a_hybrid_layer_weigh_attention_and_mixer_by_share():
    """in_proj's input fused with its norm (T·h/tp under SP), out_proj's unfused (T·d_inner/tp);
    backward dY of out_proj T·h/tp and of in_proj T·width/tp, unfused; QKV and proj alike;
    each at its share of the mean layer."""
    from strategies.cost.quantise import layer_cast_elements
    m = model_preset("nemotron-h-56b")
    T, h, tp = 8192, 8192, 8
    (ff, fu), (bf, bu) = layer_cast_elements(m, 1, tp, 1, True)
    a, w = m.attention_share, m.mamba_share
    d, F = m.layer_shares()["dense"], m.ffn_hidden_size     # the squared-ReLU MLP's
    assert ff == pytest.approx(T / tp * ((a + w + d) * h + d * F), rel=1e-12)
    assert fu == pytest.approx(T / tp * (a * 8192 + w * 16384), rel=1e-12)
    assert bf == pytest.approx(T / tp * d * F, rel=1e-12)
    assert bu == pytest.approx(T / tp * (a * (h + 10240) + w * (h + 37120) + d * h), rel=1e-12)
