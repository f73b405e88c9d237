"""DualPipeV, DualPipe "cut in half" (Sea AI Lab; deepseek-ai/DualPipe ``DualPipeV``, torch's
``ScheduleDualPipeV``): the V placement of ZB-V (``strategies.schedules.vshape``: ``2p``
stages, rank ``r`` holding stage ``r`` as chunk 0 and stage ``2p-1-r`` as chunk 1) run in
DualPipe's eight steps (``strategies.schedules.dual`` with ``n = p``, ``h = r``, phase ``c`` =
chunk ``c``), the forward of one micro-batch overlapped with the backward of another in the
steady state.

Needs ``vpp = 2`` and ``m >= 2p`` (DeepSeek's assertion). Stash: ``2p`` chunks, ``2p + 1`` on
the last rank (the DeepSeek table's ``PP+1`` with ``PP = 2p`` stages); bubble, with ``F&B`` the time
of an overlapped pair and ``B`` the whole backward: the table's ``(PP/2-1)(F&B+B-3W)`` in
chunk times, exact at ``F = B_input = W`` with no compute overlap and an upper bound around
it (``bubble_fraction``; ``tests/test_dualpipev.py``).

Plannable (estimate, simulate, compare; ``search --fix schedule=dualpipev``, the default search
leaves it out): the compiler runs each overlapped pair's forward and backward layer by layer
in turn on the compute stream, each one's expert all-to-all beside the partner's next layer
(docs/schedules.md, "Overlapped pairs"); the estimate's span is the order replayed
(``replay.order_span``; ``span_excess`` over the ideal for balanced ranks) and its all-to-all
is exposed only where it outlasts the partner's compute (the scalar estimate replays the
order over each rank's own chunks with its pipeline messages, ``estimate.chunk_correction.
order_messages``, docs/calibration.md §5.225); the LM head
sits on rank 0 (the V), as with ZB-V.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common, steps_of_columns
from strategies.schedules.validity import Rule, raise_first
from strategies.schedules.dual import dual_columns, span_excess, worst_rank_bubble
from strategies.schedules.vshape import VShape


@register("dualpipev")
class DualPipeV(VShape):
    """DualPipeV (module docstring)."""

    aliases = ("dualpipe-v",)
    text_patterns = (r"\bdualpipe-?v\b",)
    splits_backward = True
    overlaps_pairs = True

    def batch_rules(self, pp: Any, m: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """``m >= 2·pp`` micro-batches (DeepSeek's ``num_chunks >= num_ranks * 2``)."""
        return [("num_microbatches", m, m >= 2 * pp,
                 lambda: f"schedule={self.name} needs at least 2*pp={2 * pp} micro-batches "
                         "(gbs/(mbs*dp))")]

    def steps(self, stage: int, pp: int, m: int, vpp: int = 2,
              group_size: int | None = None) -> list[Step]:
        """DualPipeV order of pipeline rank ``stage`` (``&``: overlapped with the next step).

        >>> " ".join(map(str, get_schedule("dualpipev").steps(0, 1, 2, 2)))
        'F0.c0 F0.c1 F1.c0 B0.c1 W0.c1 F1.c1& B0.c0& W0.c0 B1.c1 W1.c1 B1.c0 W1.c0'
        """
        return steps_of_columns(*self.order_columns(stage, pp, m, vpp, group_size))

    def order_columns(self, stage: int, pp: int, m: int, vpp: int = 2,
                      group_size: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The order of ``steps`` as ``step_columns``: ``dual.dual_columns`` with ``n = pp``,
        ``h = stage``, phase ``c``'s ``k``-th pass micro-batch ``k`` of chunk ``c``."""
        check_common(stage, pp, m)
        raise_first(r for r in self.rules(pp, m, vpp) if r[0] != "schedule")
        kind, ph, k, overlap = dual_columns(pp, stage, m, stage == pp - 1)
        return kind, k, ph, overlap

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 2,
                  group_size: int | None = None) -> int:
        """``2pp`` chunks' activations, ``2pp + 1`` on the last rank (``m >= 2pp``): the
        DeepSeek table's ``PP + 1`` with ``PP = 2pp`` stages (``base.peak_stash`` counts an
        overlapped pair at its end)."""
        return 2 * pp + (stage == pp - 1)

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        return 2 * np.asarray(pp) + (np.asarray(stage) == np.asarray(pp) - 1)

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 2, w_share: Any = 0.0) -> Any:
        """The worst rank's bubble over its work (``dual.worst_rank_bubble`` with
        ``n = pp``): exact with free communication when ``m >= 2pp``, ``T_F = T_B``,
        ``T_W <= T_F`` and ``F&B = F + B``; DeepSeek's ``(PP/2-1)(F&B + B - 3W)`` equals it
        at ``F = B = W`` and bounds it above there, with or without compute overlap
        (docs/schedules.md)."""
        return worst_rank_bubble(pp, 2 * m, w_share)

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """One iteration's makespan (seconds): the order itself replayed with free
        communication (``replay.order_span``), rank 0 (the V's head rank) at ``t_max`` a
        micro-batch and every other rank at ``t_fill = (t_sum - t_max)/(pp - 1)``, each chunk's
        weight gradient ``w_share`` of its rank's seconds and its forward and input gradient
        half the rest each, as ``span_excess`` reads them (``f_share`` unused: over the 29
        candidates of §5.111 it puts the estimate 0.81 % from the contention-free simulation
        on the mean, this split 0.69 %). With balanced ranks, ``T_F = T_B`` and
        ``T_W <= T_F`` it equals
        ``m·t_fill + span_excess(pp, f, w)`` (``f`` a chunk's forward or input gradient, ``w``
        its weight gradient); a slower rank 0 idles in the drain too, which that form and
        ``m·t_max`` both miss (docs/calibration.md §5.111; ``tests/test_dualpipev.py``)."""
        from strategies.schedules.replay import order_span
        p = np.asarray(pp, dtype=float)
        m = np.asarray(m, dtype=float)
        fill = (np.asarray(t_sum, dtype=float) - t_max) / np.maximum(p - 1, 1)
        fill = np.where(p > 1, fill, t_max)
        w = np.asarray(w_share, dtype=float)
        closed = np.maximum(m * t_max, m * fill + span_excess(p, (1 - w) * fill / 4,
                                                               w * fill / 2))
        mb, pb, tm, ts, pw, closed = np.broadcast_arrays(m, p, np.asarray(t_max, dtype=float),
                                                         np.asarray(t_sum, dtype=float), w, closed)
        sel = self.replays(mb, pb)
        out = np.array(closed, dtype=float)
        if np.any(sel):
            out[sel] = order_span(self, mb[sel], tm[sel], ts[sel], pb[sel], 2, pw[sel],
                                  self.replay_f_share(pw[sel], None))
        return out[()] if out.ndim == 0 else out

    def replays(self, m: Any, pp: Any) -> np.ndarray:
        """Where the order exists (``batch_rules``): ``pp > 1`` and ``m >= 2pp``."""
        return (np.asarray(pp) > 1) & (np.asarray(m) >= 2 * np.asarray(pp))

    def replay_f_share(self, w_share: Any, f_share: Any) -> Any:
        """Half of what the weight gradient leaves, as ``span_excess`` reads a chunk
        (``f_share`` unused; ``pipeline_span``)."""
        return (1 - np.asarray(w_share, dtype=float)) / 2

    def fixed_search_vpps(self, num_layers: int, max_vpp: int | None = None,
                          fixed_vpp: int | None = None) -> list[int]:
        """``[2]`` under ``--fix schedule=dualpipev`` (two chunks in a V); the default search
        leaves it out (its span is exact only in a narrow region and its order costs a full
        simulation per plan)."""
        return [2] if fixed_vpp in (None, 2) and (max_vpp is None or max_vpp >= 2) else []

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        from strategies.stacks.pytorch import TORCHTITAN_SCHEDULE_NAMES
        titan = dict(TORCHTITAN_SCHEDULE_NAMES)[self.name]
        return [], ["Megatron-LM has no DualPipeV schedule (torchtitan: "
                    f"pipeline_parallel_schedule={titan}); it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not DualPipeV"
