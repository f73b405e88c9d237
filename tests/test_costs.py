"""The cost model against the closed forms of docs/formulas.md (§2 FLOPs, §4 bubble, §5 volumes,
§6 collectives), to floating-point precision, with the worked numbers the file gives."""
from __future__ import annotations

import pytest

from strategies.collectives import ring
from strategies.cost import attention_counts, comm_bytes, flop_counts, param_counts
from strategies.model import ModelSpec
from strategies.presets import model_preset
from strategies.schedules.analysis import bubble_fraction_closed_form


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> ModelSpec:
    """A GPT of docs/formulas.md §1-2: 4h GeLU MLP, multi-head attention, learned positions."""
    return ModelSpec(f"gpt-{layers}x{hidden}", layers, hidden, heads, 4 * hidden, vocab, seq)


GPTS = [(24, 2304, 24, 51200, 2048), (96, 12288, 96, 51200, 2048), (128, 25600, 160, 51200, 2048),
        (70, 14336, 112, 250880, 2048), (32, 4096, 32, 50368, 8192)]


@pytest.mark.parametrize("l,h,a,V,s", GPTS)
@pytest.mark.parametrize("B", [1, 512, 3072])
def test_model_flops_are_eq_2b(l, h, a, V, s, B):
    """§2b: F_model = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) (no recompute, full s² square)."""
    F = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    assert flop_counts.model_flops_per_step(gpt(l, h, a, V, s), B) == pytest.approx(F, rel=1e-12)


@pytest.mark.parametrize("l,h,a,V,s", GPTS)
def test_full_recompute_hardware_flops_are_eq_3(l, h, a, V, s):
    """§2a (Narayanan eq. 3): with full recomputation and the attention square computed in
    full, the hardware executes 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    B = 64
    F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    got = flop_counts.executed_flops_per_step(gpt(l, h, a, V, s), B, False, 2)
    assert got == pytest.approx(F, rel=1e-12)


@pytest.mark.parametrize("l,h,a,V,s", GPTS)
@pytest.mark.parametrize("flash", [False, True])
def test_hfu_flops_are_model_flops_plus_the_recomputed_forward(l, h, a, V, s, flash):
    """HFU's FLOPs (docs/cli.md: MFU's "with recomputation counted"): none -> the model FLOPs;
    full -> §2a's 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)), whatever the attention kernel;
    selective -> + the forward attention square 4·B·s²·h·l, unless FlashAttention (which
    recomputes inside its own backward, not counted in MFU either)."""
    m, B = gpt(l, h, a, V, s), 64
    model = flop_counts.model_flops_per_step(m, B)
    assert flop_counts.hardware_flops_per_step(m, B, flash, 0) == pytest.approx(model, rel=1e-12)
    full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    assert flop_counts.hardware_flops_per_step(m, B, flash, 2) == pytest.approx(full, rel=1e-12)
    sel = model + (0 if flash else 4 * B * s * s * h * l)
    assert flop_counts.hardware_flops_per_step(m, B, flash, 1) == pytest.approx(sel, rel=1e-12)


def test_eq_3_worked_numbers():
    """§2a worked: the 1T row of Narayanan Table 1 (5.139e19 FLOP, 102.6 s at 163 TFLOP/s on
    3072 GPUs) and BLOOM-176B (149.76 TFLOP/s at 104.70 s on 384 GPUs)."""
    F = flop_counts.executed_flops_per_step(gpt(128, 25600, 160), 3072, False, 2)
    assert F == pytest.approx(5.139e19, rel=1e-3)
    assert F / (3072 * 163e12) == pytest.approx(102.6, rel=1e-3)
    bloom = flop_counts.executed_flops_per_step(gpt(70, 14336, 112, 250880), 2048, False, 2)
    assert bloom / (384 * 104.70) / 1e12 == pytest.approx(149.76, rel=1e-4)


def test_palm_6n_rule():
    """§2c: model FLOPs per token = 6·N + 12·L·H·Q·T with N the weights a token multiplies
    (12·l·h² in the layers and V·h in the output layer)."""
    l, h, s, V = 96, 12288, 2048, 51200
    m = gpt(l, h, 96, V, s)
    N = 12 * l * h * h + V * h
    assert flop_counts.model_flops_per_step(m, 1) / s == pytest.approx(6 * N + 12 * l * h * s,
                                                                       rel=1e-12)
    assert (6 * 175e9 + 12 * 96 * 96 * 128 * 2048) == pytest.approx(1.079e12, rel=1e-3)


def test_nvidia_flops_per_sample():
    """§2d: NVIDIA's per-sample model FLOPs (GPT and Llama with GQA and SwiGLU), worked numbers
    2.2046e15 (GPT-3 175B) and 3.944e15 (Llama 3.1 70B); the GPT-3 MFU of 0.5004 at 8.91 s on
    128 H100 with GBS 256."""
    g = gpt(96, 12288, 96)
    L, h, s, V = 96, 12288, 2048, 51200
    per = s * ((24 * L * h * h + 12 * L * h * s) + 48 * L * h * h + 6 * V * h)
    assert flop_counts.model_flops_per_step(g, 1) == pytest.approx(per, rel=1e-12)
    assert per == pytest.approx(2.2046e15, rel=1e-4)
    assert 256 * per / (8.91 * 128 * 989e12) == pytest.approx(0.5004, abs=5e-4)
    L, h, F, G, A, s, V = 80, 8192, 28672, 8, 64, 8192, 128256
    llama = ModelSpec("llama3.1-70b", L, h, A, F, V, s, num_query_groups=G, activation="swiglu",
                      position_embedding="rope")
    per = s * (12 * L * h * h * (1 + G / A + s / h) + 18 * L * F * h + 6 * V * h)
    assert flop_counts.model_flops_per_step(llama, 1) == pytest.approx(per, rel=1e-12)
    assert per == pytest.approx(3.944e15, rel=1e-3)


def test_mosaic_mfu_formula():
    """§2e worked: MPT-7B on 8 H100 at 85144 tokens/s is MFU 0.4646 with (6N + 12·L·d·s) per
    token; paraplan's model FLOPs per token are the same form (N counted by the model)."""
    N, L, d, s = 6.659e9, 32, 4096, 2048
    assert (6 * N + 12 * L * d * s) * 85144 / (8 * 989e12) == pytest.approx(0.4646, abs=5e-4)
    m = model_preset("mpt-7b")
    n_mult = m.num_layers * (m.layer_params() - 2 * m.norm_params()) + m.vocab_size * m.hidden_size
    per_token = flop_counts.model_flops_per_step(m, 1) / m.seq_length
    assert per_token == pytest.approx(6 * n_mult + 12 * m.num_layers * m.hidden_size * m.seq_length,
                                      rel=1e-12)


