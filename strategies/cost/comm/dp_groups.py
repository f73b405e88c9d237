"""The collectives over data-parallel copies: the groups that hold a stage's dense and
routed-expert parameters (``dp_parts``), the share of them a rank's optimizer and gradient
buffer hold, and the seconds of the gradient reduction and parameter gathers over them,
hybrid sharding's replica all-reduces included."""
from __future__ import annotations

import numpy as np

from strategies import placement
from strategies.cost.comm.collective import collective_time
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster


def dp_parts(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
             etp: Num, shard: Num | None = None
             ) -> tuple[tuple[Num, Num, Num], tuple[Num, Num, Num]]:
    """The two data-parallel collectives over a stage's ``params`` parameters, as
    ``((dense parameters, ranks, stride), (expert parameters, ranks, stride))``: the dense
    ``params - expert_params`` over the group that holds their copies
    (``placement.dense_dp_group``: the ``dp·cp`` ranks ``tp`` apart, the cp ranks holding
    the same weights as the dp ones), then, with expert
    parallelism (``ep > 1``), the routed experts' ``expert_params`` over the group that holds
    their copies (``placement.expert_dp_group``: ``tp·cp·dp/(etp·ep)`` ranks ``etp·ep``
    apart, Megatron-Core's expert grid), in buffers of their own after the dense ones on the
    same stream. With ``ep = 1`` every parameter goes over ``dp·cp`` (an expert part of 0).
    The one rule for every collective over data-parallel copies: the gradient reduction,
    the parameter gathers after the optimizer, ZeRO-3's gathers and reduce-scatters
    (``dp_collective_time``, the lower bound, ``ProgramBuilder._dp_parts``) and the shard a
    rank holds (``grad_shard_params``). ``shard``: the plan's ``shard_dp`` (hybrid sharding,
    ``Plan.dp_shard``): each group is then the one within a replica's ``tp·cp·shard`` ranks,
    the dense ``shard·cp`` ranks a ZeRO shard spans and the experts' grid over them
    (``placement.expert_dp_group`` at ``shard``), the replicas' all-reduce of both added by
    ``dp_collective_time`` (``replica_sum``). Vectorised."""
    moe = (np.asarray(ep, dtype=float) > 1) & (np.asarray(expert_params, dtype=float) > 0)
    e = np.where(moe, expert_params, 0.0)
    within = dp if shard is None else shard          # the data-parallel ranks of one replica
    edp, stride = placement.expert_dp_group(tp, cp, within, ep, etp)
    ddp, d_stride = placement.dense_dp_group(tp, cp, within)
    return ((params - e)[()], ddp, d_stride), (e[()], edp, stride)


def has_dp_copies(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                  etp: Num) -> Num:
    """True where some of a stage's parameters have copies on other ranks to reduce their
    gradients with (and, sharded, to gather from): ``dp·cp > 1``, or routed experts whose
    expert-data-parallel group (``dp_parts``) holds more than one rank, as at ``dp = 1`` when
    ``etp·ep < tp·cp`` (Megatron-Core reduces them over that group). Vectorised."""
    return parts_have_copies(dp_parts(params, expert_params, tp, cp, dp, ep, etp))[()]


def parts_have_copies(parts) -> Num:
    """``has_dp_copies`` of ``dp_parts``' groups already formed. Vectorised."""
    return (np.asarray(parts[0][1]) > 1) | expert_copies(parts)


def expert_copies(parts) -> Num:
    """True where ``dp_parts``' expert part has copies to reduce: routed parameters over an
    expert-data-parallel group of more than one rank. Vectorised."""
    _, (e, n_e, _) = parts
    return (np.asarray(e) > 0) & (np.asarray(n_e) > 1)


