"""The scalar estimate's correction for a pipeline whose chunks differ (an uneven layout with
more than one chunk per rank, DualPipe's two copies, dense and MoE layers, multi-token
prediction): the free-communication order over each rank's own chunks (``per_chunk``), the
exposed expert all-to-all and layer communication in that order (``a2a_shift``), the
pipeline messages of DualPipe's and DualPipeV's order (``order_messages``), and the test of
which plans take it (``by_chunk``)."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from strategies.cost.system import get_system
from strategies.estimate.stage_correction import corrected, messages_shift
from strategies.estimate.pair_layers import dual_pairs, order_a2a
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.estimate.stage_passes import busiest, chunk_seconds, offload_seconds
from strategies.job import Job
from strategies.schedules import get_schedule


def chunk_records(job: Job, even_on=None, costs: StageCostMemo | None = None
                  ) -> list[list[tuple[Any, list, bool, bool]]]:
    """``(stage-cost record, chunk_layers items, embedding, LM head)`` of each rank's chunks,
    as ``chunk_times`` times them: the layers each chunk holds by kind
    (``cost.stage.chunk_layers``) on its rank's GPU type (``mixed.slowest_gpu`` over the
    rank's chunks), the embedding on the first position and the LM head on the last; with
    ``even_on`` (a GPU) ``num_layers / (pp·vpp)`` mean layers in every chunk on that GPU,
    the analytic model's assumption. DualPipe (``Schedule.mirrored``): rank ``r``'s chunk 1
    holds stage ``pp-1-r``'s layers (the layout's chunk 0 there). ``costs``: the
    estimate's ``StageCostMemo``."""
    from strategies.cost.stage import chunk_layers
    from strategies.estimate.mixed import slowest_gpu
    costs = costs or StageCostMemo(job)
    p = job.plan
    sched = get_schedule(p.schedule)
    last = sched.num_virtual_stages(p.pp, p.vpp) - 1
    mirrored = bool(sched.mirrored) and p.pp > 1

    def row_on(s: int, gpu) -> list[tuple[Any, list, bool, bool]]:
        c = costs(gpu)
        row = []
        for ch in range(2 if mirrored else p.vpp):
            src = ((s if ch == 0 else p.pp - 1 - s), 0) if mirrored else (s, ch)
            if even_on is None:
                items = chunk_layers(c, *src, job.layers_of_chunk(*src))
            else:
                items = [(job.model.num_layers / (p.pp * p.vpp), c)]
            vs = sched.virtual_stage(s, ch, p.pp, p.vpp, 0)
            row.append((c, items, vs == 0, vs == last))
        return row

    out = []
    for s in range(p.pp):
        gpu = even_on if even_on is not None else slowest_gpu(
            map(job.cluster.gpu_of_node, job.stage_nodes(s)),
            lambda g: sum(f + b for f, b, _ in (chunk_seconds(*x) for x in row_on(s, g))))
        out.append(row_on(s, gpu))
    return out


def chunk_times(job: Job, even_on=None, costs: StageCostMemo | None = None
                 ) -> list[list[tuple[float, float, float]]]:
    """``(F, B + recompute, W)`` seconds per micro-batch of each rank's chunks
    (``stage_passes.chunk_seconds`` of ``chunk_records``: each chunk's own layers by kind on
    its rank's GPU type, or with ``even_on`` the analytic model's mean layers on that GPU).
    ``costs``: the estimate's ``StageCostMemo``."""
    return seconds_of(chunk_records(job, even_on, costs))


def seconds_of(records: list[list[tuple[Any, list, bool, bool]]]
               ) -> list[list[tuple[float, float, float]]]:
    """``stage_passes.chunk_seconds`` of each rank's ``chunk_records``."""
    return [[chunk_seconds(*x) for x in row] for row in records]


