"""The eight-step per-rank order shared by DualPipe and DualPipeV (DeepSeek-V3 technical
report §3.2.1; deepseek-ai/DualPipe ``DualPipe.step`` and ``DualPipeV.step``).

A rank runs two "phases": phase 0 is fed from the rank's own end of the pipeline, phase 1 from
the other end. With ``n`` ranks per half (``p/2`` for DualPipe, ``p`` for DualPipeV), ``h`` the
rank's distance from its end and ``N`` micro-batches per phase:

1. ``2(n-h-1)`` × ``F0``
2. ``h+1`` × [``F0 F1``]
3. ``n-h-1`` × [``B1`` (its ``W`` queued), ``W`` (oldest queued), ``F1``]
4. ``N-2n+h+1`` × [``F0 & B1``, ``F1 & B0``] (on the turning rank the first ``F0``, ``B1`` run
   one after the other, not overlapped)
5. ``n-h-1`` × [``B1``, ``F1 & B0``]
6. ``h+1`` × [``B1 B0``], the ``W`` queued from the middle on (``h`` odd: from the
   ``⌊(h+1)/2⌋``-th ``B1``; ``h`` even: from the ``B0`` after it)
7. ``n-h-1`` × [``W`` (oldest), ``B0`` (queued)]
8. ``h+1`` × ``W`` (oldest)

``X & Y`` is an overlapped pair (``Step.overlap``): a forward and a whole backward (``B`` then
``W``) of two micro-batches whose compute runs in turn while each one's communication hides
under the other's. A backward not said to be queued is whole: its ``W`` follows at once.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.step import running_counts

#: tokens of ``dual_columns``: a forward, a whole backward (its ``W`` follows), a backward
#: whose ``W`` is queued, the oldest queued ``W``; ``token·4 + phase·2 + overlapped``
_F, _BW, _BQ, _WQ = 0, 1, 2, 3


def _tok(kind: int, ph: int, overlap: bool = False) -> int:
    return kind * 4 + ph * 2 + int(overlap)


def dual_columns(n: int, h: int, num_per_phase: int, turning: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The eight steps above for a rank ``h`` from its end among ``n`` per half, with
    ``num_per_phase`` micro-batches per phase, as columns ``(kind, phase, k, overlap)``:
    ``kind`` the index in ``step.STEP_KINDS``, ``k`` the pass's index among its phase's
    passes of its kind (a ``W`` its ``B``'s), ``overlap`` ``Step.overlap``; ``turning``: the
    rank where the two halves meet (no overlap on its first main-step pair). A schedule
    names each ``(phase, k)``'s micro-batch and chunk."""
    f0, f1 = _tok(_F, 0), _tok(_F, 1)
    pair = [_tok(_F, 0, True), _tok(_BW, 1, True), _tok(_F, 1, True), _tok(_BW, 0, True)]
    main = max(num_per_phase - 2 * n + h + 1, 0)
    toks = [f0] * (2 * (n - h - 1)) + [f0, f1] * (h + 1)                      # 1, 2
    toks += [_tok(_BQ, 1), _tok(_WQ, 0), f1] * (n - h - 1)                     # 3
    if main:                                                                   # 4
        toks += ([f0, _tok(_BW, 1)] + pair[2:] if turning else pair) + pair * (main - 1)
    toks += [_tok(_BW, 1), pair[2], pair[3]] * (n - h - 1)                     # 5
    half = (h + 1) // 2         # 6: W queued from the half-th B1 (h odd) or the B0 after it
    for i in range(h + 1):
        toks += [_tok(_BQ if i >= half + (h % 2 == 0) else _BW, 1),
                 _tok(_BQ if i >= half else _BW, 0)]
    toks += [_tok(_WQ, 0), _tok(_BQ, 0)] * (n - h - 1)                         # 7
    toks += [_tok(_WQ, 0)] * (h + 1)                                           # 8
    t = np.array(toks, dtype=np.int64)
    kind, ph, ov = t // 4, t // 2 % 2, (t % 2).astype(bool)
    passes = kind != _WQ
    k = np.zeros(len(t), dtype=np.int64)
    k[passes] = running_counts((kind[passes] > _F) * 2 + ph[passes])
    # the j-th queued W is the j-th queued B's
    queued, pops = np.flatnonzero(kind == _BQ), np.flatnonzero(kind == _WQ)
    if len(queued) != len(pops) or np.any(pops < queued[:len(pops)]):
        raise AssertionError("dual_columns: a W popped from an empty queue or left queued")
    ph[pops], k[pops] = ph[queued], k[queued]
    # a whole backward is two steps, its B (overlapped as given) and its W (not)
    reps = np.where(kind == _BW, 2, 1)
    at = np.repeat(np.arange(len(t)), reps)
    second = np.r_[False, at[1:] == at[:-1]]
    out_kind = np.where(kind[at] == _F, 0, np.where((kind[at] == _WQ) | second, 2, 1))
    return out_kind.astype(np.int8), ph[at], k[at], ov[at] & ~second


