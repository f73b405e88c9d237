"""What the lower bound reads of a plan's layout string or ``layers_per_stage`` without a model:
the transformer layers of the end and middle pipeline ranks and the fewest and most any
virtual stage holds (``layout_string_extremes``, ``layout_middle_most``).
"""
from __future__ import annotations

from strategies.layout.build import plan_layout_stages
from strategies.layout.grammar import LAYER
from strategies.layout.record import placed
from strategies.schedules import get_schedule


def layout_string_extremes(plan) -> tuple[float, float, float, float, float] | None:
    """What the lower bound reads of a plan's layout string or ``layers_per_stage`` (None
    without either): ``(first, mid, last, least, most)``, the transformer layers of pipeline
    rank 0, rank ``pp-2`` and rank ``pp-1`` (all their chunks; a mirrored schedule, DualPipe:
    per copy, the mean of the two stages the rank holds, ``plan_arrays.rank_layers``'s rule)
    and the fewest and most layers any one virtual stage holds. The layout string alone says
    these (no model).

    >>> from strategies.plan import Plan
    >>> layout_string_extremes(Plan(pp=4, schedule="dualpipe", layout="Et*6|t*2|t*3|t*5L"))
    (5.5, 2.5, 5.5, 2.0, 6.0)

    ``layers_per_stage`` (one chunk per rank, never mirrored:
    ``plan.checks.check_layers_per_stage``) is the layout string with those counts, read the
    same way:

    >>> layout_string_extremes(Plan(pp=4, layers_per_stage=(3, 9, 1, 3)))
    (3.0, 1.0, 3.0, 1.0, 9.0)
    """
    got = _rank_and_stage_layers(plan)
    if got is None:
        return None
    per_rank, n = got
    pp = plan.pp
    return (float(per_rank[0]), float(per_rank[max(pp - 2, 0)]), float(per_rank[pp - 1]),
            float(min(n)), float(max(n)))


def layout_middle_most(plan) -> float:
    """The most transformer layers any middle pipeline rank (1 to ``pp-2``) holds under the
    plan's layout string or ``layers_per_stage`` (per copy under DualPipe, as
    ``layout_string_extremes``); NaN without either or with ``pp < 3``. The lower bound prices
    that rank at the least position a middle rank has.

    >>> from strategies.plan import Plan
    >>> layout_middle_most(Plan(pp=4, layers_per_stage=(3, 9, 1, 3)))
    9.0
    """
    got = _rank_and_stage_layers(plan)
    if got is None or plan.pp < 3:
        return float("nan")
    return float(max(got[0][1:plan.pp - 1]))


def _rank_and_stage_layers(plan) -> tuple[list[float], list[int]] | None:
    """Each rank's transformer layers (per copy under a mirrored schedule) and each virtual
    stage's, of the plan's layout string or ``layers_per_stage``; None without either."""
    stages = plan_layout_stages(plan)
    if stages is None:
        lps = getattr(plan, "layers_per_stage", None)
        return None if lps is None else ([float(x) for x in lps], list(lps))
    pp, vpp = plan.pp, plan.vpp
    lay = placed(list(stages), plan.schedule, pp, vpp, "layout")
    per_rank = [lay.layers_of_stage(r) for r in range(pp)]
    if get_schedule(plan.schedule).mirrored and pp > 1:
        per_rank = [(per_rank[r] + per_rank[pp - 1 - r]) / 2 for r in range(pp)]
    return per_rank, [st.count(LAYER) for st in stages]
