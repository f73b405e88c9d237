"""Figures a schedule reads off its order (the ``OrderFigures`` mixin of ``Schedule``): warm-up
forwards, the peak stashed ``(micro-batch, chunk)`` entries and waiting weight gradients, the
``(stashed, pending W)`` frontier and the per-chunk stash moments (``strategies.schedules.stash``
counts them on an order), the trailing weight gradients and the overlapped share, each
scalar and over the search's arrays, once per distinct row and memoised (``order_figure``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.per_distinct import frontier_per_distinct, order_figure, per_distinct
from strategies.schedules.stash import (column_stash_frontier, column_stash_moments,
                                        column_trailing_w, peak_pending_w, peak_stash)
from strategies.schedules.step import step_columns


class OrderFigures:
    """``Schedule``'s figures counted on its order ``steps`` (module docstring); a schedule
    with a closed form overrides them."""

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """Warm-up forwards on ``stage`` (Megatron's ``num_warmup_microbatches``), from the
        order: the forwards before the first backward, less the forward that the first
        steady-state pair starts with (none when every forward comes first)."""
        steps = self.steps(stage, pp, m, vpp, group_size)
        n = next((k for k, s in enumerate(steps) if s.kind != "F"), len(steps))
        return n if n == sum(s.kind == "F" for s in steps) else n - 1

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """Peak stashed ``(microbatch, chunk)`` entries on ``stage`` (from the order)."""
        return peak_stash(self.steps(stage, pp, m, vpp, group_size))

    def pending_weight_grads(self, stage: int, pp: int, m: int, vpp: int = 1,
                             group_size: int | None = None) -> int:
        """Peak waiting weight gradients on ``stage`` (``peak_pending_w`` of the order; 0
        for a schedule that does not split the backward)."""
        return peak_pending_w(self.steps(stage, pp, m, vpp, group_size))

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``in_flight`` over arrays (default group size); default: ``in_flight`` once per
        distinct ``(stage, pp, m, vpp)``."""
        return per_distinct(order_figure(self, "in_flight"), stage, pp, m, vpp)

    def pending_weight_grads_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``pending_weight_grads`` over arrays (default group size): zeros unless the
        backward is split, else once per distinct ``(stage, pp, m, vpp)``."""
        if not self.splits_backward:
            return np.zeros(np.broadcast(*(np.asarray(x) for x in (stage, pp, m, vpp))).shape)
        return per_distinct(order_figure(self, "pending_weight_grads"), stage, pp, m, vpp)

    def stash_frontier(self, stage: int, pp: int, m: int, vpp: int = 1,
                       group_size: int | None = None) -> tuple[tuple[int, int], ...]:
        """The ``(stashed, pending W)`` pairs ``stage``'s activations can peak at
        (``stash.stash_frontier`` of the order, most stashed first; ``peak_pair`` picks the
        peak for given bytes): ``((in_flight, 0),)`` unless the backward is split."""
        if not self.splits_backward:
            return ((self.in_flight(stage, pp, m, vpp, group_size), 0),)
        return column_stash_frontier(self.order_columns(stage, pp, m, vpp, group_size))

    def chunk_stash_moments(self, stage: int, pp: int, m: int, vpp: int = 1,
                            group_size: int | None = None
                            ) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
        """``stash.chunk_stash_moments`` of ``stage``'s order, per chunk id (``vpp`` ids; a
        mirrored schedule's two copies are chunks 0 and 1)."""
        return column_stash_moments(self.order_columns(stage, pp, m, vpp, group_size),
                                    self.order_chunks(pp, vpp))

    def order_columns(self, stage: int, pp: int, m: int, vpp: int = 1,
                      group_size: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``stage``'s order as ``step.step_columns`` (default: of ``steps``; a schedule
        that builds its order as arrays overrides it and wraps ``steps`` around it)."""
        return step_columns(self.steps(stage, pp, m, vpp, group_size))

    def stash_frontier_array(self, stage: Any, pp: Any, m: Any, vpp: Any
                             ) -> tuple[np.ndarray, np.ndarray]:
        """``stash_frontier`` over arrays (default group size): ``(stashed, pending)``, each
        of shape ``(K,) + broadcast shape``, a row's frontier padded with its first pair to
        the longest ``K``; once per distinct ``(stage, pp, m, vpp)``."""
        if not self.splits_backward:
            n = np.asarray(self.in_flight_array(stage, pp, m, vpp), dtype=float)
            return n[None], np.zeros_like(n)[None]
        return frontier_per_distinct(order_figure(self, "stash_frontier"), stage, pp, m, vpp)

    def trailing_w_steps(self, stage: Any, pp: Any, m: Any) -> Any:
        """Weight-gradient steps ``W`` a rank (one chunk) runs after its last ``B`` (the
        lower bound lets them overlap that micro-batch's way back): 0 unless the backward
        is split, else counted on the order (``trailing_w``), once per distinct
        ``(stage, pp, m)`` and memoised across calls (``order_figure``)."""
        s, p, mm = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (stage, pp, m)))
        if not self.splits_backward or not s.size:
            return np.zeros(s.shape)
        return per_distinct(order_figure(self, "trailing_w_count"), s, p, mm, 1)

    def trailing_w_count(self, stage: int, pp: int, m: int, vpp: int = 1) -> int:
        """``trailing_w`` of the schedule's own order at ``(stage, pp, m)`` (its default
        chunks; ``vpp`` is the memo's key and not read)."""
        return column_trailing_w(self.order_columns(stage, pp, m))

    def overlapped_share(self, stage: int, pp: int, m: int, vpp: int = 1) -> float:
        """Share of ``stage``'s forwards that run in an overlapped group (``Step.overlap``):
        0 unless ``overlaps_pairs``, else counted on the order."""
        if not self.overlaps_pairs or not bool(self.valid(pp, m, vpp)):
            return 0.0
        fwd = [s for s in self.steps(stage, pp, m, vpp) if s.kind == "F"]
        return sum(s.overlap for s in fwd) / max(len(fwd), 1)

    def overlapped_share_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``overlapped_share`` over arrays, once per distinct ``(stage, pp, m, vpp)``."""
        if not self.overlaps_pairs:
            return np.zeros(np.broadcast(*(np.asarray(x) for x in (stage, pp, m, vpp))).shape)
        return per_distinct(order_figure(self, "overlapped_share"), stage, pp, m, vpp)
