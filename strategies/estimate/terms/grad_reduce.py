"""Each kind of rank's gradient reduction and parameter all-gather after its compute in the
analytic step (``grad_reduce``): a whole all-reduce (ZeRO-0, DeepSpeed's BF16_Optimizer) or
reduce-scatter, overlapped with its last backward from its first full bucket on (interleaved:
chunk by chunk, ``grad_window_exposed``; DualPipe: its two copies), the last bucket always
exposed; the gather after the optimizer, under the next forward with
``overlap_param_gather``. Arrays over plans; seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.buckets import BucketWindows
from strategies.estimate.terms.dp_calls import DpCalls
from strategies.estimate.terms.dp_exposure import grad_window_exposed, lanes_exposed
from strategies.estimate.terms.fill_gathers import fill_gather_wait
from strategies.estimate.terms.stages import StageTimes
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from strategies.stacks.comm_rules import full_grad_reduce
from strategies.stacks.param_gather import gathers_on_fill_path
from strategies.stacks.profile import FrameworkProfile


@dataclass(frozen=True, eq=False)
class GradReduce:
    """Per kind of rank ``k`` (first, middle = rank 1, last; arrays over plans, seconds):
    ``t_rs_k`` its whole reduce-scatter, ``grad_k`` its reduction's exposed seconds (ZeRO-0/1;
    the whole reduction without ``overlap_grad_reduce``), ``ag_k`` its parameter all-gather's
    (ZeRO >= 1), ``ag_fill_k`` its exposed share where it waits at the stage's first forward
    (``stacks.param_gather``, §5.194); interleaved, ``t_agc_k`` its parameter all-gathers of
    model chunk 0, a middle chunk and chunk ``v - 1``, each one call, and ``ag_fill0_k``
    chunk 0's exposed part where its forward waits for it layer by layer."""

    t_rs_k: list
    grad_k: list
    ag_k: list
    ag_fill_k: list
    t_agc_k: list
    ag_fill0_k: list


def end_params(sc: StageCostArrays, pr_k: list) -> tuple[Any, Any, Any]:
    """The parameters each kind of rank (first, middle, last) holds beyond its layers, of the
    ``pr_k`` it steps: the embedding on the first, the LM head on the last, none between.
    Arrays over plans."""
    return (np.minimum(sc.embedding_params, pr_k[0]), 0.0, np.minimum(sc.head_params, pr_k[2]))


