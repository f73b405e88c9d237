"""DeepSeek-V4's cost beyond ``ModelSpec.attention_linears`` (``strategies.model.dsv4``): the
mean layer's compressors' and indexers' GEMMs (``dsv4_gemms``, read by
``gemm_shapes.layer_gemm_parts``), the attention core's attended keys (``mean_attended_keys``,
read by ``attention_counts.mean_score_elements``), the indexer's and its loss's DSA kernels
(``dsa_time_fwd``, read by ``attention_time.attention_time_fwd``) and the memory-bound passes
of the indexer's top-k, the compressors' pooling and the hyper-connections' ``n`` residual
streams (``elementwise_bytes_fwd``, read by ``elementwise_bytes.elementwise_bytes_fwd``).
Units: elements, bytes, FLOPs, seconds; vectorised over the plan fields.

Megatron-Core as it runs the model (dev d48bd6be, ``experimental_attention_variant/csa.py``,
``csa_utils/fused_sparse_attention.py``, ``transformer/hyper_connection.py``,
``fusions/fused_mhc_kernels.py``):

- the attention core: FlashMLA's sparse forward and cuDNN Frontend's DSA backward over the
  window and the selected compressed entries (``fused_csa_indexer_sparse_attn``): the keys
  of ``sparse_attention.attended_keys``, the forward at the fused-attention rate of the
  catalog (``attention_time``; no training figure of FlashMLA's kernel), the backward at
  cuDNN's measured rate on Blackwell (``core_time_bwd``, docs/calibration.md §5.164).
- each compressed layer's ``Compressor``: ``wkv`` and ``wgate`` ``h -> c·d`` on every token
  (whole on each tensor-parallel rank), then a softmax-gated pooling of ``c·r`` rows into
  each entry: it reads both outputs (``2·c·d`` per token) and writes ``c·d/r``.
- the ratio-4 layers' ``CSAIndexer``: ``wq_b`` ``q_lora_rank -> H_I·d_I``, ``weights_proj``
  ``h -> H_I``, its own compressor of ``d_I``; the scores, ``H_I`` products of ``d_I`` per
  visible entry in cuDNN's indexer kernel, written as an fp32 row per query and read back by
  the radix top-k; the sparse KL loss's target, its eager passes and its backward kernel,
  all in the forward (``dsa_flops_fwd_per_token``, ``loss_bytes_per_token``).
- ``HyperConnectionModule`` around each of the two blocks: ``mapping_proj`` ``n·h -> n²+2n``
  (TF32, inside the norm's pass: ``hc_mapping_flop_per_byte``) and three fused passes over
  the ``n`` streams (the projection's norm, the aggregation ``n -> 1``, the post-add
  ``1 -> n``), ``(4n + 2)·h`` bf16 elements per token where a single residual stream's
  bias-dropout-add moves ``3h`` (``hc_bytes_per_token``).
- hash-routed layers compute no router logits (``moe/router.py`` l.208-244): the mean
  layer's router GEMM counts the learned-router layers only (``router_share``).
- the Sinkhorn kernels of the hyper-connections (``sinkhorn_time``, read by ``layer_time``)
  and the indexer's detached inputs (``DetachedInput``, read by ``gemm_time.units_in``).
"""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec
from topologies.gpus import GPU

#: bytes of one score the indexer writes and its top-k reads (fp32)
SCORE_BYTES = 4.0
#: bytes of one activation element (bf16)
ACT_BYTES = 2.0


def ratio_shares(m: ModelSpec) -> dict[int, float]:
    """Share of the main layers at each ``compress_ratios`` value (sums to 1)."""
    L = m.num_layers
    return {r: sum(1 for x in m.compress_ratios if x == r) / L for r in (0, 4, 128)}


