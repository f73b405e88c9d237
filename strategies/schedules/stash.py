"""What a rank's order stashes: the ``(stashed, pending W)`` moments its activations can peak
at (``stash_moments``, ``stash_frontier``; per chunk ``chunk_stash_moments``), the one with
the most bytes (``peak_pair``, ``peak_chunk_moment``), the peak counts (``peak_stash``,
``peak_pending_w``) and the weight gradients left after the last backward (``trailing_w``).
Pure functions of a ``list[Step]``."""
from __future__ import annotations

from typing import Iterable, Sequence

from strategies.schedules.step import Step


def _chunk_walk(steps: Iterable[Step], chunks: int | None = None
                ) -> list[tuple[tuple[int, ...], tuple[int, ...], bool]]:
    """``(stashed, pending, after_forward)`` per chunk at every moment a rank's activations
    can peak: just after each forward and just after each backward (or overlapped group's
    backwards) releases its stash. ``stashed[c]``: the forwards of chunk ``c`` whose
    backward (``B``) has not yet run; ``pending[c]``: its backwards whose weight gradient
    (``W``) is still to run (``chunks``: the rank's chunk count, default the largest
    ``Step.chunk`` + 1). A ``W`` only frees. An overlapped group (``Step.overlap``) is
    counted at its end, its backwards' stash released (and their ``W``, which the group runs
    last, pending) before its forwards' is added: the pair's forward builds its activations
    as the backward frees its own, piece by piece (DeepSeek's ``PP + 1`` for DualPipe)."""
    steps = list(steps)
    if chunks is None:
        chunks = max((s.chunk for s in steps), default=0) + 1
    has_w = {(s.microbatch, s.chunk) for s in steps if s.kind == "W"}
    live = [0] * chunks
    pending = [0] * chunks
    out: list[tuple[tuple[int, ...], tuple[int, ...], bool]] = []
    group: list[Step] = []
    for s in steps:
        group.append(s)
        if s.overlap:
            continue
        released = False
        for g in group:
            if g.kind == "B":
                released = True
                live[g.chunk] -= 1
                if (g.microbatch, g.chunk) in has_w:
                    pending[g.chunk] += 1
        if released:
            out.append((tuple(live), tuple(pending), False))
        for g in group:
            if g.kind == "F":
                live[g.chunk] += 1
                out.append((tuple(live), tuple(pending), True))
        for g in group:
            if g.kind == "W":
                pending[g.chunk] -= 1
        group = []
    return out


def _stash_walk(steps: Iterable[Step]) -> list[tuple[int, int, bool]]:
    """``_chunk_walk``'s moments summed over the chunks: ``(stashed, pending,
    after_forward)``, each counted per (microbatch, chunk)."""
    return [(sum(n), sum(w), fwd) for n, w, fwd in _chunk_walk(steps)]


def stash_moments(steps: Iterable[Step]) -> list[tuple[int, int]]:
    """``(stashed, pending)`` just after each forward (``_stash_walk``): forwards whose
    backward (``B``) has not yet run, and backwards whose weight gradient (``W``) is still to
    run, each counted per (microbatch, chunk); an overlapped group is counted at its end."""
    return [(n, w) for n, w, fwd in _stash_walk(steps) if fwd]


def stash_frontier(steps: Iterable[Step]) -> tuple[tuple[int, int], ...]:
    """The ``(stashed, pending)`` pairs a rank's activations can peak at: of every moment of
    ``_stash_walk`` (after each forward and after each backward's release), those no other
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
    best: list[tuple[int, int]] = []
    for n, w in sorted({(n, w) for n, w, _ in _stash_walk(steps)}, key=lambda x: (-x[0], -x[1])):
        if not best or w > best[-1][1]:
            best.append((n, w))
    return tuple(best) or ((0, 0),)


def peak_pair(frontier: Sequence[tuple[int, int]], per_stashed: float,
              per_pending: float) -> tuple[int, int]:
    """The pair of ``frontier`` (``stash_frontier``) with the most bytes, ``n·per_stashed
    + w·per_pending`` (bytes per stashed entry and per pending ``W``); the first (most
    stashed) on a tie."""
    vals = [n * per_stashed + w * per_pending for n, w in frontier]
    return tuple(frontier[vals.index(max(vals))])


def chunk_stash_moments(steps: Iterable[Step], chunks: int
                        ) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The moments of ``_stash_walk`` counted per chunk: ``(stashed, pending)`` with
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
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    seen: set = set()
    for live, pending, _ in _chunk_walk(steps, chunks):
        if (live, pending) not in seen:
            seen.add((live, pending))
            out.append((live, pending))
    return tuple(out) or ((tuple([0] * chunks), tuple([0] * chunks)),)


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
    last_b = max((k for k, s in enumerate(steps) if s.kind == "B"), default=len(steps))
    return sum(s.kind == "W" for s in steps[last_b + 1:])
