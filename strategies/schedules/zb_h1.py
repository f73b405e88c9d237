"""ZB-H1, the hand-crafted zero-bubble schedule of Qi et al., "Zero Bubble (Almost) Pipeline
Parallelism" (ICLR 2024), section 2.1: 1F1B with the backward split into ``B`` (input
gradient) and ``W`` (weight gradient), each ``W`` delayed to fill the cool-down bubble.

Order of rank ``r`` (docs/schedules.md): for ``x = 0 … m+p-2``, ``F(x)`` if ``x < m``, then
``B(x-(p-1-r))`` and ``W(x-(p-1))`` where those are micro-batches (``W`` lags its ``B`` by
``r``). Equivalently ``p-1-r`` forwards, ``r`` pairs ``F B``, ``m-p+1`` triples ``F B W``,
``p-1-r`` pairs ``B W``, then ``r`` weight gradients. Every rank keeps 1F1B's stash
(``p - r`` forwards whose ``B`` has not run); the bubble with free communication is
``(p-1)(T_F + T_B - T_W)`` with ``T_B`` the input gradient alone, a third of 1F1B's when
``T_F = T_B = T_W``.

Plannable: the cost model splits each backward into ``B`` and ``W`` (``layer_wgrad`` of the
stage-cost record), the compiler runs ``W`` as compute ops and reduces a chunk's gradients
after its last ``W``; the estimate's span is ``pipeline_span`` with ``W``'s share, and the
lower bound lets the ``trailing_w_steps`` overlap the last micro-batch's way back. The default
search leaves it out; ``--fix schedule=zb-h1`` searches it (docs/schedules.md).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common
from strategies.schedules.validity import raise_first
from strategies.schedules.chain import chain_span
from strategies.schedules.one_f_one_b import OneFOneBWindow
from strategies.schedules.step import make_step


@register("zb-h1")
class ZBH1(OneFOneBWindow, Schedule):
    """ZB-H1 (module docstring); warm-up and stash as 1F1B (``OneFOneBWindow``)."""

    text_patterns = (r"\bzb-?h1\b",)
    splits_backward = True
    in_default_search = False

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """ZB-H1 order of pipeline rank ``stage``; ``group_size`` is ignored.

        >>> " ".join(map(str, get_schedule("zb-h1").steps(1, 2, 3)))
        'F0.c0 B0.c0 F1.c0 B1.c0 W0.c0 F2.c0 B2.c0 W1.c0 W2.c0'
        """
        check_common(stage, pp, m)
        raise_first(super().shape_rules(pp, vpp, None))     # one chunk per rank
        out: list[Step] = []
        for x in range(m + pp - 1):
            if x < m:
                out.append(make_step("F", x, 0, False))
            b = x - (pp - 1 - stage)
            if 0 <= b < m:
                out.append(make_step("B", b, 0, False))
            w = x - (pp - 1)
            if 0 <= w < m:
                out.append(make_step("W", w, 0, False))
        return out

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """``(pp-1)(1 - 2·w_share)/m``: the bubble ``(pp-1)(T_F + T_B - T_W)`` over the ideal
        ``m·(T_F + T_B + T_W)``, ``w_share = T_W/(T_F + T_B + T_W)``. Exact with free
        communication when ``m >= pp`` and ``T_W <= T_F``, ``T_W <= T_B``
        (``tests/test_zb_h1.py``)."""
        return (pp - 1) * (1 - 2 * w_share) / m

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """``m·t_max + (t_sum - t_max)(1 - 2·w_share)``: 1F1B's span with each stage's
        share of the fill and drain shortened by ``W`` twice (``bubble_fraction``; equal to
        it for balanced stages, ``t_sum = pp·t_max``), or ``chain.chain_span`` where larger
        (``m < pp``: too few micro-batches to fill the pipeline)."""
        steady = m * t_max + (t_sum - t_max) * (1 - 2 * np.asarray(w_share, dtype=float))
        return np.maximum(steady, chain_span(m, t_max, t_sum, w_share))

    def trailing_w_steps(self, stage: Any, pp: Any, m: Any) -> Any:
        """``min(stage + 1, m)``: ``W`` lags its ``B`` by ``stage`` micro-batches, and the
        ``W`` of the last ``B``'s own iteration follows it."""
        return np.minimum(np.asarray(stage, dtype=float) + 1, m)

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Pipeline messages on the critical path: 1F1B's balanced count
        (``OneFOneB.exposed_messages``: ``2m + 2p − 5``, ``m + 1`` with two ranks, ``2p − 2``
        with one micro-batch). ZB-H1 exchanges around each step (``Schedule.actions``) but keeps
        1F1B's warm-up; the simulation of a pipeline alone exposes ``m + 2p − 3`` with the last
        rank slowest, ``2m + p + j − 3`` with middle rank ``j`` slowest (``m >= p``), whose
        largest, ``j = p − 2``, is this count, and at most it with the first rank slowest or
        even stages, while a message is short against a stage's micro-batch
        (``experiments/p2p_exchange_count.py``, docs/calibration.md §5.22)."""
        return get_schedule("1f1b").exposed_messages(m, pp, vpp)

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        return [], ["Megatron-LM has no ZB-H1 schedule (Sea AI Lab's fork adds "
                    "--enable-zero-bubble); it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not ZB-H1"
