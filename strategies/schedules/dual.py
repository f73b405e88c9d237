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

from collections import deque
from typing import Any, Callable

import numpy as np

from strategies.schedules.step import make_step
from strategies.schedules.step import Step

#: ``(kind, phase, k)`` -> the step of the ``k``-th pass of that kind in that phase
Emit = Callable[[str, int, int], Step]


def dual_order(n: int, h: int, num_per_phase: int, turning: bool, emit: Emit) -> list[Step]:
    """The eight steps above for a rank ``h`` from its end among ``n`` per half, with
    ``num_per_phase`` micro-batches per phase; ``turning``: the rank where the two halves
    meet (no overlap on its first main-step pair)."""
    out: list[Step] = []
    cnt = {(k, ph): 0 for k in "FB" for ph in (0, 1)}
    queued: deque[Step] = deque()

    def step(kind: str, ph: int, overlap: bool = False) -> Step:
        s = emit(kind, ph, cnt[kind, ph])
        cnt[kind, ph] += 1
        return make_step(s.kind, s.microbatch, s.chunk, True) if overlap else s

    def forward(ph: int, overlap: bool = False) -> None:
        out.append(step("F", ph, overlap))

    def backward(ph: int, split: bool, overlap: bool = False) -> None:
        b = step("B", ph, overlap)
        w = make_step("W", b.microbatch, b.chunk, False)
        out.append(b)
        if split:
            queued.append(w)
        else:
            out.append(w)

    def weight() -> None:
        if not queued:
            raise AssertionError("dual_order: W popped from an empty queue")
        out.append(queued.popleft())

    def pair(f_ph: int, b_ph: int) -> None:
        forward(f_ph, overlap=True)
        backward(b_ph, split=False, overlap=True)

    for _ in range(2 * (n - h - 1)):                          # 1
        forward(0)
    for _ in range(h + 1):                                    # 2
        forward(0)
        forward(1)
    for _ in range(n - h - 1):                                # 3
        backward(1, split=True)
        weight()
        forward(1)
    for i in range(num_per_phase - 2 * n + h + 1):            # 4
        if i == 0 and turning:
            forward(0)
            backward(1, split=False)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(n - h - 1):                                # 5
        backward(1, split=False)
        pair(1, 0)
    split = False
    for i in range(h + 1):                                    # 6
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        backward(1, split)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        backward(0, split)
    for _ in range(n - h - 1):                                # 7
        weight()
        backward(0, split=True)
    for _ in range(h + 1):                                    # 8
        weight()
    if queued:
        raise AssertionError("dual_order: weight gradients left queued")
    return out


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
