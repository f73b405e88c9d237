"""Context parallelism as PyTorch runs it: ``torch.distributed.tensor.experimental.
context_parallel``'s ring attention (``_attention.py``: ``_templated_ring_attention`` and its
backward), the implementation torchtitan drives (``FrameworkProfile.cp_impl == "torch"``).

What differs from Transformer Engine's ring (the default ``"ring"``, charged in
``strategies.estimate.analytic`` as traffic hidden under the attention core):

* **Rotation.** ``_ContextParallelOptions.rotate_method`` defaults to ``ALL_GATHER``
  (``_AllGatherRotater``): the forward all-gathers every rank's K/V block once, launched
  before the local (diagonal) SDPA call, and the second call waits for it. The backward
  all-gathers K/V again the same way and passes the dK/dV accumulators round the ring with
  ``ALL_TO_ALL`` (``ft_c.permute_tensor``, one hop per step) **in fp32**
  (``convert_to_f32``), each send waited for after the next step's SDPA backward, the last
  one at the end.
* **Per-step passes.** Every step's output and log-sum-exp are cast to fp32 and merged
  (``_SDPAMerger``: ``out - sigmoid(lse_i - lse)·(out - out_i)``); the backward accumulates
  dQ, dK, dV in fp32 (``_partial_update`` concatenates whole tensors); K and V are made
  contiguous and concatenated into the send buffer every step. All HBM-bound, on the compute
  stream: ``merge_bytes_fwd``, ``accum_bytes_bwd``. Each step is its own SDPA call, so with
  FlashAttention-2 every backward call repeats its pre- and post-processing kernels over the
  query (``fa2_call_bytes_bwd``, docs/calibration.md §5.136).
* **Load balance.** Round-robin (``enable_load_balance``): each rank holds chunks ``r`` and
  ``2c-1-r``; step 0 is one causal call on both, each later step one call on half the
  (q, k) square. Every step computes the same FLOPs, ``1/c`` of the rank's causal
  attention, which the attention-core time already charges
  (``attention_counts.attn_core_flops_fwd``).

Units: elements, bytes, seconds. Vectorised over the plan fields.
"""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import comm_bytes, token_counts
from strategies.cost.token_counts import Num
from strategies.model import ModelSpec
from topologies.cluster import Cluster

#: HBM bytes per output element of one merge step on the full local query (the slowest rank,
#: every later step on its whole query): ``out.to(float32)`` 2 + 4, ``out - block_out``
#: 4 + 4 + 4, ``sigmoid(...) * (...)`` 4 + 4 (the lse factor broadcast), ``out - (...)``
#: 4 + 4 + 4; the lse terms are one value per row (ignored).
MERGE_STEP_BYTES = 38.0
#: bf16 -> fp32 of the first step's output and fp32 -> bf16 of the merged result.
MERGE_ENDS_BYTES = 12.0
#: HBM bytes per K/V element of a bf16 copy (read 2, write 2): ``key.contiguous()`` /
#: ``value.contiguous()`` once per call, ``torch.cat([key, value])`` for every send.
KV_COPY_BYTES = 4.0
#: backward, per dQ element and step: ``grad_query += grad_query_`` (fp32 read 4, bf16 read 2,
#: write 4).
ACCUM_Q_BYTES = 10.0
#: backward, per dK/dV element and later step on the slowest rank (its k is half the block):
#: ``_partial_update(..., add=True)`` adds into half (5) and ``torch.cat`` rewrites the whole
#: fp32 tensor (8); the send buffer ``torch.cat([grad_key, grad_value])`` in fp32 (8).
ACCUM_KV_STEP_BYTES = 21.0
#: backward, per dK/dV element at step 0: the full add (10) and the fp32 send buffer (8).
ACCUM_KV_FIRST_BYTES = 18.0
#: backward, once: ``zeros_like`` of the fp32 dQ, dK, dV (write 4 each) and the final casts
#: to bf16 (read 4, write 2), per element of each.
ACCUM_ENDS_BYTES = 10.0
#: fp32 over bf16: the dK/dV the backward sends (``convert_to_f32``).
DKV_SCALE = 2.0
#: backward, per query element of each SDPA backward call beyond the one the catalog's rate
#: was timed with, where the call is FlashAttention-2 as PyTorch vendors it
#: (``aten/src/ATen/native/transformers/cuda/flash_attn/flash_bwd_launch_template.h``
#: ``run_flash_bwd_seqk_parallel``, ``flash_api.cpp`` ``mha_bwd``): the preprocess kernel
#: ``flash_bwd_dot_do_o_kernel<Clear_dQaccum=true>`` reads dO and O (bf16, 2 + 2) and zeroes
#: the fp32 ``dq_accum`` (4); ``flash_bwd_convert_dq_kernel`` reads it (4) and writes dQ in
#: bf16 (2). The ring calls the kernel ``c`` times on the slowest rank's whole query.
FA2_BWD_CALL_Q_BYTES = 14.0


