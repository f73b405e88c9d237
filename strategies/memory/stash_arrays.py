"""One rank's activation stash over arrays of plans (docs/memory.md): a layer's saved bytes
(``activations.layer_activation_bytes`` and ``layer_wgrad_bytes`` over arrays) and the
schedule's moments that decide how many ``(micro-batch, chunk)`` entries and pending weight
gradients a rank holds at its peak (``Schedule.stash_frontier_array``, per plan; its per-chunk
moments where a rank's chunks keep different bytes). ``rank_components.memory_component_arrays``
prices the stash with them.

>>> import numpy as np
>>> from strategies.schedules import schedule_code
>>> n, w = stash_frontier_arrays(np.array([schedule_code("1f1b")]), 0, 4, 8, 1)
>>> float(n[0, 0]), float(w[0, 0])
(4.0, 0.0)
"""
from __future__ import annotations

import numpy as np

from strategies.cost import recompute as rcp
from strategies.memory.activations import (TERM_KINDS, layer_activation_terms,
                                          layer_wgrad_terms, named_remat_bytes, op_saved_bytes,
                                          selective_dropped_bytes)
from strategies.memory.recompute_saved import checkpoint_input_bytes
from strategies.model import ModelSpec
from strategies.schedules import schedule_of_code


def layer_act_arrays(m: ModelSpec, b, tp, cp, sp, rc, flash, mask=0, remat_named=False,
                     cache=None) -> tuple[np.ndarray, np.ndarray]:
    """``(stashed, without recomputation)``: ``activations.layer_activation_bytes`` over
    arrays, bytes per GPU of one layer (``rc``: 0 none, 1 selective, 2 full,
    3 op; ``mask``: the selective modules, ``strategies.cost.recompute``; ``remat_named``: a
    JAX remat stack's selective stash, ``activations.named_remat_bytes``; ``cache``: GEMM
    inputs cached in low precision, ``activations.cache_ratios``)."""
    s = m.seq_length
    terms = layer_activation_terms(m, s, 1, cache)  # linear in the micro-batch size
    kind_sum = {k: 0.0 for k in ("seq", "tp", "score")}
    for name, nbytes in terms.items():
        kind_sum[TERM_KINDS[name]] += nbytes
    seq_div = np.where(sp, tp, 1.0)
    keep_score = ~(flash | rcp.part_selected(rc, mask, "scores"))
    stored = b * (kind_sum["seq"] / seq_div + kind_sum["tp"] / tp
                  + np.where(keep_score, kind_sum["score"] / tp, 0.0)) / cp \
        - selective_dropped_bytes(m, s, b, tp, sp, cp, rc, mask, cache)[0]
    full = checkpoint_input_bytes(m, s, b, tp, sp, cp)
    none = b * (kind_sum["seq"] / seq_div + kind_sum["tp"] / tp
                + np.where(flash, 0.0, kind_sum["score"] / tp)) / cp
    if remat_named:
        stored = np.where(rc == 1, named_remat_bytes(m, s, b, tp, sp, cp, mask), stored)
    op = op_saved_bytes(m, s, b, tp, sp, cp)
    return np.where(rc == 2, full, np.where(rc == 3, op, stored)), none


def layer_wgrad_arrays(m: ModelSpec, b, tp, cp, sp, cache=None) -> np.ndarray:
    """``activations.layer_wgrad_bytes`` over arrays."""
    terms = layer_wgrad_terms(m, m.seq_length, 1, cache).values()
    seq = sum(n for n, k in terms if k == "seq")
    tpk = sum(n for n, k in terms if k != "seq")
    return b * (seq / np.where(sp, tp, 1.0) + tpk / tp) / cp


