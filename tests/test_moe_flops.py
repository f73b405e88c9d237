"""Closed forms of the MoE/MLA cost counts (issue 14): MLA FLOPs per token, DeepSeek-V3's
published training FLOPs per token, expert GEMM FLOPs, windowed attention, and the mean layer
of a model whose layers differ."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.cost import attention_counts, ep_dispatch, flop_counts, gemm_shapes, param_counts
from strategies.cost.layer_time import layer_time
from strategies.model import ModelSpec
from strategies.presets import model_preset
from topologies.gpus import get_gpu

REL = 1e-12


def test_mla_gemm_flops_per_token_closed_form():
    """DeepSeek-V3's MLA, per token, forward: the q down and up projections (h -> 1536 ->
    128·192), the kv down projection with the shared rope key (h -> 512 + 64), the kv up
    projection (512 -> 128·(128 + 128)) and the output (128·128 -> h): 2 FLOPs per weight."""
    m = model_preset("deepseek-v3")
    h, a = 7168, 128
    mla = 2 * (h * 1536 + 1536 * a * 192 + h * 576 + 512 * a * 256 + a * 128 * h)
    dense_mlp, expert = 2 * 3 * h * 18432, 2 * 3 * h * 2048
    moe_mlp = 8 * expert + expert + 2 * h * 256          # top-8, one shared, the router
    s = m.seq_length
    assert flop_counts.gemm_flops_fwd(m, 1, 1, 1, "dense") / s == pytest.approx(mla + dense_mlp,
                                                                                rel=REL)
    assert flop_counts.gemm_flops_fwd(m, 1, 1, 1, "moe") / s == pytest.approx(mla + moe_mlp,
                                                                              rel=REL)
    mean = (3 * (mla + dense_mlp) + 58 * (mla + moe_mlp)) / 61
    assert flop_counts.gemm_flops_fwd(m, 1, 1, 1) / s == pytest.approx(mean, rel=REL)
    # the attention core: QK^T over 192 dims, AV over 128, on the full square
    assert attention_counts.attn_core_flops_per_token(m) == pytest.approx(
        61 * 2 * a * (192 + 128) * s, rel=REL)
    # MLA's tensor parallelism: the down projections stay whole on every rank
    tp = 8
    per_gpu = (2 * (h * 1536 + h * 576) + 2 * (1536 * a * 192 + 512 * a * 256 + a * 128 * h) / tp
               + dense_mlp / tp)
    assert flop_counts.gemm_flops_fwd(m, 1, tp, 1, "dense") / s == pytest.approx(per_gpu, rel=REL)


def test_deepseek_v3_training_flops_per_token_against_the_published_figure():
    """DeepSeek ("Insights into DeepSeek-V3", ISCA 2025, Table 2): 250 GFLOPs per token to train
    DeepSeek-V3 at sequence length 4,096. Forward + backward (3x) of every GEMM a token
    touches, the output head and the causal attention pairs give 250.46 GFLOPs; the figure
    leaves out the multi-token-prediction module (with it: 260.65)."""
    m = model_preset("deepseek-v3")
    assert m.seq_length == 4096
    f = flop_counts.training_flops_per_token(m, causal=True)
    assert abs(f / 250e9 - 1) < 0.005
    with_mtp = flop_counts.training_flops_per_token(m, causal=True, mtp=True)
    assert abs(with_mtp / 250e9 - 1) > 0.03
    # 6 x the active matmul weights (the embedding table is a lookup) + the causal attention
    matmul = m.active_params(embedding=False) - _non_matmul(m)
    attn = 3 * 61 * 2 * 128 * 320 * (4096 + 1) / 2
    assert f == pytest.approx(6 * matmul + attn, rel=REL)


def test_deepseek_v2_training_flops_per_token_against_the_published_figure():
    """The same table gives DeepSeek-V2 (236B) 155 GFLOPs per token at 4,096 tokens: 155.31."""
    import json
    from pathlib import Path
    from strategies.hf_config import model_from_hf
    cfg = json.loads((Path(__file__).parent / "data" / "hf" / "deepseek_v2.json").read_text())
    m = model_from_hf(cfg).with_seq_length(4096)
    assert abs(flop_counts.training_flops_per_token(m, causal=True) / 155e9 - 1) < 0.005


def _non_matmul(m: ModelSpec) -> int:
    """Active parameters that are not matmul weights: norms, MLA's latent norms, the router
    bias (the router weights are a GEMM)."""
    norms = m.num_layers * (2 * m.hidden_size + 1536 + 512) + m.hidden_size
    return norms + m.num_moe_layers * m.num_experts


@pytest.mark.parametrize("ep", [1, 2, 8, 32, 256])
def test_expert_gemm_flops_do_not_depend_on_ep(ep):
    """Expert GEMMs, forward, per GPU: ``E/ep`` local experts each get ``T·k·ep/E`` tokens on
    average, so ``2·T·k·(3·h·F)/t`` whatever ``ep`` (the shapes change, the FLOPs do not)."""
    m = model_preset("deepseek-v3")
    b, tp = 2, 2
    T = b * m.seq_length
    gemms = gemm_shapes.layer_gemms(m, b, tp, 1, ep, "moe")
    n_attn = len(m.attention_linears())
    experts = gemms[n_attn:n_attn + 2]                  # up (gate and up fused) and down
    assert all(c == 256 / ep for c, *_ in experts) and all(M == T * 8 * ep / 256 for _, M, _, _, _ in experts)
    flops = sum(2 * c * M * N * K for c, M, N, K, _ in experts)
    assert flops == pytest.approx(2 * T * 8 * 3 * 7168 * 2048 / tp, rel=REL)


@pytest.mark.parametrize("name", ["mixtral-8x22b", "qwen3-30b-a3b", "gpt-oss-120b",
                                  "qwen3-235b-a22b"])
def test_gemm_flops_are_twice_the_active_matmul_weights(name):
    """For a model whose layers are all alike with no biases in matmuls counted apart:
    forward GEMM FLOPs per token = 2 x (active layer weights that are matmuls) / layer."""
    m = model_preset(name)
    h = m.hidden_size
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    attn = (a + 2 * g) * d * h + a * d * h
    mlp = m.moe_router_topk * (3 * h * m.expert_ffn) + h * m.num_experts
    assert flop_counts.gemm_flops_fwd(m, 1, 1, 1) / m.seq_length == pytest.approx(2 * (attn + mlp),
                                                                                  rel=REL)


def test_score_elements_closed_forms():
    s = 4096
    for mode in ("square", "causal", "kernel"):   # a window of at least s is full attention
        assert attention_counts.score_elements(s, s, "sliding", mode) \
            == attention_counts.score_elements(s, None, mode=mode)
    assert attention_counts.score_elements(s, None, mode="kernel") \
        == s * s * attention_counts.causal_fraction(s)
    assert attention_counts.score_elements(s, 128, mode="square") == s * s - (s - 128) ** 2
    assert attention_counts.score_elements(s, 128, mode="causal") \
        == sum(min(i + 1, 128) for i in range(s))
    # 32 query blocks, each reaching back 2 key blocks (its own and the previous): 1 + 31·2
    assert attention_counts.score_elements(s, 128, mode="kernel") == s * s * 63 / 32 ** 2
    # W = 129 still fits 2 blocks back (row 128i reaches key 128i - 128); W = 130 needs 3
    assert attention_counts.score_elements(s, 129, mode="kernel") == s * s * 63 / 32 ** 2
    assert attention_counts.score_elements(s, 130, mode="kernel") \
        == s * s * (1 + 2 + 30 * 3) / 32 ** 2
    c = 1024                                       # chunked: 4 chunks attending within
    assert attention_counts.score_elements(s, c, "chunked", "square") == 4 * c * c
    assert attention_counts.score_elements(s, c, "chunked", "causal") == 4 * c * (c + 1) / 2
    assert attention_counts.score_elements(s + 100, c, "chunked", "square") == 4 * c * c + 100 ** 2


def test_gpt_oss_attention_is_the_mean_of_its_full_and_windowed_layers():
    m = model_preset("gpt-oss-120b")
    s, a, d = m.seq_length, 64, 64
    full, band = s * s, s * s - (s - 128) ** 2
    want = 2 * a * 2 * d * (18 * full + 18 * band) / 36
    assert attention_counts.attn_core_flops_fwd(m, 1, 1, 1, False) == pytest.approx(want, rel=REL)
    dense = ModelSpec("x", 36, 2880, 64, 2880, 201088, 4096, 8, "swiglu", kv_channels=64)
    assert attention_counts.attn_core_flops_fwd(dense, 1, 1, 1, False) == pytest.approx(
        4 * a * d * full, rel=REL)


def test_mean_layer_sums_to_the_model():
    """The cost model's one "layer" is the mean layer: num_layers of it give every exact total
    (parameters, GEMM FLOPs, EP traffic), whatever mix of dense and MoE layers."""
    m = model_preset("deepseek-v3")
    L = m.num_layers
    assert m.layer_params() * L == pytest.approx(m.layers_params(), rel=REL)
    assert param_counts.layer_params_per_gpu(m, 1, 1) * L == pytest.approx(m.layers_params(),
                                                                           rel=REL)
    exp = m.expert_params_per_layer() * L
    assert exp == pytest.approx(58 * 256 * 3 * 7168 * 2048, rel=REL)
    # ep shards the routed experts only; tp leaves MLA's down projections whole
    rep = 7168 * (1536 + 576) + 1536 + 512
    want = (m.layers_params() - exp - L * rep) / 4 + L * rep + exp / (4 * 16)
    assert param_counts.layer_params_per_gpu(m, 4, 16) * L == pytest.approx(want, rel=REL)
    one_moe = ep_dispatch.ep_alltoall_bytes_fwd(replace_layers(m), 1, 1, 1, 8)
    assert ep_dispatch.ep_alltoall_bytes_fwd(m, 1, 1, 1, 8) * L == pytest.approx(58 * one_moe,
                                                                                 rel=REL)


def replace_layers(m: ModelSpec) -> ModelSpec:
    from dataclasses import replace
    return replace(m, first_k_dense_replace=0)


def test_layer_time_runs_on_the_new_models_and_broadcasts():
    """layer_time (the mean layer) is finite and positive for MLA, windows and mixed layers,
    and its array form equals its scalar form."""
    gpu = get_gpu("H800")
    for name in ("deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b"):
        m = model_preset(name)
        tp = np.array([1, 2, 4])
        kw = dict(b=1, cp=1, ep=8, sp=True, flash=True, recompute=0, gpu=gpu, dtype="bf16")
        lt = layer_time(m, tp=tp, **kw)
        for i, t in enumerate(tp):
            one = layer_time(m, tp=int(t), **kw)
            assert float(one.fwd) == pytest.approx(float(lt.fwd[i]), rel=REL)
            assert float(one.bwd) > float(one.fwd) > 0


def _small_deepseek() -> ModelSpec:
    """DeepSeek-V3's layer shapes on 8 layers (2 dense) with a small vocabulary, so that pp
    can divide the layers."""
    from dataclasses import replace
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=1024)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ds-small", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_vectorised_memory_equals_the_memory_model_for_frontier_models(name):
    """The search's array memory model and the per-stage scalar one agree plan by plan on MLA,
    mixed dense/MoE layers, head sizes other than hidden/heads and windows."""
    from strategies.job import make_job
    from strategies.memory.arrays import peak_memory_arrays
    from strategies.memory.scalar import peak_memory
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import cluster_preset
    import math
    m = _small_deepseek() if name == "ds-small" else model_preset(name)
    sp = enumerate_space(m, cluster_preset("dgx-h100", 2), 32,
                         SpaceOptions(memory_limit_bytes=math.inf, max_bubble=1e9))
    assert sp.size > 0 and (sp.cols["ep"] > 1).any()
    rng = np.random.default_rng(1)
    idx = rng.choice(sp.size, size=min(80, sp.size), replace=False)
    from strategies.framework import DEFAULT
    # the jobs run on the default stack: its eager clamp (gpt-oss) as the arrays are told
    vec = peak_memory_arrays(sp.model, sp.subset(idx), clamp=DEFAULT.eager_variants)
    for j, i in enumerate(idx.tolist()):
        job = make_job(sp.model, sp.cluster, sp.plan(i))
        assert vec[j] == pytest.approx(peak_memory(job)[1].total, rel=1e-12), sp.key(i)


def test_mla_activation_latents():
    from strategies.memory.activations import layer_activation_terms
    m = model_preset("deepseek-v3")
    t = layer_activation_terms(m, 4096, 1)
    assert t["mla_latents"] == 8320 * 4096
    assert t["k_v"] == 2 * 4096 * 128 * (192 + 128) and t["q"] == 2 * 4096 * 128 * 192
    assert layer_activation_terms(model_preset("llama3-8b"), 4096, 1)["mla_latents"] == 0


def test_unfused_attention_computes_the_whole_square_under_a_window():
    """A fused kernel skips the blocks outside the window; the unfused path computes the whole
    square and masks it, so a window does not shorten it."""
    from dataclasses import replace
    from strategies.cost.attention_time import attention_time_fwd
    gpu = get_gpu("H100")
    m = model_preset("gpt-oss-120b")
    full = replace(m, sliding_window=None, global_attention_every=0)
    assert attention_time_fwd(m, 1, 1, 1, False, gpu) == attention_time_fwd(full, 1, 1, 1, False, gpu)
    assert attention_time_fwd(m, 1, 1, 1, True, gpu)[0] < attention_time_fwd(full, 1, 1, 1, True, gpu)[0]