def chunk_passes(job: Job, rank: int) -> list[int]:
    """The micro-batches the schedule's order runs through each of ``rank``'s chunks in one
    step: ``num_microbatches`` each, but DualPipe's two copies (``Schedule.mirrored``), which
    take half each (its order, ``Schedule.steps``, counted)."""
    p, m = job.plan, job.num_microbatches
    if not (get_schedule(p.schedule).mirrored and p.pp > 1):
        return [m] * p.vpp
    return list(_mirrored_passes(p.schedule, rank, p.pp, m, p.vpp, p.microbatch_group_size))


@lru_cache(maxsize=1024)
def _mirrored_passes(schedule: str, rank: int, pp: int, m: int, vpp: int,
                     group_size: int | None) -> tuple[int, int]:
    """``chunk_passes`` of a mirrored schedule's rank: its forwards through each copy, counted
    on its order (``Schedule.steps``) once per shape (an estimate asks for each rank's
    dozens of times)."""
    steps = get_schedule(schedule).steps(rank, pp, m, vpp, group_size)
    return tuple(sum(1 for x in steps if x.kind == "F" and x.chunk == ch) for ch in range(2))


def chunk_shares(job: Job, rank: int) -> list[float]:
    """Each of ``rank``'s chunks' share of the step's micro-batches (``chunk_passes`` over
    ``num_microbatches``): 1, but 1/2 for each of DualPipe's two copies. A rank's busy
    seconds per micro-batch are its chunks' at these shares."""
    m = job.num_microbatches
    return [n / m for n in chunk_passes(job, rank)]


def rank_seconds(shares: list[list[float]], times: list[list[tuple[Any, Any, Any]]]
                 ) -> list[Any]:
    """Each rank's busy seconds (``F + B``) per micro-batch of the step: its chunks'
    (``chunk_times``), each at its share of the micro-batches (``shares``: ``chunk_shares``
    of each rank)."""
    return [sum(k * (f + b) for k, (f, b, _) in zip(ks, row)) for ks, row in zip(shares, times)]


def rank_offloads(job: Job, records: list[list[tuple[Any, list, bool, bool]]]) -> list[Any]:
    """Each rank's exposed activation-offload seconds per step over its chunks
    (``chunk_records``): each chunk's ``stage_passes.offload_seconds`` times the
    micro-batches run through it (``chunk_passes``)."""
    return [sum(n * offload_seconds(x[1]) for n, x in zip(chunk_passes(job, r), row))
            for r, row in enumerate(records)]


