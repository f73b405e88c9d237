"""Parameters per GPU: one family of counts that the estimate (DP traffic, optimizer), the
lower bound, the stage-cost record (gradient buckets), the compute times (gradient
accumulation) and memory all read (docs/memory.md "Parameters on stage s"): the mean layer's
dense and expert shares, the multi-token-prediction modules, the embedding and the output
layer, a pipeline rank's total, and the tensors ZeRO-3 gathers one at a time. Vectorised
over the plan fields."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.token_counts import Num
from strategies.model import ModelSpec


def expert_params(m: ModelSpec) -> float:
    """Routed-expert parameters of the mean layer, their biases included (0 for a dense
    model; ``ModelSpec.expert_params_per_layer``): the part expert parallelism shards over
    ``tp·ep``; shared experts and the router stay in the dense share."""
    return m.expert_params_per_layer()


def layer_params_split(m: ModelSpec, tp: Num, ep: Num,
                       etp: Num | None = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters of the mean layer on one GPU: the routed experts
    (``expert_params``) over ``etp·ep`` (``etp`` default ``tp``); MLA's down projections
    whole on every tensor-parallel rank (``ModelSpec.tp_replicated_params``); everything else
    (attention, norms, router, shared experts, dense biases) over ``tp``."""
    experts, rep = expert_params(m), m.tp_replicated_params()
    etp = tp if etp is None else etp
    return (m.layer_params() - experts - rep) / tp + rep, experts / (etp * ep)


def layer_lead_split(m: ModelSpec, tp: Num, ep: Num,
                     etp: Num | None = None) -> tuple[Num, float]:
    """``(parameters on one GPU, share of the GEMM work)`` of the mean layer's MLP with its
    norm: what a layer's backward completes before its attention's (Megatron-Core's
    ``TransformerLayer`` runs the MLP then the attention, so the MLP's gradients are ready
    first and the QKV projection's, with the input norm's, last). The share is of the
    layer's GEMM work a token passes through (top-k experts only): attention and MLP GEMMs
    scale with the weights they multiply. A hybrid model's layer is one block (``(0, 0)``:
    its gradients complete at its end). The rest of ``layer_params_split`` (attention,
    input norm, MLA's replicated down projections) is the layer's trailing part."""
    if m.is_hybrid:
        return 0.0 * np.asarray(tp, dtype=float), 0.0
    counts = {k: n for k, n in m.layer_counts().items() if n}
    total = sum(counts.values())
    mlp = sum(n * m.mlp_params(k) for k, n in counts.items()) / total
    idle = sum(n * (m.layer_params(k) - m.active_layer_params(k))
               for k, n in counts.items()) / total
    rest = m.layer_params() - mlp - m.norm_params()      # attention, input norm (and extras)
    rep = m.tp_replicated_params()
    dense, expert = layer_params_split(m, tp, ep, etp)
    lead = dense + expert - ((rest - rep) / tp + rep)
    work = (mlp + m.norm_params() - idle) / (m.layer_params() - idle)
    return lead, float(work)


def mtp_params_split(m: ModelSpec, tp: Num, ep: Num,
                     etp: Num | None = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters on one GPU of one multi-token-prediction module
    (``ModelSpec.mtp_params``): its block's layers (``ModelSpec.mtp_block_kinds``: one
    transformer layer, MoE when the model is, or a hybrid model's pattern; each
    ``layer_params_split`` of its kind, routed experts over ``etp·ep``; DeepSeek-V4's a
    sliding-window layer, ``ModelSpec.mtp_layer_model``), the ``2h -> h``
    projection over ``tp``, three norms and DeepSeek-V4's stream contraction
    (``hc_head_params``, replicated); once however many depths it runs."""
    dense, expert = 0.0, 0.0
    mm = m.mtp_layer_model()        # DeepSeek-V4's MTP layer: a sliding-window one
    for k in m.mtp_block_kinds():
        d_k, e_k = layer_params_split(mm.of_kind(k), tp, ep, etp)
        dense, expert = dense + d_k, expert + e_k
    return (dense + 2.0 * m.hidden_size ** 2 / tp + 3 * m.norm_params() + m.hc_head_params(),
            expert)


def mtp_embedding_copy_params(m: ModelSpec, tp: Num, mtp_modules: Num,
                              has_embedding: Any) -> Num:
    """Parameters per GPU of the copy of the word embedding Megatron builds on a rank that
    holds multi-token-prediction modules (``mtp_modules > 0``) but not the embedding
    (``embedding_params_per_gpu``); 0 elsewhere. Vectorised."""
    here = (np.asarray(mtp_modules) > 0) & ~np.asarray(has_embedding, dtype=bool)
    return np.where(here, embedding_params_per_gpu(m, tp), 0.0)[()]


def content_params(m: ModelSpec, content: Any, tp: Num, ep: Num, etp: Num | None,
                   has_embedding: Any) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters per GPU of the layers and MTP modules a rank holds,
    ``content`` ``{"dense", "moe", "mtp": counts}`` (per plan; ``layout.stage_content`` of a
    job's layout, ``layout.even_stage_content_arrays`` of the plans' columns): each kind's
    layer (``layer_params_split`` of ``ModelSpec.of_kind``) times its count, the MTP modules'
    (``mtp_params_split``) and, on a rank holding MTP modules without the embedding
    (``has_embedding`` false), the copy of the embedding Megatron builds there. The one
    reading of a rank's parameters by kind: the memory model, the stage-cost record (so the
    estimate's per-rank data-parallel traffic, the lower bound and the simulator's buckets)
    take it. Vectorised."""
    dense, expert = 0.0, 0.0
    for k in m.cost_kinds():
        n = np.asarray(content.get(k, 0.0), dtype=float)
        if np.any(n):
            d_k, e_k = layer_params_split(m.of_kind(k), tp, ep, etp)
            dense, expert = dense + n * d_k, expert + n * e_k
    mtp = np.asarray(content.get("mtp", 0.0), dtype=float)
    if np.any(mtp):
        d_m, e_m = mtp_params_split(m, tp, ep, etp)
        dense = dense + mtp * d_m + mtp_embedding_copy_params(m, tp, mtp, has_embedding)
        expert = expert + mtp * e_m
    return dense + np.zeros_like(mtp), expert + np.zeros_like(mtp)


