"""The step's tail in the analytic step (``step_tail``): each kind of rank's data-parallel
tail after its compute (the reduction, DualPipe's mirror all-reduce, the optimizer and the
stack's per-step passes) less its slack, and the paths that follow the whole pipeline
(ZeRO-2's stall without overlap, ZB-H1's and interleaving's tails), the latest of them;
then the all-reduces once a step after the data-parallel sync (``per_step_allreduces``: the
tied word embedding's, MLA's replicated gradients'). Arrays over plans; seconds."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.comm.point_to_point import pair_time
from strategies.cost.norm_barrier import barrier_step
from strategies.cost.stage import StageCostArrays, sp_grad_allreduce_bytes
from strategies.estimate.terms.dp_calls import DpCalls
from strategies.estimate.terms.dp_exposure import Z2_SPLIT
from strategies.estimate.terms.grad_reduce import GradReduce, end_params
from strategies.estimate.terms.messages import microbatch_groups
from strategies.estimate.terms.ranks import rank_of_max
from strategies.estimate.terms.stages import StageTimes
from strategies.estimate.terms.zero2 import Zero2
from strategies.plan_arrays import PlanArrays
from strategies.schedules import schedule_code
from strategies.stacks.param_gather import fill_path_stages, gather_with_optimizer, \
    gathers_at_schedule_start, gathers_on_fill_path, optimizer_head_start, \
    start_gathers_delay, warmup_pace


def step_tail(sc: StageCostArrays, P: PlanArrays, calls: DpCalls, st: StageTimes,
              slack: tuple, gr: GradReduce, zero2: Zero2, z3: list, mb: Any,
              zero_g: Any, t_p2p: Any, f_layer: Any = 0.0,
              with_optimizer: bool = False, barrier_s: Any = None) -> tuple[Any, Any, Any, Any]:
    """The step's tail of plans ``P`` after the pipeline: its data-parallel communication and
    its optimizer (the latest rank's or path's; the first on a tie: rank 0's), the layers of
    the slowest kind of rank (the breakdown's), and the parameter gathers' seconds on
    micro-batch 0's fill path (``stacks.param_gather``; in the first). ``slack``: each kind
    of rank's compute end before the pipeline's; ``gr``, ``zero2``, ``z3`` each kind's
    reductions, ZeRO-2's and ZeRO-3's seconds; ``zero_g`` the ZeRO stage the gradients run
    with; ``t_p2p`` one micro-batch's send between stages; ``f_layer`` a layer's forward with
    its exposed communication (``layer_comm.layer_forward``); ``with_optimizer``: the stack
    dispatches interleaved chunk 0's gathers inside the optimizer step
    (plan ``param_gather_with_optimizer``, ``stacks.param_gather``);
    ``barrier_s``: the gradient norm's all-reduce where the stack clips (``cost.norm_barrier``,
    None: no barrier): every rank's optimizer then starts after the latest reduction."""
    tp, pp, dp, cp, ep, etp, dps = P.tp, P.pp, P.dp, P.cp, P.ep, P.etp, P.dp_shard
    zero, ogr, cl, G = P.zero, P.overlap_grad_reduce, calls.cl, calls.cl.gpus_per_node
    gb, pr_k, pe_k = calls.gb, calls.pr_k, calls.pe_k
    params, pe = pr_k[0], pe_k[0]
    n_k, mirrored = st.n_k, st.mirrored
    t_first, t_mid, t_last = st.t
    grad_k, rs_mb_k = gr.grad_k, zero2.rs_mb_k
    z2_sync, z2_path = zero2.sync, zero2.path
    tail_split, cool_tail = zero2.tail_split, zero2.cool_tail
    stride_pp = tp * cp * dp
    K = range(3)
    # (with dp = 1 too where the routed experts have copies: ``comm.has_dp_copies``)
    copies = cm.has_dp_copies(params, pe, tp, cp, dp, ep, etp)
    # the overlapped parameter gathers of a one-chunk pipeline wait at each stage's first
    # forward, one after another on micro-batch 0's fill path: their sum over the stages joins
    # the step, none is in a rank's tail (``stacks.param_gather``, §5.194)
    on_fill = gathers_on_fill_path(pp, P.vpp, zero, P.overlap_param_gather, mirrored) & copies
    # interleaved: the schedule dispatches every rank's chunks 0 and 1 at its start and each
    # later chunk ``group + rank`` forwards before its first, and a rank exposes what its
    # gathers outlast its forwards before each chunk's first (§5.197)
    on_start = gathers_at_schedule_start(pp, P.vpp, zero, P.overlap_param_gather, mirrored,
                                         P.schedule == schedule_code("interleaved")) & copies
    ag_k = [np.where(on_fill | on_start, 0.0, a) for a in gr.ag_k]
    n_fill = fill_path_stages(pp)
    fill = np.where(on_fill, sum(np.where(n_fill[k] > 0, n_fill[k] * gr.ag_fill_k[k], 0.0)
                                 for k in K), 0.0)
    # the optimizer step and the stack's per-step passes over the gradient buffer and the
    # optimizer shard (compute stream, after the reduction)
    slow_opt = max((f for _, f in cl.faults.stragglers), default=1.0)
    opt_k = [(getattr(sc, f"optimizer_{x}") + getattr(sc, f"passes_{x}")) * slow_opt
             for x in ("first", "mid", "last")]
    if np.any(on_start):     # (the chain's work only where a plan runs it)
        # chunk 0's gathers dispatched inside the optimizer, ahead of the other chunks'
        # update (``gather_with_optimizer``, §5.200)
        opt_on = gather_with_optimizer(on_start, with_optimizer)
        ends = end_params(sc, pr_k)
        heads = [np.where(opt_on, optimizer_head_start(
            getattr(sc, f"optimizer_{x}") * slow_opt, pr_k[k], ends[0] if k == 0 else 0.0,
            ends[2] if k == 2 else 0.0, P.vpp), 0.0) for k, x in zip(K, ("first", "mid", "last"))]
        fill = fill + np.where(on_start, _start_exposed(sc, P, st, gr, t_p2p, f_layer,
                                                        heads, opt_on), 0.0)
    # DualPipe (``Schedule.mirrored``): ranks r and pp-1-r sum the gradients of their two
    # copies of the same stages before the optimizer, one all-reduce over the pair (exposed;
    # the end ranks', (pp - 1)·stride apart: on one node or one GPU on each of two) of the
    # gradients its optimizer steps (with ZeRO >= 1 its dense 1/dp and expert 1/edp shares,
    # ``comm.grad_shard_params``)
    G_pairs = np.where((pp - 1) * stride_pp >= G, G, 1)
    # each rank's tail after its compute (the reduction, the mirror all-reduce, the optimizer),
    # less its slack; the paths that follow the whole pipeline (ZeRO-2's stall without
    # overlap, ``z2_sync_exposed``; ZB-H1's and interleaving's tails) are measured from its end
    tails, live_k = [], []
    for k in K:
        held = cm.grad_shard_params(pr_k[k], pe_k[k], tp, cp, dp, ep, etp, zero, dps)
        mirror = np.where(mirrored, cm.collective_time("allreduce", gb * held, 2, G_pairs, cl),
                          0.0)
        z2 = np.where(ogr, zero2.over_k[k], np.where(mirrored, mb * rs_mb_k[k], -np.inf))
        grad = np.where(zero_g == 2, z2, grad_k[k])
        dp_k = np.where(copies, np.where(zero == 3, z3[k], grad + ag_k[k]), 0.0) + mirror
        live = (k == 0) | ((k == 1) & (pp > 2)) | ((k == 2) & (pp > 1))
        live_k.append(live)
        # (a finite tail: ZeRO-2's stall without overlap is a path, below)
        tails.append(np.where(live & np.isfinite(dp_k), dp_k + opt_k[k] - slack[k], -np.inf))
    # paths after the whole pipeline: then the gather and the optimizer of the rank that ends
    # it (the slowest stage's under ZB-H1, ``Z2_SPLIT`` and ``split_tail_exposed``; rank 0's
    # after 1F1B's way back and interleaving's cool-down), or of a rank that ends later
    slowest = rank_of_max((t_first, t_mid, t_last), pp)

    def at_slowest(x: list) -> Any:
        return np.where(slowest == 0, x[0], np.where(slowest == 2, x[2], x[1]))
    after = [np.where(copies, ag_k[k], 0.0) + opt_k[k] for k in K]
    sync_on = copies & (zero_g == 2) & ~ogr & ~mirrored
    over_on = copies & (zero_g == 2) & ogr
    z2_split = z2_path == Z2_SPLIT
    # each candidate: (its end, its optimizer, what it runs after its gradients are reduced:
    # the optimizer and the parameter gather behind it)
    post_k = [np.where(copies & (zero != 3), ag_k[k], 0.0) + opt_k[k] for k in K]
    candidates = [(tails[k], opt_k[k], post_k[k]) for k in K] + [
        (np.where(sync_on, z2_sync + np.where(z2_split, at_slowest(after), after[0]), -np.inf),
         np.where(z2_split, at_slowest(opt_k), opt_k[0]),
         np.where(z2_split, at_slowest(after), after[0])),
        (np.where(over_on, tail_split + at_slowest(after), -np.inf), at_slowest(opt_k),
         at_slowest(after)),
        (np.where(over_on, cool_tail + after[0], -np.inf), opt_k[0], after[0])] + [
        # each live kind of rank behind ZeRO-2's stall: its reductions end its slack before
        # the path's, then its own gather and optimizer (with the barrier its update, not
        # only the path's rank's, follows the latest reduction: §5.203)
        (np.where(sync_on & live_k[k], z2_sync + after[k] - slack[k], -np.inf),
         opt_k[k], after[k]) for k in K]
    # the step's tail: the latest; its optimizer (the first on a tie: rank 0's) apart in the
    # breakdown, the rest data-parallel communication
    tail, t_opt, _ = candidates[0]
    for val, o, _ in candidates[1:]:
        later = val > tail
        tail, t_opt = np.where(later, val, tail), np.where(later, o, t_opt)
    if barrier_s is not None and np.any(barrier_s > 0):
        # the norm's all-reduce: no rank updates before the latest has its gradients reduced
        # (``cost.norm_barrier.barrier_step``); the breakdown's optimizer: the longest's
        ready = [np.where(np.isfinite(v), v - q, -np.inf) for v, _, q in candidates]
        post = [np.where(np.isfinite(v), q, -np.inf) for v, _, q in candidates]
        synced = barrier_step(ready, post, barrier_s)
        o_b, q_b = candidates[0][1], post[0]
        for (_, o, _), q in zip(candidates[1:], post[1:]):
            longer = q > q_b
            o_b, q_b = np.where(longer, o, o_b), np.where(longer, q, q_b)
        on = barrier_s > 0
        tail, t_opt = np.where(on, synced, tail), np.where(on, o_b, t_opt)
    dp_exposed = tail - t_opt + fill
    return dp_exposed, t_opt, at_slowest(n_k), fill


def _start_exposed(sc: StageCostArrays, P: PlanArrays, st: StageTimes, gr: GradReduce,
                   t_p2p: Any, f_layer: Any, heads: list, opt_on: Any) -> Any:
    """An interleaved pipeline's gathers as its schedule dispatches them
    (``stacks.param_gather.gathers_at_schedule_start``, §5.194, §5.197): the delay they
    carry to the last rank (``start_gathers_delay`` over rank 0, rank 1 and the last: a
    middle rank past rank 1 holds rank 1's gathers with more forwards before each chunk's
    first, so rank 1's wait bounds it), which holds back the forwards and all after them.
    Kind ``k`` (rank 0, 1, pp - 1) waits ``w_k`` before its first forward (the chunk
    forwards and sends of the stages before it, ``tau_k`` each: its layers' share of a
    chunk of ``f_layer``, a layer's forward with its exposed communication, and a send),
    then runs a forward every ``warmup_pace``. Chunk gathers: ``t_agc_k`` (chunk 0 at most
    ``ag_fill0_k``), every chunk: 0 and 1 at the schedule's start, chunk ``c >= 2``
    ``group + rank`` forwards before its first; under ``opt_on`` (``gather_with_optimizer``)
    chunk 0's ``heads[k]`` seconds before the start, one bucket (its whole gather exposable).
    Seconds."""
    pp, v = P.pp, P.vpp
    group = microbatch_groups(P)
    n_first, n_mid, _ = st.n_k
    tau = [n * f_layer / v + t_p2p for n in st.n_k]
    pace = warmup_pace(tau, pp, group)
    before = (0.0, tau[0], tau[0] + np.maximum(pp - 2, 0) * tau[1])
    vmax = int(np.max(v))
    gathers, first, ranks, waits = [], [], [], []
    for k in range(3):
        # (pp 2: no middle rank; one with no gathers passes the delays on unchanged)
        t0, tb, tl = (np.where(pp > 2, t, 0.0) for t in gr.t_agc_k[k]) if k == 1 \
            else gr.t_agc_k[k]
        gathers.append([np.where(c == v - 1, tl, tb) if c else t0 for c in range(vmax)])
        first.append(np.where(opt_on, gathers[k][0], gr.ag_fill0_k[k]))
        ranks.append((0, 1, pp - 1)[k])
        waits.append(before[k])
    return start_gathers_delay(gathers, first, v, group, ranks, waits, [pace] * 3, heads)


def per_step_allreduces(dp_exposed: Any, sc: StageCostArrays, P: PlanArrays, cl: Any,
                        n_k: tuple) -> Any:
    """``dp_exposed`` with the all-reduces once a step after the data-parallel sync added:
    the tied word embedding's gradient between the first stage and the LM head's, MLA's
    replicated gradients over tp (``n_k``: each kind of rank's layers). Seconds."""
    tp, pp, dp, cp, G = P.tp, P.pp, P.dp, P.cp, cl.gpus_per_node
    n_first, n_mid, n_last = n_k
    # the tied word embedding's gradient, all-reduced between the first stage and the LM head's
    # once per step after the data-parallel reduction (``strategies.cost.step``)
    # (in one node only when the whole pipeline group is: pp·tp·cp·dp GPUs within a node)
    t_tied = np.where(sc.tied_bytes > 0, pair_time(
        "allreduce", sc.tied_bytes, pp * tp * cp * dp <= G, cl), 0.0)
    dp_exposed = dp_exposed + t_tied
    # MLA's sequence-parallel-marked replicated gradients, all-reduced over tp once per step
    # after the data-parallel sync (``cost.stage.sp_grad_allreduce_bytes``, §5.85): the
    # stage holding the most layers
    if np.any(sc.tp_rep_grad_bytes > 0):
        rep = sp_grad_allreduce_bytes(sc, np.maximum(np.maximum(n_first, n_mid), n_last))
        dp_exposed = dp_exposed + np.where(rep > 0, cm.collective_time(
            "allreduce", np.where(rep > 0, rep, 1.0), tp, 1, cl), 0.0)
    return dp_exposed
