"""The data-parallel stream's terms of the lower bound (point 4 of
``strategies.estimate.lower_bound``'s docstring), per kind of stage: the gradient
reduction's floor, the parameter all-gathers' tail, the per-micro-batch busy time of ZeRO-2
and ZeRO-3 (``dp_terms``), and DualPipe's mirror all-reduce (``mirror_allreduce``).

With expert parallelism the routed experts' share goes over their expert-data-parallel
group, tp·cp·dp/(etp·ep) ranks etp·ep apart, after the dense share on the same stream
(``comm.dp_parts``: every data-parallel collective, ZeRO-3's included); hybrid sharding adds
each gradient reduce-scatter's all-reduces of the rank's dense and expert shares over its
replicas (``comm.dp_groups.replica_sum``; 0 with one replica)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.comm.dp_groups import dp_parts_sum, parts_have_copies, replica_sum
from strategies.cost.stage import StageCostArrays
from strategies.estimate.bound.floors import group_floor
from strategies.plan_arrays import PlanArrays
from strategies.schedules import schedule_code
from strategies.stacks.comm_rules import full_grad_reduce
from strategies.stacks.param_gather import gathers_at_schedule_start, gathers_on_fill_path
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster


class DpTerms(NamedTuple):
    """One kind of stage's data-parallel seconds: ``red`` the gradient reduction after the
    stage's last backward, ``ag_tail`` the parameter all-gathers' excess over the next
    step's first forward, ``busy`` the per-micro-batch work of ZeRO-2/3 on the dp stream."""

    red: np.ndarray
    ag_tail: np.ndarray
    busy: np.ndarray


def stage_params(sc: StageCostArrays) -> tuple[dict, dict]:
    """Per kind of stage (first, last, mid; heavy as mid) its parameters and their routed
    experts' part, which is reduced over the expert-data-parallel group
    (``comm.dp_collective_time``, the simulator's gradient buckets)."""
    params = {"first": sc.params_first, "last": sc.params_last, "mid": sc.params_mid,
              "heavy": sc.params_mid}
    eparams = {"first": sc.expert_params_first, "last": sc.expert_params_last,
               "mid": sc.expert_params_mid, "heavy": sc.expert_params_mid}
    return params, eparams


def dp_terms(cl: Cluster, sc: StageCostArrays, P: PlanArrays, profile: FrameworkProfile,
             dtype: str, zero_g: np.ndarray, nmb: np.ndarray, lps: np.ndarray,
             fwd_layer: np.ndarray, mirrored: np.ndarray) -> dict[str, DpTerms]:
    """``DpTerms`` per kind of stage (first, last, mid; heavy as mid) at the floors of
    ``cl``'s links: ``zero_g`` the ZeRO stage the gradients run with
    (``comm_rules.grad_path``), ``nmb`` micro-batches, ``lps`` the most layers of a rank
    and ``fwd_layer`` the dearest layer's forward (the window the all-gathers may hide in,
    seconds), ``mirrored`` DualPipe."""
    tp, cp, dp, ep, zero, v = P.tp, P.cp, P.dp, P.ep, P.zero, P.vpp
    params, eparams = stage_params(sc)
    gb = sc.grad_bytes
    full = full_grad_reduce(profile, dtype, zero)   # all-reduce, not RS
    # each kind's groups once (every floor below reads them)
    parts = {k: cm.dp_parts(params[k], eparams[k], tp, cp, dp, ep, P.etp, P.dp_shard)
             for k in ("first", "last", "mid")}
    # the busy seconds of the dp stream's ``work`` and the replicas' ``rep``: their sum on
    # one stream, the larger where the replicas have a lane of their own
    # (``FrameworkProfile.replica_stream``, the simulator's ``replica_lane``)
    own_lane = bool(profile.replica_stream)

    def lanes(work, rep):
        return np.maximum(work, rep) if own_lane else work + rep

    def dp_floor(nbytes_per, kind, passes):
        return dp_parts_sum(parts[kind], lambda p, n, s: group_floor(
            nbytes_per * p, n, s, passes, cl))

    def rep_floor(nbytes_per, kind):
        return replica_sum(parts[kind], tp, cp, dp, P.dp_shard, lambda p, n, s: group_floor(
            nbytes_per * p, n, s, 2.0, cl))

    def one_kind(kind):
        # (some parameter has copies to reduce with: dp·cp > 1, or experts over edp > 1)
        copies = parts_have_copies(parts[kind])
        sync = copies & (zero < 3)
        red = lanes(dp_floor(gb, kind, np.where(full, 2.0, 1.0)),
                    np.where(full, 0.0, rep_floor(gb, kind)))
        red = np.where(sync, red, 0.0)
        ag = np.where(sync & (zero >= 1), dp_floor(getattr(sc, f"gather_{kind}"), kind, 1), 0.0)
        window = lps * fwd_layer
        items = lps + 2.0                                 # at most one bucket per item
        ag_tail = np.where(P.overlap_param_gather, np.maximum(ag - window, ag / items), ag)
        # where the schedule runs them before the first forwards (§5.194: on the fill path,
        # or from an interleaved schedule's start) no gather trails the optimizer, and what
        # the first forwards wait for is at least 0 (chunk 0's dispatched inside the optimizer
        # too, ``stacks.param_gather.gather_with_optimizer``, §5.200: it only starts earlier)
        ag_tail = np.where(scheduled, 0.0, ag_tail)
        z3 = nmb * v * lanes(2 * dp_floor(sc.param_bytes, kind, 1) + dp_floor(gb, kind, 1),
                             rep_floor(gb, kind))
        # ZeRO-2: the dp stream reduce-scatters the stage's gradients once per micro-batch
        # (DualPipe: the one copy the micro-batch passed, half the rank's on the mean)
        half = np.where(mirrored, 0.5, 1.0)
        z2 = nmb * lanes(dp_floor(gb * half, kind, 1), rep_floor(gb * half, kind))
        busy = np.where((zero == 3) & copies, z3, np.where(sync & (zero_g == 2), z2, 0.0))
        return DpTerms(red, ag_tail, busy)

    scheduled = gathers_on_fill_path(P.pp, v, zero, P.overlap_param_gather, mirrored) \
        | gathers_at_schedule_start(P.pp, v, zero, P.overlap_param_gather, mirrored,
                                    P.schedule == schedule_code("interleaved"))
    terms = {k: one_kind(k) for k in ("first", "last", "mid")}   # each kind's once
    terms["heavy"] = terms["mid"]
    return terms


def mirror_allreduce(cl: Cluster, sc: StageCostArrays, P: PlanArrays, kind: str,
                     mirrored: np.ndarray) -> np.ndarray:
    """DualPipe: the all-reduce of the two copies' gradients with the mirror rank, on the
    dp stream after the last compute and the buckets, before the optimizer (seconds; its
    floor at the fastest links: the pair may share a node; the gradients its optimizer
    steps: ``comm.grad_shard_params``); 0 elsewhere."""
    params, eparams = stage_params(sc)
    held = cm.grad_shard_params(params[kind], eparams[kind], P.tp, P.cp, P.dp, P.ep, P.etp,
                                P.zero, P.dp_shard)
    return np.where(mirrored, group_floor(sc.grad_bytes * held, 2, 1, 2.0, cl), 0.0)