def layer_params_per_gpu(m: ModelSpec, tp: Num, ep: Num, etp: Num | None = None) -> Num:
    """Parameters of the mean layer held by one GPU (``layer_params_split``, summed)."""
    dense, expert = layer_params_split(m, tp, ep, etp)
    return dense + expert


def embedding_params_per_gpu(m: ModelSpec, tp: Num) -> Num:
    """Word (+ learned position) embedding on the first stage, ``/tp``."""
    return m.embedding_params() / tp


def head_params_per_gpu(m: ModelSpec, tp: Num, pp: Num, with_embedding: Any = False) -> Num:
    """The output layer on the rank that holds it, ``/tp``: the final norm plus the LM head's
    weights, or, tied, a copy of the word embedding (Megatron) unless that rank holds the
    embedding too (``with_embedding``: a V, ZB-V and DualPipeV, whose rank 0 holds the first
    and the last chunk; DualPipe's end ranks; always with ``pp = 1``): the tied head is then
    the embedding's own tensor and adds only the final norm. Parameters."""
    own = m.vocab_size * m.hidden_size
    if m.tie_word_embeddings:
        copy = (np.asarray(pp) > 1) & ~np.asarray(with_embedding, dtype=bool)
        head = np.where(copy, own, 0.0) if np.ndim(copy) else (own if copy else 0.0)
    else:
        head = m.lm_head_params() + 0 * pp
    return (head + m.norm_params()) / tp


