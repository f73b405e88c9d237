"""DeepSeek-V4's compressed attention counts (``strategies.model.dsv4``): the keys each query
of a sequence attends in a layer of each ``compress_ratios`` value, the compressed entries
the indexer scores, and the forward FLOPs per token of the attention core, the indexer's
scores and the compressors' and indexer's projections. Units: keys, entries, FLOP.

Megatron-Core's rules (``experimental_attention_variant/csa.py`` at dev d48bd6be): a query at
0-based position ``i`` sees its window, ``min(i+1, W)`` keys (``get_window_topk_idxs``, l.60-
80), and ``floor((i+1)/r)`` compressed entries (``Compressor`` docstring l.1010-1026,
``get_compress_topk_idxs`` l.82-103): ratio 128 attends every one (HCA), ratio 4 the
``index_topk`` the indexer selects, all when fewer (CSA), after scoring every visible one.
The window's sum is ``attention_counts.score_elements``' causal band.

Read by the estimate through ``dsv4_cost`` (the attention core's keys, the indexer's scores;
docs/calibration.md §5.154).
"""
from __future__ import annotations

import numpy as np

from strategies.cost.attention_counts import score_elements
from strategies.errors import SpecError
from strategies.model import ModelSpec


def compressed_visible(s: int, r: int) -> int:
    """``sum_{j=1..s} floor(j/r)``: the compressed entries the ``s`` queries of a sequence see
    at ratio ``r``; with ``q = floor(s/r)``, ``m = s mod r``: ``r·q(q-1)/2 + q·(m+1)``."""
    q, m = divmod(int(s), int(r))
    return r * q * (q - 1) // 2 + q * (m + 1)


def compressed_selected(s: int, r: int, k: int) -> int:
    """``sum_{j=1..s} min(k, floor(j/r))``: the entries the ``s`` queries attend when each keeps
    at most ``k`` of them; ``compressed_visible(s, r)`` for ``s < r·k``, else
    ``r·k(k-1)/2 + (s - r·k + 1)·k``."""
    if s < r * k:
        return compressed_visible(s, r)
    return r * k * (k - 1) // 2 + (s - r * k + 1) * k


def _check_ratio(m: ModelSpec, ratio: int) -> None:
    if not m.is_dsv4:
        raise SpecError("compress_ratios", None, f"{m.name} has no DeepSeek-V4 attention")
    if ratio not in (0, 4, 128):
        raise SpecError("ratio", ratio, "must be one of 0, 4, 128")


def attended_keys(m: ModelSpec, ratio: int, s: int | None = None) -> int:
    """Keys the ``s`` (default ``seq_length``) queries of one sequence attend in a layer of
    ``ratio``: the window's ``sum min(i+1, W)``, plus the compressed entries (all at 128, the
    top ``index_topk`` at 4)."""
    _check_ratio(m, ratio)
    s = m.seq_length if s is None else s
    keys = int(score_elements(s, m.sliding_window, "sliding", "causal"))
    if ratio == 128:
        keys += compressed_visible(s, 128)
    elif ratio == 4:
        keys += compressed_selected(s, 4, m.index_topk)
    return keys


def keys_per_query(m: ModelSpec, ratio: int, s: int | None = None) -> np.ndarray:
    """Keys each of the ``s`` (default ``seq_length``) queries attends in a layer of
    ``ratio``, by 0-based position ``i``: ``min(i+1, W)`` window keys plus ``floor((i+1)/r)``
    compressed entries (all at 128, at most ``index_topk`` at 4). Summed:
    ``attended_keys``."""
    _check_ratio(m, ratio)
    j = np.arange(1, (m.seq_length if s is None else s) + 1)
    keys = np.minimum(j, m.sliding_window)
    if ratio == 128:
        keys = keys + j // 128
    elif ratio == 4:
        keys = keys + np.minimum(j // 4, m.index_topk)
    return keys


def indexer_scores(m: ModelSpec, s: int | None = None) -> int:
    """Compressed entries the indexer scores for the ``s`` queries of one sequence in a ratio-4
    layer (every visible one, per indexer head): ``compressed_visible(s, 4)``."""
    _check_ratio(m, 4)
    return compressed_visible(m.seq_length if s is None else s, 4)


def sparse_flops_fwd_per_token(m: ModelSpec, ratio: int) -> dict[str, float]:
    """Forward FLOPs per token of a layer of ``ratio`` beyond ``attention_linears``' GEMMs,
    the mean over the ``seq_length`` positions: ``core`` (``QK^T`` and ``AV`` over the attended
    keys, ``4·a·d`` each), ``indexer`` (its scores, ``2·H_I·d_I`` per scored entry, and its
    ``wq_b`` and ``weights_proj`` GEMMs) and ``compressor`` (``wkv`` and ``wgate``, the
    indexer's own included: ``2·2·h·c·d``)."""
    s, a, d, h = m.seq_length, m.num_attention_heads, m.head_dim, m.hidden_size
    core = 4.0 * a * d * attended_keys(m, ratio) / s
    out = {"core": core, "indexer": 0.0, "compressor": 0.0}
    if ratio == 0:
        return out
    c = 2 if ratio == 4 else 1
    out["compressor"] = 4.0 * h * c * d
    if ratio == 4:
        hi, di = m.index_n_heads, m.index_head_dim
        out["compressor"] += 4.0 * h * 2 * di
        out["indexer"] = (2.0 * hi * di * indexer_scores(m) / s
                          + 2.0 * m.q_lora_rank * hi * di + 2.0 * h * hi)
    return out
