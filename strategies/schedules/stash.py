"""What a rank's order stashes: the ``(stashed, pending W)`` moments its activations can peak
at (``stash_moments``, ``stash_frontier``; per chunk ``chunk_stash_moments``), the one with
the most bytes (``peak_pair``, ``peak_chunk_moment``), the peak counts (``peak_stash``,
``peak_pending_w``) and the weight gradients left after the last backward (``trailing_w``).
Pure functions of a ``list[Step]``."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from strategies.schedules.step import Step, step_columns

#: an order as ``step_columns``: ``(kind, microbatch, chunk, overlap)`` arrays
Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _events(columns: Columns, chunks: int | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """A rank's order (``step_columns``) as count changes, ``(chunk, d_stashed, d_pending, read, after_forward,
    chunks)``, one entry per event (arrays of one length): the counts per chunk are their
    running sums, and ``read`` marks the moments its activations can peak at: just after each
    forward and just after each backward (or overlapped group's backwards) releases its
    stash. ``stashed[c]``: the forwards of chunk ``c`` whose backward (``B``) has not yet
    run; ``pending[c]``: its backwards whose weight gradient (``W``) is still to run
    (``chunks``: the rank's chunk count, default the largest ``Step.chunk`` + 1). A ``W``
    only frees. An overlapped group (``Step.overlap``) is counted at its end, its backwards'
    stash released (and their ``W``, which the group runs last, pending) before its
    forwards' is added: the pair's forward builds its activations as the backward frees its
    own, piece by piece (DeepSeek's ``PP + 1`` for DualPipe); a trailing linked run that no
    step ends is not counted."""
    kind, mb, ch, ovl = columns
    n = len(kind)
    span = int(ch.max(initial=0)) + 1
    chunks = span if chunks is None else chunks
    is_b, is_f, is_w = kind == 1, kind == 0, kind == 2
    # a backward leaves a pending W where its (micro-batch, chunk) has one
    b_pends = is_b & np.isin(mb * span + ch, (mb * span + ch)[is_w])
    # each step's group: the unlinked steps before it; in a group, B before F before W
    order = np.arange(n)
    group = order
    if ovl.any():
        group = np.cumsum(~ovl) - ~ovl
        keep = np.flatnonzero(group < np.count_nonzero(~ovl))
        order = keep[np.lexsort((np.where(is_b, 0, np.where(is_f, 1, 2))[keep], group[keep]))]
    e_b, e_f, e_g = is_b[order], is_f[order], group[order]
    d_stashed = e_f.astype(np.int64) - e_b
    d_pending = b_pends[order].astype(np.int64) - is_w[order]
    # a group's last backward: the next event is of another group or not a backward
    last_b = e_b & ~np.append(e_b[1:] & (e_g[1:] == e_g[:-1]), False)
    return ch[order], d_stashed, d_pending, e_f | last_b, e_f, chunks


def _stash_walk(steps: Iterable[Step]) -> list[tuple[int, int, bool]]:
    """``(stashed, pending, after_forward)`` summed over the chunks at each moment of
    ``_events``, in order, each counted per (microbatch, chunk)."""
    _, d_n, d_w, read, fwd, _ = _events(step_columns(list(steps)))
    return list(zip(np.cumsum(d_n)[read].tolist(), np.cumsum(d_w)[read].tolist(),
                    fwd[read].tolist()))


def first_distinct_columns(keys: np.ndarray, mix: np.ndarray | None = None) -> np.ndarray:
    """Indices of the distinct columns of the int64 matrix ``keys``, each the first of its
    value, ascending. The columns are grouped by one wrapping hash, ``Σ_r keys[r]·mix[r]``
    (``mix``: default odd multipliers), and each checked equal to its group's first; where
    one is not (a collision), they are sorted by every row instead: exact either way."""
    if mix is None:
        mix = np.int64(-0x61C8864680B583EB) + 2 * np.arange(len(keys), dtype=np.int64)
    _, head, cls = np.unique((keys * mix[:, None]).sum(axis=0), return_index=True,
                             return_inverse=True)
    if not np.array_equal(keys, keys[:, head[np.ravel(cls)]]):
        idx = np.lexsort((np.arange(keys.shape[1]),) + tuple(keys))
        ordered = keys[:, idx]
        new = np.ones(len(idx), dtype=bool)
        new[1:] = np.any(ordered[:, 1:] != ordered[:, :-1], axis=0)
        head = idx[new]
    return np.sort(head)


def _distinct_moments(chunk: np.ndarray, d_n: np.ndarray, d_w: np.ndarray, read: np.ndarray,
                      chunks: int) -> np.ndarray:
    """The distinct per-chunk ``(stashed, pending)`` counts at the ``read`` events of
    ``_events``, in order of first appearance, as rows ``stashed[0..C) + pending[0..C)``.
    Exact, without a row per event: each count is offset by its chunk's event count (so it
    is ``>= 0``) and packed into ``b`` bits of an int64 word, ``63 // b`` counts a word;
    an event adds ``±2^shift`` to one or two words, whose running sums are then the packed
    state (never a carry: every count stays in ``[0, 2^b)``); equal packed rows are equal
    states."""
    events = len(chunk)
    offset = int(np.bincount(chunk, minlength=1).max()) if events else 0
    b = max(1, (2 * offset).bit_length())
    per = 63 // b
    slot = np.arange(2 * chunks)
    word, shift = slot // per, b * (slot % per)
    words = np.zeros((int(word[-1]) + 1, events), dtype=np.int64)
    rows = np.arange(events)
    words[word[chunk], rows] = d_n << shift[chunk]
    words[word[chunk + chunks], rows] += d_w << shift[chunk + chunks]
    base = np.zeros(len(words), dtype=np.int64)
    np.add.at(base, word, np.int64(offset) << shift)
    keys = (np.cumsum(words, axis=1) + base[:, None])[:, read]
    first = keys[:, first_distinct_columns(keys)]              # (words, distinct)
    return ((first[word] >> shift[:, None]) & ((1 << b) - 1)).T - offset


def stash_moments(steps: Iterable[Step]) -> list[tuple[int, int]]:
    """``(stashed, pending)`` just after each forward (``_stash_walk``): forwards whose
    backward (``B``) has not yet run, and backwards whose weight gradient (``W``) is still to
    run, each counted per (microbatch, chunk); an overlapped group is counted at its end."""
    return [(n, w) for n, w, fwd in _stash_walk(steps) if fwd]


def stash_frontier(steps: Iterable[Step]) -> tuple[tuple[int, int], ...]:
    """The ``(stashed, pending)`` pairs a rank's activations can peak at: of every moment of
    ``_events`` (after each forward and after each backward's release), those no other
    moment exceeds in both counts, most stashed first. With ``M_B`` bytes per stashed entry
    and ``M_W`` per pending weight gradient the rank's peak is the largest
    ``n·M_B + w·M_W`` over them (``peak_pair``); the first pair is ``(peak_stash,
    peak_pending_w)``. ZB-H1 and ZB-H2 have one more, one ``B`` later, which peaks where
    ``M_W > M_B`` (full or op recomputation, MoE layers); ZB-2p's orders pass through pairs
    with fewer stashed and many more pending, which can peak with ``M_W < M_B`` too.

    >>> from strategies.schedules.zb_h1 import ZBH1
    >>> stash_frontier(ZBH1().steps(1, 4, 8))
    ((3, 1), (2, 2))
    """
    return column_stash_frontier(step_columns(list(steps)))


def column_stash_frontier(columns: Columns) -> tuple[tuple[int, int], ...]:
    """``stash_frontier`` of an order given as ``step_columns``: the moments sorted most
    stashed first (then most pending), each kept where it has more pending than every
    moment before it."""
    _, d_n, d_w, read, _, _ = _events(columns)
    n, w = np.cumsum(d_n)[read], np.cumsum(d_w)[read]
    if not len(n):
        return ((0, 0),)
    by = np.lexsort((-w, -n))
    n, w = n[by], w[by]
    keep = np.r_[True, w[1:] > np.maximum.accumulate(w)[:-1]]
    return tuple(zip(n[keep].tolist(), w[keep].tolist()))


def peak_pair(frontier: Sequence[tuple[int, int]], per_stashed: float,
              per_pending: float) -> tuple[int, int]:
    """The pair of ``frontier`` (``stash_frontier``) with the most bytes, ``n·per_stashed
    + w·per_pending`` (bytes per stashed entry and per pending ``W``); the first (most
    stashed) on a tie."""
    vals = [n * per_stashed + w * per_pending for n, w in frontier]
    return tuple(frontier[vals.index(max(vals))])


def chunk_stash_moments(steps: Iterable[Step], chunks: int
                        ) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The moments of ``_events`` counted per chunk: ``(stashed, pending)`` with
    ``stashed[c]`` the forwards of chunk ``c`` (``Step.chunk``, ``0 … chunks-1``) whose
    backward has not yet run and ``pending[c]`` its backwards whose ``W`` is still to run,
    after each forward and after each backward's release (an overlapped group at its end),
    distinct, in order. Where a rank's chunks keep different bytes (dense and MoE layers,
    an MTP module, an uneven layout) its peak is the largest ``Σ_c stashed[c]·A_c +
    pending[c]·W_c`` over them (``peak_chunk_moment``); summed over the chunks they are
    ``_stash_walk``'s pairs.

    >>> from strategies.schedules.zb_v import ZBV
    >>> chunk_stash_moments(ZBV().steps(0, 2, 4, 2), 2)[2:5]
    (((3, 0), (0, 0)), ((3, 1), (0, 0)), ((3, 0), (0, 1)))
    """
    return column_stash_moments(step_columns(list(steps)), chunks)


def column_stash_moments(columns: Columns, chunks: int
                         ) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """``chunk_stash_moments`` of an order given as ``step_columns`` (an order built as
    arrays needs no ``Step``)."""
    chunk, d_n, d_w, read, _, chunks = _events(columns, chunks)
    if not np.any(read):
        return ((tuple([0] * chunks), tuple([0] * chunks)),)
    return tuple((tuple(r[:chunks]), tuple(r[chunks:]))
                 for r in _distinct_moments(chunk, d_n, d_w, read, chunks).tolist())


def peak_chunk_moment(moments: Sequence[tuple[Sequence[int], Sequence[int]]],
                      per_stashed: Sequence[float], per_pending: Sequence[float]
                      ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The moment of ``chunk_stash_moments`` with the most bytes, ``Σ_c stashed[c]·
    per_stashed[c] + pending[c]·per_pending[c]`` (bytes of one stashed entry and of one
    pending ``W`` of each chunk); the earliest on a tie (the array model's ``argmax``)."""
    def size(mo) -> float:
        n, w = mo
        return sum(a * x for a, x in zip(n, per_stashed)) + sum(
            a * x for a, x in zip(w, per_pending))
    sizes = [size(mo) for mo in moments]
    best = sizes.index(max(sizes))
    n, w = moments[best]
    return tuple(n), tuple(w)


def peak_stash(steps: Iterable[Step]) -> int:
    """Most forwards whose backward (``B``) has not yet run, counted per (microbatch,
    chunk) (``stash_moments``); a split backward's ``W`` is not counted (it keeps only the
    layer inputs and output gradients its GEMMs need)."""
    return max((n for n, _ in stash_moments(steps)), default=0)


def peak_pending_w(steps: Sequence[Step]) -> int:
    """Most backwards whose weight gradient (``W``) is still to run when the stash count is
    at its peak (``stash_moments``): Qi et al. §2.3's peak ``peak_stash·M_B +
    peak_pending_w·M_W`` (ZB-H1 ``(p-r)M_B + r·M_W``, ZB-H2 ``(2p-2r-1)M_B + 2r·M_W`` on
    rank ``r``), which holds where ``M_W <= M_B`` on those orders; the memory model takes
    the largest pair of ``stash_frontier``. 0 where the backward is not split."""
    moments = stash_moments(steps)
    top = max((n for n, _ in moments), default=0)
    return max((w for n, w in moments if n == top), default=0)


def trailing_w(steps: Sequence[Step]) -> int:
    """``W`` steps after the last ``B`` of ``steps`` (0 without a ``B``)."""
    return column_trailing_w(step_columns(list(steps)))


def column_trailing_w(columns: Columns) -> int:
    """``trailing_w`` of an order given as ``step_columns``."""
    kind = columns[0]
    b_at = np.flatnonzero(kind == 1)
    if not len(b_at):
        return 0
    return int(np.count_nonzero(kind[int(b_at[-1]) + 1:] == 2))
