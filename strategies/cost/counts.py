"""The cost model: FLOPs, bytes and communication volumes of one transformer layer, one
micro-batch, on one GPU. The one source of truth that the analytic estimator and the
simulator's compiler both read.

Every function takes plain numbers *or numpy arrays* for the plan fields (tp, cp, mbs, sp, ...)
and broadcasts, so the search can score thousands of plans in one call with the very same
arithmetic as a single estimate. Units: FLOP, bytes, tokens.

Notation (Narayanan 2021 / Korthikanti 2022): b micro-batch, s sequence length, h hidden,
a heads, g KV heads, d head dim, F MLP hidden, V vocabulary, t tensor-parallel size,
c context-parallel size.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.model import ModelSpec

Num = Any  # float or np.ndarray

ACT_BYTES = 2  # bf16/fp16 activations


def tokens_per_gpu(b: Num, s: int, cp: Num) -> Num:
    """Tokens of one micro-batch held by one GPU of a context-parallel group."""
    return b * s / cp


def gemm_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Forward FLOPs of the dense matmuls of one layer (per GPU, per micro-batch).

    QKV ``2T·h·(h + 2gd)/t``, output ``2T·h²/t``, MLP ``2T·h·F·(3 if gated else 2)/t`` times
    top-k for MoE, plus the router ``2T·h·E`` (replicated across tp)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h, d = m.hidden_size, m.head_dim
    attn = 2 * T * h * (h + 2 * m.kv_heads * d) + 2 * T * h * h
    mlp = 2 * T * h * m.expert_ffn * (3 if m.gated else 2) * m.moe_router_topk
    router = 2 * T * h * m.num_experts if m.is_moe else 0
    return (attn + mlp) / tp + router


def causal_fraction(s: int) -> float:
    """Share of the ``s x s`` score square a causal FlashAttention kernel computes: the lower
    triangle of 128x128 blocks, diagonal blocks in full, ``(n+1)/(2n)`` for ``n = ceil(s/128)``
    blocks per side (``0.5 + 64/s`` when 128 divides ``s``; 1 for one block)."""
    n = max(1, -(-int(s) // 128))
    return (n + 1) / (2.0 * n)


def attn_core_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, causal_skip: Num) -> Num:
    """QK^T and AV FLOPs per GPU: ``4·b·s²·h/(t·c)`` for the full square, times
    ``causal_fraction(s)`` when the kernel skips the masked blocks (``causal_skip`` = 1)."""
    s = m.seq_length
    full = 4 * b * s * s * m.hidden_size / (tp * cp)
    frac = causal_fraction(s)
    return full * np.where(causal_skip, frac, 1.0) if np.ndim(causal_skip) else \
        full * (frac if causal_skip else 1.0)


def executed_flops_per_step(m: ModelSpec, gbs: Num, flash: Num, recompute: Num) -> Num:
    """FLOPs the hardware executes in one step (for HFU): forward and backward (3 x forward)
    of the GEMMs, the attention core as the kernel runs it (causal blocks skipped with
    FlashAttention) and the LM head, plus the recomputed forward (``recompute``: 0 none,
    1 selective = the attention core when it is not FlashAttention, 2 full = the layers).
    FlashAttention's own recomputation of the scores inside its backward is not counted, so
    HFU stays at most the fraction of peak the time model charges."""
    L = m.num_layers
    gemm = gemm_flops_fwd(m, gbs, 1, 1) * L
    attn = attn_core_flops_fwd(m, gbs, 1, 1, flash) * L
    head = 2 * gbs * m.seq_length * m.hidden_size * m.vocab_size
    extra = np.where(recompute == 2, gemm + attn,
                     np.where((recompute == 1) & np.logical_not(flash), attn, 0.0))
    return 3 * (gemm + attn + head) + extra


def hardware_flops_per_step(m: ModelSpec, gbs: Num, flash: Num, recompute: Num) -> Num:
    """Model FLOPs plus the recomputed forward, in the same convention (attention square in
    full; for HFU, which docs/cli.md defines as MFU "with recomputation counted"): full
    recomputation (``recompute`` 2) redoes each layer's forward; selective (1) redoes the
    attention core, except under FlashAttention, which recomputes it inside its own backward
    (not counted, as in MFU). With no recomputation this equals ``model_flops_per_step``."""
    s, h, L = m.seq_length, m.hidden_size, m.num_layers
    gemm = gemm_flops_fwd(m, gbs, 1, 1) * L
    attn = 4 * gbs * s * s * h * L
    extra = np.where(recompute == 2, gemm + attn,
                     np.where((recompute == 1) & np.logical_not(flash), attn, 0.0))
    return model_flops_per_step(m, gbs) + extra


def model_flops_per_step(m: ModelSpec, gbs: Num) -> Num:
    """Model FLOPs of one optimizer step (no recomputation): 3 × forward, the attention square
    counted in full (Narayanan eq. 3 without the recompute forward; docs/formulas.md §2b)."""
    s, h = m.seq_length, m.hidden_size
    T = gbs * s
    fwd_gemm = gemm_flops_fwd(m, gbs, 1, 1) * m.num_layers
    fwd_attn = 4 * gbs * s * s * h * m.num_layers
    fwd_head = 2 * T * h * m.vocab_size
    return 3 * (fwd_gemm + fwd_attn + fwd_head)


def mfu(m: ModelSpec, gbs: Num, step_time_s: Num, n_gpus: Num, peak_flops: Num) -> Num:
    """Model FLOPs utilisation: ``model_flops_per_step / (n_gpus · step_time_s · peak)``
    (``peak_flops`` in FLOP/s per GPU for the job's dtype). The one definition: the
    estimate, the simulation's report and the search's rows all call it."""
    return model_flops_per_step(m, gbs) / (n_gpus * step_time_s * peak_flops)


def hfu(m: ModelSpec, gbs: Num, flash: Num, recompute: Num, step_time_s: Num, n_gpus: Num,
        peak_flops: Num) -> Num:
    """Hardware FLOPs utilisation: ``hardware_flops_per_step`` (model FLOPs plus the
    recomputed forward) over ``n_gpus · step_time_s · peak_flops``; equals ``mfu`` without
    recomputation."""
    return hardware_flops_per_step(m, gbs, flash, recompute) / (n_gpus * step_time_s * peak_flops)


# ----------------------------------------------------------------------------- memory traffic
def elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of the memory-bound kernels of one layer's forward, per GPU.

    Counted per token (bf16, 1-byte dropout masks), with Megatron's fusions: two LayerNorms
    (read + write h each: 4h·2 B), two bias-dropout-add (read x and residual, write out, write
    mask: 3h·2 B + h), the MLP activation (read F or 2F if gated, write F: 2F·2 B or 3F·2 B), and
    rotary embedding on Q and K when used. Without sequence parallelism the LayerNorm and dropout
    work is replicated on every tensor-parallel rank; with it, divided by t.
    """
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    norm_drop = (8 * h + 2 * (6 * h + h)) * T
    act_elems = (3 if m.gated else 2) * m.expert_ffn * m.moe_router_topk
    act = 2 * act_elems * T / tp
    rope = 2 * 2 * (h + m.kv_heads * m.head_dim) * T / tp if m.position_embedding == "rope" else 0
    shard = np.where(sp, tp, 1) if np.ndim(sp) or np.ndim(tp) else (tp if sp else 1)
    return norm_drop / shard + act + rope


def softmax_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num) -> Num:
    """HBM bytes of the unfused attention path (no FlashAttention), per GPU, forward: the score
    matrix ``a·s²·b/(t·c)`` is written by QK^T (2 B), read and written by the fused
    scale-mask-softmax (4 B), read and written by attention dropout with its mask (5 B) and read by
    AV (2 B): 13 bytes per score element. Zero with FlashAttention (scores stay on chip)."""
    s = m.seq_length
    elems = m.num_attention_heads * s * s * b / (tp * cp)
    return np.where(flash, 0.0, 13.0 * elems) if np.ndim(flash) else (0.0 if flash else 13.0 * elems)


