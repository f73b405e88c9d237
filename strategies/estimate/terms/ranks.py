"""The three kinds of rank the analytic step tells apart (first, middle = rank 1, last): the
stage-cost record's fields per kind (``RANK_FIELDS``), the slowest of them
(``slowest_rank``, ``rank_of_max``), the stages below each (``rank_below``) and how long
before the pipeline's end each ends its compute (``rank_slack``). Arrays over plans;
seconds."""
from __future__ import annotations

from typing import Any

import numpy as np

#: the stage-cost record's fields per kind of rank (first, middle = rank 1, last) that the
#: layers a rank holds decide: its parameters (so its data-parallel traffic), its routed
#: experts', its optimizer and per-step passes (``cost.stage.stage_cost_arrays`` from the
#: plan columns' layout, ``cost.stage.stage_costs`` from a job's)
RANK_FIELDS = tuple(f"{x}_{k}" for x in ("params", "expert_params", "optimizer", "passes")
                    for k in ("first", "mid", "last"))


def slowest_rank(t_first: Any, t_mid: Any, t_last: Any, pp: Any) -> Any:
    """Seconds per micro-batch of the slowest kind of rank: the first, the last and, with
    ``pp > 2``, a middle one (an uneven layout's middle ranks may hold the most layers,
    ``plan_arrays.rank_layers``); the one rule every closed form here reads. Arrays over
    plans; seconds."""
    return np.maximum(np.maximum(t_first, t_last), np.where(pp > 2, t_mid, 0.0))


def rank_below(t: tuple, pp: Any) -> tuple:
    """Seconds per micro-batch of the stages below each kind of rank (first; middle, at its
    nearest to rank 0, rank 1, whose tail hides least; last), ``t`` their stage seconds
    (first, middle, last): 0, the first stage's, the sum less the last. Arrays over plans."""
    t_first, t_mid, t_last = t
    t_sum = t_first + t_last + np.maximum(pp - 2, 0) * t_mid
    return (0.0 * t_sum, np.where(pp > 2, t_first, 0.0), np.where(pp > 1, t_sum - t_last, 0.0))


def rank_slack(t: tuple, pp: Any, v: Any, r_f: Any, w: Any, together: Any,
               skew: Any = None) -> tuple:
    """Seconds by which each kind of rank (first, middle, last) ends its compute before the
    pipeline's end ``Schedule.pipeline_span`` (rank 0's: the last to receive the last
    micro-batch's gradient): that backward through the stages below it, one chunk of each,
    ``rank_below``·(1 − r_f − 2·w)/v, at least 0 (``r_f`` the forward's share of a stage's
    seconds, ``w`` the weight gradient's share where the schedule splits the backward, which
    the stages below run as their own trailing ``W`` while the rank's drain passes): the
    span's own closed forms, balanced 1F1B ``(p − 1)·t_b``, ZB-H1 ``(p − 1)·(t_b − t_w)``, a
    slowest stage ``k`` ending at ``r_f·(t_sum − t_k) + m·t_k``; 0 where every rank ends
    together (``together``: a V, whose rank 0 holds the last chunk too; DualPipe). Where
    ``skew`` (seconds, ``Schedule.end_skew`` of a filling rank's) is not NaN the ranks end
    ``skew`` apart in order, a parallelogram (ZB-H2): the end that finishes first
    ``(p − 1)·|skew|`` early, the middle rank next to the other end ``|skew|``, that end 0.
    Arrays over plans; seconds."""
    below = rank_below(t, pp)
    share = np.maximum(1.0 - r_f - 2.0 * w, 0.0)
    trapezoid = tuple(np.where(together | (pp == 1), 0.0, share * b / v) for b in below)
    if skew is None:
        return trapezoid
    d = np.asarray(skew, dtype=float)
    para = (np.maximum(d, 0.0) * (pp - 1), np.abs(d), np.maximum(-d, 0.0) * (pp - 1))
    return tuple(np.where(np.isnan(d) | (pp == 1), tr, pa) for tr, pa in zip(trapezoid, para))


def rank_of_max(t: tuple, pp: Any) -> Any:
    """0, 1 or 2: which kind of rank (first, middle, last) has the most seconds ``t`` (first
    on a tie; the middle only with ``pp > 2``), as ``z2_sync_exposed`` picks the slowest
    stage. Arrays over plans."""
    t_first, t_mid, t_last = t
    t_max = slowest_rank(t_first, t_mid, t_last, pp)
    return np.where(t_max == t_first, 0, np.where(t_max == t_last, 2, 1))
