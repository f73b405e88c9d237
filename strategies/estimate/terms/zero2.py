"""ZeRO-2's per-micro-batch reduce-scatters in the analytic step (``zero2_terms``):
overlapped, each kind of rank's queue under the compute and bubble from its first backward
to its last (``sharded_exposed``; the last micro-batch's under its own backward, a V's on the
span's own replay), ZB-H1's trailing ones after the slowest stage's end and an interleaved
rank 0's cool-down; without overlap, the stall after every backward on each schedule's path
(``z2_sync_exposed``). Arrays over plans; seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.buckets import BucketWindows
from strategies.estimate.terms.dp_calls import DpCalls
from strategies.estimate.terms.dp_exposure import (Z2_BACK, Z2_BUSY, Z2_COOLDOWN, Z2_SPLIT,
                                                   lanes_exposed, sharded_exposed,
                                                   split_tail_exposed, z2_sync_exposed)
from strategies.estimate.terms.grad_reduce import GradReduce
from strategies.estimate.terms.layer_comm import LayerComm, layer_forward
from strategies.estimate.terms.ranks import rank_below
from strategies.estimate.terms.stages import Span, StageTimes
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from strategies.schedules.replay import reduce_queue_tails_by_code


@dataclass(frozen=True, eq=False)
class Zero2:
    """ZeRO-2's exposed seconds (arrays over plans): ``over_k`` each kind of rank's (first,
    middle = rank 1, last) with ``overlap_grad_reduce``, ``rs_mb_k`` its reduce-scatter per
    micro-batch; the paths after the whole pipeline, each less the span: ``sync`` the stall
    without overlap (``z2_sync_exposed`` on ``path``), ``tail_split`` ZB-H1's trailing
    reduce-scatters (``split_tail_exposed``), ``cool_tail`` an interleaved rank 0's
    cool-down (-inf where a path does not apply)."""

    over_k: list
    rs_mb_k: list
    sync: Any
    path: Any
    tail_split: Any
    cool_tail: Any


def zero2_terms(sc: StageCostArrays, P: PlanArrays, calls: DpCalls, st: StageTimes,
                span: Span, win: BucketWindows, comm: LayerComm, gr: GradReduce, mb: Any,
                split: Any, zero_g: Any) -> Zero2:
    """ZeRO-2's terms of plans ``P`` (``Zero2``): ``mb`` micro-batches, ``split`` the schedule
    splits the backward, ``zero_g`` the ZeRO stage the gradients run with."""
    gb, pr_k = calls.gb, calls.pr_k
    one_bucket, lane_overlap = calls.one_bucket, calls.lane_overlap
    mirrored, last_k, t_rs_k = st.mirrored, win.last_k, gr.t_rs_k
    K = range(3)
    # ZeRO-2: gradients are sharded, so every micro-batch's are reduce-scattered into the shard,
    # each behind that micro-batch's backward; the last bucket of the last one is exposed.
    # DualPipe (``mirrored``): a micro-batch's backward passes one of the rank's two copies
    # (even micro-batches one way, odd the other), so it completes, and reduce-scatters, the
    # gradients of that copy only: half the rank's, on the mean (the simulator's buckets per
    # chunk)
    per_mb = np.where(mirrored, 0.5, 1.0)
    rs_mb_k = [np.where(mirrored, calls.time("reduce_scatter", gb * per_mb, k), t_rs_k[k])
               for k in K]
    z2_last = [np.minimum(1.0, last_k[k] / np.maximum(pr_k[k] * per_mb, 1.0)) for k in K]
    edge_k = [one_bucket("reduce_scatter", gb, k, z2_last[k], per_mb)
              - lane_overlap(k, z2_last[k], per_mb) for k in K]
    over_k = overlapped(sc, P, calls, st, span, win, comm, mb, split, zero_g, per_mb, rs_mb_k,
                        edge_k)
    sync, path, tail_split, cool_tail = after_pipeline(sc, P, calls, st, span, win, gr, mb,
                                                       split, rs_mb_k, edge_k)
    return Zero2(over_k=over_k, rs_mb_k=rs_mb_k, sync=sync, path=path, tail_split=tail_split,
                 cool_tail=cool_tail)


def overlapped(sc: StageCostArrays, P: PlanArrays, calls: DpCalls, st: StageTimes,
               span: Span, win: BucketWindows, comm: LayerComm, mb: Any, split: Any,
               zero_g: Any, per_mb: Any, rs_mb_k: list, edge_k: list) -> list:
    """ZeRO-2's exposed seconds with ``overlap_grad_reduce`` of each kind of rank (first,
    middle = rank 1, last): ``per_mb`` the share of its gradients a micro-batch completes,
    ``rs_mb_k`` its reduce-scatter per micro-batch, ``edge_k`` its last bucket's."""
    pp, v, sched, ogr = P.pp, P.vpp, P.schedule, P.overlap_grad_reduce
    gb, own_lane, rep_bucket = calls.gb, calls.own_lane, calls.rep_bucket
    n_k, mirrored, head_first, single = st.n_k, st.mirrored, st.head_first, st.single
    t_first, t_mid, t_last, t_max, t_sum, head_f = (st.first, st.mid, st.last, st.t_max,
                                                    st.t_sum, st.head_f)
    w_share, f_share, pipe = span.w_share, span.f_share, span.pipe
    window_k, lead_k, r_f, slack = win.window_k, win.lead_k, win.r_f, win.slack
    fwd_tp = span.fwd_tp
    K = range(3)
    # overlapped, the reduce-scatters queue on the data-parallel stream from the rank's first
    # backward to its last: with forwards between the backwards
    # (``Schedule.reduces_under_forwards``: 1F1B, interleaved, zero-bubble) the rank's compute
    # less what runs before that backward: micro-batch 0's forward through every stage and its
    # backward through the later ones, one chunk (1/v) of each there (none where rank 0
    # holds the last chunk, a V: ``head_first``), the stages' sum ``t_sum`` split in rank 0's
    # forward share ``r``: rank 0's r·t_sum + ((1 − r)·t_sum − t_b0)/v, balanced
    # p·t_f + (p − 1)·t_b/v (1F1B: (m + p − 1)·t − (p·t_f + (p − 1)·t_b) = m·t − t_f); else
    # (GPipe, DualPipe) the backwards, ``mb·t_b``; the last bucket of the last micro-batch
    # always after it (``sharded_exposed``)
    below = rank_below((t_first, t_mid, t_last), pp)
    under_fwd = attr_by_code(sched, "reduces_under_forwards").astype(bool)

    # ... and the last micro-batch's own reduce-scatter runs under its last backward alone
    # (one chunk a rank, the backward unsplit: 1F1B, GPipe), from its first bucket on
    # (``lead_k``): that backward's seconds with its exposed communication, the rank's less
    # its forward (compute, TP collectives, ring waits, all-to-all) and the embedding's and
    # the LM head's forwards where it holds them (docs/calibration.md §5.127)
    f_layer = layer_forward(sc, comm, fwd_tp)
    t_own = (np.where(single, t_max, t_first), t_mid, t_last)
    f_ends = (sc.embedding_fwd + np.where(single, head_f, 0.0), 0.0,
              np.where(single, 0.0, head_f))
    # (the LM head's backward, which that window holds, runs before the first bucket's:
    # ``lead_k`` counts from the layers', §5.193)
    b_ends = (np.where(single, st.head_b, 0.0), 0.0, np.where(single, 0.0, st.head_b))
    one_chunk = (v == 1) & ~split & ~mirrored
    # a V (ZB-V, DualPipeV): each rank's per-chunk reduce-scatters queue behind its gradient
    # steps, which its drain runs back to back (ZB-V's deferred ``W``), on the span's own
    # replay (``VShape.reduce_queue_tails``, §5.127)
    z2_queue = reduce_queue_tails_by_code(
        sched, head_first & ogr & (zero_g == 2), mb, t_max, t_sum, w_share, f_share, pp,
        tuple(calls.time("reduce_scatter", gb / v, k)
              - own_lane * rep_bucket(k, 1.0, gb / v) for k in K), tuple(edge_k))

    def z2_over_k(k: int) -> Any:
        first_bwd = r_f * t_sum + np.where(
            head_first, 0.0, ((1 - r_f) * (t_sum - below[k]) - window_k[k]) / v)
        z2_window = np.where(under_fwd, pipe - slack[k] - first_bwd, mb * window_k[k])
        rep = rep_bucket(k, 1.0, gb * per_mb)
        last = np.where(one_chunk, lanes_exposed(rs_mb_k[k] + lead_k[k] + b_ends[k], rep,
                                                 t_own[k] - n_k[k] * f_layer - f_ends[k],
                                                 edge_k[k], own_lane), -np.inf)
        return np.maximum(np.maximum(lanes_exposed(mb * rs_mb_k[k], mb * rep, z2_window,
                                                   edge_k[k], own_lane, sms=calls.sms), last),
                          z2_queue[k])
    return [z2_over_k(k) for k in K]