def dp_parts_sum(parts, cost) -> Num:
    """``cost(parameters, ranks, stride)`` of ``dp_parts``' dense collective plus its expert
    one where that runs (``expert_copies``; else 0, priced at a stand-in group of 2 ranks
    stride 1 so that no group of one is priced): the one sum the estimate's
    ``dp_collective_time`` and the lower bound's floors read. Vectorised."""
    (d, n_d, s_d), (e, n_e, s_e) = parts
    on = expert_copies(parts)
    base = cost(d, n_d, s_d)
    if not np.any(on):      # no expert part anywhere (a dense model): its zeros, not priced
        # (the shape ``np.where`` below gives: ``cost``'s of ``e`` is within ``base``'s, as
        # ``e`` is within ``d``'s; the same sum bit for bit, ``+ 0.0`` included)
        return base + np.zeros(np.broadcast_shapes(np.shape(on), np.shape(e), np.shape(n_e),
                                                   np.shape(s_e)))
    return base + np.where(on, cost(e, np.where(on, n_e, 2.0), np.where(on, s_e, 1.0)), 0.0)


def grad_shard_params(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                      etp: Num, zero: Num, shard: Num | None = None) -> Num:
    """Parameters whose reduced gradients one rank's optimizer reads after the data-parallel
    reduction: all of the stage's (ZeRO-0), or with ZeRO >= 1 the dense ones' ``1/(dp·cp)``
    share plus the routed experts' ``1/edp`` share (``dp_parts``' groups): ZeRO-2/3 shard the
    gradients, and ZeRO-1's sharded optimizer steps only its shard of the reduce-scattered
    gradients (ZeRO paper, P_os; Megatron's distributed optimizer). DualPipe's mirror
    all-reduce sums these between the two ranks that hold the same stages: the two copies
    are data-parallel replicas of the stage, reduced like any other (deepseek-ai/DualPipe
    issue #22: "Optimizer is handled the same as other synchronous pipelines like 1F1B";
    PiPPy's double pipe, pytorch/PiPPy#276: "corresponding stages ... synchronize gradients
    using DDP"), so the pair adds what the optimizer reads, the shard each copy's
    reduce-scatter over dp left, not the whole gradient. With hybrid sharding (``shard``,
    ``dp_parts``) the dense share is ``1/(shard·cp)``. Vectorised."""
    return _group_share(params, expert_params, tp, cp, dp, ep, etp, np.asarray(zero) >= 1,
                        shard)


def grad_buffer_params(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                       etp: Num, zero_g: Num, shard: Num | None = None) -> Num:
    """Parameters whose gradients one rank's gradient buffer holds, accumulated over the
    micro-batches: all of the stage's, or with sharded gradients (``zero_g >= 2``: the ZeRO
    stage the gradients run with, ``comm_rules.grad_path``) the dense ones' ``1/(dp·cp)``
    share plus the routed experts' ``1/edp`` share, each reduce-scattered over the group that
    holds its copies (``dp_parts``; Megatron-Core keeps the experts' gradients in buffers of
    their own over the expert-data-parallel group). Where ``edp = 1`` the experts' gradients
    stay whole under ZeRO-2 as under ZeRO-1. Vectorised."""
    return _group_share(params, expert_params, tp, cp, dp, ep, etp, np.asarray(zero_g) >= 2,
                        shard)


def _group_share(params, expert_params, tp, cp, dp, ep, etp, sharded, shard):
    """``dp_parts``' dense share over its group plus its expert share over theirs where
    ``sharded``, else ``params``."""
    (d, n_d, _), (e, n_e, _) = dp_parts(params, expert_params, tp, cp, dp, ep, etp, shard)
    return np.where(sharded, d / n_d + e / n_e, params)[()]


def dp_collective_time(kind: str, bytes_per_param: Num, params: Num, expert_params: Num,
                       tp: Num, cp: Num, dp: Num, ep: Num, etp: Num,
                       cluster: Cluster, shard: Num | None = None) -> Num:
    """Seconds of the data-parallel collective ``kind`` over a stage's gradients (or
    parameters) of ``bytes_per_param`` bytes each, alone on its links: ``dp_parts``' dense
    collective over dp·cp, then its routed experts' over their expert-data-parallel group (none
    where that group is one rank: each expert held once). With hybrid sharding (``shard <
    dp``, the plan's ``shard_dp``) the gathers and reduce-scatters run over the ``shard·cp``
    ranks of a shard group and a gradient reduce-scatter is followed by the all-reduce of
    each rank's ``1/(shard·cp)`` share over its ``dp/shard`` replicas
    (``placement.replica_group``; FSDP's HSDP, Megatron-Core's distributed-optimizer
    instances); an all-reduce (ZeRO-0's, never hybrid) spans every copy. Vectorised."""
    if kind == "allreduce":
        shard = None
    parts = dp_parts(params, expert_params, tp, cp, dp, ep, etp, shard)
    t = np.asarray(dp_parts_sum(parts, lambda p, n, s: collective_time(
        kind, bytes_per_param * p, n, s, cluster)))
    if kind == "reduce_scatter" and shard is not None:
        t = t + replica_time(bytes_per_param, parts, tp, cp, dp, shard, cluster)
    return t[()]


