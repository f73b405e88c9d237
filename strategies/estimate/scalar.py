"""``estimate(job)``: the analytic answer for one plan — step time, its breakdown, MFU, memory."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.terms.dp_exposure import tail_reads_span
from strategies.estimate.terms.messages import ranked_messages
from strategies.flushes import flush_job, flushed_arrays
from strategies.job import Job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.schedules import get_schedule, head_rank, schedule_code

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm",
                  "bubble", "optimizer")


def plan_arrays(plan: Plan) -> PlanArrays:
    """The estimator's ``PlanArrays`` of one resolved plan (0-d arrays), as the even plan:
    without the uneven-layout columns, since ``_per_stage``/``_per_chunk`` replace the even
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


class StageCostMemo:
    """``cost.stage.stage_costs(job, gpu)`` of one job, computed once per GPU type and kept
    for the rest of one estimate (the rank fields, the per-stage and per-chunk makespans and
    the all-to-all shift all read it, a pipelined estimate once per stage and GPU before).
    ``stage_costs`` is a pure function of the job and the GPU, so the answer is the same
    object, bit for bit, as a fresh call's. Keyed by the GPU object (``gpu=None``: the
    cluster's slowest, as ``stage_costs``); the memo holds the GPU so its id stays its own."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._by_gpu: dict[int, tuple[Any, Any]] = {}

    def __call__(self, gpu: Any = None) -> Any:
        """The stage-cost record of the memo's job on ``gpu`` (default the cluster's slowest)."""
        gpu = self.job.cluster.gpu if gpu is None else gpu
        hit = self._by_gpu.get(id(gpu))
        if hit is None:
            from strategies.cost.stage import stage_costs
            hit = self._by_gpu[id(gpu)] = (gpu, stage_costs(self.job, gpu))
        return hit[1]


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
    optimizer. MFU/HFU against the summed peak."""
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
            "hfu": float(r["hfu"]) * scale}


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


def _stage_times(job: Job, even_on=None, costs: StageCostMemo | None = None
                 ) -> tuple[list[float], list[float], list[float]]:
    """Forward, backward (+ recomputation) and the backward's weight-gradient part (``W``)
    seconds per micro-batch of each pipeline stage
    from the shared cost record: its own layer count on its own GPU type (of those among its
    ranks, the one whose forward + backward is longest, ``mixed.slowest_gpu``), or with
    ``even_on`` (a GPU) ``num_layers / pp`` layers on that GPU for every stage, the analytic
    model's assumption. ``costs``: the estimate's ``StageCostMemo``."""
    from strategies.estimate.mixed import slowest_gpu
    costs = costs or StageCostMemo(job)
    p, f, b, w = job.plan, [], [], []
    head_at = head_rank(p.schedule, p.pp, p.vpp)

    def times(s: int, gpu, n: float) -> tuple[float, float, float]:
        c = costs(gpu)
        # block partial recompute: min(N, chunk) layers of each of the stage's v chunks
        bwd = (n * c.layer_bwd + p.vpp * c.chunk_recompute(n / p.vpp)[0] if c.recompute_cap
               else n * (c.layer_bwd + c.layer_recompute))
        return (n * c.layer_fwd + (c.embedding_fwd if s == 0 else 0.0)
                + (c.head_fwd if s == head_at else 0.0),
                bwd + (c.embedding_bwd if s == 0 else 0.0)
                + (c.head_bwd if s == head_at else 0.0),
                n * c.layer_wgrad + (c.embedding_wgrad if s == 0 else 0.0)
                + (c.head_wgrad if s == head_at else 0.0))

    for s in range(p.pp):
        if even_on is None:
            n = job.layers_of_stage(s)
            gpu = slowest_gpu(map(job.cluster.gpu_of_node, job.stage_nodes(s)),
                              lambda g: sum(times(s, g, n)[:2]))
        else:
            gpu, n = even_on, job.model.num_layers / p.pp
        for out, x in zip((f, b, w), times(s, gpu, n)):
            out.append(x)
    return f, b, w


