"""``estimate(job)``: the analytic answer for one plan — step time, its breakdown, MFU, memory.

The even plan's analytic step (``analytic.estimate_arrays``), corrected for a pipeline whose
stages differ (``stage_correction``) or whose chunks differ (``chunk_correction``), each GPU
type's stage costs read once (``stage_cost_memo``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strategies.cost.stage.cost_arrays import kept_records
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.chunk_correction import by_chunk, order_slack, per_chunk
from strategies.estimate.stage_correction import per_stage, stage_slack
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.estimate.terms.dp_exposure import tail_reads_span
from strategies.estimate.terms.stages import bubble_share
from strategies.flushes import flush_job, flushed_arrays
from strategies.job import Job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.schedules import get_schedule

BREAKDOWN_KEYS = ("compute", "recompute", "offload", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
                  "dp_comm", "bubble", "optimizer")


def plan_arrays(plan: Plan) -> PlanArrays:
    """The estimator's ``PlanArrays`` of one resolved plan (0-d arrays), as the even plan:
    without the uneven-layout columns, since ``per_stage``/``per_chunk`` replace the even
    plan's pipeline makespan by the real stages' (the search's arrays carry the layout
    and price its ranks directly, ``plan_arrays.rank_layers``)."""
    from dataclasses import replace
    return replace(PlanArrays.of_plan(plan), first_stage_layers=0.0, last_stage_layers=0.0,
                   account_slots=False)


def tail_arrays(job: Job) -> PlanArrays:
    """The ``PlanArrays`` (0-d) ``_real_tail`` prices the data-parallel tail with: the even
    plan's (``plan_arrays``) with the layers each kind of rank holds in ``job``'s layout as
    the columns' first/last stage counts (the middle ranks share the rest,
    ``plan_arrays.rank_layers``), so each rank's slack and last backward are its own layers'
    as the search's columns price them (docs/calibration.md §5.112); an even layout's is
    ``plan_arrays``' own."""
    from dataclasses import replace
    even = plan_arrays(job.plan)
    if job.layout.uniform:
        return even
    pp = job.plan.pp
    return replace(even, first_stage_layers=float(job.layers_of_stage(0)),
                   last_stage_layers=float(job.layers_of_stage(pp - 1)))


@dataclass(frozen=True)
class Estimate:
    """The analytic estimate of one plan. Times in seconds, memory in bytes inside."""

    job: Job
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    bubble_fraction: float
    breakdown_s: dict[str, float]
    memory: Any = field(repr=False)           # MemoryBreakdown of the peak stage
    memory_by_stage: list = field(repr=False)
    num_microbatches: int = 0

    @property
    def fits(self) -> bool:
        """Every stage fits its own GPUs' HBM (``memory.scalar.stage_hbm_bytes``)."""
        if len(self.job.cluster.groups) == 1:
            return self.memory.total <= self.job.cluster.min_hbm_bytes
        from strategies.memory.scalar import stage_hbm_bytes
        return all(b.total <= stage_hbm_bytes(self.job, s)
                   for s, b in enumerate(self.memory_by_stage))

    def to_json(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu, "hfu": self.hfu, "bubble_fraction": self.bubble_fraction,
            "memory": self.memory.to_gib_dict(),
            "memory_by_stage": [mb.to_gib_dict() for mb in self.memory_by_stage],
            "fits": self.fits, "breakdown_s": dict(self.breakdown_s),
            "num_microbatches": self.num_microbatches,
            "inputs": self.job.to_dict(),
        }


