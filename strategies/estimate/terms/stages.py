"""Each kind of rank's seconds per micro-batch in the analytic step (``StageTimes``: its
layers with their exposed communication, the embedding and the LM head where it holds them,
stragglers) and the pipeline's span over them (``Span``: the schedule's closed form with the
weight gradient's and the forward's shares, the bubble). Arrays over plans; seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.faults import straggler_stages
from strategies.estimate.terms.layer_comm import LayerComm
from strategies.estimate.terms.ranks import slowest_rank
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from topologies.cluster import Cluster


@dataclass(frozen=True, eq=False)
class StageTimes:
    """Seconds per micro-batch (arrays over plans): ``n_k`` the layers of each kind of rank
    (first, middle = rank 1, last); ``comp_layer`` a layer's forward and backward compute,
    ``per_layer`` with its recomputation and exposed communication; ``head_f``/``head_b`` the
    LM head's passes; ``first``/``mid``/``last`` each kind of rank's stage; ``t_max``,
    ``t_sum`` the slowest and the sum over the stages (stragglers in
    ``t_max`` and ``t_sum``); ``head_first`` a V (the LM head on rank 0), ``mirrored``
    DualPipe, ``single`` pp = 1."""

    n_k: tuple
    comp_layer: Any
    per_layer: Any
    head_f: Any
    head_b: Any
    first: Any
    mid: Any
    last: Any
    t_max: Any
    t_sum: Any
    head_first: Any
    mirrored: Any
    single: Any
    #: the multi-token-prediction modules' backward and recomputation seconds in the rank's
    #: last backward where pp = 1 (``mtp_seconds``; 0 elsewhere)
    mtp_bwd: Any = 0.0

    @property
    def t(self) -> tuple:
        """(first, middle, last) rank's seconds."""
        return self.first, self.mid, self.last


@dataclass(frozen=True, eq=False)
class Span:
    """The pipeline's span over the stages (arrays over plans): ``t_fill`` a filling stage's
    mean seconds, ``w_share``/``f_share`` the weight gradient's and the forward's share of
    them, ``fwd_tp`` a layer's forward TP collectives, ``pipe`` the span (seconds per step,
    the lone passes' all-to-all included), ``bubble`` its idle part."""

    t_fill: Any
    w_share: Any
    f_share: Any
    fwd_tp: Any
    pipe: Any
    bubble: Any


def bubble_share(bubble: Any, step: Any) -> Any:
    """``bubble_fraction``, the one rule the estimate and the simulator report: the pipeline's
    bottleneck stage's bubble (seconds, the breakdown's ``bubble``; the busiest stage's idle
    time that no communication covers) over the step (seconds); 0 where the step is 0.
    Arrays or numbers."""
    step = np.asarray(step, dtype=float)
    return np.where(step > 0, np.asarray(bubble, dtype=float) / np.where(step > 0, step, 1.0),
                    0.0)


def mtp_seconds(sc: StageCostArrays, comm: LayerComm, modules: int,
                layers: int) -> tuple[Any, Any]:
    """(All, backward) seconds per micro-batch of the multi-token-prediction modules on the
    rank that holds them (the LM head's): ``modules`` times one module's forward, backward
    and recomputation (``by_kind["mtp"]``, its depths included), its ``layers``
    (``ModelSpec.mtp_stash_layers``) times a layer's exposed TP and CP communication and its
    all-to-all bytes' share of the mean layer's exposed one; the backward: its backward and
    recomputation, which the gradient buckets' window holds. (0, 0) without them. The plan
    columns price it where the rank holds the whole model (pp = 1); a pipeline's MTP rank is
    priced by its chunks (``estimate.kinds``)."""
    k = sc.by_kind.get("mtp") if modules else None
    if k is None:
        return 0.0, 0.0
    ep = np.where(sc.ep_bytes > 0, comm.ep * k.ep_bytes / np.maximum(sc.ep_bytes, 1e-30), 0.0)
    bwd = modules * (k.layer_bwd + k.layer_recompute)
    return modules * (k.layer_fwd + layers * (comm.tp + comm.cp)) + ep * modules + bwd, bwd