def _chunk_times(job: Job, even_on=None, costs: StageCostMemo | None = None
                 ) -> list[list[tuple[float, float, float]]]:
    """``(F, B + recompute, W)`` seconds per micro-batch of each rank's chunks from the shared
    cost record: the layers each chunk holds by kind (``cost.stage.chunk_layers``) on its
    rank's GPU type (``mixed.slowest_gpu`` over the rank's chunks), the embedding on the
    first position and the LM head on the last; with ``even_on`` (a GPU)
    ``num_layers / (pp·vpp)`` mean layers in every chunk on that GPU, the analytic model's
    assumption. DualPipe (``Schedule.mirrored``): rank ``r``'s chunk 1 holds stage
    ``pp-1-r``'s layers (the layout's chunk 0 there). ``costs``: the estimate's
    ``StageCostMemo``."""
    from strategies.cost.stage import chunk_layers, chunk_sum
    from strategies.estimate.mixed import slowest_gpu
    costs = costs or StageCostMemo(job)
    p = job.plan
    sched = get_schedule(p.schedule)
    last = sched.num_virtual_stages(p.pp, p.vpp) - 1
    mirrored = bool(sched.mirrored) and p.pp > 1

    def row_on(s: int, gpu) -> list[tuple[float, float, float]]:
        c = costs(gpu)
        row = []
        for ch in range(2 if mirrored else p.vpp):
            src = ((s if ch == 0 else p.pp - 1 - s), 0) if mirrored else (s, ch)
            if even_on is None:
                items = chunk_layers(c, *src, job.layers_of_chunk(*src))
            else:
                items = [(job.model.num_layers / (p.pp * p.vpp), c)]
            vs = sched.virtual_stage(s, ch, p.pp, p.vpp, 0)
            emb, head = vs == 0, vs == last
            f = (chunk_sum(items, lambda x: x.layer_fwd) + (c.embedding_fwd if emb else 0.0)
                 + (c.head_fwd if head else 0.0))
            # block partial recompute: min(N, chunk) layers, each kind's share at its cost
            b = (chunk_sum(items, lambda x: x.layer_bwd)
                 + c.chunk_recompute(chunk_sum(items, lambda x: 1.0), None, items)[0]
                 if c.recompute_cap
                 else chunk_sum(items, lambda x: x.layer_bwd + x.layer_recompute))
            b += (c.embedding_bwd if emb else 0.0) + (c.head_bwd if head else 0.0)
            w = (chunk_sum(items, lambda x: x.layer_wgrad) + (c.embedding_wgrad if emb else 0.0)
                 + (c.head_wgrad if head else 0.0))
            row.append((f, b, w))
        return row

    out = []
    for s in range(p.pp):
        gpu = even_on if even_on is not None else slowest_gpu(
            map(job.cluster.gpu_of_node, job.stage_nodes(s)),
            lambda g: sum(f + b for f, b, _ in row_on(s, g)))
        out.append(row_on(s, gpu))
    return out


def _per_chunk(job: Job, r: dict[str, Any], costs: StageCostMemo | None = None
               ) -> dict[str, Any]:
    """A pipeline whose chunks differ (a layout with uneven chunks, interleaved or not; dense
    and MoE layers; multi-token prediction): ``_per_stage``'s correction with the makespans
    of the free-communication simulation over each rank's chunks (``_chunk_times``: the
    even split's mean layers against the layers each chunk holds). ``costs``: the estimate's
    ``StageCostMemo``."""
    from strategies.schedules.analysis import simulate_free_comm
    costs = costs or StageCostMemo(job)
    p, m = job.plan, job.num_microbatches
    spans: dict[int, tuple[Any, float]] = {}    # id(times) -> (times, makespan): each once

    def span(times, pairs=None) -> float:
        """The order's makespan over ``times`` (the even split's and the layout's are read
        again by ``_a2a_shift``: worked out once, the same numbers); ``pairs``: the seconds
        of each overlapped pair (``analysis.free_comm_ranks``' ``pair_seconds``)."""
        hit = spans.get(id(times))
        if hit is None:
            hit = spans[id(times)] = (times, simulate_free_comm(
                p.schedule, p.pp, m, p.vpp, 0.0, 0.0, p.microbatch_group_size,
                chunk_times=times, combined=bool(p.ep_overlap), pair_seconds=pairs))
        return hit[1]

    def makespan(times) -> tuple[float, float]:
        return span(times), m * max(sum(f + b for f, b, _ in row) for row in times)

    even, real = _chunk_times(job, job.cluster.gpu, costs), _chunk_times(job, None, costs)

    def ranks(times) -> list[float]:
        return [sum(f + b for f, b, _ in row) for row in times]
    shift, held = _a2a_shift(job, r, even, real, span, costs)
    if float(r.get("ep_a2a_s", 0.0)) > 0:      # the order's shift: expert communication
        return _corrected(job, r, makespan(even), makespan(real),
                          _messages_shift(job, r, ranks(even), ranks(real)), shift)
    # the busiest real rank's layers run the layers' own communication (``r``'s is the even
    # rank's num_layers/pp); the rest of the order's shift is bubble
    scale = 1.0 if held is None or get_schedule(p.schedule).mirrored \
        else held / (job.model.num_layers / p.pp)
    return _corrected(job, r, makespan(even), makespan(real),
                      _messages_shift(job, r, ranks(even), ranks(real)), 0.0, shift, scale)


