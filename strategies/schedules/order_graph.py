"""A schedule's order as the dependency graph of its events, built as arrays
(``analysis.free_comm_order`` wraps it in a ``FreeCommOrder``): the steps of every rank as
columns (``Schedule.order_columns`` or ``step.step_columns``), an event per overlapped group
(``Step.overlap``), each step's producer found by its ``(kind, microbatch, position)`` key
in one table, each event's predecessors (its rank's previous event, then its steps'
dependencies' producers, first seen first), and each event's level from one walk of the
ranks over those integer lists. Pure; no SimPy.

A step waits (free communication) for: ``W`` its ``B``; ``F`` the forward at the position
before (none at position 0); ``B`` the backward at the position after, or at the last
position its own forward.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from strategies.distinct_rows import distinct_int_rows
from strategies.schedules.step import STEP_KINDS

#: kind codes (``step.STEP_KINDS``' indices)
_F, _B, _W = 0, 1, 2


def order_graph(sched: Any, pp: int, m: int, vpp: int, group_size: int | None,
                columns: Sequence[tuple]) -> tuple:
    """``(rank, sig, sigs, preds, bounds)`` of ``FreeCommOrder`` for the order whose rank
    ``r`` runs the steps ``columns[r]`` (``step.step_columns``). Raises ``RuntimeError`` on
    deadlock (a step waits for a step no rank runs, or the ranks wait in a cycle)."""
    counts = np.array([len(c[0]) for c in columns], dtype=np.int64)
    kind, micro, chunk = (np.concatenate([np.asarray(c[j]) for c in columns]).astype(np.int64)
                          for j in range(3))
    overlap = np.concatenate([np.asarray(c[3]) for c in columns]).astype(bool)
    srank = np.repeat(np.arange(pp, dtype=np.int64), counts)
    # an event ends at a step not linked to the next, or at its rank's last step
    ends_group = ~overlap
    ends_group[np.cumsum(counts)[counts > 0] - 1] = True
    ev = np.concatenate(([0], np.cumsum(ends_group)[:-1])).astype(np.int64)
    n = int(ends_group.sum())
    ev_count = np.bincount(srank[ends_group], minlength=pp) if n else np.zeros(pp, np.int64)
    off = np.concatenate(([0], np.cumsum(ev_count))).astype(np.int64)
    pos = sched.virtual_stage_array(srank, chunk, pp, vpp, micro)
    last = sched.num_virtual_stages(pp, vpp) - 1
    prod, dep = _producers(kind, micro, pos, last, ev)
    # candidates of each event: its rank's previous event, then each step's producer
    width = int(np.bincount(ev).max()) if n else 1
    first = np.r_[True, ev[1:] != ev[:-1]] if n else np.zeros(0, dtype=bool)
    slot = np.arange(len(ev)) - np.maximum.accumulate(np.where(first, np.arange(len(ev)), 0))
    cand = np.full((n, 1 + width), -2, dtype=np.int64)        # -2: no candidate
    e = np.arange(n)
    cand[:, 0] = np.where(e > off[np.repeat(np.arange(pp), ev_count)], e - 1, -2)
    cand[ev, 1 + slot] = np.where(dep, prod, -2)
    cand[cand == e[:, None]] = -2                             # a group's own steps
    for j in range(1, 1 + width):                             # first seen first
        seen = (cand[:, 1:j] == cand[:, j:j + 1]).any(axis=1) | (cand[:, 0] == cand[:, j])
        cand[seen, j] = -2
    # each event's predecessors first, in their order, padded with -2
    cand = np.take_along_axis(cand, np.argsort(cand == -2, axis=1, kind="stable"), axis=1)
    cand = cand[:, :max(1, int((cand != -2).sum(axis=1).max(initial=0)))]
    level = _levels(cand.tolist(), off.tolist(), pp, sched.name, m, vpp, group_size)
    rank = np.repeat(np.arange(pp), ev_count)
    lv = np.array(level, dtype=np.int64)
    order = np.lexsort((rank, lv))
    where = np.empty(n + 1, dtype=np.int64)
    where[order], where[n] = np.arange(n), n
    mat = np.where(cand == -2, n, cand)
    sig, sigs = _signatures(kind, chunk, srank, ev, slot, n, width)
    lv = lv[order]
    bounds = tuple(np.flatnonzero(np.r_[True, lv[1:] != lv[:-1]]).tolist()) + (n,)
    return rank[order], sig[order], sigs, where[mat[order]], bounds


def _producers(kind: np.ndarray, micro: np.ndarray, pos: np.ndarray, last: int,
               ev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(producer, has_dep)`` of each step: the event that runs the step it waits for (the
    last such event, rank by rank; -1 where none runs it), and whether it waits at all
    (a forward at position 0 does not; nor a step of a group waiting for one of the steps
    before it in the group)."""
    dk = np.where(kind == _W, _B, np.where((kind == _B) & (pos == last), _F, kind))
    dp = np.where(kind == _W, pos, np.where(kind == _F, pos - 1,
                                            np.where(pos == last, pos, pos + 1)))
    has = ~((kind == _F) & (pos <= 0))
    lo_m, lo = int(micro.min(initial=0)), int(min(pos.min(initial=0), dp.min(initial=0)))
    span_m = int(micro.max(initial=0)) - lo_m + 1
    span_p = int(max(pos.max(initial=0), dp.max(initial=0))) - lo + 1
    key = (kind * span_m + micro - lo_m) * span_p + (pos - lo)
    dkey = (dk * span_m + micro - lo_m) * span_p + (dp - lo)
    table = np.full(3 * span_m * span_p, -1, dtype=np.int64)
    np.maximum.at(table, key, ev)          # a key run twice: its last event, as a dict keeps
    prod = table[dkey]
    # a group drops a dependency on a key of one of its earlier steps
    same = np.zeros(len(ev), dtype=bool)
    for j in range(1, int(np.bincount(ev).max()) if len(ev) else 1):
        back = np.r_[np.full(j, -1), ev[:-j]] == ev
        same |= back & (np.r_[np.full(j, -1), key[:-j]] == dkey)
    return prod, has & ~same