def stage_times(sc: StageCostArrays, P: PlanArrays, n_k: tuple, comm: LayerComm,
                cl: Cluster, lps: Any, mtp: tuple = (0.0, 0.0)) -> StageTimes:
    """Each kind of rank's seconds per micro-batch of plans ``P`` (``StageTimes``): ``n_k``
    its layers (``plan_arrays.rank_layers``), ``comm`` a layer's exposed communication,
    ``lps`` the mean layers per rank (a straggler's stage at pp = 1), ``mtp`` the
    multi-token-prediction modules' (all, backward) seconds (``mtp_seconds``), added with the
    LM head where pp = 1."""
    tp, pp, dp, cp, v, sched = P.tp, P.pp, P.dp, P.cp, P.vpp, P.schedule
    n_first, n_mid, n_last = n_k
    tp_layer, cp_layer, ep_layer = comm.tp, comm.cp, comm.ep
    comp_layer = sc.layer_fwd + sc.layer_bwd
    per_layer = comp_layer + sc.layer_recompute + tp_layer + cp_layer + ep_layer
    head_f, head_b = sc.head_fwd, sc.head_bwd
    emb = sc.embedding_fwd + sc.embedding_bwd
    t_mid = n_mid * per_layer
    t_first0, t_last0 = n_first * per_layer, n_last * per_layer
    head_first = (dispatch(sched, "head_rank_array", pp, v) == 0) & (pp > 1)   # a V
    t_first = np.where(head_first, t_first0 + emb + head_f + head_b, t_first0 + emb)
    t_last = np.where(head_first, t_last0, t_last0 + head_f + head_b)
    # DualPipe (``Schedule.mirrored``): both end ranks embed half the micro-batches and run the
    # LM head of the other half
    mirrored = attr_by_code(sched, "mirrored").astype(bool) & (pp > 1)
    t_first = np.where(mirrored, t_mid + (emb + head_f + head_b) / 2, t_first)
    t_last = np.where(mirrored, t_first, t_last)
    single = pp == 1
    t_max = np.where(single, t_first + head_f + head_b + mtp[0],
                     slowest_rank(t_first, t_mid, t_last, pp))
    t_sum = np.where(single, t_max, t_first + t_last + (pp - 2) * t_mid)
    if cl.faults.stragglers:
        comp_f, comp_l = (n * (comp_layer + sc.layer_recompute) for n in (n_first, n_last))
        t_max, t_sum = straggler_stages(
            cl.faults.stragglers, tp * cp * dp, pp,
            (t_first, t_mid, t_last, t_max),
            (np.where(head_first, comp_f + emb + head_f + head_b, comp_f + emb),
             n_mid * (comp_layer + sc.layer_recompute),
             np.where(head_first, comp_l, comp_l + head_f + head_b),
             lps * (comp_layer + sc.layer_recompute) + emb + head_f + head_b),
            t_max, t_sum)
    return StageTimes(n_k=n_k, comp_layer=comp_layer, per_layer=per_layer, head_f=head_f,
                      head_b=head_b, first=t_first, mid=t_mid, last=t_last, t_max=t_max,
                      t_sum=t_sum, head_first=head_first, mirrored=mirrored,
                      single=single,
                      mtp_bwd=np.where(single, mtp[1], 0.0) if np.any(mtp[1]) else 0.0)


def span_of(sc: StageCostArrays, P: PlanArrays, st: StageTimes, comm: LayerComm, mb: Any,
           lps: Any, pipe_span: Any = None) -> Span:
    """The pipeline's span over the stages ``st`` (``Span``): ``mb`` micro-batches, ``lps``
    the mean layers per rank; ``pipe_span`` the real pipeline's seconds in place of the
    schedule's closed form (``estimate_arrays``)."""
    pp, v, sched = P.pp, P.vpp, P.schedule
    single, t_max, t_sum, lone = st.single, st.t_max, st.t_sum, comm.lone
    tp_layer, n_tp, cp_fwd = comm.tp, comm.n_tp, comm.cp_fwd
    # the weight gradient's share of the time of the stages that fill and drain the pipeline
    # (all but the slowest: (t_sum - t_max)/(pp - 1) each on average; schedules that split
    # the backward fill the bubble with it); the closed forms hold while W is no longer than
    # the forward or the input-gradient part of the backward, so it counts up to those
    t_w = lps * np.minimum(sc.layer_wgrad, np.minimum(sc.layer_fwd,
                                                      sc.layer_bwd - sc.layer_wgrad))
    t_fill = np.where(single, t_max, (t_sum - t_max) / np.maximum(pp - 1, 1))
    fill = np.where(t_fill > 0, t_fill, 1.0)
    w_share = np.where(t_fill > 0, np.minimum(t_w / fill, 0.5), 0.0)
    # the forward's share: its compute, its own blocking TP collectives (the forward's
    # ``tp_per_layer_fwd`` of the layer's ``n_tp``) and its context-parallel ring's waits
    # (``cp_fwd``, §5.110), which run on the chain of forwards too
    fwd_tp = tp_layer * sc.tp_per_layer_fwd / np.maximum(n_tp, 1e-30)
    f_share = np.where(t_fill > 0, np.minimum(lps * (sc.layer_fwd + fwd_tp + cp_fwd) / fill,
                                              1.0), 0.0)
    pipe = dispatch(sched, "pipeline_span", mb, t_max, t_sum, v, w_share, f_share, pp) + lone
    if pipe_span is not None:           # the real pipeline's span, its lone passes included
        pipe = np.full_like(pipe, pipe_span, dtype=float)
    bubble = pipe - lone - mb * t_max
    return Span(t_fill=t_fill, w_share=w_share, f_share=f_share, fwd_tp=fwd_tp, pipe=pipe,
                bubble=bubble)
