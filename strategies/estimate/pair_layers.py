"""DualPipe's overlapped groups and each rank's own exposed expert all-to-all on a schedule's
order, for the scalar estimate's per-chunk correction (``chunk_correction.a2a_shift``,
docs/calibration.md §5.231): ``dual_pairs`` times one ``F& B& W`` group layer by layer as the
simulator's builder runs it, ``order_a2a`` sums a rank's exposed all-to-all over its order.
Seconds."""
from __future__ import annotations

from typing import Any, Callable


def order_a2a(sched: Any, rank: int, pp: int, m: int, vpp: int, group_size: int | None,
              lone: Any, paired: Any) -> float:
    """Seconds of ``rank``'s own exposed expert all-to-all over one step of ``sched``'s
    order (``Schedule.steps``), as the order's replay prices it: each forward and backward
    run alone ``lone(kind, chunk)``, each overlapped group of several steps (DualPipe's
    ``F&B&W``) ``paired(members)`` (``(kind, chunk)`` of each); a weight-gradient step
    alone none. What the simulator's metrics charge to ``ep_comm`` on that rank (idle
    compute while only its all-to-all moves bytes, ``simulator.metrics``)."""
    total, group = 0.0, []
    for s in sched.steps(rank, pp, m, vpp, group_size):
        group.append(s)
        if s.overlap:
            continue
        if len(group) > 1:
            total += paired(tuple([(x.kind, x.chunk) for x in group]))
        elif s.kind != "W":
            total += lone(s.kind, s.chunk)
        group = []
    return total


def dual_pairs(records: list, times: list, a2a: float, rc: float, other: float
               ) -> Callable[[int, tuple], tuple[float, float]]:
    """``dual(rank, members)``: ``(seconds, exposed all-to-all seconds)`` of one of
    DualPipe's overlapped groups (``F& B& W``: a forward of one chunk, the input-gradient
    backward of another, then the weight gradients) as the simulator's builder runs it
    (``simulator.program.overlapped_pairs.OverlappedPairs.overlapped``): layer by layer in
    turn, the forward's first; each layer's compute, then its all-to-all on the one
    expert-parallel stream (``a2a`` per mean layer scaled by its expert bytes; FIFO) beside
    its TP/CP communication (``other / 2`` a layer, which blocks the compute stream); a
    pass's next layer waits for its own last all-to-all (the partner's layer between them
    hides it), a recomputed MoE layer's (``rc``) runs before its backward, exposed. The
    layers one pass has beyond the other's run alone, each waiting for its own previous
    all-to-all; a pass's last all-to-all is waited for by its output message only, or by
    its LM head's forward. The forward's embedding before its layers and LM head after
    them, the backward's LM-head and embedding input-gradient parts likewise, then the
    group's ``W`` (``times``' chunk ``W``), compute only. Equal chunks of one kind whose
    all-to-all hides: the analytic ``F + B + W`` plus their TP/CP communication.
    ``records``: ``chunk_correction.chunk_records`` of the job (each rank's chunks' stage-cost
    record, layers by kind, embedding and LM head); ``times``: the chunks' ``(F, B, W, ...)``;
    ``a2a``, ``rc``, ``other``: one mean layer's all-to-all, recomputation all-to-all and
    TP/CP seconds (the analytic step's ``ep_a2a_s``, ``ep_rc_s``, ``layer_comm_s``)."""
    keep: dict[tuple, tuple[float, float]] = {}

    def layers(rank: int, ch: int, fwd: bool) -> tuple[float, list, float]:
        """``(lead, [(compute, all-to-all, exposed before), ...] in run order, tail)``."""
        c, items, emb, head = records[rank][ch]
        mean = max(c.ep_bytes, 1e-30)
        one = []
        for n, x in items:
            t = a2a * x.ep_bytes / mean
            if fwd:
                one += [(x.layer_fwd, t, 0.0)] * int(round(n))
            else:
                one += [(x.layer_bwd - x.layer_wgrad + x.layer_recompute, t,
                         rc * x.ep_bytes / mean)] * int(round(n))
        if fwd:
            return (c.embedding_fwd if emb else 0.0), one, (c.head_fwd if head else 0.0)
        return ((c.head_bwd - c.head_wgrad) if head else 0.0), one[::-1], \
            ((c.embedding_bwd - c.embedding_wgrad) if emb else 0.0)

    def dual(rank: int, members: tuple) -> tuple[float, float]:
        hit = keep.get((rank, members))
        if hit is not None:
            return hit
        passes = [(k, ch) for k, ch in members if k != "W"]
        w = sum(times[rank][ch][2] for k, ch in members if k == "W")
        o = other / 2
        runs = []
        for k, ch in passes:
            lead, one, tail = layers(rank, ch, k == "F")
            runs.append([lead, iter(one), tail, None])    # pending own all-to-all end
        clock = tp = ep = idle = 0.0
        live = list(range(len(runs)))
        while live:
            for i in list(live):
                lead, it, tail, pend = runs[i]
                x = next(it, None)
                ready = max(clock, tp)
                if x is None:               # the pass ends: its tail, if any (and the
                    live.remove(i)          # lead of a chunk without layers)
                    if lead + tail > 0:
                        start = max(ready, pend or 0.0)
                        idle += start - ready
                        clock = start + lead + tail
                    continue
                f, t, before = x
                start = max(ready, pend or 0.0)
                idle += start - ready
                clock = start + lead + before + f
                idle += before
                runs[i][0] = 0.0
                if t > 0:
                    ep = max(ep, clock) + t
                    runs[i][3] = ep
                else:
                    runs[i][3] = None
                tp = clock + o
        out = keep[(rank, members)] = (max(clock, tp) + w, idle)
        return out
    return dual
