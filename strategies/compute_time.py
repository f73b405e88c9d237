"""Compute time of one layer for one micro-batch on one GPU, from the cost model's FLOPs and bytes.

The efficiency model (documented in docs/calibration.md):

* Dense GEMMs run at ``peak(dtype) · matmul_efficiency · Π_d d/(d + 64)`` over the GEMM's three
  dimensions M, N, K — the chip's large-GEMM efficiency (a datasheet-level property) times a
  smooth penalty for thin shapes (tile and wave quantisation); a GEMM is never faster than its
  operands' HBM traffic allows (roofline). Backward = two GEMMs of the same shape set (dgrad,
  wgrad).
* Attention core: FlashAttention at ``peak(bf16) · attention_efficiency`` (forward; its backward
  does 2.5× the forward FLOPs), or, without it, two batched GEMMs with K = head_dim plus the
  memory-bound softmax/dropout traffic.
* Memory-bound kernels (LayerNorm, dropout, activation, rotary, fp8 casts) take bytes over
  ``HBM bandwidth · 0.85``; their backward moves twice the forward bytes.

Every function broadcasts over numpy arrays of plan fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strategies import costs
from strategies.costs import Num
from strategies.model import ModelSpec
from topologies.gpus import GPU

HBM_EFFICIENCY = 0.85     # achievable fraction of HBM bandwidth (STREAM-like kernels)
SHAPE_SCALE = 64.0        # a GEMM dimension d runs at d/(d+64) of the large-shape rate
FLASH_BWD_FACTOR = 2.5    # FlashAttention backward FLOPs / forward FLOPs (recomputes S = QK^T)
FP8_CAST_BYTES = 3.0      # per GEMM input element cast to fp8 (read 2 B, write 1 B)


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one layer, one micro-batch, one GPU (compute only, no communication)."""

    fwd: Num
    bwd: Num
    recompute: Num   # extra forward work redone in the backward (selective or full)


def _shape(d: Num) -> Num:
    return d / (d + SHAPE_SCALE)


def _gemm(flops_scale: Num, M: Num, N: Num, K: Num, rate: Num, hbm: float, esize: float) -> Num:
    """Time of ``flops_scale`` GEMMs of shape MxNxK (seconds)."""
    flops = 2.0 * M * N * K
    t_compute = flops / (rate * _shape(M) * _shape(N) * _shape(K))
    t_memory = esize * (M * K + K * N + M * N) / hbm
    return flops_scale * np.maximum(t_compute, t_memory)


def gemm_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str) -> Num:
    """Forward time of the dense GEMMs of one layer (seconds)."""
    T = costs.tokens_per_gpu(b, m.seq_length, cp)
    h, d, g = m.hidden_size, m.head_dim, m.kv_heads
    rate = gpu.peak(dtype) * gpu.matmul_efficiency
    hbm = gpu.hbm_bandwidth * HBM_EFFICIENCY
    es = 1.0 if dtype == "fp8" else 2.0
    t = _gemm(1, T, (h + 2 * g * d) / tp, h, rate, hbm, es)          # QKV
    t = t + _gemm(1, T, h, h / tp, rate, hbm, es)                    # output projection
    F = m.expert_ffn
    up = F * (2 if m.gated else 1) / tp
    if m.is_moe:
        experts_here = m.num_experts / ep
        M_e = T * m.moe_router_topk / experts_here                    # tokens per local expert
        t = t + _gemm(experts_here, M_e, up, h, rate, hbm, es) + _gemm(experts_here, M_e, h, F / tp, rate, hbm, es)
        t = t + _gemm(1, T, m.num_experts, h, rate, hbm, 2.0)          # router
    else:
        t = t + _gemm(1, T, up, h, rate, hbm, es) + _gemm(1, T, h, F / tp, rate, hbm, es)
    return t


