"""Each kind of rank's data-parallel collectives in the analytic step (``DpCalls``): a whole
reduction or gather of its parameters (``time``), the bucket that nothing hides as a call of
its own (``one_bucket``), and with hybrid sharding the replicas' all-reduce inside a
reduce-scatter (``rep_bucket``) and what of it a lane of its own hides (``lane_overlap``).
Arrays over plans; seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.comm.dp_groups import replica_overlap, replica_time
from strategies.cost.sm_share import NO_SMS, WindowSMs
from strategies.cost.stage import StageCostArrays
from strategies.plan_arrays import PlanArrays
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster


@dataclass(frozen=True, eq=False)
class DpCalls:
    """The data-parallel collectives of each kind of rank ``k`` (0 first, 1 middle = rank 1,
    2 last) of plans over ``tp cp dp ep etp`` on ``cl``: ``pr_k``/``pe_k`` its parameters and
    its routed experts' (the routed experts' share over the expert-data-parallel group,
    ``comm.dp_collective_time``), ``gb`` gradient bytes per parameter, ``dps`` the ranks a
    ZeRO shard spans (hybrid sharding; None: dp), ``own_lane`` the replicas' all-reduces on a
    stream of their own (``FrameworkProfile.replica_stream``)."""

    pr_k: tuple
    pe_k: tuple
    gb: Any
    tp: Any
    cp: Any
    dp: Any
    ep: Any
    etp: Any
    dps: Any
    cl: Cluster
    own_lane: bool
    #: the SMs the data-parallel collectives hold (``sm_share.WindowSMs``; ``NO_SMS``: none)
    sms: WindowSMs = NO_SMS

    @classmethod
    def of(cls, sc: StageCostArrays, P: PlanArrays, cl: Cluster,
           profile: FrameworkProfile, sms: WindowSMs = NO_SMS) -> "DpCalls":
        """The calls of plans ``P`` from their stage-cost record ``sc``; ``sms`` the SMs
        they hold beside the compute (``sm_share.window_sms``)."""
        return cls(pr_k=(sc.params_first, sc.params_mid, sc.params_last),
                   pe_k=(sc.expert_params_first, sc.expert_params_mid, sc.expert_params_last),
                   gb=sc.grad_bytes, tp=P.tp, cp=P.cp, dp=P.dp, ep=P.ep, etp=P.etp,
                   dps=P.dp_shard, cl=cl, own_lane=bool(profile.replica_stream), sms=sms)

    def time(self, kind: str, nbytes: Any, k: int) -> Any:
        """Seconds of collective ``kind`` over rank kind ``k``'s parameters at ``nbytes`` a
        parameter."""
        return cm.dp_collective_time(kind, nbytes, self.pr_k[k], self.pe_k[k], self.tp,
                                     self.cp, self.dp, self.ep, self.etp, self.cl, self.dps)

    def one_bucket(self, kind: str, nbytes: Any, k: int, share: Any, scale: Any = 1.0) -> Any:
        """The bucket that nothing hides (the last gradient bucket, the first gathered) is a
        call of its own, as the simulator's buckets are: its ``share`` of rank kind ``k``'s
        parameters (x ``scale``) at the ring's whole per-call latency, not that share of one
        call's latency (docs/calibration.md §5.26)."""
        return cm.dp_collective_time(kind, nbytes, self.pr_k[k] * scale * share,
                                     self.pe_k[k] * scale * share, self.tp, self.cp, self.dp,
                                     self.ep, self.etp, self.cl, self.dps)

    def bucket_calls(self, kind: str, nbytes: Any, k: int, last: Any, calls: Any) -> Any:
        """Seconds of collective ``kind`` over rank kind ``k``'s parameters issued as
        ``calls`` buckets, one call each (Megatron-Core: one ``start_grad_sync`` or
        ``start_param_sync`` per bucket group), the last ``last`` of the parameters and the
        others the rest in equal shares: ``(calls − 1)·one_bucket((1 − last)/(calls − 1))
        + one_bucket(last)`` (``time`` at one call): the bytes' time once and the ring's
        per-call latency once a bucket, as the simulator's buckets run
        (docs/calibration.md §5.227)."""
        rest = np.maximum(calls - 1.0, 1.0)
        many = rest * self.one_bucket(kind, nbytes, k, (1.0 - last) / rest) \
            + self.one_bucket(kind, nbytes, k, last)
        return np.where(calls > 1, many, self.time(kind, nbytes, k))

    def rep_bucket(self, k: int, share: Any, nbytes: Any = None) -> Any:
        """Hybrid sharding: the replicas' all-reduce inside a reduce-scatter's seconds
        (``share`` of rank kind ``k``'s gradients at ``nbytes`` a parameter, default ``gb``;
        ``comm.dp_groups.replica_time``); 0 without."""
        if self.dps is None:
            return 0.0
        nbytes = self.gb if nbytes is None else nbytes
        return replica_time(nbytes, cm.dp_parts(
            self.pr_k[k] * share, self.pe_k[k] * share, self.tp, self.cp, self.dp, self.ep,
            self.etp, self.dps), self.tp, self.cp, self.dp, self.dps, self.cl)

    def lane_overlap(self, k: int, share: Any, scale: Any = 1.0) -> Any:
        """On a lane of its own, what of a reduce-scatter's last bucket the dense share's
        all-reduce hides beside the experts' reduce-scatter (``comm.dp_groups.replica_overlap``); 0
        without hybrid sharding or without the lane."""
        if self.dps is None or not self.own_lane:
            return 0.0
        return replica_overlap(self.gb, cm.dp_parts(
            self.pr_k[k] * scale * share, self.pe_k[k] * scale * share, self.tp, self.cp,
            self.dp, self.ep, self.etp, self.dps), self.tp, self.cp, self.dp, self.dps,
            self.cl)
