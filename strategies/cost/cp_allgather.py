"""Transformer Engine's all-gather context parallelism (``AttnFuncWithCPAndKVAllGather``,
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``, read at
d0067d0; Megatron-Core ``--cp-comm-type all_gather``, plan ``cp_comm``; Llama 3's CP, Dubey et
al. 2024 §3.3.2): the HBM passes around its attention kernels and the working set it holds.
Its network traffic is ``comm_bytes.cp_gather_bytes`` (the estimate's ``cp_ring.layer_waits``
at ``cp_exposed_fraction`` 1, the simulator's ``layer_blocks``), its kernels' grid
``attention_grid.allgather_factor``. docs/calibration.md §5.134. Units: bytes.

What the function does, sbhd layout (Megatron-Core's), ``G`` the gathered K and V
(``cp_gather_bytes``), ``O``/``Q`` the rank's attention output / query bytes:

* forward: ``gather_along_first_dim`` of K and of V (the output buffer, ``G``), then
  ``torch.index_select`` into sequence order (read ``G``, write ``G``; the rank-ordered buffer
  freed after it); two kernels, one per local query chunk, each against the keys up to its
  end; each chunk's output copied into the rank's (``out_f16[i].copy_``: read and write
  ``O`` in all). Saved for the backward: the local Q, K, V and O only.
* backward: K and V gathered and reordered again (``2·G``); dK and dV of the whole sequence
  zero-filled (``torch.zeros``: write ``G``); each chunk's dK/dV added into its key range
  (``dk[start:end].add_``: read both, write one, over ``(r+1)/(2c)`` and ``(2c-r)/(2c)`` of
  ``G``, ``(1 + 1/(2c))·G`` for the two); each chunk's dQ copied into the rank's (``2·Q``);
  dK/dV reordered to rank order (``index_select``: ``2·G``) and reduce-scattered.
* working set at the backward's peak, on top of the saved tensors: the gathered K/V (``G``),
  the full dK/dV (``G``), the two chunks' dK/dV (``(1 + 1/(2c))·G``, held to the end) and the
  reordered dK/dV before the reduce-scatter (``G``).
"""
from __future__ import annotations

import numpy as np

from strategies.cost.comm_bytes import cp_gather_bytes
from strategies.cost.token_counts import ACT_BYTES, Num, tokens_per_gpu
from strategies.model import ModelSpec


def _rank_heads(m: ModelSpec, b: Num, tp: Num, cp: Num, dim: int) -> Num:
    """Bytes of one 16-bit tensor of the rank's tokens over its query heads of width ``dim``."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.num_attention_heads / tp * dim


def copy_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """HBM bytes of one layer's forward besides its kernels and collectives: the gathered
    K/V reordered (``2·G``) and the chunks' outputs copied into the rank's (``2·O``)."""
    return 2.0 * cp_gather_bytes(m, b, tp, cp) + 2.0 * _rank_heads(m, b, tp, cp, m.v_dim)


def _window_share(s: int, w: int, c: int) -> float:
    """Share of ``G`` the slowest rank's two chunks' key ranges cover under a sliding window
    of ``w`` keys (``get_kv_seq_info_after_all_gather``: chunk ``j`` of ``q = s/(2c)`` tokens
    reaches back to ``max(0, (j+1)·q - q - (w-1))``): ``max_r [min((r+1)q, q+w-1) +
    min((2c-r)q, q+w-1)] / s``; ``1 + 1/(2c)`` for a window of at least the sequence."""
    q = s / (2.0 * c)
    reach = q + w - 1
    return max(min((r + 1) * q, reach) + min((2 * c - r) * q, reach) for r in range(c)) / s


def chunk_key_shares(m: ModelSpec, cp: Num) -> tuple[Num, Num]:
    """(mean layer, largest layer) share of ``G`` the chunks' key ranges cover, where each
    chunk's dK/dV is accumulated (``dk[seq_start_idx:seq_end_idx].add_``, context_parallel.py
    L4094 at d0067d0) and held: ``1 + 1/(2c)`` on a full layer (``(r+1)/(2c)`` and
    ``(2c-r)/(2c)``), ``_window_share`` on a sliding-window one (the slowest rank's);
    docs/calibration.md §5.134, §5.196. Vectorised over ``cp``."""
    full = 1.0 + 0.5 / np.asarray(cp, dtype=float)
    nw, L = m.num_windowed_layers, m.num_layers
    if not nw or m.window_kind != "sliding" or m.sliding_window >= m.seq_length:
        return full, full
    win = np.vectorize(lambda c: _window_share(m.seq_length, m.sliding_window, int(round(c))),
                       otypes=[float])(np.maximum(np.asarray(cp, dtype=float), 1.0))
    return ((L - nw) * full + nw * win) / L, (full if nw < L else win)


def copy_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """HBM bytes of one layer's backward besides its kernels and collectives: K/V reordered
    again (``2·G``), dK/dV zero-filled (``G``), the chunks' dK/dV accumulated
    (``3·k·G``, ``k`` the mean layer's ``chunk_key_shares``: ``1 + 1/(2c)`` without a
    window), reordered (``2·G``), and the chunks' dQ copied (``2·Q``)."""
    g = cp_gather_bytes(m, b, tp, cp)
    k = chunk_key_shares(m, cp)[0]
    return (5.0 + 3.0 * k) * g + 2.0 * _rank_heads(m, b, tp, cp, m.head_dim)


def working_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Bytes the attention holds at its backward's peak besides the saved tensors: the
    gathered K/V, the whole dK/dV, the chunks' dK/dV and the reordered dK/dV,
    ``(3 + k)·G``, ``k`` the largest layer's ``chunk_key_shares`` (``(4 + 1/(2c))·G``
    without a window). One layer at a time (a transient, as the MoE permutation buffers)."""
    extra = chunk_key_shares(m, cp)[1] - (1.0 + 0.5 / np.asarray(cp, dtype=float))
    return (4.0 + 0.5 / cp + extra) * cp_gather_bytes(m, b, tp, cp)