def _a2a_shift(job: Job, r: dict[str, Any], even, real, span,
               costs: StageCostMemo | None = None) -> tuple[float, float | None]:
    """(Seconds, the busiest real rank's layers or None where 0): the seconds the exposed
    expert all-to-all changes by when an overlapped-pair schedule
    (``Schedule.overlaps_pairs``: DualPipe) runs a layout other than the even split
    (docs/calibration.md §5.36): the pipeline's makespan becomes the order's with each
    step's exposed communication (a forward or backward alone: its layers' dispatch and
    combine; in an ``F&B`` pair ``combined.pair_exposed`` per layer, half on each member; a
    recomputed MoE layer's again before its backward; the layer's TP and CP communication,
    half on each pass), in place of the even composition's (the slowest rank's all-to-all on
    top of the even pipeline's fill: in the order the ranks that wait in the fill and drain
    absorb part of it). Each chunk's MoE layers are counted by their expert bytes
    (``cost.stage.chunk_layers``: a dense layer has none). The same order with each step's
    own communication for a schedule without pairs (1F1B, §5.52; interleaved, §5.54) whose
    stages or chunks differ in layers or kinds (dense first layers, MTP); Megatron-Core's
    combined 1F1B (``ep_overlap``) runs its pairs and lone passes (§5.91). 0 for zero-bubble
    (``splits_backward``) plans and for the even split of one kind; without
    expert parallelism the same order with the layers' TP and CP communication alone (an
    uneven layout, docs/calibration.md §5.93).
    ``even``/``real``: ``_chunk_times`` of the even split and of the layout; ``span(times)``:
    the order's makespan; ``costs``: the estimate's ``StageCostMemo``."""
    p = job.plan
    sched = get_schedule(p.schedule)
    # an order with pairs: DualPipe's ``F&B``, Megatron-Core's combined 1F1B (``ep_overlap``,
    # whose lone warm-up forwards and cool-down backwards the order runs, §5.91)
    pairs = bool(sched.overlaps_pairs) or bool(p.ep_overlap)
    c = (costs or StageCostMemo(job))(job.cluster.gpu)
    if pairs and job.layout.uniform and (sched.overlaps_pairs or not c.by_kind):
        return 0.0, None
    # no paired overlap (1F1B and the like, §5.52; interleaved, §5.54): each chunk's own
    # layers and kinds (dense first layers carry no all-to-all; MTP), as the simulator runs
    # them. Megatron's combined 1F1B (``ep_overlap``) keeps the even composition (within
    # -1.5..-0.3 % of its simulation on §5.54's seeded set; this order has no pairs, +0.8..
    # +4.7 %), as do the zero-bubble orders (``splits_backward``: the W steps fill the drain;
    # ZB-H1 met its simulation within 2 % with the even composition, -3.5 % with this one:
    # tests/test_zero_overlap.py)
    if not pairs and (sched.splits_backward or (job.layout.uniform and not c.by_kind)):
        return 0.0, None
    from strategies.cost.stage import chunk_layers, chunk_sum
    a2a, pair, rc, other = (float(r[k]) for k in ("ep_a2a_s", "ep_pair_s", "ep_rc_s",
                                                  "layer_comm_s"))
    mean = max(c.ep_bytes, 1e-30)
    mirrored = bool(sched.mirrored) and p.pp > 1

    def counts(rank: int, ch: int) -> tuple[float, float]:
        """The chunk's layers, and its MoE layers in mean layers (expert bytes / the mean's)."""
        src = ((rank if ch == 0 else p.pp - 1 - rank), 0) if mirrored else (rank, ch)
        items = chunk_layers(c, *src, job.layers_of_chunk(*src))
        return chunk_sum(items, lambda x: 1.0), chunk_sum(items, lambda x: x.ep_bytes) / mean

    times, layers = [], []
    for rk, row in enumerate(real):
        out = []
        layers.append(sum(counts(rk, ch)[0] for ch in range(len(row))))
        for ch, (f, b, w) in enumerate(row):
            n, e = counts(rk, ch)
            o = n * other / 2
            out.append((f, b, w, e * a2a + o, e * (a2a + rc) + o, e * pair / 2 + o,
                        e * (pair / 2 + rc) + o))
        times.append(out)
    pipe = float(r["step_time_s"]) - float(r["pp_comm"]) - float(r["dp_comm"]) \
        - float(r["optimizer"])
    # the makespan with communication less the one without (the compute order, which
    # ``_corrected`` puts in place of the even one) and less the even composition's excess
    # over the even compute order
    pairs = _combined_pairs(job, c, times, a2a, rc, other) if p.ep_overlap else None
    busiest = max(range(len(real)), key=lambda k: sum(f + b for f, b, _ in real[k]))
    return span(times, pairs) - span(real) - (pipe - span(even)), layers[busiest]


