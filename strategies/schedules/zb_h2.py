"""ZB-H2, the second hand-crafted zero-bubble schedule of Qi et al., "Zero Bubble (Almost)
Pipeline Parallelism" (ICLR 2024), section 2.2: more forwards in the warm-up fill the bubble
before the first ``B``, and the weight gradients move to the tail, turning the trapezoid of
1F1B into a parallelogram.

Order of rank ``r`` (docs/schedules.md, "ZB-H2"): ``min(m, 2(p-r)-1)`` forwards; pairs
``B F`` (``W`` deferred) until ``min(m, 2p-1)`` forwards have run; triples ``B W F`` until all
``m`` have; pairs ``B W`` until all ``B`` have; the deferred ``W`` last, oldest first. The
stash reaches ``min(m, 2(p-r)-1)`` forwards, ``(2p-1)·M_B`` on the first stage. With
post-validation of the optimizer step (the paper's section 4: no all-reduce before the step,
so one iteration's tail overlaps the next one's head) a rank's span is what an iteration
costs, and its bubble with free communication is ``(p-1)(T_F + T_B - 2T_W)`` (zero when the
three are equal).

Plannable as ZB-H1 is (the cost model's ``B`` and ``W``, docs/schedules.md, "Split
backward"). The simulator runs one iteration: each rank steps its optimizer when its own
gradients are reduced, with no synchronisation across stages before it (post-validation), and
the step time is that iteration's makespan, the per-rank bubble plus the start skew
(``pipeline_span``). The default search leaves it out; ``--fix schedule=zb-h2`` searches it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common
from strategies.schedules.validity import raise_first
from strategies.schedules.chain import chain_span
from strategies.schedules.step import make_step


@register("zb-h2")
class ZBH2(Schedule):
    """ZB-H2 (module docstring)."""

    text_patterns = (r"\bzb-?h2\b",)
    splits_backward = True
    in_default_search = False

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """ZB-H2 order of pipeline rank ``stage``; ``group_size`` is ignored.

        >>> " ".join(map(str, get_schedule("zb-h2").steps(1, 2, 3)))
        'F0.c0 B0.c0 F1.c0 B1.c0 F2.c0 B2.c0 W0.c0 W1.c0 W2.c0'
        """
        check_common(stage, pp, m)
        raise_first(Schedule.shape_rules(self, pp, vpp, None))     # one chunk per rank
        nf = nb = nw = 0
        out: list[Step] = []
        for _ in range(min(m, 2 * (pp - stage) - 1)):
            out.append(make_step("F", nf, 0, False))
            nf += 1
        while nf < min(m, 2 * pp - 1):                     # fill: W deferred
            out += [make_step("B", nb, 0, False), make_step("F", nf, 0, False)]
            nb, nf = nb + 1, nf + 1
        while nf < m:                                      # steady
            out += [make_step("B", nb, 0, False), make_step("W", nw, 0, False),
                    make_step("F", nf, 0, False)]
            nb, nw, nf = nb + 1, nw + 1, nf + 1
        while nb < m:                                      # drain
            out += [make_step("B", nb, 0, False), make_step("W", nw, 0, False)]
            nb, nw = nb + 1, nw + 1
        out += [make_step("W", i, 0, False) for i in range(nw, m)]        # tail
        return out

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """``min(2(pp - stage) - 1, m)`` forwards before the first ``B``, less the one the
        first ``B F`` pair would start with: ``min(2(pp - stage) - 2, m)``, or ``m`` when all
        forwards come first."""
        check_common(stage, pp, m)
        n = min(2 * (pp - stage) - 1, m)
        return n if n == m else n - 1

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """``min(2(pp - stage) - 1, m)`` forwards whose ``B`` has not run (the paper's
        ``(2p-1)·M_B`` on the first stage)."""
        return min(2 * (pp - stage) - 1, m)

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        return np.minimum(2 * (pp - stage) - 1, m)

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """A rank's bubble ``(pp-1)·max(0, T_F + T_B - 2T_W)`` (``B`` the input gradient)
        over its work ``m·(T_F + T_B + T_W)``: ``(pp-1)·max(0, 1 - 3·w_share)/m`` with
        ``w_share = T_W/(T_F + T_B + T_W)``. The per-rank span, what an iteration costs under
        post-validation; the makespan of one iteration alone adds the start skew, for
        ``(pp-1)·max(T_F, T_F + T_B - 2T_W)`` over the ideal. Both exact with free
        communication when ``m >= 2pp - 1`` and ``T_W <= T_F`` (``tests/test_zb_h2.py``)."""
        return (pp - 1) * np.maximum(0.0, 1 - 3 * np.asarray(w_share, dtype=float)) / m

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """One iteration's makespan: ``m·t_max + (t_sum - t_max)·max(f_share, 1 - 3·w_share)``,
        the ``(pp-1)·max(T_F, T_F + T_B - 2T_W)`` over the ideal of ``bubble_fraction``'s
        docstring for balanced stages (``f_share = T_F/(T_F + T_B + T_W)``), or
        ``chain.chain_span`` where larger (``m < 2pp - 1``: the fill's forwards run out)."""
        w = np.asarray(w_share, dtype=float)
        steady = m * t_max + (t_sum - t_max) * np.maximum(f_share, 1 - 3 * w)
        return np.maximum(steady, chain_span(m, t_max, t_sum, w))

    def end_skew(self, f_share: Any, w_share: Any) -> Any:
        """Rank ``r`` ends its compute at ``r·T_F + m·(T_F + T_B + T_W) + (pp-1-r)·max(0,
        T_F + T_B - 2T_W)`` with free communication (balanced, ``m >= 2pp - 1``,
        ``tests/test_zb_h2.py``): each rank ``min(T_F, 2T_W - T_B)`` after the one before,
        ``f_share - max(0, 1 - 3·w_share)`` of a rank's seconds (the last rank ends last
        where ``T_B < 2T_W``, rank 0 where above)."""
        return np.asarray(f_share, dtype=float) - np.maximum(
            0.0, 1 - 3 * np.asarray(w_share, dtype=float))

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        return [], ["Megatron-LM has no ZB-H2 schedule (Sea AI Lab's fork searches a ZB-2p "
                    "schedule with --enable-zero-bubble --zero-bubble-max-pending-backward "
                    "2p and --enable-optimizer-post-validation); it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not ZB-H2"