def test_causal_fraction_and_executed_attention():
    """A causal FlashAttention kernel computes the lower triangle of 128x128 blocks with the
    diagonal blocks in full; never more than the square."""
    assert attention_counts.causal_fraction(2048) == pytest.approx(0.5 + 64 / 2048, rel=1e-15)
    assert attention_counts.causal_fraction(64) == 1.0
    assert attention_counts.causal_fraction(128) == 1.0
    m = gpt(24, 2304, 24)
    full = attention_counts.attn_core_flops_fwd(m, 1, 1, 1, False)
    assert full == 4 * 2048 * 2048 * 2304
    assert attention_counts.attn_core_flops_fwd(m, 1, 1, 1, True) == pytest.approx(
        full * (0.5 + 64 / 2048))
    # executed FLOPs without recompute and without FlashAttention are the model FLOPs
    assert flop_counts.executed_flops_per_step(m, 8, False, 0) == pytest.approx(
        flop_counts.model_flops_per_step(m, 8), rel=1e-12)
    assert flop_counts.executed_flops_per_step(m, 8, True, 0) \
        < flop_counts.model_flops_per_step(m, 8)


@pytest.mark.parametrize("p,m,v", [(12, 128, 1), (8, 64, 1), (8, 64, 12), (4, 8, 2), (35, 280, 3)])
def test_bubble_closed_forms(p, m, v):
    """§4: (p-1)/m for 1F1B and GPipe, (p-1)/(v·m) interleaved."""
    assert bubble_fraction_closed_form("1f1b", p, m, 1) == pytest.approx((p - 1) / m, rel=1e-15)
    assert bubble_fraction_closed_form("gpipe", p, m, 1) == pytest.approx((p - 1) / m, rel=1e-15)
    if v > 1:
        assert bubble_fraction_closed_form("interleaved", p, m, v) == pytest.approx(
            (p - 1) / (v * m), rel=1e-15)


def test_bubble_worked_bloom():
    """§4 worked: BLOOM-176B (p=12, B=2048, b=2, d=8): m=128, bubble 8.6 %, 2.9 % with v=3."""
    m = 2048 // (2 * 8)
    assert m == 128
    assert bubble_fraction_closed_form("1f1b", 12, m, 1) == pytest.approx(0.0859, abs=5e-5)
    assert bubble_fraction_closed_form("interleaved", 12, m, 3) == pytest.approx(0.0286, abs=5e-5)


