"""ZeRO-3's exposed seconds per kind of rank in the analytic step (``zero3_exposed``): the
parameters gathered for the forward and the backward and the gradients reduce-scattered,
every micro-batch, prefetched a layer (FSDP's unit) at a time under the step's compute, or
one host-synchronous tensor at a time (DeepSpeed 2021). Arrays over plans; seconds."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.sm_share import WindowSMs
from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.dp_calls import DpCalls
from strategies.estimate.terms.dp_exposure import lanes_exposed
from strategies.estimate.terms.stages import StageTimes
from strategies.placement import dense_dp_group
from strategies.plan_arrays import PlanArrays


def zero3_exposed(sc: StageCostArrays, P: PlanArrays, calls: DpCalls, st: StageTimes,
                  pipe: Any, slack: tuple, mb: Any) -> list:
    """ZeRO-3's exposed seconds of each kind of rank (first, middle = rank 1, last) of plans
    ``P``: ``pipe`` the pipeline's span, ``slack`` each kind's compute end before it
    (``rank_slack``), ``mb`` micro-batches."""
    tp, pp, cp, dps, cl = P.tp, P.pp, P.cp, P.dp_shard, calls.cl
    gb, own_lane = calls.gb, calls.own_lane
    one_bucket, rep_bucket, lane_overlap = calls.one_bucket, calls.rep_bucket, calls.lane_overlap
    n_k, per_layer, comp_layer = st.n_k, st.per_layer, st.comp_layer
    head_f, head_b = st.head_f, st.head_b
    # ZeRO-3: parameters gathered for forward and backward, gradients scattered, every micro-batch
    # The gathers are prefetched (the next layer's during this one's compute), so the whole
    # step's compute hides the stream's work; exposed at least: each forward's first layer
    # waits for its own gather, which follows the previous backward's last reduce-scatter
    # over the same links (the two share the NIC), and the step's last reduce-scatter
    # follows the last backward: mb·(t_ag + t_rs) of one layer's calls
    # ZeRO-3 one tensor at a time (DeepSpeed 2021): every gather and gradient reduce-scatter of
    # every micro-batch is host-synchronous (``torch.cuda.synchronize`` before each gather),
    # so none hides behind compute (``param_counts.zero3_tensor_gathers``, ``comm.per_tensor_time``)
    # (over the dense parameters' copies, ``placement.dense_dp_group``)
    n_dp, stride_dp = dense_dp_group(tp, cp, dps)
    z3_tensor = mb * (
        cm.per_tensor_time(sc.z3_fwd_n + sc.z3_bwd_n, sc.param_bytes
                           * (sc.z3_fwd_params + sc.z3_bwd_params), n_dp, stride_dp, cl,
                           sc.copy_gap, copy_rate=sc.copy_rate)
        + cm.per_tensor_time(sc.z3_rs_n, gb * sc.z3_rs_params, n_dp, stride_dp, cl,
                             sc.copy_gap, "reduce_scatter", copy_rate=sc.copy_rate))

    # (a call per layer, FSDP's unit: its share of the bandwidth and the ring's whole latency,
    # as the simulator's gathers and reduce-scatters are; docs/calibration.md §5.26)
    # each kind's forward beside no layer of its own: the embedding's on the first rank, the
    # LM head's on the rank that holds it (a V: the first)
    head_first = st.head_first
    ends_f = (sc.embedding_fwd + np.where(head_first | (pp == 1), head_f, 0.0), 0.0,
              np.where(head_first, 0.0, head_f))

    def z3_exposed(k: int) -> Any:
        units = np.maximum(n_k[k], 1)
        t_ag_u, t_rs_u = (one_bucket(kind, nb, k, 1.0 / units)
                          for kind, nb in (("allgather", sc.param_bytes), ("reduce_scatter", gb)))
        # (with the replicas' all-reduces on their own lane, ``replica_stream``, only the
        # step's last waits: the next forward's first gather follows the reduce-scatter)
        rep_u = rep_bucket(k, 1.0 / units)
        ovl_u = lane_overlap(k, 1.0 / units)
        # a backward whose layers reduce slower than they compute queues its reduce-scatters
        # (each layer's after its backward, on one stream): (units − 1)·(t − b) more after it
        b_u = sc.layer_bwd + sc.layer_recompute
        rs_dp = np.where(own_lane, t_rs_u - rep_u, t_rs_u)
        queue = (units - 1) * np.maximum(0.0, rs_dp - b_u)
        # ... and on a lane of their own the replicas' all-reduces, each after its layer's
        # reduce-scatter (those one per max(b, RS)), queue behind the step's last backward
        # where they are slower still: (units − 1)·(AR − max(b, RS)) more after it
        rep_queue = own_lane * (units - 1) * np.maximum(0.0, rep_u - np.maximum(b_u, rs_dp))
        # the replicas' first all-reduce waits for the first micro-batch's forward (its
        # layers' compute and half their exposed communication), the LM head's backward and
        # the first layer's backward and reduce-scatter (one stage); from then on their lane
        # can stay busy to the step's end (none without replicas)
        rep_lead = np.where((pp == 1) & (rep_u > 0), units * (sc.layer_fwd + (per_layer - comp_layer
                                                              - sc.layer_recompute) / 2)
                            + sc.embedding_fwd + head_f + head_b + b_u + rs_dp, 0.0)
        work = mb * units * (2 * t_ag_u + t_rs_u)
        edge = mb * (t_ag_u + t_rs_u + queue) - own_lane * ((mb - 1) * rep_u + ovl_u) + rep_queue
        return np.where(sc.z3_fwd_n > 0, z3_tensor, lanes_exposed(
            work, mb * units * rep_u, pipe - slack[k], edge, own_lane, rep_lead)
            + pass_sm_extra(calls.sms, mb, units, t_ag_u, rs_dp, sc.layer_fwd, b_u,
                            ends_f[k]))
    return [z3_exposed(k) for k in range(3)]


def pass_sm_extra(sms: WindowSMs, mb: Any, units: Any, t_ag: Any, t_rs: Any, fwd: Any,
                  bwd: Any, fwd_other: Any = 0.0) -> Any:
    """What the SMs ZeRO-3's collectives hold (``sms.nccl``) add to the compute beside them,
    one window per pass (``sm_share.overlap_extra`` each; FSDP's unit a layer, ``units`` of
    them, ``mb`` micro-batches; ``t_ag``/``t_rs`` one unit's gather and reduce-scatter,
    ``fwd``/``bwd`` its forward and backward seconds, ``fwd_other`` the forward's seconds
    beside no layer: the embedding's, the LM head's). The forward: the gathers after each
    forward's first, its own and the backward's (the stream runs the prefetches ahead: the
    simulator's program), beside its ``units·fwd + fwd_other``; its end waits for its own
    only. The
    backward: each layer's reduce-scatter beside the next layer's backward (the last one's
    has none), its end the later of the two. Not pooled over the step: a backward whose
    reduce-scatters outlast its compute hides the compute's slowdown under them. 0 with
    ``NO_SMS``. Arrays over plans; seconds."""
    if not (sms.sm and sms.nccl):
        return 0.0
    ahead = mb * (units - 1) * t_ag
    return (sms.extra(ahead + mb * units * t_ag, mb * (units * fwd + fwd_other), sms.nccl,
                      waited=ahead)
            + sms.extra(mb * (units - 1) * t_rs, mb * (units - 1) * bwd, sms.nccl))