def mean_attended_keys(m: ModelSpec) -> float:
    """Keys one head of one sequence attends in the mean layer, per query summed over the
    ``seq_length`` queries: ``sparse_attention.attended_keys`` weighted by ``ratio_shares``
    (what ``attention_counts.mean_score_elements`` returns for a DeepSeek-V4 model)."""
    from strategies.cost.sparse_attention import attended_keys
    return sum(w * attended_keys(m, r) for r, w in ratio_shares(m).items() if w)


def router_share(m: ModelSpec) -> float:
    """Share of the MoE layers that run the learned router's GEMM: the hash-routed first
    ``num_hash_layers`` do not; 1.0 without them."""
    if not m.is_moe or not m.num_hash_layers:
        return 1.0
    return 1.0 - m.num_hash_layers / m.num_moe_layers


def bf16_einsum(m: ModelSpec, name: str) -> bool:
    """Whether ``attention_linears``' ``name`` runs as a 16-bit einsum, not a Transformer
    Engine linear: DeepSeek-V4's grouped ``wo_a`` (``o_down``; ``torch.einsum`` over the
    ``linear_o_group_proj`` parameter, ``deepseek_v4_hybrid_attention.py`` l.179-186,
    l.468), priced as the router (``row_parallel`` None) whatever the run's precision."""
    return m.is_dsv4 and name == "o_down"


class DetachedInput(tuple):
    """A GEMM ``(count, M, N, K, row_parallel)`` whose input takes no gradient: its backward
    is the weight gradient alone (``gemm_time.units_in`` prices no data gradient for it).
    Transformer Engine's ``Linear`` runs the data-gradient GEMM only where its input requires
    a gradient (``transformer_engine/pytorch/module/linear.py`` at d0067d0, l.711
    ``requires_dgrad = input_requires_grad``, l.1018); DeepSeek-V4's indexer projections
    read ``x.detach()`` and ``qr.detach()`` (Megatron-Core dev d48bd6be, ``csa.py``
    l.2024-2028, ``_forward_fused_indexer_training``). A plain tuple otherwise."""

    __slots__ = ()


def dsv4_gemms(m: ModelSpec, T: Num) -> list[tuple]:
    """The mean layer's DeepSeek-V4 GEMMs beyond ``attention_linears`` on ``T`` rows, each
    ``(count, M, N, K, row_parallel)``, whole on every tensor-parallel rank: compressors
    ``h -> 2·c·d`` (``wkv`` and ``wgate``) and the indexer's own ``h -> 2·2·d_I``, built and
    run with FP8 disabled (``csa.py`` l.1064, l.1160: "the compressor GEMMs in high precision
    (BF16) even under FP8 training"; ``row_parallel`` None, the 16-bit rate, as the router);
    the indexer's ``wq_b``, a Transformer Engine linear at the run's precision
    (``backend.linear()``, Megatron-Core ``experimental_attention_variant_module_specs.py``
    l.110-175, "runs in FP8 under FP8 training", ``csa.py`` l.1576; ``row_parallel``
    False); its ``weights_proj`` ``h -> H_I``, FP8 disabled (``csa.py`` l.1495, l.1597;
    None); [] without
    ``compress_ratios``. Not GEMMs here: the indexer's scores, a cuDNN fused kernel priced
    with its loss's (``dsa_flops_fwd_per_token``), and the hyper-connection mappings, whose
    TF32 MMA runs inside the norm's pass over the streams (``HC_MAPPING_FLOP_PER_BYTE``).
    Forward FLOPs per token equal ``sparse_attention.sparse_flops_fwd_per_token``'s
    ``compressor`` and ``indexer`` less the scores (tests). The indexer's three GEMMs read
    detached inputs (``DetachedInput``: no data gradient)."""
    if not m.is_dsv4:
        return []
    h, d, sh = m.hidden_size, m.head_dim, ratio_shares(m)
    out: list[tuple] = []
    for r, c in ((4, 2), (128, 1)):
        if sh[r]:
            out.append((sh[r], T, 2 * c * d, h, None))       # BF16 (l.1160)
    if sh[4]:
        hi, di = m.index_n_heads, m.index_head_dim
        out += [DetachedInput(g) for g in (
            (sh[4], T, 2 * 2 * di, h, None), (sh[4], T, hi * di, m.q_lora_rank, False),
            (sh[4], T, hi, h, None))]               # weights_proj: FP8 disabled (l.1597)
    return out