def kv_block_elements(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv") -> Num:
    """K and V elements one GPU holds and sends per ring step: ``T·g·(d + d_v)/t``
    (``g``: ``comm_bytes.sent_kv_heads``)."""
    T = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    return T * comm_bytes.sent_kv_heads(m, heads) * (m.head_dim + m.v_dim) / tp


def query_elements(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Elements of one GPU's query (and of its dQ): ``T·a·d/t``."""
    return token_counts.tokens_per_gpu(b, m.seq_length, cp) * m.num_attention_heads \
        * m.head_dim / tp


def output_elements(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Elements of one GPU's attention output: ``T·a·d_v/t``."""
    return token_counts.tokens_per_gpu(b, m.seq_length, cp) * m.num_attention_heads * m.v_dim / tp


def merge_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv") -> Num:
    """HBM bytes of one layer's ring forward besides its SDPA calls, on the slowest rank:
    ``(c-1)`` merges of the whole output, the two casts, the contiguous K/V copy and ``c-1``
    send-buffer concatenations; 0 without context parallelism."""
    cp = np.asarray(cp, dtype=float)
    o, kv = output_elements(m, b, tp, cp), kv_block_elements(m, b, tp, cp, heads)
    out = (cp - 1) * MERGE_STEP_BYTES * o + MERGE_ENDS_BYTES * o + KV_COPY_BYTES * kv * cp
    return np.where(cp > 1, out, 0.0)[()]


def accum_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv",
                    kernel: str = "native") -> Num:
    """HBM bytes of one layer's ring backward besides its SDPA backward calls' own main
    kernels, on the slowest rank: the fp32 dQ accumulation each step, the dK/dV accumulation
    and send buffer (step 0 whole, later steps half the block plus the concatenations), the
    K/V copies as in the forward, the zero-fills and final casts; where the per-step call is
    FlashAttention-2 (``kernel == "fa2"``, ``GPU.flash_efficiency``'s kernel name) its
    per-call pre- and post-processing passes over the query, ``fa2_call_bytes_bwd``; 0
    without context parallelism."""
    cp = np.asarray(cp, dtype=float)
    q, kv = query_elements(m, b, tp, cp), kv_block_elements(m, b, tp, cp, heads)
    out = (cp * ACCUM_Q_BYTES * q + ACCUM_KV_FIRST_BYTES * kv
           + (cp - 1) * ACCUM_KV_STEP_BYTES * kv + KV_COPY_BYTES * kv * cp
           + ACCUM_ENDS_BYTES * (q + kv))
    if kernel == "fa2":
        out = out + fa2_call_bytes_bwd(m, b, tp, cp)
    return np.where(cp > 1, out, 0.0)[()]


def fa2_call_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """HBM bytes of one layer's ring backward that FlashAttention-2's per-call passes add
    over one call on the slowest rank (rank ``c-1``, whose every later step runs on its whole
    query, ``_templated_ring_attention``'s ``i <= rank`` branch): ``(c-1)·
    FA2_BWD_CALL_Q_BYTES·q`` with ``q = query_elements``; the one call a step without
    context parallelism makes is in the catalog's backward rate. 0 without context
    parallelism. Vectorised."""
    cp = np.asarray(cp, dtype=float)
    out = (cp - 1) * FA2_BWD_CALL_Q_BYTES * query_elements(m, b, tp, cp)
    return np.where(cp > 1, out, 0.0)[()]


def allgather_stalls(t_gather: Num, t_dkv: Num, step_fwd: Num, step_bwd: Num,
                     cp: Num) -> tuple[Num, Num]:
    """(forward, backward) seconds one layer's ring waits on the network with the all-gather
    rotater, from the order of ``_templated_ring_attention`` and its backward: the K/V
    all-gather (``t_gather``) runs beside step 0 (``step_fwd``/``step_bwd``: one step's
    compute, ``1/c`` of the layer's attention) and step 1 waits for it; in the backward the
    fp32 dK/dV send of step ``i`` (``t_dkv``, queued behind the gather on the group's one
    NCCL stream) runs beside step ``i+1`` and the last one is waited for at the end:

        forward  = max(0, G - s_f)
        backward = max(0, G - s_b) + (c-1)·max(0, S - s_b) + S

    0 without context parallelism. Vectorised."""
    cp = np.asarray(cp, dtype=float)
    fwd = np.maximum(0.0, t_gather - step_fwd)
    bwd = np.maximum(0.0, t_gather - step_bwd) + (cp - 1) * np.maximum(0.0, t_dkv - step_bwd) \
        + t_dkv
    on = cp > 1
    return np.where(on, fwd, 0.0)[()], np.where(on, bwd, 0.0)[()]


def torch_ring_stalls(m: ModelSpec, b: Num, tp: Num, cp: Num, attn_fwd: Num, attn_bwd: Num,
                      cl: Cluster, heads: str = "kv") -> tuple[Num, Num]:
    """``allgather_stalls`` for one layer of a plan: the K/V all-gather of ``c`` blocks of
    ``ACT_BYTES·kv_block_elements`` over the context-parallel group (``tp`` apart,
    ``comm.collective_time``), the fp32 dK/dV block to the next rank (``comm.p2p_time``), and
    ``attn_fwd/c``, ``attn_bwd/c`` (seconds of the layer's attention core, its per-step
    passes included) per step."""
    cp = np.asarray(cp, dtype=float)
    block = token_counts.ACT_BYTES * kv_block_elements(m, b, tp, cp, heads)
    g = cm.collective_time("allgather", block * cp, cp, tp, cl)
    s = cm.p2p_time(DKV_SCALE * block, cl, tp)
    return allgather_stalls(g, s, attn_fwd / cp, attn_bwd / cp, cp)