def _combined_pairs(job: Job, c: Any, times: list, a2a: float, rc: float,
                    other: float):
    """``pair_seconds`` of Megatron-Core's combined 1F1B pairs on ``job``'s layout: a pair
    of rank ``r``'s forward of chunk ``a`` and backward of chunk ``b`` runs both chunks'
    compute, their layers' other communication (``other`` per layer, half on each pass),
    the backward's recomputed all-to-alls (``rc`` per MoE layer) and, layer by layer, the
    forward's layer ``i`` beside the backward's layer ``n_b − 1 − i``: the backward
    layer's all-to-all exposed by what outlasts the forward layer's compute, the forward
    layer's by what outlasts the backward layer's; the layers one pass has beyond the
    other's run alone, each all-to-all exposed whole (Megatron-LM d98e8a64
    ``TransformerModelChunkSchedulePlan.run``: ``min(f_num_layers, b_num_layers)``
    overlapped layers, then the rest; §5.91). Each layer's all-to-all is the mean layer's
    ``a2a`` scaled by its expert bytes (a dense layer has none). With one kind of layer
    and equal chunks: ``n·combined.pair_exposed`` per pair, the analytic rule."""
    from strategies.cost.stage import chunk_layers
    p = job.plan
    mean = max(c.ep_bytes, 1e-30)
    layers: dict[tuple[int, int], list[tuple[float, float, float]]] = {}

    def of(rank: int, ch: int) -> list[tuple[float, float, float]]:
        """``(forward, backward + recompute, all-to-all)`` seconds of each layer, in order."""
        key = (rank, ch)
        if key not in layers:
            items = chunk_layers(c, rank, ch, job.layers_of_chunk(rank, ch))
            layers[key] = [(x.layer_fwd, x.layer_bwd + x.layer_recompute,
                            a2a * x.ep_bytes / mean)
                           for n, x in items for _ in range(int(round(n)))]
        return layers[key]

    def seconds(rank: int, group) -> float:
        (_, a), (_, b) = group
        fl, bl = of(rank, a), of(rank, b)[::-1]
        k = min(len(fl), len(bl))
        exposed = sum(max(0.0, tb - ff) + max(0.0, tf - bb)
                      for (ff, _, tf), (_, bb, tb) in zip(fl[:k], bl[:k]))
        exposed += sum(x[2] for x in fl[k:]) + sum(x[2] for x in bl[k:])
        e_b = sum(x[2] for x in bl) / max(a2a, 1e-30)
        return (times[rank][a][0] + times[rank][b][1] + (len(fl) + len(bl)) * other / 2
                + e_b * rc + exposed)
    return seconds


