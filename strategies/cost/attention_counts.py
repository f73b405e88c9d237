"""The attention core's counts: score elements (full, sliding-window or chunked; the model's
square, the causal pairs, or the 128x128 blocks a causal kernel computes), QK^T and AV FLOPs,
the fused kernel's exponentials, and the HBM bytes of the unfused (no FlashAttention) path's
score tensors. Units: elements, FLOP, bytes; vectorised over the plan fields."""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num
from strategies.model import ModelSpec


def causal_fraction(s: int) -> float:
    """Share of the ``s x s`` score square a causal FlashAttention kernel computes: the lower
    triangle of 128x128 blocks, diagonal blocks in full, ``(n+1)/(2n)`` for ``n = ceil(s/128)``
    blocks per side (``0.5 + 64/s`` when 128 divides ``s``; 1 for one block)."""
    n = max(1, -(-int(s) // 128))
    return (n + 1) / (2.0 * n)


def _causal_blocks(n: int, w: int) -> int:
    """128x128 blocks a causal kernel computes over ``n`` query blocks when each reaches back
    at most ``w`` key blocks (its own included): ``sum min(i+1, w)``."""
    if n <= w:
        return n * (n + 1) // 2
    return w * (w + 1) // 2 + (n - w) * w


SCORE_MODES = ("square", "causal", "kernel")


def score_elements(s: int, window: int | None = None, kind: str = "sliding",
                   mode: str = "square") -> float:
    """Score elements one head of one sequence computes (QK^T entries, per layer).

    ``mode`` "square": the model-FLOP convention, ``s²`` for full attention, the band
    ``s² - (s-W)²`` for a sliding window of ``W < s`` keys, ``sum ℓ²`` over the chunks of
    chunked attention (Llama 4: each chunk of ``C`` tokens attends within itself). "causal":
    the pairs a causal mask keeps, ``s(s+1)/2``, ``sum min(i+1, W)`` in a sliding window,
    ``sum ℓ(ℓ+1)/2`` over chunks. "kernel": the 128x128 blocks a causal kernel that skips
    masked blocks computes, ``s²·causal_fraction(s)``; in a sliding window each query block
    reaches back ``ceil((W-1)/128) + 1`` key blocks. A window of at least ``s`` is full
    attention."""
    if mode not in SCORE_MODES:
        raise ValueError(f"mode={mode!r}: must be one of {', '.join(SCORE_MODES)}")
    if window is None or window >= s:
        return {"square": float(s * s), "causal": s * (s + 1) / 2.0,
                "kernel": s * s * causal_fraction(s)}[mode]
    if kind == "chunked":
        q, r = divmod(s, window)
        return sum(score_elements(c, None, mode=mode) for c in [window] * q + ([r] if r else []))
    if mode == "square":
        return float(s * s - (s - window) ** 2)
    if mode == "causal":
        return window * (window + 1) / 2.0 + (s - window) * window
    n = max(1, -(-int(s) // 128))
    return s * s * _causal_blocks(n, -(-(window - 1) // 128) + 1) / (n * n)


def mean_score_elements(m: ModelSpec, mode: str = "square", windows: bool = True) -> float:
    """``score_elements`` of the mean layer: windowed and full layers weighted by count
    (``windows`` False: every layer full, what an unfused kernel computes before masking); a
    hybrid model's mean layer has ``ModelSpec.attention_share`` attention blocks."""
    s, L, nw = m.seq_length, m.num_layers, m.num_windowed_layers
    if m.is_dsv4:       # the sparse kernel's attended keys, every mode (strategies.cost.dsv4_cost)
        from strategies.cost.dsv4_cost import mean_attended_keys
        return float(mean_attended_keys(m))
    full = score_elements(s, None, mode=mode)
    if m.is_hybrid:
        return m.attention_share * full
    if not nw or not windows:
        return full
    win = score_elements(s, m.sliding_window, m.window_kind, mode)
    return ((L - nw) * full + nw * win) / L


def window_share(m: ModelSpec) -> float:
    """Share of the mean layer's causal-kernel score blocks (``score_elements`` "kernel") that
    its sliding-window layers compute: ``nw·win / ((L - nw)·full + nw·win)``; 0.0 without
    windowed layers, or where the window is at least the sequence (those layers run the
    causal kernel's full grid: Llama 4's chunks at ``s <= C``, ``stacks.cp_windows``). The
    fused kernel's time per block is one rate unless a kind is priced at its own
    (``fp8_attention.time_factors``, ``window_kernel``). 0.0 for DeepSeek-V4: its sparse
    kernel gathers each query's window and compressed entries as one set
    (``mean_score_elements``), none of its layers runs the causal kernel's windowed grid."""
    s, L, nw = m.seq_length, m.num_layers, m.num_windowed_layers
    if not nw or m.is_dsv4 or m.sliding_window >= s:
        return 0.0
    full = score_elements(s, None, mode="kernel") * (L - nw)
    win = score_elements(s, m.sliding_window, m.window_kind, "kernel") * nw
    return win / (full + win)


def attn_core_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, causal_skip: Num,
                        windows: bool = True) -> Num:
    """QK^T and AV FLOPs per GPU of the mean layer: ``2·b·a·(d_qk + d_v)/(t·c)`` per score
    element (``4·b·s²·h/(t·c)`` for the full square of a standard layer, ``a·d = h``), over
    ``mean_score_elements`` (the full square, or the causal kernel's blocks when it skips the
    masked ones, ``causal_skip`` = 1; windows as ``score_elements``, or ignored with
    ``windows`` False: the unfused path computes the whole square and masks it)."""
    per = 2 * b * m.num_attention_heads * (m.head_dim + m.v_dim) / (tp * cp)
    full = mean_score_elements(m, "square", windows)
    skip = mean_score_elements(m, "kernel")
    return per * np.where(causal_skip, skip, full) if np.ndim(causal_skip) else \
        per * (skip if causal_skip else full)


def attn_exponentials_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Exponentials per GPU of the mean layer's fused (Flash) attention forward: one per score
    element the causal kernel computes, ``b·a/(t·c)`` times ``mean_score_elements(m,
    "kernel")`` (``attn_core_flops_fwd`` with causal skipping over its ``2·(d_qk + d_v)`` FLOPs
    per element); the backward recomputes each once more (``P = exp(S - LSE)``)."""
    return b * m.num_attention_heads / (tp * cp) * mean_score_elements(m, "kernel")


def attn_core_flops_per_token(m: ModelSpec, causal: bool = False) -> float:
    """Forward QK^T and AV FLOPs per token of all layers: ``2·a·(d_qk + d_v)`` per score
    element, over the square or (``causal``) the causal pairs, ``mean_score_elements / s``."""
    per = 2.0 * m.num_attention_heads * (m.head_dim + m.v_dim)
    return per * m.num_layers * mean_score_elements(m, "causal" if causal else "square") \
        / m.seq_length


#: HBM bytes per score element of the unfused attention path (Megatron's, no FlashAttention),
#: forward: QK^T's ``baddbmm`` writes the score (2), the fused scale-mask-softmax reads and
#: writes it (2 + 2), attention dropout reads it and writes it and its 1-byte mask (2 + 2 + 1)
#: and AV's ``bmm`` reads it (2). NVIDIA/Megatron-LM v2.x and bigscience-workshop/
#: Megatron-DeepSpeed ``megatron/model/transformer.py`` ``ParallelAttention.forward``.
SCORE_BYTES_FWD = 13.0
#: ... and backward (autograd of the same ops): AV's backward writes ``dP = dO·V^T`` (2) and
#: reads the dropped-out probabilities for ``dV = P^T·dO`` (2); dropout's backward reads ``dP``
#: and the mask and writes (2 + 1 + 2); the fused softmax backward reads the gradient and the
#: saved softmax output and writes in place (2 + 2 + 2); QK^T's backward reads ``dS`` for
#: ``dQ = dS·K`` and for ``dK = dS^T·Q`` (2 + 2). docs/calibration.md §3.25.
SCORE_BYTES_BWD = 19.0
#: The attention dropout's share of those bytes, forward (it reads the probabilities, writes
#: them and its 1-byte mask: 2 + 2 + 1) and backward (reads ``dP`` and the mask, writes:
#: 2 + 1 + 2). A model trained without dropout (``ModelSpec.dropout`` False) never spends
#: them: ``F.dropout(x, p=0)`` returns ``x`` itself (PyTorch ``aten/src/ATen/native/
#: Dropout.cpp``, ``_dropout_impl``), so AV reads the softmax output directly, as Transformer
#: Engine's ``UnfusedDotProductAttention`` runs it (``torch.nn.Dropout(0.0)``). §5.44.
DROPOUT_SCORE_BYTES_FWD = 5.0
DROPOUT_SCORE_BYTES_BWD = 5.0


def score_bytes(m: ModelSpec) -> tuple[float, float]:
    """HBM bytes per score element of the unfused attention path, (forward, backward):
    ``SCORE_BYTES_FWD``/``SCORE_BYTES_BWD``, less the dropout's share
    (``DROPOUT_SCORE_BYTES_*``) for a model trained without dropout."""
    if m.dropout:
        return SCORE_BYTES_FWD, SCORE_BYTES_BWD
    return (SCORE_BYTES_FWD - DROPOUT_SCORE_BYTES_FWD,
            SCORE_BYTES_BWD - DROPOUT_SCORE_BYTES_BWD)


def score_elements_per_gpu(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Elements of the unfused path's score tensors per GPU and layer: ``a·s²·b/(t·c)`` (the
    whole square: the unfused path computes it, the causal mask only hides a half)."""
    s = m.seq_length
    return m.num_attention_heads * s * s * b / (tp * cp)


def _unless_flash(flash: Num, per: Num) -> Num:
    """``per`` where the plan runs the unfused attention path, 0 under FlashAttention (scalar
    ``flash`` keeps a scalar)."""
    return np.where(flash, 0.0, per) if np.ndim(flash) else (0.0 if flash else per)


def softmax_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num,
                      bias_bytes: float = 0.0) -> Num:
    """HBM bytes of the unfused attention path (no FlashAttention), per GPU, forward:
    ``score_bytes(m)[0]`` per score element (``score_elements_per_gpu``), plus ``bias_bytes``
    per element where the stack adds a position bias into the score tensor
    (``FrameworkProfile.alibi_score_bytes`` for ALiBi). Zero with FlashAttention (scores stay
    on chip)."""
    return _unless_flash(flash, (score_bytes(m)[0] + bias_bytes)
                         * score_elements_per_gpu(m, b, tp, cp))


def softmax_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num) -> Num:
    """HBM bytes of the unfused attention path's backward per GPU: ``score_bytes(m)[1]`` per
    score element (a bias added in the forward has no gradient: ALiBi's is a buffer). Zero
    with FlashAttention."""
    return _unless_flash(flash, score_bytes(m)[1] * score_elements_per_gpu(m, b, tp, cp))