def test_communication_volumes_worked():
    """§5 worked (GPT-3 175B, b=1, s=2048, h=12288, t=8, 2-byte activations): 352 MB of
    tensor-parallel traffic per layer per micro-batch per GPU (4 all-reduces of b·s·h) and
    50.3 MB per pipeline boundary (b·s·h, split over the tp ranks)."""
    m = model_preset("gpt3-175b")
    buf = comm_bytes.tp_comm_bytes_fwd(m, 1, 1)
    assert buf == 2 * 2048 * 12288
    assert 4 * 2 * (8 - 1) / 8 * buf / 1e6 == pytest.approx(352.3, abs=0.1)
    assert comm_bytes.pp_p2p_bytes(m, 1, 8, 1, False) * 8 / 1e6 == pytest.approx(50.3, abs=0.05)


def test_collective_closed_forms():
    """§6: ring all-reduce 2(n-1)/n·S/B, reduce-scatter and all-gather (n-1)/n·S/B; worked: the
    DP gradient all-reduce of GPT-3 175B at t=8, p=8 (5.44 GB of bf16 gradients, d=48, 25 GB/s)
    takes 0.43 s."""
    S, n, B = 5.44e9, 48, 25e9
    assert ring.allreduce_time(S, n, B, 0.0) == pytest.approx(2 * (n - 1) / n * S / B, rel=1e-15)
    assert ring.reduce_scatter_time(S, n, B, 0.0) == pytest.approx((n - 1) / n * S / B, rel=1e-15)
    assert ring.allgather_time(S, n, B, 0.0) == pytest.approx((n - 1) / n * S / B, rel=1e-15)
    assert float(ring.allreduce_time(S, n, B, 0.0)) == pytest.approx(0.43, abs=0.005)
    assert float(ring.allreduce_time(S, 1, B, 1e-6)) == 0.0


# ----------------------------------------------------------------- one family of parameter counts

MOE_BIAS = ModelSpec("moe-bias", 8, 1024, 16, 2816, 32000, 1024, num_query_groups=4,
                     activation="swiglu", num_experts=8, moe_router_topk=2, bias=True,
                     norm="rmsnorm", position_embedding="rope")


@pytest.mark.parametrize("m", [MOE_BIAS, model_preset("mixtral-8x7b"), model_preset("llama3-8b"),
                               gpt(24, 2304, 24)], ids=lambda m: m.name)
@pytest.mark.parametrize("tp,ep,pp", [(1, 1, 1), (2, 4, 2), (4, 2, 4), (2, 8, 8)])
def test_stage_params_sum_to_the_model(m, tp, ep, pp):
    """Summed over the stages, every parameter is held once: the experts (their biases
    included) over tp·ep, everything else (final norm included) over tp; a tied head is a
    second copy of the word embedding only with pp > 1."""
    experts = m.num_layers * param_counts.expert_params(m)
    if m.is_moe:
        F = m.expert_ffn * (2 if m.gated else 1)
        want_e = m.num_experts * (m.mlp_params_per_expert() + (F + m.hidden_size if m.bias else 0))
        assert param_counts.expert_params(m) == want_e
    tied = m.vocab_size * m.hidden_size if m.tie_word_embeddings and pp > 1 else 0
    want = (m.num_params() - experts + tied) / tp + experts / (tp * (ep if m.is_moe else 1))
    got = sum(param_counts.stage_params_per_gpu(m, tp, ep if m.is_moe else 1, pp, s)
              for s in range(pp))
    assert got == pytest.approx(want, rel=1e-14)
    # the array form gives the same per stage as the scalar one
    import numpy as np
    arr = param_counts.stage_params_per_gpu(m, np.full(pp, tp), np.full(pp, ep if m.is_moe else 1),
                                            np.full(pp, pp), np.arange(pp))
    assert list(arr) == [param_counts.stage_params_per_gpu(m, tp, ep if m.is_moe else 1, pp, s)
                         for s in range(pp)]


def test_final_norm_is_on_the_last_stage():
    m = model_preset("llama3-8b")
    last = param_counts.stage_params_per_gpu(m, 2, 1, 4, 3)
    mid = param_counts.stage_params_per_gpu(m, 2, 1, 4, 1)
    assert last - mid == (m.lm_head_params() + m.norm_params()) / 2


@pytest.mark.parametrize("l,h,a,V,s", GPTS)
def test_mfu_is_eq_2b_over_gpu_seconds(l, h, a, V, s):
    """The one MFU/HFU definition: §2b model FLOPs over n·t·peak; HFU adds the recomputed
    forward (full recomputation: 96 instead of 72, §2a) and equals MFU without it."""
    B, n, t, peak = 512, 1024, 12.5, 312e12
    m = gpt(l, h, a, V, s)
    want = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) / (n * t * peak)
    assert flop_counts.mfu(m, B, t, n, peak) == pytest.approx(want, rel=1e-12)
    assert flop_counts.hfu(m, B, False, 0, t, n, peak) == flop_counts.mfu(m, B, t, n, peak)
    full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (n * t * peak)
    assert flop_counts.hfu(m, B, False, 2, t, n, peak) == pytest.approx(full, rel=1e-12)