def per_chunk(job: Job, r: dict[str, Any], costs: StageCostMemo | None = None
               ) -> dict[str, Any]:
    """A pipeline whose chunks differ (a layout with uneven chunks, interleaved or not; dense
    and MoE layers; multi-token prediction): ``per_stage``'s correction with the makespans
    of the free-communication simulation over each rank's chunks (``chunk_times``: the
    even split's mean layers against the layers each chunk holds) and the busiest rank's busy
    time, each chunk's at the micro-batches the order runs through it (``rank_seconds`` at
    ``chunk_shares``: DualPipe's copies ``m/2`` each, docs/calibration.md §5.222); that
    rank's layers per micro-batch scale ``tp_comm``/``cp_comm``. Under DualPipe and DualPipeV
    (``Schedule.overlaps_pairs``) the pipeline messages too are the order's
    (``order_messages``, §5.225). ``costs``: the estimate's ``StageCostMemo``."""
    from strategies.schedules.analysis import simulate_free_comm
    costs = costs or StageCostMemo(job)
    p, m = job.plan, job.num_microbatches
    spans: dict[int, tuple[Any, float]] = {}    # id(times) -> (times, makespan): each once

    def span(times, pairs=None) -> float:
        """The order's makespan over ``times`` (the even split's and the layout's are read
        again by ``a2a_shift``: worked out once, the same numbers); ``pairs``: the seconds
        of each overlapped pair (``analysis.free_comm_ranks``' ``pair_seconds``)."""
        hit = spans.get(id(times))
        if hit is None:
            hit = spans[id(times)] = (times, simulate_free_comm(
                p.schedule, p.pp, m, p.vpp, 0.0, 0.0, p.microbatch_group_size,
                chunk_times=times, combined=bool(p.ep_overlap), pair_seconds=pairs))
        return hit[1]

    shares = [chunk_shares(job, rank) for rank in range(p.pp)]

    def ranks(times) -> list[float]:
        return rank_seconds(shares, times)

    def makespan(times) -> tuple[float, float]:
        return span(times), m * max(ranks(times))

    held_by = chunk_records(job, None, costs)          # the real chunks
    even, real = chunk_times(job, job.cluster.gpu, costs), seconds_of(held_by)
    shift, held, timed, own = a2a_shift(job, r, even, real, span, costs)
    # the busiest real rank's own exposed offload copies: the breakdown's entry
    off = busiest(ranks(real), rank_offloads(job, held_by))
    msgs, idle = messages_shift(job, r, ranks(even), ranks(real)), 0.0
    if get_schedule(p.schedule).overlaps_pairs:     # DualPipe's messages on its own order
        busy = ranks(real)
        msgs, idle = order_messages(job, r, timed or (real, None),
                                    max(range(p.pp), key=busy.__getitem__), costs)
    # the busiest real rank's layers run the layers' own communication (``r``'s is the even
    # rank's num_layers/pp)
    scale = 1.0 if held is None else held / (job.model.num_layers / p.pp)
    if float(r.get("ep_a2a_s", 0.0)) > 0:      # the order's shift: expert communication
        # (the order's shift holds the layers' TP/CP communication too: the busiest rank's
        # extra layers' share is theirs, not the all-to-all's, §5.225)
        extra = (scale - 1.0) * (float(r["tp_comm"]) + float(r["cp_comm"]))
        # the busiest rank's own exposed all-to-all on the order is ``ep_comm``, the rest
        # of the shift its bubble (§5.231)
        a2a = shift - extra if own is None else own - float(r["ep_comm"])
        return corrected(job, r, makespan(even), makespan(real), msgs, a2a,
                         idle + shift - a2a, scale, off)
    # the rest of the order's shift is bubble
    return corrected(job, r, makespan(even), makespan(real), msgs, 0.0, shift + idle, scale,
                     off)


def order_messages(job: Job, r: dict[str, Any], timed: tuple, rank: int,
                   costs: StageCostMemo | None = None) -> tuple[float, float]:
    """``(pp_comm, bubble)``: seconds the pipeline messages change ``r``'s ``pp_comm`` and
    bubble by when they are counted on the schedule's own order (``schedules.message_replay``:
    each exchange's sends and receives on the rank's point-to-point stream, as the simulator
    runs them) rather than by ``exposed_messages``' closed form. The order's makespan with its
    messages less the one without, over ``timed`` (``(chunk times, pair seconds)``: the real
    chunks with their layers' own communication where ``a2a_shift`` priced it, else their
    compute), is what the messages add to the step: ``rank``'s (the busiest) exposed
    transfers are its ``pp_comm``, the rest its bubble (docs/calibration.md §5.225). One
    message is ``r``'s ``p2p_time_s``, of which a receive's tensor-parallel all-gather (no
    sequence parallelism) is priced after the receive. The run is kept on ``costs``
    (``"order_messages"``: each rank's end, ``order_slack``)."""
    from strategies.cost import comm as cm
    from strategies.schedules.analysis import event_seconds
    from strategies.schedules.message_replay import message_order, replay_messages
    p = job.plan
    sched = get_schedule(p.schedule)
    c = (costs or StageCostMemo(job))(job.cluster.gpu)
    t_p2p = float(r["p2p_time_s"])
    t_gather = float(cm.collective_time("allgather", c.p2p_gather_bytes, p.tp, 1,
                                        job.cluster)) if c.p2p_gather_bytes > 0 else 0.0
    times, pairs = timed
    seconds = event_seconds(sched, p.pp, p.vpp, 0.0, 0.0, chunk_times=times,
                            pair_seconds=pairs)
    # the order is the shape's (kept); each kind of pass timed once for both runs
    order = message_order(sched, p.pp, job.num_microbatches, p.vpp, p.microbatch_group_size)
    dur = [seconds(rk, x) for rk, x in order.sigs]
    run = (costs or StageCostMemo(job)).keep("order_messages", lambda: replay_messages(
        order, dur, t_p2p - t_gather, t_gather))
    free = replay_messages(order, dur, 0.0, 0.0).makespan
    own = run.exposed_comm(rank)
    return own - float(r["pp_comm"]), run.makespan - free - own