def span_excess(n: Any, f: Any, w: Any) -> Any:
    """Seconds by which the worst rank's span, and one iteration's makespan, exceed its work
    with free communication: ``max(3(n-1)f - n·w, 2(n-1)f)`` for ``n`` ranks per half, chunk
    times ``f = b`` (forward, input gradient) and ``w`` (weight gradient), no compute overlap
    in a pair. Found with ``analysis.free_comm_ranks`` and exact when ``T_W <= T_F`` and
    ``m >= 2·num_ranks`` (``tests/test_dualpipe.py``, ``tests/test_dualpipev.py``,
    ``tests/test_dualpipe_plan.py``). DeepSeek's ``(PP/2-1)(F&B + B - 3W)`` with
    ``F&B = F + B`` and ``B = b + w`` the whole backward is ``(n-1)(3f - w)``: equal at
    ``w = 0`` and ``w = f``, above it between (``deepseek_bubble``).

    >>> float(span_excess(4, 1.0, 1.0)), float(span_excess(4, 1.0, 0.5)), float(span_excess(4, 1.0, 0.0))
    (6.0, 7.0, 9.0)
    """
    n, f, w = (np.asarray(x, dtype=float) for x in (n, f, w))
    return np.maximum(3 * (n - 1) * f - n * w, 2 * (n - 1) * f)


def deepseek_bubble(stages: Any, f_and_b: Any, b_full: Any, w: Any) -> Any:
    """DeepSeek's published DualPipe bubble ``(PP/2-1)(F&B + B - 3W)`` (deepseek-ai/DualPipe
    README, DeepSeek-V3 report Table 2): ``stages`` pipeline stages (``p`` for DualPipe,
    ``2p`` for DualPipeV), chunk seconds of an overlapped pair ``f_and_b``, of a whole
    backward ``b_full`` and of a weight gradient ``w``.

    >>> deepseek_bubble(8, 2.0, 1.0, 0.0)
    9.0
    """
    return (stages / 2 - 1) * (f_and_b + b_full - 3 * w)


def worst_rank_bubble(n: Any, passes: Any, w_share: Any) -> Any:
    """The worst rank's idle time over its work with free communication, ``n`` ranks per
    half, ``passes`` chunk passes of each kind per rank (``m`` for DualPipe, ``2m`` for
    DualPipeV), chunk times ``f = b`` (``B`` the input gradient) and ``w``, no compute overlap
    in a pair (``F&B = F + B``): ``span_excess`` over ``passes·(2f + w)``, written with
    ``s = w_share = w/(2f + w)``. Exact when ``T_W <= T_F`` and ``m >= 2·num_ranks``
    (``tests/test_dualpipe.py``, ``tests/test_dualpipev.py``).

    >>> float(worst_rank_bubble(4, 16, 1 / 3)) * 16    # F = B = W: 2(n-1) f over 3f
    2.0
    """
    s = np.asarray(w_share, dtype=float)
    return span_excess(n, (1 - s) / 2, s) / passes