def grad_reduce(sc: StageCostArrays, P: PlanArrays, profile: FrameworkProfile, dtype: str,
                calls: DpCalls, st: StageTimes, win: BucketWindows, ogr_g: Any,
                t_p2p: Any, f_layer: Any) -> GradReduce:
    """The gradient reductions and parameter gathers of plans ``P`` (``GradReduce``):
    ``ogr_g`` the overlap the gradients run with (``comm_rules.grad_path``), ``t_p2p`` one
    pipeline message's seconds (interleaved: a step of the reduction window), ``f_layer`` a
    layer's forward with its exposed communication (``layer_comm.layer_forward``: what a
    stage's first forward runs between its parameter gathers' waits)."""
    tp, pp, dp, cp, ep, etp, v, dps = P.tp, P.pp, P.dp, P.cp, P.ep, P.etp, P.vpp, P.dp_shard
    sched, zero, opg, cl = P.schedule, P.zero, P.overlap_param_gather, calls.cl
    gb, pr_k, pe_k, own_lane = calls.gb, calls.pr_k, calls.pe_k, calls.own_lane
    dp_time, one_bucket = calls.time, calls.one_bucket
    rep_bucket, lane_overlap = calls.rep_bucket, calls.lane_overlap
    n_k, mirrored = st.n_k, st.mirrored
    last_k, window_k, lead_k, whole_k = win.last_k, win.window_k, win.lead_k, win.whole_k
    K = range(3)
    on_fill_any = bool(np.any(gathers_on_fill_path(pp, v, zero, opg, mirrored)))
    t_ar_k = [dp_time("allreduce", gb, k) for k in K]
    t_rs_k = [dp_time("reduce_scatter", gb, k) for k in K]
    # the parameter all-gather after the optimizer: each kind of rank's mean width
    # (``stage.rank_params.gather_width``: FP8-stored weights at one byte under ``fp8_param_gather``)
    gw_k = (sc.gather_first, sc.gather_mid, sc.gather_last)
    t_ag_k = [dp_time("allgather", gw_k[k], k) for k in K]
    # a full all-reduce with ZeRO-0 and under DeepSpeed's BF16_Optimizer, which shards only the
    # optimizer (``comm_rules.full_grad_reduce``)
    full = full_grad_reduce(profile, dtype, zero)

    # interleaved (chunks on a ring, the backward unsplit): a chunk's gradients are complete,
    # and reduced, after its last micro-batch's backward (Megatron's ``grad_sync_func`` per
    # chunk, ``Schedule.reduces_chunk_after_backward``), so the reduction of chunk v-1 starts
    # (v-1)·pp backward steps before the rank's end (``Schedule.reduce_window_steps`` less
    # chunk v-1's own step, the lower bound's window), each step a chunk's backward and its
    # one blocking exchange (``Interleaved.exposed_messages``); at least chunk 0's whole
    # reduction (``grad_window_exposed``)
    chunked = attr_by_code(sched, "reduces_chunk_after_backward").astype(bool) & (v > 1) \
        & (pp > 1)
    end_k = end_params(sc, pr_k)
    steps = dispatch(sched, "reduce_window_steps", pp, v)

    # each kind's first parameter-gather bucket and its seconds (the embedding's share, at
    # least one bucket, as before §5.193's cut of the gradients' buckets): the overlapped
    # gather's edge, and interleaved chunk 0's, read it
    ag_edge_k = [one_bucket("allgather", gw_k[k], k, np.where(
        whole_k[k] > 0, whole_k[k],
        np.minimum(1.0, np.maximum(sc.bucket_params, win.emb_k[k]) / pr_k[k]))) for k in K]

    def grad_exposed(k: int) -> Any:
        t_grad = np.where(full, t_ar_k[k], t_rs_k[k])
        rep = np.where(full, 0.0, rep_bucket(k, 1.0))
        last = np.where(whole_k[k] > 0, whole_k[k],
                        np.minimum(1.0, last_k[k] / pr_k[k]))
        t_edge = np.where(full, one_bucket("allreduce", gb, k, last),
                          one_bucket("reduce_scatter", gb, k, last) - lane_overlap(k, last))
        # the buckets' calls queued under the window: the ring's per-call latency once a
        # bucket (``BucketWindows.calls_k``, §5.227); with one bucket the whole call
        n_b = win.calls_k[k]
        if np.any(n_b > 1):
            t_queue = t_grad + np.where(full, *(
                calls.bucket_calls(kind, gb, k, last, n_b) - calls.time(kind, gb, k)
                for kind in ("allreduce", "reduce_scatter")))
            t_agq = calls.bucket_calls("allgather", gw_k[k], k, last, n_b)
        else:
            t_queue, t_agq = t_grad, t_ag_k[k]
        # (overlapped: all but the first bucket beside the next forward, which their SMs
        # slow, ``sm_share.overlap_extra``; the simulator's ``metrics.rank_ends`` alike)
        ag_edge = ag_edge_k[k]
        ag_fwd = n_k[k] * sc.layer_fwd
        ag_over = np.maximum(t_agq - ag_fwd, ag_edge)
        if calls.sms.sm and calls.sms.nccl:
            ag_over = ag_over + calls.sms.extra(t_agq - ag_edge, ag_fwd, calls.sms.nccl)
        ag = np.where(opg, ag_over, t_ag_k[k])
        # at the stage's first forward (§5.194): each bucket's gather is dispatched where the
        # forward waits for the bucket before it (``finish_param_sync``), in forward order
        # (the embedding's first), each layer's forward between the waits
        # (``fill_gathers.fill_gather_wait``, ``stacks.param_gather_wait``; the simulator's
        # ``FillGathers``); a rank past the first reduced as one bucket waits for it whole
        fill = np.maximum(t_agq - ag_fwd + win.lead_layers_k[k] * sc.layer_fwd, ag_edge)
        if on_fill_any:
            cut = fill_gather_wait(
                sc, f_layer, n_k[k], sc.head_params if k == 2 else 0.0, win.emb_k[k],
                lambda params: one_bucket("allgather", gw_k[k], k, params / pr_k[k]))
            fill = np.where(whole_k[k] > 0, fill, cut)
        if calls.sms.sm and calls.sms.nccl:
            fill = fill + calls.sms.extra(t_agq - ag_edge, ag_fwd, calls.sms.nccl)
        # chunk 0's parameters: 1/v of the rank's layers, with the embedding on rank 0 (the
        # LM head is in the last rank's chunk v-1)
        c0 = (pr_k[k] - end_k[k]) / v + (end_k[0] if k == 0 else 0.0)
        t_c0 = np.where(full, *(cm.dp_collective_time(kind, gb, c0, pe_k[k] / v, tp, cp, dp,
                                                      ep, etp, cl, dps)
                                for kind in ("allreduce", "reduce_scatter")))
        # DualPipe (``mirrored``; docs/calibration.md §5.36): the copy fed from the far end
        # completes its gradients first, and its buckets reduce under what the rank still runs
        # (an end rank: ``pp/2`` backwards of the other copy, B and W, ``reduce_window_steps``);
        # the other copy's, about half the rank's, are produced by its last W (the weight
        # gradients), so at least they less that W are exposed (the middle rank: as before)
        ends_k = mirrored & (k != 1)
        after = pp / 2 * window_k[k]
        mirror_over = np.maximum(np.maximum(t_grad - window_k[k] - after, t_edge),
                                 t_grad / 2 - n_k[k] * sc.layer_wgrad)
        t_bc = window_k[k] / v
        over = np.where(chunked, grad_window_exposed(t_grad, t_c0, t_bc + t_p2p, steps,
                                                     calls.sms,
                                                     t_bc / np.maximum(t_bc + t_p2p, 1e-300)),
                        np.where(ends_k, mirror_over,
                                 lanes_exposed(t_queue + np.where((v == 1) & ~mirrored,
                                                                  lead_k[k], 0.0),
                                               rep, window_k[k], t_edge, own_lane,
                                               sms=calls.sms)))
        return (np.where(ogr_g, over, t_grad), np.where(zero >= 1, ag, 0.0),
                np.where(zero >= 1, fill, 0.0))
    grad_ag = [grad_exposed(k) for k in K]

    def chunk_gathers(k: int) -> tuple:
        # chunk 0's, a middle chunk's and chunk v-1's gathers, one call each (1/v of the
        # rank's layers; the embedding in rank 0's chunk 0, the LM head in the last rank's
        # chunk v-1)
        body = (pr_k[k] - end_k[k]) / v
        return tuple(cm.dp_collective_time("allgather", gw_k[k], p, pe_k[k] / v, tp, cp, dp,
                                           ep, etp, cl, dps)
                     for p in (body + (end_k[0] if k == 0 else 0.0), body,
                               body + (end_k[2] if k == 2 else 0.0)))

    t_agc_k = [chunk_gathers(k) for k in K]

    def chunk0_fill(k: int) -> Any:
        # chunk 0's gather where its forward waits bucket by bucket (``ag_fill_k``'s form
        # over the chunk's forward; its whole gather where it is one bucket)
        t0 = t_agc_k[k][0]
        return np.minimum(t0, np.maximum(t0 - n_k[k] * sc.layer_fwd / v
                                         + win.lead_layers_k[k] * sc.layer_fwd, ag_edge_k[k]))
    return GradReduce(t_rs_k=t_rs_k, grad_k=[g for g, _, _ in grad_ag],
                      ag_k=[a for _, a, _ in grad_ag], ag_fill_k=[f for _, _, f in grad_ag],
                      t_agc_k=t_agc_k,
                      ag_fill0_k=[chunk0_fill(k) for k in K])