def hc_mapping_flop_per_byte(m: ModelSpec) -> float:
    """FLOPs the hyper-connection mapping's MMA does per byte of the ``n·h`` bf16 streams it
    reads, ``n² + 2n`` (24 at ``n`` = 4): ``2·(n²+2n)`` per element. With ``use_fused_mhc``
    (cuTile, Blackwell) the mapping and its RMS norm are one kernel (Megatron-Core
    ``fusions/fused_mhc_kernels.py`` l.1460-1500: ``ct.mma`` on ``tfloat32`` tiles in the
    norm's one pass over K), so its time is the read ``hc_bytes_per_token`` counts wherever
    the chip's TF32 GEMM rate over its HBM rate exceeds this (tests: every catalog GPU with
    TF32), and its backward (``_cutile_fused_compute_h_proj_rms_bwd``) the backward's read
    of the streams and write of their gradient; not a GEMM in ``dsv4_gemms``."""
    n = m.hc_streams
    return 2.0 * (n * n + 2 * n) / ACT_BYTES


def dsa_flops_fwd_per_token(m: ModelSpec, tp: Num = 1) -> dict[str, float]:
    """FLOPs per token of the mean layer's cuDNN DSA kernels of the indexer and its loss, all
    run in the forward pass (Megatron-Core ``csa_utils/fused_sparse_attention.py``,
    ``FusedCSAIndexerSparseAttnFunc.forward``, with the recipe's
    ``dsa_indexer_loss_coeff`` 0.01 and ``dsa_indexer_use_sparse_loss``), at the ratio-4
    layers' share: ``scores``, the indexer's forward over every visible entry
    (``indexer_forward_wrapper``, ``2·H_I·d_I`` each); ``teacher``, the attention's
    ``QK^T`` recomputed over the selected compressed entries for the loss's target
    (``sparse_attn_score_recompute_wrapper``, ``2·(a/tp)·d`` each); ``indexer_bwd``, the
    loss's eager backward over the selected entries (``indexer_backward_wrapper``: the
    scores recomputed, ``d_q`` and ``d_k``, ``3·2·H_I·d_I`` each). The backward pass runs
    none of them (it scales the precomputed gradients); the selected entries per query are
    ``sparse_attention.compressed_selected``'s mean."""
    from strategies.cost.sparse_attention import compressed_selected, indexer_scores
    sh = ratio_shares(m)[4]
    if not m.is_dsv4 or not sh:
        return {"scores": 0.0, "teacher": 0.0, "indexer_bwd": 0.0}
    s, hd = m.seq_length, m.index_n_heads * m.index_head_dim
    sel = compressed_selected(s, 4, m.index_topk) / s
    return {"scores": sh * 2.0 * hd * indexer_scores(m) / s,
            "teacher": sh * 2.0 * m.num_attention_heads / tp * m.head_dim * sel,
            "indexer_bwd": sh * 3 * 2.0 * hd * sel}


#: bytes per (query, top-k slot) the sparse indexer loss's eager PyTorch passes move in the
#: forward, fp32 tensors of ``index_topk`` slots per query (``fused_sparse_attention.py``
#: l.1591-1600 and ``_kl_loss_from_target_predict`` l.1172-1197, 4-byte indices): the
#: predict's ``clamp`` (8) and ``long`` (12), ``gather`` (16), the mask (5) and ``where``
#: (9), ``softmax`` (8); the KL's two ``clamp`` (16), two ``log`` (16), ``-`` (12), ``*``
#: (12), ``sum`` (4) and ``row_valid`` (6); the two ``clone`` for the backward (16)
LOSS_SLOT_BYTES = 8 + 12 + 16 + 5 + 9 + 8 + 16 + 16 + 12 + 12 + 4 + 6 + 16