def rank_fields(job: Job, gpu: Any = None,
                costs: StageCostMemo | None = None) -> dict[str, float]:
    """``terms.ranks.RANK_FIELDS`` of ``job``'s own layout (``cost.stage.stage_costs``: each
    rank's layers by kind, a layout string's or ``layers_per_stage``'s, its MTP modules, the
    embedding and the LM head where they are): rank 0, rank 1 (the middle kind: the middle
    rank nearest rank 0, ``terms.ranks.rank_slack``) and rank ``pp-1``, which the even plan's
    columns (``plan_arrays``) cannot say; on ``gpu`` where given (default the cluster's slowest
    by peak). ``costs``: the estimate's ``StageCostMemo`` of ``job`` (default a fresh one)."""
    c, pp = (costs or StageCostMemo(job))(gpu), job.plan.pp
    out = {}
    for x, by in (("params", c.params_by_stage), ("expert_params", c.expert_params_by_stage),
                  ("optimizer", c.optimizer_by_stage), ("passes", c.passes_by_stage)):
        for k, s in (("first", 0), ("mid", min(1, pp - 1)), ("last", pp - 1)):
            out[f"{x}_{k}"] = float(by[s])
    return out


def _by_group(job: Job) -> dict[str, Any]:
    """``group_microbatches`` (replicas of each node group run their own count): each group's
    replicas estimated on its GPU with its count over the cluster-wide links (the gradient
    reduction spans the groups); every replica reaches the reduction, then runs its own
    optimizer, so the step is the longest step-before-the-optimizer plus the longest
    optimizer. MFU/HFU against the summed peak; the bubble fraction, the kept group's bubble over
    that step (``terms.stages.bubble_share``)."""
    from dataclasses import replace

    from strategies.job import replica_groups
    p, parts = job.plan, []
    for g in sorted(set(replica_groups(job.cluster, p))):
        view = job.cluster.group_view(g, links=False)
        alone = replace(p, gbs=p.group_microbatches[g] * p.mbs * p.dp, group_microbatches=None)
        r = estimate_arrays(job.model, view, job.dtype, plan_arrays(alone), job.framework,
                            job.system)
        parts.append((r, view, alone.gbs))
    i, step, opt = _synchronised_step([x[0] for x in parts])
    r, view, gbs = parts[i]
    # r's MFU counts that group's batch on its peak over its step; the job's on the summed peak
    scale = (view.mean_peak(job.dtype) / job.cluster.mean_peak(job.dtype) * p.gbs / gbs
             * float(r["step_time_s"]) / step)
    return {**r, "step_time_s": step, "optimizer": opt,
            "tokens_per_s": job.tokens_per_step / step, "mfu": float(r["mfu"]) * scale,
            "hfu": float(r["hfu"]) * scale,
            "bubble_fraction": float(bubble_share(float(r["bubble"]), step))}


def _synchronised_step(runs: list[dict[str, Any]]) -> tuple[int, float, float]:
    """Ranks that run ``runs`` (estimates) side by side and meet at the gradient reduction
    (``mixed.synchronised_step``). Returns (the index of the run with the longest part before
    the optimizer, the step, the optimizer; seconds)."""
    from strategies.estimate.mixed import synchronised_step
    i, step, opt = synchronised_step(
        [float(r["step_time_s"]) - float(r["optimizer"]) for r in runs],
        [float(r["optimizer"]) for r in runs])
    return int(i), float(step), float(opt)


