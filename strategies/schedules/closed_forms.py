"""A schedule's closed forms of time (the ``ClosedForms`` mixin of ``Schedule``): the pieces
the fill and drain are cut into, the bubble fraction, the pipeline's span with free
communication, the point-to-point exchange rounds and messages on the critical path (the
analytic estimate), the gradient reduction's window and the ranks' end skew (the lower
bound), the steady-state period. Array methods take numpy arrays (or scalars) and are pure.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class ClosedForms:
    """``Schedule``'s closed forms (module docstring); a schedule overrides those its order
    changes."""

    def fill_chunks(self, vpp: Any) -> Any:
        """Pieces a stage's per-micro-batch work is cut into on the pipeline fill and drain
        (the bubble shrinks by this factor): 1."""
        return np.ones_like(np.asarray(vpp, dtype=float))

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """Closed-form idle over ideal time, balanced stages, free communication:
        ``(pp-1)/(fill_chunks·m)``. ``w_share``: the weight gradient's share of a stage's
        time per micro-batch, which only a schedule that splits the backward can use."""
        return (pp - 1) / (self.fill_chunks(vpp) * m)

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """Seconds of the pipeline with free communication, from the slowest stage's and the
        sum of all stages' seconds per micro-batch: ``m·t_max + (t_sum - t_max)/fill``.
        ``w_share``/``f_share``: the weight gradient's and the forward's share of a stage's
        seconds per micro-batch, which only a schedule that splits the backward uses
        (``bubble_fraction``); ``pp``: the pipeline ranks (None: not needed)."""
        return m * t_max + (t_sum - t_max) / self.fill_chunks(vpp)

    def exchange_rounds(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Point-to-point exchange rounds on the critical path: ``m·fill + pp - 1``."""
        return m * self.fill_chunks(vpp) + pp - 1

    def overlapped_p2p_time(self, m: Any, pp: Any, vpp: Any, t: Any, hiding: Any,
                            group: Any = None) -> Any:
        """Seconds of pipeline messages exposed under ``overlap_p2p_comm`` (``t`` one
        message, ``hiding`` the pass that runs before a steady call is waited for, ``group``
        the micro-batch group, None: ``pp``): a schedule without overlapped calls
        (``overlaps_p2p`` False) blocks on each, ``t·exposed_messages``."""
        return np.asarray(t, dtype=float) * self.exposed_messages(m, pp, vpp)

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Point-to-point messages on the critical path (each costs one message's time):
        two blocking exchanges per round, ``2·exchange_rounds``."""
        return 2 * self.exchange_rounds(m, pp, vpp)

    def bottleneck_messages(self, m: Any, pp: Any, vpp: Any, rank: Any) -> Any:
        """Point-to-point messages on the critical path when rank kind ``rank`` (0 the first,
        1 a middle, 2 the last rank) is the slowest: ``exposed_messages`` for every kind
        unless ``messages_by_rank``."""
        return self.exposed_messages(m, pp, vpp) + 0 * np.asarray(rank, dtype=float)

    def reduce_window_steps(self, pp: Any, vpp: Any) -> Any:
        """Backward steps at most left on a rank once its first chunk's gradients are
        complete (the window the gradient reduction can hide in): 1."""
        return np.ones_like(np.asarray(pp, dtype=float))

    def end_skew(self, f_share: Any, w_share: Any) -> Any:
        """Seconds by which each rank ends its compute after the rank before it, over a
        rank's seconds per micro-batch, where the order ends the ranks in a parallelogram
        (``terms.ranks.rank_slack``); NaN: the ranks end as 1F1B's trapezoid does, rank 0 last."""
        return np.full(np.shape(np.asarray(f_share, dtype=float)), np.nan)

    def period(self, pp: int, group_size: int | None = None) -> int:
        """Micro-batches per steady-state period."""
        return pp
