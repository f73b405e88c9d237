"""A schedule's span from its own order: the free-communication makespan of the per-rank
order (``analysis.free_comm_order``, replayed for many plans at once by
``analysis.free_comm_makespans``) with one rank at the slowest rank's seconds and every other
at the mean of the rest, for schedules whose span has no closed form once the ranks differ
(DualPipeV with its head rank slower than the others, docs/calibration.md §5.111)."""
from __future__ import annotations

from typing import Any

import numpy as np


def order_span(sched: Any, m: Any, t_max: Any, t_sum: Any, pp: Any, vpp: int,
               w_share: Any, f_share: Any, slow_rank: int = 0) -> np.ndarray:
    """Seconds of one iteration of ``sched``'s order over ``pp`` ranks and ``m``
    micro-batches with free communication (arrays over plans): rank ``slow_rank`` runs
    ``t_max`` a micro-batch, every other rank ``(t_sum - t_max)/(pp - 1)``, each rank's
    seconds split evenly over its ``vpp`` chunks and, in each chunk, into a forward
    ``f_share``, a weight gradient ``w_share`` (where the schedule splits the backward) and
    the input gradient the rest. An overlapped pair lasts its members' sum (no compute
    overlap). Plans are replayed together by distinct ``(pp, m)``."""
    from strategies.schedules.analysis import free_comm_makespans, free_comm_order
    m, t_max, t_sum, pp, w, f = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (m, t_max, t_sum, pp, w_share, f_share)))
    out = np.zeros(m.shape)
    fill = (t_sum - t_max) / np.maximum(pp - 1, 1)
    split = bool(sched.splits_backward)
    keys = np.stack([pp.ravel(), m.ravel()], axis=1).astype(np.int64)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    flat = out.reshape(-1)
    for i, (p, mb) in enumerate(uniq.tolist()):
        sel = np.flatnonzero(inv.reshape(-1) == i)
        per = {r: (t_max if r == slow_rank else fill).reshape(-1)[sel] / vpp for r in (0, 1)}
        fs, ws = f.reshape(-1)[sel], w.reshape(-1)[sel]

        def seconds(r: int, members: tuple, per=per, fs=fs, ws=ws) -> np.ndarray:
            t = per[0 if r == slow_rank else 1]
            total = 0.0
            for kind, _chunk in members:
                share = fs if kind == "F" else (ws if kind == "W" else
                                                1 - fs - (ws if split else 0.0))
                total = total + share * t
            return total
        order = free_comm_order(sched, int(p), int(mb), vpp)
        flat[sel] = free_comm_makespans(order, seconds, sel.size)
    return out