def _messages_shift(job: Job, r: dict[str, Any], even: list[float],
                    real: list[float]) -> float:
    """Seconds the pipeline messages change by when the rank that bounds the steady state
    is the real stages' rather than the even plan's (``even``/``real``: each rank's seconds
    per micro-batch): ``terms.messages.ranked_messages`` of the real ranks less the even ones'
    under a schedule with per-kind counts (1F1B, docs/calibration.md §5.21), else 0."""
    p = job.plan
    if p.pp < 2 or not get_schedule(p.schedule).messages_by_rank:
        return 0.0
    code = schedule_code(p.schedule)

    def ranked(ts: list[float]) -> float:
        kinds = (ts[0], max(ts[1:-1]) if p.pp > 2 else 0.0, ts[-1])
        return float(ranked_messages(code, job.num_microbatches, p.pp, p.vpp, kinds, sum(ts),
                                     float(r["p2p_time_s"])))
    return ranked(real) - ranked(even)


def _corrected(job: Job, r: dict[str, Any], even: tuple[float, float],
               real: tuple[float, float], messages: float = 0.0,
               a2a: float = 0.0, order: float = 0.0,
               comm_scale: float = 1.0) -> dict[str, Any]:
    """The analytic step ``r`` with the even pipeline's compute makespan and busy time
    (``even``) replaced by the real ones (``real``): the difference goes to compute (the
    busiest rank) and bubble; ``messages`` (``_messages_shift``) to ``pp_comm``, ``a2a``
    (``_a2a_shift`` with expert parallelism) to ``ep_comm``, ``order`` (``_a2a_shift``
    without: the layers' own communication in the real order) to bubble, less the part of it
    that is the busiest rank's own layers' (``tp_comm``/``cp_comm`` times ``comm_scale``)."""
    (span_e, busy_e), (span_u, busy_u) = even, real
    step = float(r["step_time_s"]) - span_e + span_u + messages + a2a + order
    out = dict(r)
    out["pp_comm"] = float(r["pp_comm"]) + messages
    # (what the order removes beyond the even composition's all-to-all was its bubble's excess)
    ep = max(float(r["ep_comm"]) + a2a, 0.0)
    out["ep_comm"] = ep
    out["compute"] = float(r["compute"]) + busy_u - busy_e
    out["bubble"] = float(r["bubble"]) + (span_u - busy_u) - (span_e - busy_e) \
        + (float(r["ep_comm"]) + a2a - ep) + order
    for k in ("tp_comm", "cp_comm"):
        out[k] = float(r[k]) * comm_scale
        out["bubble"] -= out[k] - float(r[k])
    if out["bubble"] < 0.0:                 # the analytic bubble was below the free-comm one
        out["compute"], out["bubble"] = out["compute"] + out["bubble"], 0.0
    scale = float(r["step_time_s"]) / step
    out.update({"step_time_s": step, "tokens_per_s": job.tokens_per_step / step,
                "mfu": float(r["mfu"]) * scale, "hfu": float(r["hfu"]) * scale,
                "bubble_fraction": out["bubble"] / step})
    return out