def order_slack(job: Job, costs: StageCostMemo) -> tuple[float, float, float] | None:
    """How long before the pipeline's end (the order with its messages, ``order_messages``'
    run kept on ``costs``) rank 0, rank 1 and rank ``pp - 1`` end: each kind of rank's
    slack, which hides as much of its data-parallel tail (``analytic``'s ``rank_ends``);
    None where no such run was made. Seconds."""
    run = costs.keep("order_messages", lambda: None)
    if run is None:
        return None
    span, pp = run.makespan, job.plan.pp
    return span - run.end[0], span - run.end[min(1, pp - 1)], span - run.end[pp - 1]


def a2a_shift(job: Job, r: dict[str, Any], even, real, span,
               costs: StageCostMemo | None = None
               ) -> tuple[float, float | None, tuple | None, float | None]:
    """(Seconds, the busiest real rank's layers per micro-batch at its chunks'
    ``chunk_shares``, the ``(chunk times, pair seconds)`` the order ran with, and that
    rank's own exposed all-to-all seconds on the order (``order_a2a``; None with
    ``ep_overlap``); or ``0, None, None, None``): the seconds the exposed expert all-to-all
    changes by
    when an overlapped-pair schedule
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
    (``splits_backward``) plans and for the even split of one kind (but DualPipe's and
    DualPipeV's without expert parallelism, whose even split replays its order too, §5.225,
    and with it where ``SystemConfig.dualpipe_ep_order`` is on, §5.231, their groups then
    ``pair_layers.dual_pairs``');
    without expert parallelism the same order with the layers' TP and CP communication alone
    (an uneven layout, docs/calibration.md §5.93).
    ``even``/``real``: ``chunk_times`` of the even split and of the layout; ``span(times)``:
    the order's makespan; ``costs``: the estimate's ``StageCostMemo``."""
    p = job.plan
    sched = get_schedule(p.schedule)
    # an order with pairs: DualPipe's ``F&B``, Megatron-Core's combined 1F1B (``ep_overlap``,
    # whose lone warm-up forwards and cool-down backwards the order runs, §5.91)
    pairs = bool(sched.overlaps_pairs) or bool(p.ep_overlap)
    c = (costs or StageCostMemo(job))(job.cluster.gpu)
    on = bool(get_system(job.system).dualpipe_ep_order)    # §5.231's switch
    if pairs and job.layout.uniform and (
            (sched.overlaps_pairs and p.ep > 1 and not on)
            or (not sched.overlaps_pairs and not c.by_kind)):
        return 0.0, None, None, None
    # no paired overlap (1F1B and the like, §5.52; interleaved, §5.54): each chunk's own
    # layers and kinds (dense first layers carry no all-to-all; MTP), as the simulator runs
    # them. Megatron's combined 1F1B (``ep_overlap``) keeps the even composition (within
    # -1.5..-0.3 % of its simulation on §5.54's seeded set; this order has no pairs, +0.8..
    # +4.7 %), as do the zero-bubble orders (``splits_backward``: the W steps fill the drain;
    # ZB-H1 met its simulation within 2 % with the even composition, -3.5 % with this one:
    # tests/test_zero_overlap.py)
    if not pairs and (sched.splits_backward or (job.layout.uniform and not c.by_kind)):
        return 0.0, None, None, None
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
        # the rank's layers per micro-batch of the step: each chunk's at its share of the
        # micro-batches (``chunk_shares``: half each of DualPipe's copies)
        layers.append(sum(k * counts(rk, ch)[0] for ch, k in
                          zip(range(len(row)), chunk_shares(job, rk))))
        for ch, (f, b, w) in enumerate(row):
            n, e = counts(rk, ch)
            o = n * other / 2
            out.append((f, b, w, e * a2a + o, e * (a2a + rc) + o, e * pair / 2 + o,
                        e * (pair / 2 + rc) + o))
        times.append(out)
    pipe = float(r["step_time_s"]) - float(r["pp_comm"]) - float(r["dp_comm"]) \
        - float(r["optimizer"])
    # the makespan with communication less the one without (the compute order, which
    # ``corrected`` puts in place of the even one) and less the even composition's excess
    # over the even compute order
    pairs = _combined_pairs(job, c, times, a2a, rc, other) if p.ep_overlap else None
    dual = dual_pairs(chunk_records(job, None, costs), times, a2a, rc, other) \
        if sched.overlaps_pairs and on else None
    busy = rank_seconds([chunk_shares(job, rk) for rk in range(len(real))], real)
    busiest = max(range(len(real)), key=busy.__getitem__)
    if dual is not None:
        pairs = lambda rank, group: dual(rank, group)[0]    # noqa: E731

    def lone(kind: str, ch: int) -> float:
        return counts(busiest, ch)[1] * (a2a + (rc if kind == "B" else 0.0))

    def paired(group: tuple) -> float:
        """A group's exposed all-to-all: ``dual_pairs``', or each pass's ``pair / 2`` a MoE
        layer (the times' rule without the switch)."""
        if dual is not None:
            return dual(busiest, group)[1]
        return sum(counts(busiest, ch)[1] * (pair / 2 + (rc if k == "B" else 0.0))
                   for k, ch in group if k != "W")
    # the busiest rank's own exposed all-to-all on the order (``ep_comm``; Megatron's
    # combined pairs keep theirs, §5.91)
    own = None if p.ep_overlap else order_a2a(
        sched, busiest, p.pp, job.num_microbatches, p.vpp, p.microbatch_group_size, lone,
        paired)
    return (span(times, pairs) - span(real) - (pipe - span(even)), layers[busiest],
            (times, pairs), own)


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