def attention_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num, gpu: GPU) -> tuple[Num, Num]:
    """(forward, backward) seconds of the attention core of one layer."""
    peak = gpu.peak("bf16")
    hbm = gpu.hbm_bandwidth * HBM_EFFICIENCY
    f_flash = costs.attn_core_flops_fwd(m, b, tp, cp, True)
    t_flash = f_flash / (peak * gpu.attention_efficiency)
    f_full = costs.attn_core_flops_fwd(m, b, tp, cp, False)
    # unfused: two batched GEMMs with K = head_dim (QK^T) and N = head_dim (AV)
    d = m.head_dim
    s = m.seq_length
    rate = peak * gpu.matmul_efficiency * _shape(d) * _shape(s / cp) * _shape(s)
    soft = costs.softmax_bytes_fwd(m, b, tp, cp, False) / hbm
    t_plain_f = f_full / rate + soft
    t_plain_b = 2 * f_full / rate + 2 * soft
    fwd = np.where(flash, t_flash, t_plain_f)
    bwd = np.where(flash, FLASH_BWD_FACTOR * t_flash, t_plain_b)
    return fwd, bwd


def elementwise_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU, dtype: str) -> Num:
    hbm = gpu.hbm_bandwidth * HBM_EFFICIENCY
    byts = costs.elementwise_bytes_fwd(m, b, tp, cp, sp)
    if dtype == "fp8":  # inputs of the four GEMMs cast to fp8 (activations; weights amortised)
        T = costs.tokens_per_gpu(b, m.seq_length, cp)
        byts = byts + FP8_CAST_BYTES * T * (2 * m.hidden_size + (m.hidden_size + m.expert_ffn) / tp)
    return byts / hbm


def layer_time(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, sp: Num, flash: Num,
               recompute: Num, gpu: GPU, dtype: str) -> LayerTime:
    """Compute seconds of one layer: forward, backward and recomputation.

    ``recompute`` is 0 (none), 1 (selective: the attention core is recomputed) or 2 (full: the
    whole forward is recomputed)."""
    g = gemm_time_fwd(m, b, tp, cp, ep, gpu, dtype)
    a_f, a_b = attention_time_fwd(m, b, tp, cp, flash, gpu)
    e = elementwise_time_fwd(m, b, tp, cp, sp, gpu, dtype)
    fwd = g + a_f + e
    bwd = 2 * g + a_b + 2 * e
    # selective recompute redoes the attention core; with FlashAttention its backward already
    # recomputes the scores, so there is nothing extra to redo
    sel = np.where(flash, 0.0, a_f)
    rc = np.where(recompute == 2, fwd, np.where(recompute == 1, sel, 0.0))
    return LayerTime(fwd, bwd, rc)


def lm_head_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str) -> tuple[Num, Num]:
    """(forward, backward) seconds of the output layer and the cross-entropy on the last stage."""
    T = costs.tokens_per_gpu(b, m.seq_length, cp)
    rate = gpu.peak("bf16") * gpu.matmul_efficiency  # the logits GEMM stays in bf16
    hbm = gpu.hbm_bandwidth * HBM_EFFICIENCY
    g = _gemm(1, T, m.vocab_size / tp, m.hidden_size, rate, hbm, 2.0)
    ce = 3 * 4.0 * T * m.vocab_size / tp / hbm  # fp32 softmax cross-entropy over the logits
    return g + ce, 2 * g + ce


def embedding_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU) -> Num:
    """Forward seconds of the embedding lookup (+ position add, dropout) on the first stage."""
    T = costs.tokens_per_gpu(b, m.seq_length, cp)
    return 4 * 2.0 * T * m.hidden_size / (gpu.hbm_bandwidth * HBM_EFFICIENCY)


def optimizer_time(params_on_gpu: Num, gpu: GPU) -> Num:
    """Adam step over the parameters this GPU updates: fp32 master, m and v read and written
    (24 B), the fp32 gradient read (4 B), the bf16 weight written (2 B): 30 B per parameter."""
    return 30.0 * params_on_gpu / (gpu.hbm_bandwidth * HBM_EFFICIENCY)
