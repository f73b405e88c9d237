"""One mean layer's exposed communication per micro-batch in the analytic step (seconds,
arrays over plans): the tensor-parallel collectives that block (``tp_exposed``), the context
parallel ring's waits (``cp_waits``) and the expert all-to-all (``ep_exposed``), gathered in
``LayerComm`` (``layer_comm``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from strategies.collectives.phase import call_latency
from strategies.cost import comm as cm
from strategies.cost.cp_ring import layer_sm_extra as cp_layer_sm_extra
from strategies.cost.cp_a2a import layer_waits as a2a_layer_waits
from strategies.cost.cp_hier import layer_waits as hier_layer_waits
from strategies.cost.cp_hier import ring_record, ring_sizes
from strategies.cost.cp_ring import layer_waits as cp_layer_waits
from strategies.cost.sm_share import NO_SMS, WindowSMs
from strategies.cost.stage import (StageCostArrays, attn_down_time, attn_full_rc_time,
                                   attn_rc_gathers, attn_rope_time, attn_tp_saved,
                                   dgrad_reduce_hidden, dgrad_reduce_time, down_reduce_hidden,
                                   sp_regather_exposed)
from strategies.plan_arrays import PlanArrays
from strategies.schedules import dispatch
from strategies.schedules.combined import lone_passes_exposed, pair_exposed
from topologies.cluster import Cluster


@dataclass(frozen=True, eq=False)
class LayerComm:
    """One mean layer's exposed communication per micro-batch (seconds, arrays over plans):
    ``tp`` its tensor-parallel collectives (``n_tp`` calls of them, forward, backward and
    recomputation), ``cp`` its ring waits (``cp_fwd`` the forward's), ``ep`` its expert
    all-to-all (``a2a`` one direction, ``paired`` its exposure in an overlapped pair), and
    ``lone`` the combined 1F1B's lone passes' all-to-all, on the critical path once a step."""

    tp: Any
    n_tp: Any
    cp_fwd: Any
    cp: Any
    a2a: Any
    paired: Any
    ep: Any
    lone: Any


def attn_saved(sc: StageCostArrays, sp: Any, t: Callable[[str, Any], Any]) -> Any:
    """``cost.stage.attn_tp_saved`` of the forward and of the blocking backward (where no
    asynchronous reduction runs, ``rd_bytes`` 0) per plan; ``t(kind, bytes)`` the tp group's
    contention-free collective seconds."""
    fwd, bwd = (np.where(sp, attn_tp_saved(t, sc, True, f), attn_tp_saved(t, sc, False, f))
                for f in (True, False))
    return fwd + np.where(sc.rd_bytes > 0, 0.0, bwd)


def tp_collective_time(sc: StageCostArrays, cl: Cluster, tp: Any, sp: Any) -> Any:
    """One of a layer's tensor-parallel collectives, contention-free seconds: the all-reduce
    of ``sc.tp_bytes`` over ``tp``; under sequence parallelism (``sp``) an all-gather and a
    reduce-scatter, the all-reduce's bytes in two calls, so one more call's own latency
    (``phase.call_latency``, §5.233). Arrays over plans."""
    return cm.collective_time("allreduce", sc.tp_bytes, tp, 1, cl) \
        + np.where(sp, call_latency(tp), 0.0)


def tp_exposed(sc: StageCostArrays, cl: Cluster, tp: Any, sp: Any, tpo: Any,
               rc: Any, sms: WindowSMs = NO_SMS) -> tuple[Any, Any]:
    """A layer's exposed tensor-parallel seconds per micro-batch and the count ``n_tp`` of its
    collectives: 2 forward, 2 backward, the recomputation's (``recompute.tp_rerun``), hidden
    under the GEMMs with ``tp_comm_overlap`` (``tpo``) but for the stack's unfused share, and
    MLA's, the down projections', sequence parallelism's re-gathers and the data gradients'
    reductions beside their weight gradients; with TP overlap under Transformer Engine's
    userbuffers, what the ``sms.tp`` SMs of the row-parallel forward GEMMs' reduce-scatters
    add to those GEMMs (``sm_share.overlap_extra``). Arrays over plans; seconds."""
    # tensor parallel: 2 collectives fwd, 2 bwd, the recomputation's (``recompute.tp_rerun``)
    t_ar = tp_collective_time(sc, cl, tp, sp)
    n_tp = sc.tp_per_layer_fwd + sc.tp_per_layer_bwd + sc.tp_per_layer_recompute
    tp_raw = n_tp * t_ar
    # MLA's attention runs its column-side collective at its latents' widths: the forward's
    # all-gather under SP, the backward's reduction where it is blocking (the asynchronous
    # one is ``dgrad_reduce_hidden``'s); 0 for any other attention (``cost.stage.attn_tp_saved``,
    # §5.81)
    def t_tp(kind: str, nbytes):
        """Contention-free seconds of collective ``kind`` of ``nbytes`` over the tp group."""
        return cm.collective_time(kind, nbytes, tp, 1, cl)
    tp_raw = tp_raw - np.where(tp > 1, attn_saved(sc, sp, t_tp), 0.0)
    # with overlap, the stack's unfused share of the collectives stays exposed
    # (``async_tp.overlap_exposed``: async TP's summed-dgrad reduce-scatters, and under the
    # rowwise recipe its all-gathers)
    # rowwise recipe, and its rerun forward's too: ``StageCosts.rerun_tp_exposed``)
    tp_out = (sc.tp_overlap_fwd_exposed * sc.tp_per_layer_fwd
              * (1.0 + (sc.tp_per_layer_recompute > 0))
              + sc.tp_overlap_bwd_exposed * sc.tp_per_layer_bwd) * t_ar
    tp_hidden = np.maximum(tp_raw - tp_out
                           - (3 + np.where(rc == 2, sc.tp_per_layer_recompute / 2, 0.0))
                           * sc.gemm_fwd,
                           (tp_raw - tp_out) / sc.tp_overlap_chunks) + tp_out
    tp_layer = np.where(tpo, tp_hidden, tp_raw)
    # userbuffers' ``pipeline`` overlap of the row-parallel forward GEMMs (proj, fc2): their
    # reduce-scatters, half the forward's all-reduce volume less the unfused share, hold
    # ``sms.tp`` SMs beside those GEMMs (``sms.ub`` of the forward GEMM seconds)
    if sms.sm and sms.tp:
        rs_fwd = (1.0 - sc.tp_overlap_fwd_exposed) * sc.tp_per_layer_fwd * t_ar / 2
        tp_layer = tp_layer + np.where(np.asarray(tpo, dtype=bool) & (tp > 1),
                                       sms.extra(rs_fwd, sms.ub * sc.gemm_fwd, sms.tp), 0.0)
    # MLA's recomputed up projections gather their latents again (``mla_up_proj`` under SP,
    # ``cost.stage.attn_rc_gathers``, §5.81), blocking
    if np.any(sc.tp_attn_rc > 0):
        tp_layer = tp_layer + attn_rc_gathers(t_tp, sc)
    # and its rope key's own gather (forward) and reduce-scatter (backward) under SP
    # (``cost.stage.attn_rope_time``), blocking
    if np.any(sc.tp_rope_w > 0):
        def t_rope(kind: str, nbytes):
            return cm.collective_time(kind, np.where(nbytes > 0, nbytes, 1.0), tp, 1, cl)
        tp_layer = tp_layer + attn_rope_time(t_rope, sc, True) + attn_rope_time(t_rope, sc,
                                                                                False)
    # and, where the stack runs its down projections column-parallel (Megatron-Core
    # 0.12-0.13), their own gathers and reductions (``cost.stage.attn_down_time``, §5.85),
    # blocking, less what their weight gradients hide of the input-gradient reductions
    # (``cost.stage.down_reduce_hidden``, §5.99)
    if np.any(sc.tp_down > 0):
        tp_layer = tp_layer + np.where(
            sp, attn_down_time(t_tp, sc, True, True) + attn_down_time(t_tp, sc, True, False),
            attn_down_time(t_tp, sc, False, True) + attn_down_time(t_tp, sc, False, False)) \
            - down_reduce_hidden(lambda w: dgrad_reduce_time(sc, tp, sp, cl, w), sc)
    # full recomputation reruns the attention forward's own gathers: the rope key's and the
    # column-parallel down projections' (``cost.stage.attn_full_rc_time``, §5.85), blocking
    if np.any(sc.tp_attn_full_rc > 0):
        tp_layer = tp_layer + np.where(sp, attn_full_rc_time(t_tp, sc, True),
                                       attn_full_rc_time(t_tp, sc, False))
    # sequence parallelism's backward re-gathers, each beside the data-gradient GEMM it was
    # issued before, TP overlap or not (``cost.stage.sp_regather_exposed``, §5.70)
    tp_layer = tp_layer + sp_regather_exposed(
        lambda w: np.where(sc.rg_bytes > 0, cm.collective_time("allgather", sc.rg_bytes * w,
                                                               tp, 1, cl), 0.0), sc)
    # the column-parallel data gradients' reductions beside their weight-gradient GEMMs
    # (``cost.stage.dgrad_reduce_hidden``, §5.75): a bf16 reduce-scatter under SP, an
    # all-reduce without
    tp_layer = tp_layer - dgrad_reduce_hidden(lambda w: dgrad_reduce_time(sc, tp, sp, cl, w), sc)
    return tp_layer, n_tp


def cp_waits(sc: StageCostArrays, cl: Cluster, tp: Any, cp: Any,
             sms: WindowSMs = NO_SMS) -> tuple[Any, Any]:
    """A layer's ring-attention waits per micro-batch, forward and backward (seconds), with
    what the ring's NCCL SMs (``sms.nccl``) add to the attention core it runs beside
    (``cp_ring.layer_sm_extra``)."""
    # context parallel ring attention: each pass waits on its ring inside the attention,
    # where it outlasts the attention core, on top of the layer's other exposed
    # communication (``cost.cp_ring.ring_exposed``, §5.110)
    # (PyTorch's ring: its waits on the all-gather and the dK/dV ring)
    if sc.cp_a2a:   # TE's all-to-all: Q/K/V and O over the CP group, exposed (§5.185)
        return a2a_layer_waits(lambda n: cm.collective_time("alltoall", n, cp, tp, cl), sc, cp)
    k = sc.cp_a2a_size
    if sc.cp_hier:  # a2a+p2p: the all-to-all over k ranks tp apart, the ring at (t·k, c/k)
        r_tp, r_cp = ring_sizes(tp, cp, k)
        t_ag = cm.collective_time("allgather", sc.cp_bytes, r_cp, r_tp, cl)
        cp_fwd, cp_bwd = hier_layer_waits(
            lambda n: cm.collective_time("alltoall", n, k, tp, cl), t_ag, sc, cp)
    else:
        t_ag = cm.collective_time("allgather", sc.cp_bytes, cp, tp, cl)
        cp_fwd, cp_bwd = cp_layer_waits(t_ag, sc, cp)
    if sms.sm and sms.nccl:
        x_fwd, x_bwd = cp_layer_sm_extra(t_ag, ring_record(sc) if sc.cp_hier else sc, cp,
                                         lambda c, w: sms.extra(c, w, sms.nccl))
        cp_fwd, cp_bwd = cp_fwd + x_fwd, cp_bwd + x_bwd
    return cp_fwd, cp_bwd


def ep_exposed(sc: StageCostArrays, cl: Cluster, P: PlanArrays, mb: Any, split: Any,
               num_layers: int, sms: WindowSMs = NO_SMS) -> tuple[Any, Any, Any, Any]:
    """A layer's expert all-to-all per micro-batch: one direction's seconds ``t_a2a``, its
    exposure in an overlapped pair, the combined 1F1B's lone passes' (once a step) and the
    layer's exposed seconds (``split``: the schedule splits the backward). Seconds."""
    ep, pp, v, sched, L = P.ep, P.pp, P.vpp, P.schedule, num_layers
    # expert parallel all-to-all: dispatch + combine, forward and backward (ep_bytes holds
    # both of a forward), over groups of ep ranks etp apart (strategies.placement); with
    # expert tensor parallelism an all-gather after the dispatch and a reduce-scatter before
    # the combine over the etp consecutive ranks. In an overlapped pair (DualPipe's F&B,
    # ``Schedule.overlaps_pairs``) a forward layer's expert communication runs beside the
    # partner's next backward layer and the backward's beside the next forward layer,
    # exposed only where it outlasts that compute (the share of the slowest rank's forwards
    # that are paired, from the order)
    etp = P.etp
    t_a2a = cm.collective_time("alltoall", sc.ep_bytes, ep, etp, cl, sc.ep_remote_scale,
                               sc.ep_nvlink_share) \
        + np.where(sc.etp_bytes > 0,
                   cm.collective_time("allgather", sc.etp_bytes, etp, 1, cl)
                   + cm.collective_time("reduce_scatter", sc.etp_bytes, etp, 1, cl), 0.0)
    # Megatron-Core's combined 1F1B (``P.ep_overlap``, strategies.schedules.combined) pairs a
    # forward with a whole backward; DualPipe's pairs take the input-gradient part B
    partner = sc.layer_bwd - np.where(split, sc.layer_wgrad, 0.0) + sc.layer_recompute
    paired = pair_exposed(t_a2a, sc.layer_fwd, partner)
    # the dispatcher's SMs (``sms.ep``) beside each pair member's compute
    if sms.sm:
        paired = paired + sms.extra(t_a2a, partner, sms.ep) + sms.extra(t_a2a, sc.layer_fwd,
                                                                        sms.ep)
    # (DualPipe: the share of the slowest rank's forwards that are paired; Megatron's
    # combined 1F1B: every pass paired, and the fill's lone forwards and the drain's lone
    # backwards on the critical path once, ``combined.lone_passes_exposed``, §5.91)
    q = np.where(P.ep_overlap, 1.0,
                 dispatch(sched, "overlapped_share_array", 0 * pp, pp, mb, v))
    lone = np.where(P.ep_overlap, lone_passes_exposed(L, t_a2a, paired), 0.0)
    # a recomputed MoE layer runs its all-to-all again before its backward (exposed)
    ep_layer = (1 - q) * 2 * t_a2a + q * paired + sc.ep_per_layer_recompute * t_a2a
    return t_a2a, paired, lone, ep_layer


def layer_forward(sc: StageCostArrays, comm: LayerComm, fwd_tp: Any) -> Any:
    """One mean layer's forward per micro-batch with its exposed communication (seconds,
    arrays over plans): compute, ``fwd_tp`` its forward TP collectives (``Span.fwd_tp``), its
    ring waits and its all-to-all's forward half (less the recomputation's rounds)."""
    return (sc.layer_fwd + fwd_tp + comm.cp_fwd
            + (comm.ep - sc.ep_per_layer_recompute * comm.a2a) / 2)


def layer_comm(sc: StageCostArrays, cl: Cluster, P: PlanArrays, mb: Any, split: Any,
               num_layers: int, sms: WindowSMs = NO_SMS) -> LayerComm:
    """One mean layer's exposed communication per micro-batch of plans ``P`` (``LayerComm``),
    with what the SMs ``sms`` its overlapped collectives hold add to the compute beside
    them (``sm_share.window_sms``; ``NO_SMS`` none)."""
    tp, n_tp = tp_exposed(sc, cl, P.tp, P.sp, P.tp_comm_overlap, P.recompute, sms)
    cp_fwd, cp_bwd = cp_waits(sc, cl, P.tp, P.cp, sms)
    a2a, paired, lone, ep = ep_exposed(sc, cl, P, mb, split, num_layers, sms)
    return LayerComm(tp=tp, n_tp=n_tp, cp_fwd=cp_fwd, cp=cp_fwd + cp_bwd, a2a=a2a,
                     paired=paired, ep=ep, lone=lone)