def by_chunk(job: Job, costs: StageCostMemo | None = None) -> bool:
    """Whether ``job``'s pipeline chunks differ in ways the per-stage slowdown of
    ``per_stage`` does not capture: a layout other than the even split with more than one
    chunk per rank (DualPipe's two copies included), or layers of more than one kind or multi-token prediction (the
    stage-cost record's ``by_kind``; DualPipe's two copies read each one's stage,
    ``chunk_times``); every DualPipe and DualPipeV plan, whose messages are counted on
    its order (``order_messages``, §5.225); and an uneven layout of one chunk per rank under
    a schedule without a split backward (1F1B, DeepSpeed's 1F1B, GPipe), whose layers' own
    communication (TP, CP, the expert all-to-all) runs in the real order (``a2a_shift``;
    1F1B then equals its contention-free simulation, docs/calibration.md §5.235). The
    zero-bubble orders keep ``per_stage`` (``a2a_shift`` prices none of theirs, §5.52).
    ``costs``: the estimate's ``StageCostMemo``."""
    from strategies.cost.stage.layers import mixes_kinds
    p = job.plan
    sched = get_schedule(p.schedule)
    if sched.overlaps_pairs:
        return True                         # DualPipe, DualPipeV: the order, its messages
    if (p.vpp > 1 or sched.mirrored) and not job.layout.uniform:
        return True                         # DualPipe: rank r's copies, stages r and pp-1-r
    if not job.layout.uniform and not sched.splits_backward:
        return True                         # one chunk, uneven: the order's layers (§5.235)
    if not mixes_kinds(job.model):
        return False                        # one kind of layer: no by_kind record
    return bool((costs or StageCostMemo(job))().by_kind)

