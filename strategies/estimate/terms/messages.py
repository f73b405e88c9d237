"""The pipeline's point-to-point messages in the analytic step: one message's seconds over
the hops of a plan's schedule (``path_p2p_times``), the messages a schedule whose count
depends on the bounding rank adds to the span (``ranked_messages``, 1F1B), and the step's
exposed messages (``p2p_exposed``). Arrays over plans; seconds."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.ranks import slowest_rank
from strategies.estimate.terms.stages import Span, StageTimes
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch, schedules
from strategies.schedules.combined import pair_message_hiding
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster


def path_p2p_times(sched: Any, pp: Any, v: Any, stride: Any, nbytes: Any,
                   cl: Cluster) -> np.ndarray:
    """One pipeline message's seconds per plan: ``comm.path_p2p_time`` over the hops of the
    plan's schedule (``Schedule.path_hops``), once per distinct ``(schedule, pp, vpp,
    stride)`` whose pipeline spans nodes with stages closer than a node or not whole nodes
    apart; elsewhere every hop is alike and ``p2p_time(stride)`` is that price."""
    code, pp, v, stride, nb = np.broadcast_arrays(*(np.asarray(x) for x in (
        sched, pp, v, stride, nbytes)))
    G = cl.gpus_per_node
    # every hop alike (the pipeline in one node, or stages whole nodes apart): one hop's price
    out = np.array(cm.p2p_time(nb, cl, stride), dtype=float, copy=True).reshape(code.shape)
    mixed = ((pp > 1) & (stride * pp > G) & (stride % G != 0)).ravel()
    if not mixed.any():
        return out[()] if out.ndim else out
    keys = np.stack([a.ravel()[mixed].astype(np.int64) for a in (code, pp, v, stride)], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    flat, nbf = out.reshape(-1), nb.reshape(-1)
    where = np.flatnonzero(mixed)
    table = schedules()
    for i, (c, p, vv, st) in enumerate(uniq):
        sel = where[inv.reshape(-1) == i]
        hops = table[c].path_hops(int(p), max(int(vv), 1))
        flat[sel] = cm.path_p2p_time(nbf[sel], cl, int(st), hops)
    return out[()] if out.ndim else out


def ranked_messages(sched: Any, mb: Any, pp: Any, v: Any, times: tuple[Any, Any, Any],
                    t_sum: Any, t_p2p: Any, w_share: Any = 0.0, f_share: Any = 0.5) -> Any:
    """Seconds the point-to-point messages add to the pipeline's span under a schedule whose
    count depends on the kind of rank that bounds the steady state
    (``Schedule.messages_by_rank``, 1F1B): the largest, over the first, a middle (``pp >= 3``)
    and the last rank (``times``: their seconds per micro-batch), of the free span through
    that rank (``pipeline_span`` with its time as the slowest) plus its path's messages
    (``bottleneck_messages``) times ``t_p2p``, less the free span through the slowest; at
    least the fewest messages (docs/calibration.md §5.21). Arrays over plans."""
    t_max = slowest_rank(*times, pp)
    pipe = dispatch(sched, "pipeline_span", mb, t_max, t_sum, v, w_share, f_share, pp)
    paths = [np.where((k != 1) | (pp > 2), dispatch(
        sched, "pipeline_span", mb, t_k, t_sum, v, w_share, f_share, pp)
        + t_p2p * dispatch(sched, "bottleneck_messages", mb, pp, v, k), -np.inf)
        for k, t_k in enumerate(times)]
    fewest = t_p2p * np.min([dispatch(sched, "bottleneck_messages", mb, pp, v, k)
                             for k in (0, 2)], axis=0)
    return np.maximum(np.max(paths, axis=0) - pipe, fewest)


def microbatch_groups(P: PlanArrays) -> Any:
    """Forwards of one chunk a rank runs before the next chunk's (Megatron-Core's
    ``microbatch_group_size_per_vp_stage``), ``pp`` where the plan leaves it unset."""
    return np.where(P.microbatch_group_size > 0, P.microbatch_group_size, P.pp)


def p2p_exposed(sc: StageCostArrays, cl: Cluster, P: PlanArrays, profile: FrameworkProfile,
                st: StageTimes, span: Span, mb: Any, lps: Any) -> tuple[Any, Any]:
    """One pipeline message's seconds ``t_p2p`` and the messages' exposed seconds per step of
    plans ``P`` under the stack ``profile``: the schedule's exposed messages, by the bounding
    rank's path (``ranked_messages``) or, with ``overlap_p2p_comm``, the fill's and the
    drain's chain (``mb`` micro-batches, ``lps`` the mean layers per rank)."""
    tp, pp, dp, cp, v, sched = P.tp, P.pp, P.dp, P.cp, P.vpp, P.schedule
    t_first, t_mid, t_last, t_sum = st.first, st.mid, st.last, st.t_sum
    w_share, f_share = span.w_share, span.f_share
    # pipeline point-to-point (scatter/gather over the tp ranks' NICs, then an NVLink all-gather)
    stride_pp = tp * cp * dp
    t_p2p = path_p2p_times(sched, pp, v, stride_pp, sc.p2p_bytes, cl) + np.where(
        sc.p2p_gather_bytes > 0, cm.collective_time("allgather", sc.p2p_gather_bytes, tp, 1, cl),
        0.0)
    # 1F1B (``Schedule.messages_by_rank``): a middle rank blocks on two exchanges per
    # micro-batch, the end ranks on one, so the span with messages is the largest, over the
    # kind of rank that bounds the steady state, of the free span through it and its path's
    # messages (``bottleneck_messages``), at least the fewest messages
    by_rank = attr_by_code(sched, "messages_by_rank").astype(bool) & (pp > 1)
    ranked = ranked_messages(sched, mb, pp, v, (t_first, t_mid, t_last), t_sum, t_p2p, w_share,
                             f_share) if np.any(by_rank) else 0.0
    pp_exposed = np.where(pp > 1, np.where(by_rank, ranked, t_p2p * dispatch(
        sched, "exposed_messages", mb, pp, v)), 0.0)
    # a stack with ``overlap_p2p_comm`` (Megatron-Core's interleaved schedule): only the
    # fill's and the drain's chain stays exposed, each steady call what outlasts the pass
    # of the other kind (a chunk's forward, the shorter) run before it is waited for
    # (``Interleaved.overlapped_p2p_time``; docs/calibration.md §5.68); none under
    # Megatron-Core's combined 1F1B, whose steady pairs wait for their neighbours' current
    # pairs, each call hidden only by the delayed attention weight gradient
    # (``combined.pair_message_hiding``, §5.82, §5.87)
    ov = attr_by_code(sched, "overlaps_p2p").astype(bool) & (pp > 1) & bool(
        profile.overlap_p2p_comm)
    if np.any(ov):
        # the warm-up's and cool-down's calls waited for whole unless
        # ``overlap_p2p_comm_warmup_flush`` (§5.207; with it §5.68's chain, not re-measured)
        group = pp if profile.overlap_p2p_comm_warmup_flush else microbatch_groups(P)
        pp_exposed = np.where(ov, dispatch(sched, "overlapped_p2p_time", mb, pp, v, t_p2p,
                                           pair_message_hiding(lps / v * sc.layer_fwd,
                                                               P.ep_overlap,
                                                               sc.dw_attn * P.delay_wgrad),
                                           group),
                              pp_exposed)
    return t_p2p, pp_exposed