def stage_params_split(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                       layers: Num | None = None,
                       head_stage: Num | None = None, mirrored: Any = False,
                       etp: Num | None = None, content: Any = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters held by one GPU of pipeline rank ``stage``: its
    ``layers`` (default ``l/p``; ``Job.layers_of_stage`` for uneven stages) mean layers, or,
    given ``content`` (``{"dense", "moe", "mtp": counts}``, both copies where mirrored), the
    layers and MTP modules it holds by kind (``content_params``), the embedding on
    stage 0 and the output layer on stage ``head_stage`` (default ``pp-1``; the schedule's
    ``head_rank_array``: 0 on a V). ``mirrored`` (``Schedule.mirrored``, DualPipe): the rank
    also holds stage ``pp-1-stage``, so twice the layers and, on both end ranks, the embedding
    and the output layer. ``etp``: the expert tensor-parallel size (default tp)."""
    dense_l, expert_l = layer_params_split(m, tp, ep, etp)
    lps = m.num_layers // pp if layers is None else layers
    head = np.asarray(pp) - 1 if head_stage is None else np.asarray(head_stage)
    first, last = np.asarray(stage) == 0, np.asarray(stage) == head
    mirrored = np.asarray(mirrored, dtype=bool)
    end = first | (np.asarray(stage) == np.asarray(pp) - 1)
    first, last = np.where(mirrored, end, first), np.where(mirrored, end, last)
    lps = np.where(mirrored, 2, 1) * lps
    if content is None:
        layer_d, layer_e = lps * dense_l, lps * expert_l
    else:
        layer_d, layer_e = content_params(m, content, tp, ep, etp, first)
    dense = (layer_d + np.where(first, embedding_params_per_gpu(m, tp), 0.0)
             + np.where(last, head_params_per_gpu(m, tp, pp, first), 0.0))
    return dense, layer_e


def stage_params_per_gpu(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                         layers: Num | None = None, head_stage: Num | None = None,
                         mirrored: Any = False, etp: Num | None = None) -> Num:
    """Parameters held by one GPU of pipeline rank ``stage`` (``stage_params_split``, summed)."""
    dense, expert = stage_params_split(m, tp, ep, pp, stage, layers, head_stage, mirrored, etp)
    return dense + expert


def layer_param_tensors(m: ModelSpec) -> tuple[int, ...]:
    """Numel of each parameter tensor of one layer in forward order (the whole tensor, before
    any split): input norm, attention weights and biases, second norm, MLP weights and biases
    (a MoE layer: the router, a latent MoE's down projection, every routed expert, its up
    projection, then every shared expert's). What a stack that
    gathers one tensor at a time (DeepSpeed ZeRO-3, ``zero3_tensor_gathers``) gathers."""
    h = m.hidden_size
    norm = (h, h) if m.norm == "layernorm" else (h,)
    attn: list[int] = []
    for name, i, o, _ in m.attention_linears():
        attn.append(i * o)
        if name in ("qkv", "q", "kv_up") and (m.bias or m.qkv_bias):
            attn.append(o)
        if name == "proj" and m.bias:
            attn.append(h)

    def mlp(ffn: int, w: int = h) -> list[int]:
        up = (2 if m.gated else 1) * ffn
        return [w * up] + ([up] if m.bias else []) + [ffn * w] + ([w] if m.bias else [])

    if m.is_moe:
        L = m.moe_latent_size
        body = [h * m.num_experts] + ([h * L] if L else []) \
            + mlp(m.expert_ffn, m.expert_hidden) * m.num_experts + ([L * h] if L else [])
        body += mlp(m.shared_ffn) * m.num_shared_experts
    else:
        body = mlp(m.ffn_hidden_size)
    return tuple(norm) + tuple(attn) + tuple(norm) + tuple(body)


def zero3_tensor_gathers(m: ModelSpec, tp: Num, ep: Num, pp: Num, full_recompute: Num,
                         reuse_params: float) -> dict[str, Num]:
    """ZeRO-3 run one parameter tensor at a time (DeepSpeed v0.3.13-v0.5, 2021): per
    micro-batch on the first pipeline stage, the all-gathers of the forward (every tensor
    of its ``l/p`` layers, the embedding and, with ``pp = 1``, the final norm and the LM head,
    a tied head gathering the word embedding again), of the backward (with full recompute the
    recomputed forward's and the backward's), and the gradient reduce-scatters (one per
    tensor). A tensor released after use is gathered again at its next use unless fewer than
    ``reuse_params`` parameters are used in between (``stage3_max_reuse_distance``):
    DeepSpeed's ``PartitionedParameterCoordinator._keep_for_later``. Returns counts and
    parameters per GPU (``/tp``; experts ``/(tp·ep)`` folded into the layer's mean):
    ``fwd_n, fwd_params, bwd_n, bwd_params, rs_n, rs_params``. Vectorised."""
    tensors = np.asarray(layer_param_tensors(m), dtype=float)
    T = len(tensors)
    share = tensors / tensors.sum()                       # each tensor's share of the layer
    after = share[::-1].cumsum()[::-1] - share            # share used after it in the layer
    L = m.num_layers // np.asarray(pp)
    P = layer_params_per_gpu(m, tp, ep)                   # one layer on one GPU
    single = np.asarray(pp) == 1
    tied = bool(m.tie_word_embeddings)
    word = m.vocab_size * m.hidden_size / tp
    norm_n = 2 if m.norm == "layernorm" else 1
    head_n = np.where(single, norm_n + 1, 0)              # final norm + head (or tied word)
    head_p = np.where(single, m.norm_params() / tp + (word if tied else m.lm_head_params() / tp),
                      0.0)
    emb_n = 2 if m.position_embedding == "learned" else 1
    emb_p = embedding_params_per_gpu(m, tp)
    R = float(reuse_params)
    rc = np.asarray(full_recompute, dtype=bool)
    bwd_n = 0.0
    bwd_p = 0.0
    for j in range(T):
        s_j, a_j = share[j] * P, after[j] * P
        # k = layers after this one on the stage: forward use -> next use (the recomputed
        # forward, or the backward) passes the rest of this layer, k layers, the head, k
        # layers again and (recompute) the part of this layer before the tensor
        k_rc = np.ceil((R - head_p + s_j - P) / (2 * P))
        n_rc = L - np.clip(k_rc, 0, L)                    # layers whose distance >= R
        k_nr = np.ceil((R - head_p - 2 * a_j) / (2 * P))
        n_nr = L - np.clip(k_nr, 0, L)
        again_bwd = np.where(2 * a_j >= R, L, 0)          # recomputed forward -> backward
        n_j = np.where(rc, n_rc + again_bwd, n_nr)
        bwd_n = bwd_n + n_j
        bwd_p = bwd_p + n_j * s_j
    emb_again = 2 * L * P + head_p >= R                   # embedding: whole stage in between
    bwd_n = bwd_n + np.where(emb_again, emb_n, 0)
    bwd_p = bwd_p + np.where(emb_again, emb_p, 0.0)
    fwd_n = L * T + emb_n + head_n
    fwd_p = L * P + emb_p + head_p
    rs_n = L * T + emb_n + np.where(single, norm_n + (0 if tied else 1), 0)
    rs_p = L * P + emb_p + np.where(single, m.norm_params() / tp + m.lm_head_params() / tp, 0.0)
    return {"fwd_n": fwd_n + 0.0 * P, "fwd_params": fwd_p, "bwd_n": bwd_n + 0.0 * P,
            "bwd_params": bwd_p, "rs_n": rs_n + 0.0 * P, "rs_params": rs_p + 0.0 * P}