def loss_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of the indexer loss's eager passes in the mean layer's forward:
    ``LOSS_SLOT_BYTES`` over the ``index_topk`` slots of each query of a ratio-4 layer, at
    their share; 0 for another model."""
    sh = ratio_shares(m)[4] if m.is_dsv4 else 0.0
    return sh * LOSS_SLOT_BYTES * m.index_topk if sh else 0.0


def dsa_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, core_flops: Num, core_s: Num,
                 hbm: float) -> Num:
    """Forward seconds per GPU of the indexer's and its loss's kernels of the mean layer
    (0 for another model): ``dsa_flops_fwd_per_token`` on the ``b·s/cp`` tokens at the rate
    the attention core's forward runs (``core_s`` seconds for ``core_flops``, as
    ``attention_time`` priced it: the cuDNN DSA kernels gather the same keys), plus
    ``loss_bytes_per_token`` at ``hbm`` bytes/s."""
    if not m.is_dsv4:
        return 0.0
    T = tokens_per_gpu(b, m.seq_length, cp)
    f = sum(dsa_flops_fwd_per_token(m, tp).values())
    return T * f * core_s / core_flops + T * loss_bytes_per_token(m) / hbm


#: cuDNN Frontend's DSA sparse-attention backward, the kernel Megatron-Core's backward runs
#: (``sparse_attention_backward_wrapper``, ``fused_sparse_attention.py`` l.1854-1864 at
#: d48bd6be), as measured in NVIDIA/cudnn-frontend#318 (2026-06-21, the "new" column):
#: ``s_q = s_kv = 4096``, ``H = 64``, ``D_qk = D_v = 512``, every query ``topk`` keys;
#: ``(topk, milliseconds)`` on an SM100 GPU (the PR names no board; taken as the catalog's
#: B200, ``DSA_BWD_GPU``, as most DSA PRs that name one measured on: #640, #730, #817).
DSA_BWD_MEASURED = ((128, 0.560), (512, 1.233), (1024, 2.155), (2048, 4.019))
#: the measurement's queries x heads, and its chip
DSA_BWD_ROWS, DSA_BWD_GPU = 4096 * 64, "B200-SXM-180GB"
#: keys per tile of the SM100 sparse kernels at ``D`` 512 (``_get_topk_alignment``,
#: ``fused_sparse_attention.py`` l.111-122): a query's keys run as whole tiles (the
#: compacted ``topk_length`` sets the tile count, l.1509)
DSA_KEY_TILE = 64


def dsa_bwd_seconds(keys: np.ndarray) -> np.ndarray:
    """Seconds of the measured backward (``DSA_BWD_MEASURED``) per query and head on its
    chip for queries of ``keys`` keys each: whole tiles of ``DSA_KEY_TILE``, the time linear
    between the measured points (and past the end segments, floored at 0)."""
    k = np.ceil(np.asarray(keys, dtype=float) / DSA_KEY_TILE) * DSA_KEY_TILE
    x = np.array([p[0] for p in DSA_BWD_MEASURED], dtype=float)
    y = np.array([p[1] for p in DSA_BWD_MEASURED], dtype=float) * 1e-3 / DSA_BWD_ROWS
    i = np.clip(np.searchsorted(x, k) - 1, 0, len(x) - 2)
    t = y[i] + (k - x[i]) * (y[i + 1] - y[i]) / (x[i + 1] - x[i])
    return np.maximum(t, 0.0)


def core_time_bwd(m: ModelSpec, b: Num, tp: Num, gpu: GPU) -> Num | None:
    """Backward seconds per GPU of the mean layer's sparse attention core at cuDNN's
    measured rate (docs/calibration.md §5.164): each query's keys
    (``sparse_attention.keys_per_query``) at ``dsa_bwd_seconds``, summed over the
    sequence and averaged over the layers (``ratio_shares``), times the ``b·a/tp`` head
    rows of the micro-batch, at that rate's fraction of the measured chip's 16-bit peak
    on ``gpu`` (its time times ``peak(B200) / peak(gpu)``). None on a GPU of another
    generation than the measured kernel's (``gemm_kernel.GEMM_GENERATION`` ``sm_100``: no
    figure for the SM90 path), where the dense kernel's rate stays. Read by
    ``attention_time.attention_time_fwd`` in place of the dense kernel's backward."""
    from strategies.cost.gemm_kernel import GEMM_GENERATION
    from strategies.cost.sparse_attention import keys_per_query
    from topologies.gpus import get_gpu
    if GEMM_GENERATION.get(gpu.name) != GEMM_GENERATION[DSA_BWD_GPU]:
        return None
    per = sum(w * float(dsa_bwd_seconds(keys_per_query(m, r)).sum())
              for r, w in ratio_shares(m).items() if w)
    scale = get_gpu(DSA_BWD_GPU).peak("bf16") / gpu.peak("bf16")
    return per * scale * b * (m.num_attention_heads / tp)