def stash_frontier_arrays(sched, stage, pp, m, v, group=0) -> tuple[np.ndarray, np.ndarray]:
    """``Schedule.stash_frontier_array`` of each plan's schedule (by code): ``(stashed,
    pending)`` of shape ``(K,) + plans``, each plan's pairs padded with its first. ``group``:
    each plan's micro-batch group (0: the default); a plan that names one reads its order's
    ``Schedule.stash_frontier`` once per distinct ``(code, stage, pp, m, vpp, group)``."""
    arrs = np.broadcast_arrays(np.asarray(sched, dtype=np.int64), *(np.asarray(a) for a in
                                                                    (stage, pp, m, v, group)))
    c, rest, g = arrs[0], arrs[1:5], arrs[5]
    got = {}
    for code in np.unique(c):
        sel = (c == code) & (g == 0)
        if np.any(sel):
            got[(int(code), 0)] = (sel, schedule_of_code(code).stash_frontier_array(
                *(a[sel] for a in rest)))
    named = np.flatnonzero(np.ravel(g) > 0)
    if named.size:
        flat = [np.ravel(a) for a in (c, *rest, g)]
        keys = np.stack([f[named].astype(np.int64) for f in flat], axis=1)
        for key in np.unique(keys, axis=0).tolist():
            sel = np.all(np.stack([f == x for f, x in zip(flat, key)]), axis=0).reshape(c.shape)
            code, stage_k, pp_k, m_k, v_k, g_k = key
            front = schedule_of_code(code).stash_frontier(stage_k, pp_k, m_k, v_k, g_k)
            k_sel = int(sel.sum())
            got[tuple(key)] = (sel, (np.array([[n] * k_sel for n, _ in front], dtype=float),
                                     np.array([[w] * k_sel for _, w in front], dtype=float)))
    depth = max((f[0].shape[0] for _, f in got.values()), default=1)
    n = np.zeros((depth,) + c.shape)
    w = np.zeros((depth,) + c.shape)
    for sel, (nk, wk) in got.values():
        pad = depth - nk.shape[0]
        n[:, sel] = np.concatenate([nk] + [nk[:1]] * pad) if pad else nk
        w[:, sel] = np.concatenate([wk] + [wk[:1]] * pad) if pad else wk
    return n, w


#: ``Schedule.chunk_stash_moments`` of each ``(code, stage, pp, m, vpp)`` as padded
#: ``(stashed, pending)`` arrays of shape ``(K, C)``; bounded, cleared when full
_CHUNK_MOMENTS: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}


def _chunk_moments(code: int, stage: int, pp: int, m: int, v: int, group: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    key = (code, stage, pp, m, v, group)
    got = _CHUNK_MOMENTS.get(key)
    if got is None:
        if len(_CHUNK_MOMENTS) >= 1 << 14:
            _CHUNK_MOMENTS.clear()
        mo = schedule_of_code(code).chunk_stash_moments(stage, pp, m, v, group or None)
        got = _CHUNK_MOMENTS[key] = (np.array([n for n, _ in mo], dtype=float),
                                     np.array([w for _, w in mo], dtype=float))
    return got


def own_chunk_peak(sched, stage, pp, m, v, acts, wgs, extra, sel, group=0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(stashed, pending, layers' bytes)`` of each plan in ``sel`` at the order's per-chunk
    moment with the most bytes (``schedules.stash.peak_chunk_moment``: ``acts[c] + extra``
    per stashed entry of chunk ``c``, ``wgs[c]`` per pending ``W``; the first on a tie);
    zeros elsewhere. ``acts``, ``wgs``: ``(C,) + plans``; ``group``: the micro-batch group
    (0: the default); once per distinct order."""
    cols = np.broadcast_arrays(*(np.asarray(a) for a in (sched, stage, pp, m, v, group, sel)))
    shape = cols[0].shape
    flat = [np.ravel(c) for c in cols]
    a2 = acts.reshape(acts.shape[0], -1)
    w2 = wgs.reshape(wgs.shape[0], -1)
    e2 = np.ravel(extra + np.zeros(shape))
    out = [np.zeros(len(flat[0])) for _ in range(3)]
    rows = np.flatnonzero(flat[6])
    keys = np.stack([f[rows].astype(np.int64) for f in flat[:6]], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = np.ravel(inv)
    for j, key in enumerate(uniq.tolist()):
        idx = rows[inv == j]
        nk, wk = _chunk_moments(*key)                        # (K, C)
        c = nk.shape[1]
        per_n = a2[:c, idx] + e2[idx]                        # (C, rows)
        size = nk @ per_n + wk @ w2[:c, idx]                 # (K, rows)
        pick = np.argmax(size, axis=0)
        out[0][idx] = nk[pick].sum(axis=1)
        out[1][idx] = wk[pick].sum(axis=1)
        out[2][idx] = np.einsum("rc,cr->r", nk[pick], a2[:c, idx]) + np.einsum(
            "rc,cr->r", wk[pick], w2[:c, idx])
    return tuple(x.reshape(shape) for x in out)