# ----------------------------------------------------------------------- communication volumes
def tp_comm_bytes_fwd(m: ModelSpec, b: Num, cp: Num) -> Num:
    """Bytes of the activation tensor that one tensor-parallel collective moves: ``b·s·h/c``
    elements of 2 bytes. A layer's forward runs two such all-reduces (or, with SP, two
    all-gather + reduce-scatter pairs); the backward runs the same two (Korthikanti §4.2.2)."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.hidden_size


def pp_p2p_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """Bytes sent between consecutive pipeline stages per micro-batch, each direction, by one
    GPU: ``b·s·h`` activations, split over the tensor-parallel ranks with sequence parallelism
    (or Megatron's scatter/gather optimisation, which does the same thing across the node's
    NICs); ``/c`` with context parallelism."""
    full = ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.hidden_size
    return full / tp  # scatter/gather (2021) and SP (2022+) both shard the boundary tensor


def cp_comm_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Ring attention: each GPU passes its K and V blocks around the ring, ``c-1`` steps of
    ``2·T·g·d/t`` elements (forward); the backward sends K, V and their gradients (2×)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    return ACT_BYTES * 2 * T * m.kv_heads * m.head_dim / tp * (cp - 1)


def ep_alltoall_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num) -> Num:
    """MoE token dispatch + combine per layer forward, per GPU: each token's hidden vector goes
    to top-k experts and comes back; the share ``(ep-1)/ep`` leaves the GPU."""
    if not m.is_moe:
        return 0.0 * ep
    T = tokens_per_gpu(b, m.seq_length, cp)
    return 2 * ACT_BYTES * T * m.hidden_size * m.moe_router_topk * (ep - 1) / ep / tp


# ----------------------------------------------------------------------------- parameters
# One family of per-GPU parameter counts: the estimate (DP traffic, optimizer), the lower
# bound, the stage-cost record (gradient buckets), cost/compute (gradient accumulation) and
# memory all read these. docs/memory.md "Parameters on stage s".

def expert_params(m: ModelSpec) -> int:
    """Parameters of one layer's experts (0 for a dense model): every expert's MLP weights and,
    with ``bias``, its MLP biases (fc1 ``F`` or ``2F`` gated, fc2 ``h``). Sharded over
    ``tp·ep`` like the weights they belong to; the router stays in the dense share."""
    if not m.is_moe:
        return 0
    per = m.mlp_params_per_expert()
    if m.bias:
        per += m.expert_ffn * (2 if m.gated else 1) + m.hidden_size
    return m.num_experts * per


def layer_params_split(m: ModelSpec, tp: Num, ep: Num) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters of one layer on one GPU: the experts (``expert_params``)
    over ``tp·ep``, everything else (attention, norms, router, dense biases) over ``tp``."""
    experts = expert_params(m)
    return (m.layer_params() - experts) / tp, experts / (tp * ep)