def hc_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token one layer's hyper-connections move beyond a single residual
    stream's bias-dropout-add, forward: two blocks of ``(4n + 2 - 3)·h`` bf16 elements
    (``n`` read by the projection's norm, ``n`` read and ``1`` written by the aggregation,
    ``n + 1`` read and ``n`` written by the post-add; the plain add's ``3h`` counted by
    ``elementwise_bytes``); 0 with one stream."""
    n = m.hc_streams
    return 0.0 if n == 1 else 2 * (4 * n - 1) * m.hidden_size * ACT_BYTES


#: bytes of one element of the hyper-connections' Sinkhorn matrices and workspace (fp32)
MAP_BYTES = 4.0


def sinkhorn_bytes_per_token(m: ModelSpec) -> tuple[float, float]:
    """HBM bytes per token ``(forward, backward)`` of one layer's Sinkhorn-Knopp kernels, one
    per block (two), on each token's ``n x n`` fp32 residual-mixing logits (``use_fused_mhc``:
    Triton's ``_triton_sinkhorn_fwd_kernel``/``_bwd_kernel``, Megatron-Core dev d48bd6be
    ``fusions/fused_mhc_kernels.py`` l.224-390; the ``I = hc_sinkhorn_iters`` iterations in
    registers). Forward: reads the logits, writes the result and the initial matrix ``M_init``
    the backward reads, ``3·n²``. Backward: reads the gradient and ``M_init`` and writes the
    logits' gradient (``3·n²``), and replays the iterations into a workspace it then reads
    back in reverse, ``2·I`` matrices and ``I`` row and ``I`` column sums (l.364-366), each
    written and read: ``2·(2·I·n² + 2·I·n)``. Elements of ``MAP_BYTES``; ``(0, 0)`` with one
    stream. Not in ``elementwise_bytes_fwd``: the backward is not twice the forward."""
    n, it = m.hc_streams, m.hc_sinkhorn_iters
    if n == 1:
        return 0.0, 0.0
    return (2 * 3 * n * n * MAP_BYTES,
            2 * (3 * n * n + 2 * (2 * it * n * n + 2 * it * n)) * MAP_BYTES)


def sinkhorn_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, hbm: float
                  ) -> tuple[Num, Num]:
    """Seconds per GPU ``(forward, backward)`` of the mean layer's Sinkhorn kernels
    (``sinkhorn_bytes_per_token`` on the ``b·s/cp`` tokens, over sequence parallelism's
    split of the per-token work as the hyper-connections' other passes, at ``hbm`` bytes/s);
    ``(0, 0)`` for another model. Read by ``layer_time.layer_time``."""
    if not m.is_dsv4:
        return 0.0, 0.0
    from strategies.cost.elementwise_bytes import seq_shard
    T = tokens_per_gpu(b, m.seq_length, cp) / seq_shard(tp, sp) / hbm
    f, bw = sinkhorn_bytes_per_token(m)
    return T * f, T * bw


def sparse_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of the mean layer's compressed attention passes, forward: the
    compressors' pooling (reads ``wkv`` and ``wgate``, ``2·c·d``, writes ``c·d/r``; the
    indexer's own of ``d_I`` too), the indexer's query RoPE and Hadamard rotation (each reads
    and writes ``H_I·d_I``; ``CSAIndexer.forward_before_topk``, ``csa.py`` l.1576-1588) and
    its scores in fp32: written for every one of the ``s/4`` compressed entries of each
    query's row, ``-inf`` where masked (``_indexer_topk_core``, ``fused_sparse_attention.py``
    l.930-935: ``(b, sq, sk)``), read by the radix top-k over the visible ones
    (``indexer_scores / s`` per token)."""
    if not m.is_dsv4:
        return 0.0
    from strategies.cost.sparse_attention import indexer_scores
    sh, d = ratio_shares(m), m.head_dim
    heads = [(sh[4], 2, 4, d), (sh[128], 1, 128, d)]
    if sh[4]:
        heads.append((sh[4], 2, 4, m.index_head_dim))
    pool = sum(w * (2 * c * x + c * x / r) * ACT_BYTES for w, c, r, x in heads if w)
    if not sh[4]:
        return pool
    query = 2 * 2 * m.index_n_heads * m.index_head_dim * ACT_BYTES
    topk = SCORE_BYTES * (m.seq_length // 4 + indexer_scores(m) / m.seq_length)
    return pool + sh[4] * (query + topk)


def query_norm_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of the query's per-head RMS norm, forward: ``_q_rms_norm`` (a
    compiled kernel, no weight; ``deepseek_v4_hybrid_attention.py`` l.40-42, l.711) reads
    and writes the ``a·d`` query, ``2·a·d`` bf16 elements. The output's out-of-place
    inverse RoPE (``fused_mla_rope_out_of_place``, l.400-413: it reads and writes all ``a·d``)
    and the in-place RoPE of the query's and key's rope parts are what
    ``elementwise_bytes.rope_width``'s ``(a + g)·d`` term stands for here."""
    return 2 * m.num_attention_heads * m.head_dim * ACT_BYTES


def elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, shard: Num) -> Num:
    """HBM bytes per GPU of the mean layer's DeepSeek-V4 passes, forward: the hyper-
    connections' (``hc_bytes_per_token``, over ``shard``: sequence parallelism's split of the
    per-token work, ``elementwise_bytes.seq_shard``), the query norm's (over ``tp``, its
    heads split) and the compressed attention's (``sparse_bytes_per_token``, whole on every
    rank); 0 for another model."""
    if not m.is_dsv4:
        return 0.0
    T = tokens_per_gpu(b, m.seq_length, cp)
    return T * (hc_bytes_per_token(m) / shard + query_norm_bytes_per_token(m) / tp
                + sparse_bytes_per_token(m))


def saved_elements_per_token(m: ModelSpec) -> float:
    """16-bit elements per token the mean layer saves for its backward beyond the dense
    attention's table (``memory.layer_terms``' ``mla_latents`` for DeepSeek-V4): the query
    latent before and after its norm (``2·q_lora_rank``), the key/value head before its norm
    (``d``), each compressor's ``wkv`` and ``wgate`` outputs (``2·c·d``; the pooling's
    backward reads them) and the indexer's query, head weights and its compressor's outputs
    (``H_I·d_I + H_I + 2·2·d_I``), at their layers' shares."""
    sh, d = ratio_shares(m), m.head_dim
    out = 2.0 * m.q_lora_rank + d + sh[4] * 2 * 2 * d + sh[128] * 2 * d
    if sh[4]:
        hi, di = m.index_n_heads, m.index_head_dim
        out += sh[4] * (hi * di + hi + 2 * 2 * di)
    return out
