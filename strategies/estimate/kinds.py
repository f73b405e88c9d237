"""The search's analytic arrays for plans whose pipeline stages differ by the kinds of layer
they hold: a model that mixes dense and MoE layers (``first_k_dense_replace``) or carries
multi-token-prediction modules (``num_nextn_predict_layers``), pipelined (``pp > 1``); and
for pipelined plans of an uneven layout (the search's ``layouts`` rows: slots, first/last
stage layer counts), whose ranks hold unequal chunks.

The plan columns price every stage as ``num_layers / pp`` mean layers
(``analytic.estimate_arrays``), which is exact without pipelining but not where rank 0
holds the dense layers and rank ``pp-1`` the MTP module: the scalar estimate then replaces
the even pipeline's compute makespan by the free-communication order over each rank's own
chunks (``chunk_correction.per_chunk``, an event order per plan with no closed form). Those rows are
priced here by the scalar's own path (``scalar.step_arrays``), one plan at a time, so the
arrays and the scalar agree exactly (one source of truth; docs/calibration.md §5.51). An
uneven layout's rows likewise: the columns price each rank by its own layer count
(``plan_arrays.rank_layers``) in the even pipeline's order, the scalar by the order over the
real chunks (``chunk_correction.per_chunk``/``per_stage``) and its ``base`` run with the job's own
rank fields; the search reads the scalar's (docs/search.md "Uneven pipeline layouts"). Rows
of an even layout of a one-kind model, or without pipelining, keep the plan columns'
figures bit for bit.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from strategies.cost.stage.layers import mixes_kinds
from strategies.cost.system import SystemConfig
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays, as_plan_arrays, rank_layers
from topologies.cluster import Cluster


def kind_rows(m: ModelSpec, P: PlanArrays | Mapping[str, Any]) -> np.ndarray:
    """Indices of the plans ``P`` whose stages the plan columns cannot price: pipelined
    (``pp > 1``) plans where ``m`` mixes kinds of layer (``cost.stage.layers.mixes_kinds``) or the
    plan's layout is uneven (``plan_arrays.rank_layers``' flag: slots, first/last stage
    layer counts), whose step the scalar prices by each rank's own chunks in the schedule's
    order (``chunk_correction.per_chunk``/``stage_correction.per_stage``; docs/search.md
    "Uneven pipeline layouts"); and pipelined plans of a schedule of overlapped pairs
    (DualPipe, DualPipeV), whose messages the scalar counts on the order (§5.225)."""
    from strategies.schedules import attr_by_code
    P = as_plan_arrays(P)
    pp = np.atleast_1d(P.pp)
    if mixes_kinds(m):
        return np.flatnonzero(pp > 1)
    # DualPipe and DualPipeV: the order with its messages (``chunk_correction.by_chunk``,
    # ``order_messages``; docs/calibration.md §5.225)
    pairs = np.atleast_1d(attr_by_code(P.schedule, "overlaps_pairs")).astype(bool)
    return np.flatnonzero((pp > 1) & (np.atleast_1d(rank_layers(m.num_layers, P)[4])
                                      | pairs))


def with_kind_rows(m: ModelSpec, cl: Cluster, dtype: str, P: PlanArrays | Mapping[str, Any],
                   analytic: Mapping[str, Any], plan_of: Callable[[int], Plan],
                   framework: FrameworkProfile | str | None = None,
                   system: SystemConfig | None = None,
                   only: Iterable[int] | None = None) -> dict[str, Any]:
    """``analytic`` (the arrays of the plans ``P``) with the rows of ``kind_rows`` replaced by
    the scalar estimate's figures of those plans (``scalar.step_arrays`` of the job of
    ``plan_of(i)``, made with ``framework`` and ``system`` as the search makes its jobs):
    every per-plan array (seconds, ratios, counts); the stage-cost record is kept. ``only``:
    just those of these rows (the ones a report shows; each row's figures are its own, the
    same whichever others are priced with it). Returns a new dict; ``analytic`` is not
    changed."""
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.terms.ranks import RANK_FIELDS
    from strategies.estimate.scalar import rank_fields, step_arrays
    from strategies.estimate.stage_cost_memo import StageCostMemo
    from strategies.job import make_job
    rows = kind_rows(m, P)
    if only is not None:
        rows = np.intersect1d(rows, np.fromiter(only, dtype=np.int64))
    out = dict(analytic)
    if rows.size == 0:
        return out
    shape = np.shape(analytic["step_time_s"])
    keys = [k for k, v in analytic.items() if isinstance(v, np.ndarray) and v.shape == shape]
    flat = {}
    for k in keys:
        out[k] = np.array(analytic[k], copy=True)
        flat[k] = out[k].reshape(-1)            # a view: one plan's 0-d arrays too
    from strategies.estimate.scalar import BREAKDOWN_KEYS
    from strategies.flushes import flush_job, flushed_arrays
    # a plan of k pipeline flushes: one flush's figures, composed (``strategies.flushes``)
    whole = [make_job(m, cl, plan_of(i), dtype=dtype, framework=framework, system=system)
             for i in rows.tolist()]
    jobs = [flush_job(j) for j in whole]
    memos = [StageCostMemo(j) for j in jobs]
    # the scalar's uncorrected runs of all these plans at once (its even plan's columns,
    # ``scalar.plan_arrays``, and each job's own rank fields: ``scalar.step_arrays``'
    # ``base``), then each plan corrected by its own layout
    ranks = [rank_fields(j, None, c) for j, c in zip(jobs, memos)]
    n = len(jobs)
    even = replace(PlanArrays.from_plans([j.plan for j in jobs]), first_stage_layers=np.zeros(n),
                   last_stage_layers=np.zeros(n), account_slots=np.zeros(n, dtype=bool))
    base = estimate_arrays(m, cl, dtype, even, jobs[0].framework, jobs[0].system,
                           {f: np.array([r[f] for r in ranks]) for f in RANK_FIELDS})
    for x, (i, job, memo) in enumerate(zip(rows.tolist(), jobs, memos)):
        one = {k: (v[x] if isinstance(v, np.ndarray) and v.shape == (n,) else v)
               for k, v in base.items()}
        r = step_arrays(job, memo, one)
        if whole[x].plan.flushes > 1:
            r = flushed_arrays(r, whole[x].plan.flushes, BREAKDOWN_KEYS)
        for k in keys:
            flat[k][i] = r[k]
    return out