def _levels(preds: list, off: list, pp: int, name: str, m: int, vpp: int,
            group_size: int | None) -> list:
    """Each event's level (one more than its predecessors' largest; ``preds``: rows padded
    with -2, -1 a step no rank runs), walking each rank in its order as far as its
    predecessors have levels (a rank stopped on an event resumes once that event has one).
    Raises ``RuntimeError`` when ranks are left stuck."""
    level = [-1] * (off[-1] + 1)
    waiting: dict[int, list] = {}
    at = off[:-1]
    ready = list(range(pp))
    while ready:
        r = ready.pop()
        e, stop = at[r], off[r + 1]
        while e < stop:
            top, late = -1, None
            for q in preds[e]:
                if q == -2:                  # the row's padding
                    break
                lq = level[q] if q >= 0 else -1
                if lq < 0:
                    late = q
                    break
                if lq > top:
                    top = lq
            if late is not None:
                if late >= 0:
                    waiting.setdefault(late, []).append(r)
                break
            level[e] = top + 1
            if e in waiting:
                ready.extend(waiting.pop(e))
            e += 1
        at[r] = e
    stuck = [r for r in range(pp) if at[r] < off[r + 1]]
    if stuck:
        raise RuntimeError(f"schedule {name!r} deadlocks on ranks {stuck} "
                           f"(pp={pp}, m={m}, vpp={vpp}, group_size={group_size})")
    return level[:-1]


def _signatures(kind: np.ndarray, chunk: np.ndarray, srank: np.ndarray, ev: np.ndarray,
                slot: np.ndarray, n: int, width: int) -> tuple[np.ndarray, tuple]:
    """``(sig, sigs)``: each event's index into ``sigs``, the distinct ``(rank, members)``
    (``members``: its steps' ``(kind, chunk)``) in the order of their first event."""
    if not n:
        return np.zeros(0, dtype=np.int64), ()
    rows = np.full((n, 1 + 2 * width), -1, dtype=np.int64)
    rows[ev, 0] = srank
    rows[ev, 1 + 2 * slot] = kind
    rows[ev, 2 + 2 * slot] = chunk
    first, inv = distinct_int_rows(rows)
    by_first = np.argsort(first, kind="stable")
    rank_of = np.empty(len(first), dtype=np.int64)
    rank_of[by_first] = np.arange(len(first))
    sigs = []
    for row in rows[first[by_first]].tolist():
        members = tuple((STEP_KINDS[k], c) for k, c in zip(row[1::2], row[2::2]) if k >= 0)
        sigs.append((row[0], members))
    return rank_of[inv], tuple(sigs)