def replica_time(bytes_per_param: Num, parts, tp: Num, cp: Num, dp: Num, shard: Num,
                 cluster: Cluster) -> Num:
    """Seconds of hybrid sharding's all-reduces across replicas after a gradient
    reduce-scatter (``dp_collective_time``): ``replica_sum`` of ring all-reduces. 0 where
    there is one replica. Vectorised."""
    return replica_sum(parts, tp, cp, dp, shard, lambda p, n, s: collective_time(
        "allreduce", bytes_per_param * p, n, s, cluster))


def replica_overlap(bytes_per_param: Num, parts, tp: Num, cp: Num, dp: Num, shard: Num,
                    cluster: Cluster) -> Num:
    """Seconds of a gradient reduce-scatter's tail that hybrid sharding's dense replica
    all-reduce hides where it has a lane of its own (``FrameworkProfile.replica_stream``):
    it starts when the dense reduce-scatter ends and runs beside the routed experts'
    reduce-scatter (``dp_parts``' order on the data-parallel stream, the experts' buckets
    after the dense), so the tail is ``RS_d + max(RS_e, AR_d) + AR_e``, not their sum:
    ``min(RS_e, AR_d)``. 0 without experts to reduce-scatter (``expert_copies``) or with one
    replica. Vectorised."""
    (d, n_d, s_d), (e, n_e, s_e) = parts
    on = expert_copies(parts) & (placement.replica_group(tp, cp, dp, shard)[0] > 1)
    if not np.any(on):
        return (0.0 * np.asarray(e, dtype=float) * np.asarray(n_e))[()]
    rs_e = np.where(on, collective_time("reduce_scatter", bytes_per_param * e,
                                        np.where(on, n_e, 2.0), np.where(on, s_e, 1.0),
                                        cluster), 0.0)
    ar_d = replica_time(bytes_per_param, ((d, n_d, s_d), (0.0 * e, n_e, s_e)), tp, cp, dp,
                        shard, cluster)
    return np.minimum(rs_e, ar_d)[()]


def replica_sum(parts, tp: Num, cp: Num, dp: Num, shard: Num, cost) -> Num:
    """``cost(parameters, ranks, stride)`` of hybrid sharding's all-reduces across replicas
    after a gradient reduce-scatter, summed: each rank's share of ``dp_parts``' dense
    gradients (``1/(shard·cp)``) and, in buffers of their own, of its routed experts'
    (``1/n_e``, the expert grid within a replica; all of them where that grid is one rank),
    each over the ``dp/shard`` ranks that hold the same shard (``placement.replica_group``:
    Megatron-Core's one inter-instance group for dense and expert buckets,
    ``get_inter_distributed_optimizer_instance_group``; torchtitan's ``dp_replicate`` in
    both meshes); 0 where there is one replica. The one rule the estimate
    (``replica_time``), the bound and the simulator (``_replica_reduce``) read.
    Vectorised."""
    (d, n_d, _), (e, n_e, _) = parts
    n_r, s_r = placement.replica_group(tp, cp, dp, shard)
    on = np.asarray(n_r) > 1
    if not np.any(on):
        return (0.0 * np.asarray(n_r))[()]
    n, s = np.where(on, n_r, 2.0), np.where(on, s_r, 1.0)
    moe = on & (np.asarray(e) > 0)
    t = cost(d / n_d, n, s) + np.where(moe, cost(np.where(moe, e / n_e, 0.0), n, s), 0.0)
    return np.where(on, t, 0.0)[()]
