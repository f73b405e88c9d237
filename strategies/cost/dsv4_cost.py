"""DeepSeek-V4's cost beyond ``ModelSpec.attention_linears`` (``strategies.model.dsv4``): the
mean layer's compressors', indexers' and hyper-connections' GEMMs (``dsv4_gemms``, read by
``gemm_shapes.layer_gemm_parts``), the attention core's attended keys (``mean_attended_keys``,
read by ``attention_counts.mean_score_elements``) and the memory-bound passes of the
indexer's top-k, the compressors' pooling and the hyper-connections' ``n`` residual streams
(``elementwise_bytes_fwd``, read by ``elementwise_bytes.elementwise_bytes_fwd``). Units:
elements, bytes; vectorised over the plan fields.

Megatron-Core as it runs the model (dev d48bd6be, ``experimental_attention_variant/csa.py``,
``csa_utils/fused_sparse_attention.py``, ``transformer/hyper_connection.py``):

- the attention core: FlashMLA's sparse forward and cuDNN Frontend's DSA backward over the
  window and the selected compressed entries (``fused_csa_indexer_sparse_attn``): the keys
  of ``sparse_attention.attended_keys``, priced at the fused-attention rate of the catalog
  (``attention_time``; FlashMLA publishes a prefill forward only, no training figure).
- each compressed layer's ``Compressor``: ``wkv`` and ``wgate`` ``h -> c·d`` on every token
  (whole on each tensor-parallel rank), then a softmax-gated pooling of ``c·r`` rows into
  each entry: it reads both outputs (``2·c·d`` per token) and writes ``c·d/r``.
- the ratio-4 layers' ``CSAIndexer``: ``wq_b`` ``q_lora_rank -> H_I·d_I``, ``weights_proj``
  ``h -> H_I``, its own compressor of ``d_I``; the scores, ``H_I`` products of ``d_I`` per
  visible entry (``sparse_attention.indexer_scores``, a GEMM per indexer head here), written
  as one fp32 score per query and entry and read back by the radix top-k.
- ``HyperConnectionModule`` around each of the two blocks: ``mapping_proj`` ``n·h -> n²+2n``
  (fp32) and three fused passes over the ``n`` streams (the projection's norm, the
  aggregation ``n -> 1``, the post-add ``1 -> n``), ``(4n + 2)·h`` bf16 elements per token
  where a single residual stream's bias-dropout-add moves ``3h`` (``hc_bytes_per_token``).
- hash-routed layers compute no router logits (``moe/router.py`` l.208-244): the mean
  layer's router GEMM counts the learned-router layers only (``router_share``).
"""
from __future__ import annotations

from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec

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


def dsv4_gemms(m: ModelSpec, T: Num) -> list[tuple]:
    """The mean layer's DeepSeek-V4 GEMMs beyond ``attention_linears`` on ``T`` rows, each
    ``(count, M, N, K, row_parallel)``, whole on every tensor-parallel rank: compressors
    ``h -> 2·c·d`` (``wkv`` and ``wgate``), the indexer's ``wq_b`` and its compressor ``h ->
    2·2·d_I``, Transformer Engine linears at the run's precision (``backend.linear()``,
    Megatron-Core ``experimental_attention_variant_module_specs.py`` l.110-175;
    ``row_parallel`` False); its ``weights_proj`` ``h -> H_I``, run with FP8 disabled
    (``csa.py`` l.1592), the indexer's scores (``H_I`` GEMMs of ``K = d_I``
    over the mean visible entries per query, cuDNN's 16-bit kernel) and the
    hyper-connections' two ``n·h -> n²+2n`` mappings (fp32 in Megatron-Core, priced at the
    16-bit rate), ``row_parallel`` None as the router; [] without ``compress_ratios``.
    Forward FLOPs per token equal ``sparse_attention.sparse_flops_fwd_per_token``'s
    ``compressor`` and ``indexer`` plus the mappings' (tests)."""
    if not m.is_dsv4:
        return []
    from strategies.cost.sparse_attention import indexer_scores
    h, d, sh = m.hidden_size, m.head_dim, ratio_shares(m)
    out: list[tuple] = []
    for r, c in ((4, 2), (128, 1)):
        if sh[r]:
            out.append((sh[r], T, 2 * c * d, h, False))
    if sh[4]:
        hi, di = m.index_n_heads, m.index_head_dim
        out += [(sh[4], T, 2 * 2 * di, h, False), (sh[4], T, hi * di, m.q_lora_rank, False),
                (sh[4], T, hi, h, None),            # weights_proj: FP8 disabled (l.1592)
                (sh[4] * hi, T, indexer_scores(m) / m.seq_length, di, None)]
    n = m.hc_streams
    if n > 1:
        out.append((2, T, n * n + 2 * n, n * h, None))
    return out


def hc_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token one layer's hyper-connections move beyond a single residual
    stream's bias-dropout-add, forward: two blocks of ``(4n + 2 - 3)·h`` bf16 elements
    (``n`` read by the projection's norm, ``n`` read and ``1`` written by the aggregation,
    ``n + 1`` read and ``n`` written by the post-add; the plain add's ``3h`` counted by
    ``elementwise_bytes``); 0 with one stream."""
    n = m.hc_streams
    return 0.0 if n == 1 else 2 * (4 * n - 1) * m.hidden_size * ACT_BYTES


def sparse_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of the mean layer's compressed attention passes, forward: the
    compressors' pooling (reads ``wkv`` and ``wgate``, ``2·c·d``, writes ``c·d/r``; the
    indexer's own of ``d_I`` too), the indexer's query RoPE and Hadamard rotation (each reads
    and writes ``H_I·d_I``; ``CSAIndexer.forward_before_topk``, ``csa.py`` l.1576-1588) and
    its scores, written in fp32 and read by the top-k (``2·SCORE_BYTES`` per visible
    entry, ``indexer_scores / s`` per token)."""
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
    topk = 2 * SCORE_BYTES * indexer_scores(m) / m.seq_length
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
    per-token work, ``elementwise_bytes._seq_shard``), the query norm's (over ``tp``, its
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
