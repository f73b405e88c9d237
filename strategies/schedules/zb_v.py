"""ZB-V, the zero-bubble schedule on a V placement of Qi et al., "Zero Bubble (Almost)
Pipeline Parallelism" (ICLR 2024), section 6: ``2p`` stages, rank ``r`` holding stage ``r``
(chunk 0) and stage ``2p-1-r`` (chunk 1) (``strategies.schedules.vshape``); the backward is
split into ``B`` and ``W``, the steady state runs ``F B W`` per chunk.

Order of rank ``r`` (docs/schedules.md, "ZB-V"; as Sea AI Lab's ``handcrafted_zb_v.py`` and
torch's ``ScheduleZBVZeroBubble`` build it), over ``n = max(2p-1, m)`` micro-batches:
``2(p-r)-1`` × ``F0``; ``r`` × [``F1 F0``]; ``p-r`` × [``F1 B1 W1``]; while chunk 1 trails
chunk 0 or forwards remain: [``F0`` (if any left) ``B0 W0 F1 B1 W1``]; ``r`` × [``B0 B1``]
(their ``W`` deferred); ``p-r`` × [``B0 W0``]; the deferred ``W1``, then the ``W0``. The
steps of micro-batches ``>= m`` are dropped (torch blanks them). Every rank stashes at
most ``2p`` chunks' activations (``p`` micro-batches' worth, 1F1B's first-stage peak, on
every rank).

Plannable (estimate, simulate, compare): the embedding and the LM head both sit on rank 0
(``ends``), which the cost record, memory and estimate read (``head_rank_array``); the
default search leaves it out.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common, steps_of_columns, token_columns
from strategies.schedules.validity import raise_first
from strategies.schedules.chain import chain_span
from strategies.schedules.vshape import VShape


@register("zb-v")
class ZBV(VShape):
    """ZB-V (module docstring)."""

    text_patterns = (r"\bzb-?v\b", r"zero[- ]bubble v")
    aliases = ("zbv",)
    splits_backward = True

    def steps(self, stage: int, pp: int, m: int, vpp: int = 2,
              group_size: int | None = None) -> list[Step]:
        """ZB-V order of pipeline rank ``stage``.

        >>> " ".join(map(str, get_schedule("zb-v").steps(1, 2, 3, 2)))[:59]
        'F0.c0 F0.c1 F1.c0 F1.c1 B0.c1 W0.c1 F2.c0 B0.c0 W0.c0 F2.c1'
        """
        return steps_of_columns(*self.order_columns(stage, pp, m, vpp, group_size))

    def order_columns(self, stage: int, pp: int, m: int, vpp: int = 2,
                      group_size: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The order of ``steps`` as ``step_columns``, from the module docstring's counts:
        the steady loop runs ``n - p`` rounds, the first ``n - (2p - r - 1)`` with an ``F0``
        (chunk 0's forwards left after the warm-up), and each chunk defers ``r`` weight
        gradients to the end."""
        check_common(stage, pp, m)
        raise_first(VShape.shape_rules(self, pp, vpp, None))
        p, r, n = pp, stage, max(2 * pp - 1, m)
        f0, f1, b0, b1, w0, w1 = 0, 1, 2, 3, 4, 5            # kind·2 + chunk
        warm0 = 2 * p - r - 1
        ids = ([f0] * (2 * (p - r) - 1) + [f1, f0] * r + [f1, b1, w1] * (p - r)
               + [f0, b0, w0, f1, b1, w1] * (n - warm0) + [b0, w0, f1, b1, w1] * (warm0 - p)
               + [b0, b1] * r + [b0, w0] * (p - r) + [w1] * r + [w0] * r)
        return token_columns(ids, 2, m)

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 2,
                  group_size: int | None = None) -> int:
        """``2·pp`` chunks' activations (``pp`` micro-batches' worth) on every rank when
        ``m >= 2pp - 1``; from the order below that."""
        if m >= 2 * pp - 1:
            return 2 * pp
        return super().in_flight(stage, pp, m, vpp, group_size)

    def reduce_window_steps(self, pp: Any, vpp: Any) -> Any:
        """After the first of a rank's two chunks completes its gradients (its last ``W``),
        ``pp`` more backward steps ``B`` (each with its ``W``) run on the rank: counted on
        ``steps`` for pp 2-8 and m from pp to 4·pp (``tests/test_zb_v.py``). The lower bound
        lets the gradient reduction hide under them."""
        return np.asarray(pp, dtype=float) + 0 * np.asarray(vpp, dtype=float)

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 2, w_share: Any = 0.0) -> Any:
        """A rank's bubble ``(pp-1)·max(0, T_F + T_B - 2T_W)/2`` (``T`` per stage and
        micro-batch, ``B`` the input gradient; each chunk takes half) over its work
        ``m·(T_F + T_B + T_W)``: ``(pp-1)·max(0, 1 - 3·w_share)/(2m)``. The per-rank span
        (post-validation); one iteration's makespan exceeds the ideal by
        ``(pp-1)·max(T_F, T_F + T_B - 2T_W)/2``. Both exact with free communication when
        ``m >= 2pp - 1``, ``T_F = T_B`` and ``T_W <= T_F`` (``tests/test_zb_v.py``)."""
        return (pp - 1) * np.maximum(0.0, 1 - 3 * np.asarray(w_share, dtype=float)) / (2 * m)

    def fixed_search_vpps(self, num_layers: int, max_vpp: int | None = None,
                          fixed_vpp: int | None = None) -> list[int]:
        """``[2]`` when the search is told ``--fix schedule=zb-v`` (two chunks in a V) and the
        layers allow it (the space checks divisibility); the default search leaves it out."""
        return [2] if fixed_vpp in (None, 2) and (max_vpp is None or max_vpp >= 2) else []

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """One iteration's makespan (seconds): the order replayed with free communication
        (``replay.order_span``), rank 0 (the V's head rank, which holds the embedding and the
        LM head) at ``t_max`` a micro-batch and every other rank at ``(t_sum - t_max)/(pp -
        1)``, each chunk's forward ``f_share``, weight gradient ``w_share`` and input gradient
        the rest (docs/calibration.md §5.111). For balanced ranks it equals the closed forms
        of ``closed_span`` where those are exact; the closed forms read the slowest rank's
        seconds for every further micro-batch, which a slower rank 0 does not set (+0.5..+4.3
        % at pp 16, §5.109). One rank (``pp`` 1 or not given): ``closed_span``."""
        out = self.closed_span(m, t_max, t_sum, vpp, w_share, f_share, pp)
        if pp is None:
            return out
        from strategies.schedules.replay import order_span
        mb, pb, tm, ts, w, f, out = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
            m, pp, t_max, t_sum, w_share, f_share, out)))
        out = np.array(out)
        sel = self.replays(mb, pb)
        if np.any(sel):
            out[sel] = order_span(self, mb[sel], tm[sel], ts[sel], pb[sel], 2, w[sel],
                                  self.replay_f_share(w[sel], f[sel]))
        return out[()] if out.ndim == 0 else out

    def closed_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                    w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """The closed forms of the makespan for balanced ranks (seconds):
        ``m·t_max + (t_sum - t_max)·max(f_share, 1 - 3·w_share)/2``, the
        ``(pp-1)·max(T_F, T_F + T_B - 2T_W)/2`` over the ideal of ``bubble_fraction``'s
        docstring (``t`` a rank's seconds per micro-batch, both chunks; ``f_share = T_F/(T_F
        + T_B + T_W)``). With ``m < 2pp - 1`` the fill's forwards run out and the larger of
        two chains sets it (``chain.chain_span``, ``T`` a rank's seconds over both chunks):
        for ``m <= pp`` one micro-batch's ``p(T_F + T_B) + T_W`` plus ``(max(T_F, T_B) +
        T_B)/2 + T_W`` per further one; beyond, ``m(T_F + T_B) + (p-1)T_B + p·T_W``. Exact
        with free communication for balanced ranks and ``T_W <= T_F <= T_B`` (at ``T_F =
        T_B`` for every ``m``, as the steady form); low by up to 7 % for ``m < 2pp - 1`` when
        ``T_F > T_B`` (6.7 % at ``T_F = 2T_B``, pp 8; ``tests/test_few_microbatches.py``)."""
        w = np.asarray(w_share, dtype=float)
        f = np.asarray(f_share, dtype=float)
        b = 1 - f - w
        steady = m * t_max + (t_sum - t_max) * np.maximum(f, 1 - 3 * w) / 2
        first = (chain_span(1, t_max, t_sum, w)
                 + (np.asarray(m, dtype=float) - 1) * t_max * ((np.maximum(f, b) + b) / 2 + w))
        later = chain_span(m, t_max, t_sum, w) + (t_sum - t_max) * (w - f)
        return np.maximum(steady, np.maximum(first, later))

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        from strategies.stacks.pytorch import TORCHTITAN_SCHEDULE_NAMES
        titan = dict(TORCHTITAN_SCHEDULE_NAMES)[self.name]
        return [], ["Megatron-LM has no ZB-V schedule (Sea AI Lab's fork: "
                    "--zero-bubble-v-schedule; torchtitan: "
                    f"pipeline_parallel_schedule={titan}); it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not ZB-V"