def after_pipeline(sc: StageCostArrays, P: PlanArrays, calls: DpCalls, st: StageTimes,
                   span: Span, win: BucketWindows, gr: GradReduce, mb: Any, split: Any,
                   rs_mb_k: list, edge_k: list) -> tuple[Any, Any, Any, Any]:
    """ZeRO-2's paths after the whole pipeline, each less its span (-inf where one does not
    apply): the stall without overlap (``z2_sync_exposed``) and its path (``Z2_*``), ZB-H1's
    trailing reduce-scatters (``split_tail_exposed``), an interleaved rank 0's cool-down.
    ``rs_mb_k``/``edge_k``: each kind of rank's reduce-scatter per micro-batch and last
    bucket."""
    tp, pp, dp, cp, ep, etp, v, dps = P.tp, P.pp, P.dp, P.cp, P.ep, P.etp, P.vpp, P.dp_shard
    sched, cl = P.schedule, calls.cl
    gb, pr_k, pe_k, one_bucket = calls.gb, calls.pr_k, calls.pe_k, calls.one_bucket
    params, pe = pr_k[0], pe_k[0]
    n_first, n_mid, n_last = st.n_k
    mirrored, head_first = st.mirrored, st.head_first
    t_first, t_mid, t_last = st.t
    w_share, f_share, pipe = span.w_share, span.f_share, span.pipe
    r_f, window = win.r_f, win.window_k[0]
    t_rs_mb, t_rs_k = rs_mb_k[0], gr.t_rs_k
    # without overlap every micro-batch's reduce-scatter stalls its stage's compute after the
    # backward (``z2_sync_exposed``); each stage's own from its parameters
    rs_stage = (t_rs_mb, t_rs_k[1], t_rs_k[2])
    # rank 0's chunk 0 (interleaved): the embedding's gradients and 1/v of its layers'
    emb_p = np.minimum(sc.embedding_params, params)
    rs_c0 = cm.dp_collective_time("reduce_scatter", gb, emb_p + (params - emb_p) / v, pe / v,
                                  tp, cp, dp, ep, etp, cl, dps)
    trailing = tuple(dispatch(sched, "trailing_w_steps", s, pp, mb)
                     for s in (0 * pp, np.maximum(pp - 2, 0), pp - 1))
    z2_path = np.where(split, np.where(v == 1, Z2_SPLIT, Z2_BUSY),
                       np.where(v == 1, Z2_BACK, Z2_COOLDOWN))
    z2_sync = z2_sync_exposed(
        lambda t_mx, t_sm: dispatch(sched, "pipeline_span", mb, t_mx, t_sm, v, w_share, f_share,
                                    pp),
        pipe, t_first, t_mid, t_last, rs_stage, (1 - r_f) * t_first, mb, pp, z2_path, v, r_f,
        rs_c0, trailing)
    # overlapped under a split backward, one chunk per rank (ZB-H1): at least the slowest
    # stage's trailing W's reduce-scatters after its own end (``split_tail_exposed``), at
    # least each rank's last bucket (``BucketWindows.last_k``)
    w_stage = (n_first * sc.layer_wgrad + sc.embedding_wgrad, n_mid * sc.layer_wgrad,
               n_last * sc.layer_wgrad + sc.head_wgrad)
    edges = (edge_k[0],) + tuple(
        one_bucket("reduce_scatter", gb, k, np.minimum(1.0, win.last_k[k]
                                                        / np.maximum(pr_k[k], 1.0)))
        for k in (1, 2))
    tail_split = np.where(split & (v == 1) & ~head_first, split_tail_exposed(
        pipe, t_first, t_mid, t_last, pp, mb, r_f, rs_stage, w_stage, trailing, edges),
        -np.inf)
    # interleaved (chunks on a ring, the backward unsplit): rank 0 ends with the chunk-0
    # backwards of the last p micro-batches back to back; their reduce-scatters (chunk 0's
    # gradients, the embedding's among them: rs_c0 each) queue with only those backwards to
    # run under, at least the last bucket (``sharded_exposed``)
    cool_tail = np.where(~split & (v > 1) & ~head_first & ~mirrored & (pp > 1),
                         sharded_exposed(pp * rs_c0, pp * window / v, edges[0]), -np.inf)
    return z2_sync, z2_path, tail_split, cool_tail
