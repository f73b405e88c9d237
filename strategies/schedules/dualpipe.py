"""DualPipe (DeepSeek-V3 technical report §3.2.1; deepseek-ai/DualPipe ``DualPipe``): two
pipelines over the same ``p`` ranks in opposite directions, each rank holding the stage of
both (twice the parameters), micro-batches fed from both ends, and the forward of one
micro-batch overlapped with the backward of another so that each one's all-to-all and
point-to-point communication hides under the other's compute.

Placement: micro-batch ``i`` of a step goes in direction ``i mod 2`` (the repository feeds
``m/2`` from each end; numbering them alternately keeps the placement a function of the
micro-batch alone); direction 0 runs ranks ``0 … p-1`` on chunk 0 (the forward-direction
copy), direction 1 ranks ``p-1 … 0`` on chunk 1 (the reverse copy). The order is DualPipe's
eight steps (``strategies.schedules.dual``) with ``n = p/2``, ``h = min(r, p-1-r)`` and
``m/2`` micro-batches per phase; phase 0 is the direction fed from the rank's own end.

Needs ``vpp = 1`` (each copy holds the whole stage), ``p`` even and ``m`` even with
``m >= 2p`` (DeepSeek's assertions). The stash is not the same on every rank: ``p + 1``
micro-batches on the two middle ranks, ``p`` on the others.

Plannable (estimate, simulate, compare; ``search --fix schedule=dualpipe``, the default search
leaves it out): ``mirrored`` (rank ``r`` holds stages ``r`` and ``p-1-r``: twice the
parameters, their gradients and optimizer states; the embedding and the LM head on both end
ranks), the overlapped pairs as DualPipeV's (docs/schedules.md, "Overlapped pairs"), the
span ``span_excess`` with ``n = p/2`` (the closed form; the estimate replays the order over
each rank's own copies with its pipeline messages, ``estimate.chunk_correction.per_chunk``
and ``order_messages``, docs/calibration.md §5.225). ``layers_per_stage`` is refused.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common, steps_of_columns
from strategies.schedules.validity import Rule, raise_first
from strategies.schedules.dual import dual_columns, span_excess, worst_rank_bubble


@register("dualpipe")
class DualPipe(Schedule):
    """DualPipe (module docstring)."""

    reduces_under_forwards = False

    splits_backward = True
    overlaps_pairs = True
    mirrored = True
    in_default_search = False
    text_patterns = (r"\bdualpipe\b",)   # not "DualPipeV" (no word boundary there)

    # ------------------------------------------------------------------ placement
    def num_virtual_stages(self, pp: int, vpp: int) -> int:
        """``pp`` positions on either direction's path."""
        return pp

    def virtual_stage(self, rank: int, chunk: int, pp: int, vpp: int,
                      microbatch: int = 0) -> int:
        """Position of ``rank``'s ``chunk`` on its direction's path: ``rank`` for chunk 0
        (direction 0, even micro-batches), ``pp-1-rank`` for chunk 1 (direction 1, odd)."""
        return rank if chunk == 0 else pp - 1 - rank

    def rank_chunk(self, position: int, pp: int, vpp: int,
                   microbatch: int = 0) -> tuple[int, int]:
        return (position, 0) if microbatch % 2 == 0 else (pp - 1 - position, 1)

    # ------------------------------------------------------------------ validity
    def shape_rules(self, pp: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """``vpp = 1``, no micro-batch group, ``pp`` even."""
        return super().shape_rules(pp, vpp, group_size) + [
            ("pp", pp, (pp >= 2) & (pp % 2 == 0),
             lambda: "schedule=dualpipe needs an even pp >= 2 (two pipelines meet in the "
                     "middle)")]

    def batch_rules(self, pp: Any, m: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """``m`` even and ``>= 2·pp`` (half from each end)."""
        return [("num_microbatches", m, (m % 2 == 0) & (m >= 2 * pp),
                 lambda: f"schedule=dualpipe needs an even number of micro-batches >= "
                         f"2*pp={2 * pp} (gbs/(mbs*dp); half enter from each end)")]

    # ------------------------------------------------------------------ order
    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """DualPipe order of pipeline rank ``stage`` (``&``: overlapped with the next step).

        >>> " ".join(map(str, get_schedule("dualpipe").steps(0, 2, 4)))
        'F0.c0 F1.c1 F2.c0 B1.c1 W1.c1 F3.c1& B0.c0& W0.c0 B3.c1 W3.c1 B2.c0 W2.c0'
        """
        return steps_of_columns(*self.order_columns(stage, pp, m, vpp, group_size))

    def order_columns(self, stage: int, pp: int, m: int, vpp: int = 1,
                      group_size: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The order of ``steps`` as ``step_columns``: ``dual.dual_columns`` with ``n = pp/2``
        and ``h`` the rank's distance from its end; phase ``ph``'s ``k``-th pass runs
        direction ``d = ph xor (stage >= pp/2)``: micro-batch ``2k + d`` on chunk ``d``."""
        check_common(stage, pp, m)
        raise_first(r for r in self.rules(pp, m, vpp, group_size) if r[0] != "schedule")
        h = min(stage, pp - 1 - stage)
        kind, ph, k, overlap = dual_columns(pp // 2, h, m // 2, h == pp // 2 - 1)
        d = ph ^ int(stage >= pp // 2)
        return kind, 2 * k + d, d, overlap

    def reduce_window_steps(self, pp: Any, vpp: Any) -> Any:
        """After the first of a rank's two copies completes its gradients (its last ``W``)
        the end ranks still run ``pp/2`` input gradients ``B`` and ``pp/2`` weight gradients
        ``W``, each at most a whole backward: ``pp`` steps (the most of any rank; counted on
        ``steps`` for pp 2-16 and m from 2·pp to 4·pp, ``tests/test_dualpipe_bound.py``).
        The lower bound lets the gradient reduction hide under them (was 1: the bound then
        exceeded the simulated step of even plans with ``dp > 1`` and ZeRO-0)."""
        return np.asarray(pp, dtype=float) + 0 * np.asarray(vpp, dtype=float)

    # ------------------------------------------------------------------ memory and time
    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """Stashed micro-batches (both directions) at the peak: ``pp + 1`` on the two middle
        ranks, ``pp`` on the others (``m >= 2pp``; ``base.peak_stash`` counts an overlapped
        pair at its end); DeepSeek's ``PP + 1`` is the middle ranks'."""
        return pp + (min(stage, pp - 1 - stage) == pp // 2 - 1)

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        st, p = np.asarray(stage), np.asarray(pp)
        return p + (np.minimum(st, p - 1 - st) == p // 2 - 1)

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """The worst rank's bubble over its work (``dual.worst_rank_bubble`` with
        ``n = pp // 2``): exact with free communication when ``m >= 2pp``, ``T_F = T_B``,
        ``T_W <= T_F`` and ``F&B = F + B``; DeepSeek's ``(PP/2-1)(F&B + B - 3W)`` equals it
        at ``F = B = W`` and bounds it above there, with or without compute overlap
        (docs/schedules.md)."""
        return worst_rank_bubble(pp // 2, m, w_share)

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """One iteration's makespan (seconds): the larger of the slowest rank's work
        ``m·t_max`` and ``m·t_fill + span_excess(pp/2, f, w)`` with ``t_fill = (t_sum -
        t_max)/(pp - 1)`` (a rank's seconds per micro-batch, one stage), ``f`` the mean of a
        stage's forward and input gradient, ``(1 - w_share)·t_fill/2``, and
        ``w = w_share·t_fill`` (``f_share`` unused). Exact with free communication for
        balanced ranks when ``T_F = T_B``, ``T_W <= T_F`` and ``m >= 2pp``
        (``tests/test_dualpipe_plan.py``); elsewhere an approximation, as DualPipeV's."""
        p = np.asarray(pp, dtype=float)
        fill = (np.asarray(t_sum, dtype=float) - t_max) / np.maximum(p - 1, 1)
        fill = np.where(p > 1, fill, t_max)
        w = np.asarray(w_share, dtype=float)
        return np.maximum(m * t_max, m * fill + span_excess(p // 2, (1 - w) * fill / 2, w * fill))

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        return [], ["Megatron-LM has no DualPipe schedule (deepseek-ai/DualPipe; "
                    "torchtitan ships only DualPipeV); it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not DualPipe"