def _synchronised(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One step of ranks that run ``runs`` (estimates of the same plan on different GPU types)
    side by side (``mixed.synchronised_runs``, the search's arrays' rule)."""
    from strategies.estimate.mixed import synchronised_runs
    return synchronised_runs(runs)

def _flushed(job: Job, one: Estimate) -> Estimate:
    """``job``'s estimate from that of one of its ``flushes`` (``strategies.flushes``): every
    part ``k`` times but the optimizer; the same work per flush, so MFU/HFU, tokens/s and the
    bubble fraction scale with ``k·T_1/T`` (``flushes.flushed_arrays``, the rule the search's
    arrays compose with); memory is one flush's."""
    r = flushed_arrays({"step_time_s": one.step_time_s, "tokens_per_s": one.tokens_per_s,
                        "mfu": one.mfu, "hfu": one.hfu, "bubble_fraction": one.bubble_fraction,
                        **one.breakdown_s}, job.plan.flushes, BREAKDOWN_KEYS)
    return Estimate(job=job, step_time_s=float(r["step_time_s"]),
                    tokens_per_s=float(r["tokens_per_s"]), mfu=float(r["mfu"]),
                    hfu=float(r["hfu"]), bubble_fraction=float(r["bubble_fraction"]),
                    breakdown_s={k: float(r[k]) for k in BREAKDOWN_KEYS}, memory=one.memory,
                    memory_by_stage=one.memory_by_stage, num_microbatches=job.num_microbatches)


def estimate(job: Job) -> Estimate:
    """Analytic estimate of ``job`` (microseconds of work; see strategies.estimate.analytic).
    Heterogeneous work: ``group_microbatches`` (``_by_group``); stages that differ in layers
    or GPU type (``per_stage``, ``per_chunk``). One plan's stage-cost record computed once for
    the whole estimate (``cost_arrays.kept_records``)."""
    with kept_records():
        return _estimate(job)


def _estimate(job: Job) -> Estimate:
    """``estimate`` within its ``kept_records`` block."""
    from strategies.memory.scalar import memory_by_stage
    if job.plan.flushes > 1:    # k pipeline flushes per step: one flush's estimate, composed
        return _flushed(job, estimate(flush_job(job)))
    r = {k: float(v) for k, v in step_arrays(job).items() if k != "stage_costs"}  # the plan
    stages = memory_by_stage(job)
    peak = max(stages, key=lambda x: x.total)
    return Estimate(job=job, step_time_s=r["step_time_s"], tokens_per_s=r["tokens_per_s"],
                    mfu=r["mfu"], hfu=r["hfu"], bubble_fraction=r["bubble_fraction"],
                    breakdown_s={k: r[k] for k in BREAKDOWN_KEYS}, memory=peak,
                    memory_by_stage=stages, num_microbatches=int(r["num_microbatches"]))


def step_arrays(job: Job, costs: StageCostMemo | None = None,
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The analytic step of ``job`` (one flush) as ``analytic.estimate_arrays``' 0-d arrays,
    corrected for its own layout, layer kinds and GPU types (``_by_group``, ``per_chunk``,
    ``per_stage``): what ``estimate`` reports, and what the search's arrays read for the
    plans their columns cannot price (``estimate.kinds``). ``costs``: a ``StageCostMemo`` of
    ``job``; ``base``: a pipelined plan's uncorrected run, ``estimate_arrays`` of
    ``plan_arrays(plan)`` with ``rank_fields(job)`` on ``Cluster.gpu``, where the caller
    computed it (the search, over many plans at once)."""
    with kept_records():        # one plan's stage-cost record, once (``cost_arrays``)
        return _step_arrays(job, costs or StageCostMemo(job), base)


def _step_arrays(job: Job, costs: StageCostMemo, base: dict[str, Any] | None
                 ) -> dict[str, Any]:
    """``step_arrays`` within its ``kept_records`` block (``costs``: the estimate's memo)."""
    p = job.plan
    if p.group_microbatches is not None:
        arrays = _by_group(job)
    else:
        # without pipelining every rank holds the whole model and the step waits for the
        # slowest GPU type: on a mixed cluster each type's own kernel times (a kernel's fixed
        # time can reverse the peak order on small GEMMs, gemm_kernel.gemm_fixed_s), combined as
        # the ranks meet at the gradient reduction (``_synchronised``)
        gpus = ([None] if job.cluster.uniform or p.pp > 1
                else list({g.name: g for g in map(job.cluster.gpu_of_node,
                                                  job.stage_nodes(0))}.values()))
        runs = [base] if base is not None and p.pp > 1 else [
            estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(p), job.framework,
                            job.system, rank_fields(job, g, costs), g) for g in gpus]
        arrays = runs[0] if len(runs) == 1 else _synchronised(runs)
        if p.pp > 1 and (by_chunk(job, costs) or (p.vpp > 1 and not job.cluster.uniform)):
            arrays = _real_tail(job, arrays, per_chunk(job, arrays, costs), costs)
        elif p.pp > 1 and p.vpp == 1 and (p.layers_per_stage is not None
                                          or not job.layout.uniform
                                          or not job.cluster.uniform):
            arrays = _real_tail(job, arrays, per_stage(job, arrays, costs), costs)
    return arrays


def _real_tail(job: Job, r: dict[str, Any], out: dict[str, Any],
               costs: StageCostMemo) -> dict[str, Any]:
    """``out`` (the corrected step of ``r``, the even plan's run) with the data-parallel tail
    after the pipeline (``dp_comm`` + ``optimizer``) of the real pipeline: ``r``'s tail hides
    the gradient reductions under the even pipeline's closed-form span (ZeRO-2's and
    ZeRO-3's windows), which time added to the end stages lengthens more than the real
    chunks' order does (docs/calibration.md §5.93), and each rank's under its slack and last
    backward of ``num_layers/pp`` layers. The same run with that span (``estimate_arrays``'
    ``pipe_span``) and, on an uneven layout, the layers each kind of rank holds
    (``tail_arrays``: the search's columns' tail rule, §5.112), ZeRO-0/1 included; an even
    layout's tail re-runs only where it reads the span (``terms.dp_exposure.tail_reads_span``;
    elsewhere ``r``'s is that run's, bit for bit), with expert all-to-all too (§5.102). A
    split backward (zero-bubble, DualPipe) keeps ``r``'s tail: its ZeRO-2 tail is the
    slowest stage's own end less the span (``terms.dp_exposure.split_tail_exposed``), and the even
    stages' end beside the real span is no order's (the real layers move its ZeRO-1 rows
    away from the simulation too, §5.112), with, on uneven stages of one chunk per rank,
    each kind of rank's compute end from the real stages' replay (``rank_ends``,
    ``stage_correction.stage_slack``: the slowest stage's trailing weight gradients end the
    pipeline, so its rank reduces last, §5.203), and DualPipe's (``Schedule.mirrored``) on
    uneven stages from its order with its messages (``chunk_correction.order_slack``,
    §5.225: an end rank lighter in parameters may end last); a mixed cluster keeps it (its arrays form,
    ``stage_correction.corrected_arrays``, reads the even run, and the columns time every
    rank on the slowest GPU). §5.93, §5.102, §5.112: ``python experiments/uneven_tail_gaps.py``."""
    p = job.plan
    sched = get_schedule(p.schedule)
    slack = order_slack(job, costs) if sched.mirrored and not job.layout.uniform else None
    if not job.cluster.uniform or (slack is None and sched.splits_backward and (
            p.vpp > 1 or sched.mirrored or job.layout.uniform)):
        return out
    tail = float(r["dp_comm"]) + float(r["optimizer"])
    pipe = float(out["step_time_s"]) - float(out["pp_comm"]) - tail
    again = r
    if slack is not None:
        # DualPipe on uneven stages: each kind of rank's end from the order with its
        # messages (``chunk_correction.order_slack``; §5.225)
        again = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(p),
                                job.framework, job.system, rank_fields(job, None, costs),
                                rank_ends=slack)
    elif sched.splits_backward:
        # one chunk per rank on uneven stages: the even run's tail with each kind of rank's
        # compute end from the real stages' replay (``stage_correction.stage_slack``), where
        # the slowest stage's trailing weight gradients end the pipeline (§5.203)
        again = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(p),
                                job.framework, job.system, rank_fields(job, None, costs),
                                rank_ends=stage_slack(job, costs))
    elif not job.layout.uniform or tail_reads_span(job.framework, p.pp, p.zero,
                                                   p.overlap_grad_reduce):
        again = estimate_arrays(job.model, job.cluster, job.dtype, tail_arrays(job),
                                job.framework, job.system, rank_fields(job, None, costs),
                                pipe_span=pipe)
    dp, opt = float(again["dp_comm"]), float(again["optimizer"])
    step = pipe + float(out["pp_comm"]) + dp + opt
    scale = float(out["step_time_s"]) / step
    return {**out, "dp_comm": dp, "optimizer": opt, "step_time_s": step,
            "tokens_per_s": job.tokens_per_step / step, "mfu": float(out["mfu"]) * scale,
            "hfu": float(out["hfu"]) * scale,
            "bubble_fraction": float(bubble_share(float(out["bubble"]), step))}
