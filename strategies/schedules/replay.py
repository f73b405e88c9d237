"""A schedule's span from its own order: the free-communication makespan of the per-rank
order (``analysis.free_comm_order``, replayed for many plans at once by
``analysis.free_comm_ends``) with one rank at the slowest rank's seconds and every other
at the mean of the rest, for schedules whose span has no closed form once the ranks differ
(DualPipeV with its head rank slower than the others, docs/calibration.md §5.111); and on
the same replay, the queue of ZeRO-2's per-chunk reduce-scatters that each rank's gradient
steps release (``order_reduce_tails``, §5.127)."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from strategies.distinct_rows import distinct_rows


#: spans already replayed, by ``(schedule class, name, pp, m, vpp, slow_rank)`` and a plan's
#: column of seconds (``_columns``' row as bytes): a column's replay reads that column alone,
#: so a span found once is the span of every plan with the same key, bit for bit (the
#: search's estimates ask for the same few thousand columns many times: the ZeRO-2 twins,
#: ``ranked_messages``' variants); bounded, cleared when full
_SPANS: dict[tuple, float] = {}
_SPANS_MAX = 1 << 18


def _columns(sched: Any, m: Any, t_max: Any, t_sum: Any, pp: Any, vpp: int, w_share: Any,
             f_share: Any, slow_rank: int) -> Iterator[tuple]:
    """Per distinct ``(pp, m)`` of the plans: ``(sel, p, mb, cols)``, the flat indices of
    those plans, their ``pp`` and ``m``, and each plan's column of seconds ``cols`` (``(n,
    4)``: a micro-batch's seconds on the slow rank's and the other ranks' kind of rank, each
    over ``vpp``, the forward and the weight-gradient shares), all a replay reads."""
    m, t_max, t_sum, pp, w, f = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (m, t_max, t_sum, pp, w_share, f_share)))
    fill = (t_sum - t_max) / np.maximum(pp - 1, 1)
    uniq, inv, _ = distinct_rows(pp, m)
    # the plans of each distinct (pp, m), ascending, from one stable sort (not a scan of
    # every plan per distinct pair)
    by = np.argsort(inv, kind="stable")
    bounds = np.cumsum(np.bincount(inv, minlength=len(uniq)))[:-1]
    for (p, mb), sel in zip(uniq, np.split(by, bounds)):
        per = {r: (t_max if r == slow_rank else fill).reshape(-1)[sel] / vpp for r in (0, 1)}
        cols = np.stack([per[0], per[1], f.reshape(-1)[sel], w.reshape(-1)[sel]], axis=1)
        yield sel, int(p), int(mb), cols


def _replay(sched: Any, p: int, mb: int, vpp: int, cols: np.ndarray, slow_rank: int
            ) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(order, ends, dur)``: the order (``free_comm_order``) and each event's end and
    seconds (``free_comm_ends``, ``(events, n)``) over the ``n`` columns ``cols``
    (``_columns``), the seconds as ``order_span`` reads them."""
    from strategies.schedules.analysis import free_comm_ends, free_comm_order
    split = bool(sched.splits_backward)
    per = {0: cols[:, 0], 1: cols[:, 1]}
    fs, ws = cols[:, 2], cols[:, 3]

    def seconds(r: int, members: tuple) -> np.ndarray:
        t = per[0 if r == slow_rank else 1]
        total = 0.0
        for kind, _chunk in members:
            share = fs if kind == "F" else (ws if kind == "W" else
                                            1 - fs - (ws if split else 0.0))
            total = total + share * t
        return total
    order = free_comm_order(sched, p, mb, vpp)
    ends, dur = free_comm_ends(order, seconds, len(cols))
    return order, ends, dur


def _distinct_columns(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)``: the first row of each distinct row of ``cols`` (bit for bit:
    ``-0.0`` and ``0.0`` apart) and each row's index among them."""
    bits = np.ascontiguousarray(cols).view(np.int64)
    _, first, inv = np.unique(bits, axis=0, return_index=True, return_inverse=True)
    return first, np.ravel(inv)


def _replays(sched: Any, m: Any, t_max: Any, t_sum: Any, pp: Any, vpp: int, w_share: Any,
             f_share: Any, slow_rank: int) -> Iterator[tuple]:
    """Per distinct ``(pp, m)`` of the plans: ``(sel, p, order, ends, dur)``, the flat
    indices of those plans, their ``pp``, the order (``free_comm_order``) and each event's
    end and seconds over them (``free_comm_ends``), the seconds as ``order_span`` reads
    them. Plans with the same column of seconds are replayed once."""
    for sel, p, mb, cols in _columns(sched, m, t_max, t_sum, pp, vpp, w_share, f_share,
                                     slow_rank):
        first, inv = _distinct_columns(cols)
        order, ends, dur = _replay(sched, p, mb, vpp, cols[first], slow_rank)
        yield sel, p, order, ends[:, inv], dur[:, inv]