def layer_params_per_gpu(m: ModelSpec, tp: Num, ep: Num) -> Num:
    """Parameters of one layer held by one GPU (``layer_params_split``, summed)."""
    dense, expert = layer_params_split(m, tp, ep)
    return dense + expert


def embedding_params_per_gpu(m: ModelSpec, tp: Num) -> Num:
    """Word (+ learned position) embedding on the first stage, ``/tp``."""
    return m.embedding_params() / tp


def head_params_per_gpu(m: ModelSpec, tp: Num, pp: Num) -> Num:
    """The last stage's output layer, ``/tp``: the final norm plus the LM head's weights, or,
    tied, a copy of the word embedding when ``pp > 1`` (Megatron; with ``pp = 1`` the tied
    head is the embedding and adds nothing)."""
    own = m.vocab_size * m.hidden_size
    if m.tie_word_embeddings:
        head = np.where(pp > 1, own, 0.0) if np.ndim(pp) else (own if pp > 1 else 0.0)
    else:
        head = m.lm_head_params() + 0 * pp
    return (head + m.norm_params()) / tp


def stage_params_split(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                       layers: Num | None = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters held by one GPU of pipeline rank ``stage``: its
    ``layers`` (default ``l/p``; ``Job.layers_of_stage`` for uneven stages), the embedding on
    stage 0 and the output layer on stage ``pp-1``."""
    dense_l, expert_l = layer_params_split(m, tp, ep)
    lps = m.num_layers // pp if layers is None else layers
    first, last = np.asarray(stage) == 0, np.asarray(stage) == np.asarray(pp) - 1
    dense = (lps * dense_l + np.where(first, embedding_params_per_gpu(m, tp), 0.0)
             + np.where(last, head_params_per_gpu(m, tp, pp), 0.0))
    return dense, lps * expert_l


def stage_params_per_gpu(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                         layers: Num | None = None) -> Num:
    """Parameters held by one GPU of pipeline rank ``stage`` (``stage_params_split``, summed)."""
    dense, expert = stage_params_split(m, tp, ep, pp, stage, layers)
    return dense + expert
