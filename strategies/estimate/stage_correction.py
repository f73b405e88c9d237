"""The scalar estimate's correction for a pipeline whose stages differ (stages on different GPU
types; an uneven layout of one chunk per rank under a split backward, the others taking
``chunk_correction.per_chunk``, docs/calibration.md §5.235): the even plan's analytic
step with its compute makespan replaced by the real stages' (``per_stage``), the step rule
``corrected`` and the pipeline messages' shift ``messages_shift`` that the per-chunk
correction (``chunk_correction``) reads too."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.estimate.stage_passes import busiest, offload_seconds, stage_seconds
from strategies.estimate.terms.messages import ranked_messages
from strategies.estimate.terms.stages import bubble_share
from strategies.job import Job
from strategies.schedules import head_rank, schedule_code
from strategies.schedules.registry import schedule_of_code


def stage_records(job: Job, even_on=None, costs: StageCostMemo | None = None
                  ) -> list[tuple[Any, float]]:
    """``(stage-cost record, mean layers)`` of each pipeline stage, as ``stage_times`` times
    it: its own layer count on its own GPU type (of those among its ranks, the one whose
    forward + backward is longest, ``mixed.slowest_gpu``), or with ``even_on`` (a GPU)
    ``num_layers / pp`` layers on that GPU for every stage. ``costs``: the estimate's
    ``StageCostMemo``."""
    from strategies.estimate.mixed import slowest_gpu
    costs = costs or StageCostMemo(job)
    p = job.plan
    head_at = head_rank(p.schedule, p.pp, p.vpp)
    out = []
    for s in range(p.pp):
        if even_on is None:
            n = job.layers_of_stage(s)
            gpu = slowest_gpu(map(job.cluster.gpu_of_node, job.stage_nodes(s)),
                              lambda g: sum(stage_seconds(costs(g), n, p.vpp, s == 0,
                                                          s == head_at)[:2]))
        else:
            gpu, n = even_on, job.model.num_layers / p.pp
        out.append((costs(gpu), n))
    return out


def stage_times(job: Job, even_on=None, costs: StageCostMemo | None = None
                 ) -> tuple[list[float], list[float], list[float]]:
    """Forward, backward (+ recomputation) and the backward's weight-gradient part (``W``)
    seconds per micro-batch of each pipeline stage (``stage_passes.stage_seconds``) from the
    shared cost record (``stage_records``: each stage's own layers on its own GPU type, or
    with ``even_on`` the analytic model's ``num_layers / pp`` on that GPU).
    ``costs``: the estimate's ``StageCostMemo``."""
    p, f, b, w = job.plan, [], [], []
    head_at = head_rank(p.schedule, p.pp, p.vpp)
    for s, (c, n) in enumerate(stage_records(job, even_on, costs)):
        for out, x in zip((f, b, w), stage_seconds(c, n, p.vpp, s == 0, s == head_at)):
            out.append(x)
    return f, b, w


def stage_offloads(job: Job, costs: StageCostMemo | None = None) -> list[Any]:
    """Each real stage's exposed activation-offload seconds per micro-batch
    (``stage_passes.offload_seconds`` of its ``stage_records``)."""
    return [offload_seconds([(n, c)]) for c, n in stage_records(job, None, costs)]


def messages_shift_arrays(code: Any, m: Any, pp: int, vpp: int, p2p: Any, even: list,
                          real: list) -> Any:
    """Seconds the pipeline messages change by when the rank that bounds the steady state
    is the real stages' rather than the even plan's (``even``/``real``: each rank's seconds
    per micro-batch, numbers or arrays over plans; ``p2p``: one message's seconds):
    ``terms.messages.ranked_messages`` of the real ranks less the even ones' under a
    schedule (code ``code``) with per-kind counts (1F1B, docs/calibration.md §5.21), else 0.
    The rule of ``messages_shift`` (one plan) and of ``mixed_stages`` (arrays)."""
    if pp < 2 or not schedule_of_code(code).messages_by_rank:
        return 0.0
    n = np.shape(p2p)

    def ranked(ts: list) -> Any:
        mid = np.maximum.reduce(ts[1:-1]) if pp > 2 else 0.0
        return ranked_messages(np.full(n, code), np.full(n, m), np.full(n, pp),
                               np.full(n, vpp), (ts[0], mid, ts[-1]), sum(ts), p2p)
    return ranked(real) - ranked(even)


def messages_shift(job: Job, r: dict[str, Any], even: list[float],
                   real: list[float]) -> float:
    """``messages_shift_arrays`` of ``job`` (``r``: its analytic step), in seconds."""
    p = job.plan
    return float(messages_shift_arrays(schedule_code(p.schedule), job.num_microbatches, p.pp,
                                       p.vpp, float(r["p2p_time_s"]), even, real))


#: the analytic step's entries ``corrected_arrays`` reads
_CORRECTED_READS = ("step_time_s", "pp_comm", "ep_comm", "compute", "bubble", "tp_comm",
                    "cp_comm", "mfu", "hfu", "offload")


def corrected_arrays(r: Mapping[str, Any], even: tuple, real: tuple, tokens: Any,
                     messages: Any = 0.0, a2a: Any = 0.0, order: Any = 0.0,
                     comm_scale: Any = None, offload: Any = None) -> dict[str, Any]:
    """The analytic step ``r`` with the even pipeline's compute makespan and busy time
    (``even``) replaced by the real ones (``real``): the difference goes to compute (the
    busiest rank) and bubble; ``messages`` (``messages_shift``) to ``pp_comm``, ``a2a``
    (``chunk_correction.a2a_shift`` with expert parallelism) to ``ep_comm``, ``order``
    (``a2a_shift`` without: the layers' own communication in the real order) to bubble, less
    the part of it that is the busiest rank's own layers' (``tp_comm``/``cp_comm`` times
    ``comm_scale``; None: those two left out). ``offload``: the busiest real rank's exposed
    offload seconds per step (``stage_passes.offload_seconds``), which its busy time holds:
    the breakdown's ``offload`` entry, and compute the rest of the shift (None: ``r``'s kept,
    the even rank's). ``tokens``: per step. Numbers (one plan, ``corrected``) or arrays over
    plans (``mixed_stages``); returns the entries it changes."""
    (span_e, busy_e), (span_u, busy_u) = even, real
    step = r["step_time_s"] - span_e + span_u + messages + a2a + order
    # (what the order removes beyond the even composition's all-to-all was its bubble's excess)
    ep = np.maximum(r["ep_comm"] + a2a, 0.0)
    out = {"pp_comm": r["pp_comm"] + messages, "ep_comm": ep}
    compute = r["compute"] + busy_u - busy_e
    if offload is not None:     # the busiest real rank's copies: their own entry
        out["offload"] = offload
        compute = compute - (offload - r["offload"])
    bubble = r["bubble"] + (span_u - busy_u) - (span_e - busy_e) \
        + (r["ep_comm"] + a2a - ep) + order
    if comm_scale is not None:
        for k in ("tp_comm", "cp_comm"):
            out[k] = r[k] * comm_scale
            bubble = bubble - (out[k] - r[k])
    neg = bubble < 0.0                  # the analytic bubble was below the free-comm one
    out["compute"] = np.where(neg, compute + bubble, compute)
    out["bubble"] = np.where(neg, 0.0, bubble)
    scale = r["step_time_s"] / step
    out.update({"step_time_s": step, "tokens_per_s": tokens / step, "mfu": r["mfu"] * scale,
                "hfu": r["hfu"] * scale, "bubble_fraction": bubble_share(out["bubble"], step)})
    return out


def corrected(job: Job, r: dict[str, Any], even: tuple[float, float],
              real: tuple[float, float], messages: float = 0.0,
              a2a: float = 0.0, order: float = 0.0,
              comm_scale: float = 1.0, offload: float | None = None) -> dict[str, Any]:
    """``r`` (``job``'s analytic step) with ``corrected_arrays``' entries, in seconds."""
    nums = {k: float(r[k]) for k in _CORRECTED_READS}
    fixed = corrected_arrays(nums, even, real, job.tokens_per_step, messages, a2a, order,
                             comm_scale, offload)
    return {**r, **{k: float(v) for k, v in fixed.items()}}


def _free_ranks(job: Job, f: list[float], b: list[float], w: list[float]) -> list:
    """Each rank's span (``schedules.analysis.free_comm_ranks``) of ``job``'s schedule with
    free communication, stage ``s`` running ``(f_s + b_s)/(f_0 + b_0)`` times stage 0's
    forward ``f[0]``, backward ``b[0]`` and weight gradient ``w[0]``; seconds."""
    from strategies.schedules.analysis import free_comm_ranks
    p = job.plan
    slow = [(x + y) / (f[0] + b[0]) for x, y in zip(f, b)]
    return free_comm_ranks(p.schedule, p.pp, job.num_microbatches, 1, f[0], b[0],
                           p.microbatch_group_size, t_w=w[0], slowdown=slow)


def real_replay(job: Job, costs: StageCostMemo | None = None
                ) -> tuple[tuple[list[float], list[float], list[float]], tuple]:
    """The real stages' forward, backward and ``W`` seconds (``stage_times(job, None)``) and
    each rank's span when they run ``job``'s schedule with free communication
    (``_free_ranks``; ``schedules.analysis.RankSpan``, seconds): the one replay of the real
    pipeline that ``per_stage`` (its makespan) and ``stage_slack`` (each kind of rank's end)
    read, computed once per estimate (kept on ``costs``, the estimate's ``StageCostMemo``)."""
    costs = costs or StageCostMemo(job)

    def replay() -> tuple[tuple[list[float], list[float], list[float]], tuple]:
        real = stage_times(job, None, costs)
        return real, tuple(_free_ranks(job, *real))
    return costs.keep("real_replay", replay)


def stage_slack(job: Job, costs: StageCostMemo | None = None) -> tuple[float, float, float]:
    """How long before the real stages' pipeline ends (``real_replay``, the replay
    ``per_stage`` reads) rank 0, rank 1 (the middle kind, ``terms.ranks.rank_slack``'s) and
    rank ``pp - 1`` end their compute:
    the kinds' slack from the replay rather than ``rank_slack``'s closed form, which has rank
    0 end last. Under a split backward on uneven stages the slowest stage's trailing weight
    gradients end the pipeline, so its rank is the last to reduce its gradients and the
    others wait for it at the gradient norm's barrier (``cost.norm_barrier``, §5.203).
    Seconds."""
    ends = [x.end for x in real_replay(job, costs)[1]]
    span, pp = max(ends), job.plan.pp
    return span - ends[0], span - ends[min(1, pp - 1)], span - ends[pp - 1]


def per_stage(job: Job, r: dict[str, Any], costs: StageCostMemo | None = None
               ) -> dict[str, Any]:
    """A pipeline whose stages differ (``layers_per_stage``, or stages on different GPU types):
    the analytic step of the even plan on the slowest GPU, with its compute makespan replaced
    by that of the real stages. Both makespans come from the schedule with free communication
    (``schedules.analysis.simulate_free_comm``; stage ``s`` at ``slowdown_s`` times stage 0's
    step), the rest of the analytic step (communication, optimizer) kept; the difference goes
    to compute (busiest stage) and bubble, that stage's own exposed offload copies
    (``stage_offloads``) to ``offload``. ``costs``: the estimate's ``StageCostMemo``."""
    costs = costs or StageCostMemo(job)
    m = job.num_microbatches

    def makespan(times: tuple[list[float], list[float], list[float]], ranks
                 ) -> tuple[float, float]:
        span = max(x.end for x in ranks)
        return span, m * max(x + y for x, y in zip(*times[:2]))

    even = stage_times(job, job.cluster.gpu, costs)
    real, real_ranks = real_replay(job, costs)     # the replay ``stage_slack`` reads too
    busy = [x + y for x, y in zip(*real[:2])]
    shift = messages_shift(job, r, [x + y for x, y in zip(*even[:2])], busy)
    scale, ep = busiest_layers_comm(job, r, busy)
    return corrected(job, r, makespan(even, _free_ranks(job, *even)),
                     makespan(real, real_ranks), shift, ep, -ep, scale,
                     offload=m * busiest(busy, stage_offloads(job, costs)))


def busiest_layers_comm(job: Job, r: dict[str, Any], busy: list[float]
                        ) -> tuple[float, float]:
    """``(comm_scale, ep shift)``: the breakdown's layer communication as the busiest real
    stage's (largest ``busy``, the first on a tie) rather than the analytic step's slowest
    kind of rank's: ``tp_comm``/``cp_comm`` scaled to that stage's layers (one layer's
    ``layer_comm_s`` each micro-batch), and ``ep_comm`` moved by its layers' expert
    all-to-all beyond ``r``'s, two directions and a recomputed layer's again each
    (``ep_a2a_s``, ``ep_rc_s``; the order runs no pairs), the step unchanged (the rest is
    bubble; docs/calibration.md §5.231). ``(1, 0)`` where ``r`` has no layer communication,
    and for Megatron's combined 1F1B (``ep_overlap``), whose lone passes ``r`` prices."""
    m, per = job.num_microbatches, float(r.get("layer_comm_s", 0.0))
    had = float(r["tp_comm"]) + float(r["cp_comm"])
    if per <= 0.0 or had <= 0.0:
        return 1.0, 0.0
    held = m * job.layers_of_stage(max(range(len(busy)), key=busy.__getitem__))
    scale = held * per / had
    if job.plan.ep_overlap or float(r.get("ep_a2a_s", 0.0)) <= 0.0:
        return scale, 0.0
    layer_ep = 2.0 * float(r["ep_a2a_s"]) + float(r["ep_rc_s"])
    return scale, (held - had / per) * layer_ep