def order_span(sched: Any, m: Any, t_max: Any, t_sum: Any, pp: Any, vpp: int,
               w_share: Any, f_share: Any, slow_rank: int = 0) -> np.ndarray:
    """Seconds of one iteration of ``sched``'s order over ``pp`` ranks and ``m``
    micro-batches with free communication (arrays over plans): rank ``slow_rank`` runs
    ``t_max`` a micro-batch, every other rank ``(t_sum - t_max)/(pp - 1)``, each rank's
    seconds split evenly over its ``vpp`` chunks and, in each chunk, into a forward
    ``f_share``, a weight gradient ``w_share`` (where the schedule splits the backward) and
    the input gradient the rest. An overlapped pair lasts its members' sum (no compute
    overlap). Plans are replayed together by distinct ``(pp, m)``, each distinct column of
    seconds once (``_SPANS`` keeps them)."""
    shape = np.broadcast(*(np.asarray(x) for x in (m, t_max, t_sum, pp, w_share,
                                                   f_share))).shape
    out = np.zeros(shape)
    flat = out.reshape(-1)
    for sel, p, mb, cols in _columns(sched, m, t_max, t_sum, pp, vpp, w_share, f_share,
                                     slow_rank):
        first, inv = _distinct_columns(cols)
        head = (type(sched), sched.name, p, mb, vpp, slow_rank)
        keys = [head + (cols[j].tobytes(),) for j in first.tolist()]
        span = np.array([_SPANS.get(k, np.nan) for k in keys])
        todo = np.flatnonzero([k not in _SPANS for k in keys])
        if todo.size:
            _order, ends, _dur = _replay(sched, p, mb, vpp, cols[first[todo]], slow_rank)
            span[todo] = ends.max(axis=0)
            if len(_SPANS) + todo.size > _SPANS_MAX:
                _SPANS.clear()
            _SPANS.update(zip([keys[j] for j in todo.tolist()], span[todo].tolist()))
        flat[sel] = span[inv]
    return out


def order_reduce_tails(sched: Any, m: Any, t_max: Any, t_sum: Any, pp: Any, vpp: int,
                       w_share: Any, f_share: Any, rs: tuple, edge: tuple,
                       slow_rank: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seconds by which each kind of rank's (first, middle, last) data-parallel stream ends
    after the order's makespan (``order_span``, the same replay), where every step that
    completes a chunk's gradients for one micro-batch (its ``W`` where the schedule splits
    the backward, else its ``B``) releases that chunk's ZeRO-2 reduce-scatter, ``rs[k]``
    seconds on rank kind ``k``'s one stream (rank 0 the first, ``pp - 1`` the last, the
    largest over the ranks between for the middle; ``-inf`` where ``pp < 3``). Each
    reduce-scatter runs under the step that releases it and what follows, at least its last
    bucket ``edge[k]`` after that step (``terms.dp_exposure.sharded_exposed`` per step): the stream
    ends at ``q <- max(max(q, start) + rs, end + edge)`` over the rank's releasing steps in
    its order. A V's ranks end their drains with gradient steps back to back (ZB-V's
    deferred ``W``), whose reduce-scatters queue after the rank's compute
    (docs/calibration.md §5.127). ``rs``/``edge``: arrays over plans per kind; seconds."""
    shape = np.broadcast(*(np.asarray(x) for x in (m, t_max, t_sum, pp, w_share, f_share,
                                                   *rs, *edge))).shape
    rs = [np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1) for x in rs]
    edge = [np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1) for x in edge]
    out = [np.full(shape, -np.inf) for _ in range(3)]
    flats = [o.reshape(-1) for o in out]
    kind = "W" if sched.splits_backward else "B"
    for sel, p, order, ends, dur in _replays(sched, m, t_max, t_sum, pp, vpp, w_share,
                                             f_share, slow_rank):
        span = ends.max(axis=0)
        start = ends - dur
        # each rank's releasing events in its order (a rank's events rise level by level,
        # and ``order`` is sorted by level): one row per rank, as many on each
        # (each event once per releasing member, a stable sort by rank keeping its order)
        per_sig = np.array([sum(k == kind for k, _c in members) for _r, members in order.sigs],
                           dtype=np.int64)
        events = np.repeat(np.arange(len(order.sig)), per_sig[order.sig])
        idx = events[np.argsort(order.rank[events], kind="stable")].reshape(p, -1)
        of = np.array([0] + [1] * max(p - 2, 0) + [2])[:p]
        r_rs = np.stack([rs[k][sel] for k in of.tolist()])
        r_edge = np.stack([edge[k][sel] for k in of.tolist()])
        q = np.full((p, sel.size), -np.inf)
        for j in range(idx.shape[1]):
            e = idx[:, j]
            q = np.maximum(np.maximum(q, start[e]) + r_rs, ends[e] + r_edge)
        tail = q - span
        flats[0][sel] = tail[0]
        if p > 1:
            flats[2][sel] = tail[p - 1]
        if p > 2:
            flats[1][sel] = tail[1:p - 1].max(axis=0)
    return out[0], out[1], out[2]


def reduce_queue_tails_by_code(codes: Any, need: Any, m: Any, t_max: Any, t_sum: Any,
                               w_share: Any, f_share: Any, pp: Any, rs: tuple,
                               edge: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``reduce_queue_tails`` of each plan's schedule (by its code) where ``need`` and the
    schedule has one (the V schedules, ``vshape.VShape``), else ``-inf``: each kind of rank's
    (first, middle, last) reduce-scatter queue's end after the span. Arrays over plans;
    seconds."""
    from strategies.schedules.registry import present_codes, schedule_of_code
    args = np.broadcast_arrays(*(np.asarray(x) for x in (codes, need, m, t_max, t_sum, w_share,
                                                         f_share, pp, *rs, *edge)))
    c, need = args[0].astype(np.int64), args[1].astype(bool)
    out = [np.full(c.shape, -np.inf) for _ in range(3)]
    for code in present_codes(c[need]).tolist():
        sched = schedule_of_code(code)
        if not hasattr(sched, "reduce_queue_tails"):
            continue
        sel = need & (c == code)
        x = [a[sel].astype(float) for a in args[2:]]
        got = sched.reduce_queue_tails(*x[:6], tuple(x[6:9]), tuple(x[9:12]))
        for o, g in zip(out, got):
            o[sel] = g
    return tuple(out)
