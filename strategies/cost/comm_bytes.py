"""Bytes of the dense layer's communication per GPU and micro-batch: one tensor-parallel
collective's buffer, the pipeline's point-to-point activations and ring attention's K/V
blocks, which the all-gather variant gathers whole. (Expert parallelism's:
``strategies.cost.ep_dispatch``.) Units: bytes."""
from __future__ import annotations

from strategies.cost.token_counts import ACT_BYTES, Num, tokens_per_gpu
from strategies.model import ModelSpec


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


def sent_kv_heads(m: ModelSpec, heads: str = "kv") -> int:
    """Heads of the K/V block a context-parallel rank sends: the model's KV heads (``"kv"``;
    MLA's up-projected K and V have ``a``), or every query head where the stack repeats K and
    V before attention (``"query"``, ``FrameworkProfile.cp_kv_heads``: torchtitan's Llama calls
    ``repeat_kv`` before ``F.scaled_dot_product_attention``, models/llama/model.py)."""
    return m.num_attention_heads if heads == "query" else m.kv_heads


def cp_comm_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv") -> Num:
    """Ring attention: each GPU passes its K and V blocks around the ring, ``c-1`` steps of
    ``T·g·(d + d_v)/t`` elements (``2·T·g·d/t`` for a standard layer; ``g``:
    ``sent_kv_heads``); the backward sends K, V and their gradients (2×)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    return ACT_BYTES * T * sent_kv_heads(m, heads) * (m.head_dim + m.v_dim) / tp * (cp - 1)


def cp_gather_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv") -> Num:
    """Bytes of one micro-batch's K and V gathered whole over the context-parallel group, per
    GPU: ``b·s·g·(d + d_v)/t`` elements of 2 bytes (``g``: ``sent_kv_heads``). The buffer
    every context-parallel exchange's collectives are timed on (``StageCosts.cp_bytes``: the
    ring passes ``(c-1)/c`` of it a pass, ``cp_comm_bytes_fwd``); Transformer Engine's
    all-gather path (``AttnFuncWithCPAndKVAllGather``) all-gathers it before the attention,
    forward and backward, and reduce-scatters dK/dV of the same size in the backward
    (``strategies.cost.cp_allgather``)."""
    return ACT_BYTES * b * m.seq_length * sent_kv_heads(m, heads) * (m.head_dim + m.v_dim) / tp