def _per_stage(job: Job, r: dict[str, Any], costs: StageCostMemo | None = None
               ) -> dict[str, Any]:
    """A pipeline whose stages differ (``layers_per_stage``, or stages on different GPU types):
    the analytic step of the even plan on the slowest GPU, with its compute makespan replaced
    by that of the real stages. Both makespans come from the schedule with free communication
    (``schedules.analysis.simulate_free_comm``; stage ``s`` at ``slowdown_s`` times stage 0's
    step), the rest of the analytic step (communication, optimizer) kept; the difference goes
    to compute (busiest stage) and bubble. ``costs``: the estimate's ``StageCostMemo``."""
    from strategies.schedules.analysis import simulate_free_comm
    costs = costs or StageCostMemo(job)
    p, m = job.plan, job.num_microbatches

    def makespan(f: list[float], b: list[float], w: list[float]) -> tuple[float, float]:
        slow = [(x + y) / (f[0] + b[0]) for x, y in zip(f, b)]
        span = simulate_free_comm(p.schedule, p.pp, m, 1, f[0], b[0],
                                  p.microbatch_group_size, t_w=w[0], slowdown=slow)
        return span, m * max(x + y for x, y in zip(f, b))

    even, real = _stage_times(job, job.cluster.gpu, costs), _stage_times(job, None, costs)
    return _corrected(job, r, makespan(*even), makespan(*real), _messages_shift(
        job, r, [x + y for x, y in zip(*even[:2])], [x + y for x, y in zip(*real[:2])]))


def by_chunk(job: Job, costs: StageCostMemo | None = None) -> bool:
    """Whether ``job``'s pipeline chunks differ in ways the per-stage slowdown of
    ``_per_stage`` does not capture: a layout other than the even split with more than one
    chunk per rank (DualPipe's two copies included), or layers of more than one kind or multi-token prediction (the
    stage-cost record's ``by_kind``; DualPipe's two copies read each one's stage,
    ``_chunk_times``). ``costs``: the estimate's ``StageCostMemo``."""
    from strategies.cost.stage.layers import mixes_kinds
    p = job.plan
    if (p.vpp > 1 or get_schedule(p.schedule).mirrored) and not job.layout.uniform:
        return True                         # DualPipe: rank r's copies, stages r and pp-1-r
    if not mixes_kinds(job.model):
        return False                        # one kind of layer: no by_kind record
    return bool((costs or StageCostMemo(job))().by_kind)


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
    or GPU type (``_per_stage``)."""
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
    corrected for its own layout, layer kinds and GPU types (``_by_group``, ``_per_chunk``,
    ``_per_stage``): what ``estimate`` reports, and what the search's arrays read for the
    plans their columns cannot price (``estimate.kinds``). ``costs``: a ``StageCostMemo`` of
    ``job``; ``base``: a pipelined plan's uncorrected run, ``estimate_arrays`` of
    ``plan_arrays(plan)`` with ``rank_fields(job)`` on ``Cluster.gpu``, where the caller
    computed it (the search, over many plans at once)."""
    p = job.plan
    costs = costs or StageCostMemo(job)  # each GPU type's stage costs, once per estimate
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
            arrays = _real_tail(job, arrays, _per_chunk(job, arrays, costs), costs)
        elif p.pp > 1 and p.vpp == 1 and (p.layers_per_stage is not None
                                          or not job.layout.uniform
                                          or not job.cluster.uniform):
            arrays = _real_tail(job, arrays, _per_stage(job, arrays, costs), costs)
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
    away from the simulation too, §5.112); a mixed cluster keeps it too (its arrays form,
    ``mixed_stages.corrected``, reads the even run, and the columns time every rank on the
    slowest GPU). §5.93, §5.102, §5.112: ``python experiments/uneven_tail_gaps.py``."""
    p = job.plan
    if not job.cluster.uniform or get_schedule(p.schedule).splits_backward:
        return out
    tail = float(r["dp_comm"]) + float(r["optimizer"])
    pipe = float(out["step_time_s"]) - float(out["pp_comm"]) - tail
    again = r
    if not job.layout.uniform or tail_reads_span(job.framework, p.pp, p.zero,
                                                 p.overlap_grad_reduce):
        again = estimate_arrays(job.model, job.cluster, job.dtype, tail_arrays(job),
                                job.framework, job.system, rank_fields(job, None, costs),
                                pipe_span=pipe)
    dp, opt = float(again["dp_comm"]), float(again["optimizer"])
    step = pipe + float(out["pp_comm"]) + dp + opt
    scale = float(out["step_time_s"]) / step
    return {**out, "dp_comm": dp, "optimizer": opt, "step_time_s": step,
            "tokens_per_s": job.tokens_per_step / step, "mfu": float(out["mfu"]) * scale,
            "hfu": float(out["hfu"]) * scale, "bubble_fraction": float(out["bubble"]) / step}
