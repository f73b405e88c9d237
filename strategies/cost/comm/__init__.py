"""Analytic times of communication on a cluster: the bandwidth a group really gets.

One concern a module: ``links`` (the link rates and latencies a group of ranks gets, the
efficiencies, the relays of a rail topology), ``catalog`` (a collective's modelled seconds by
the algorithm ``strategies.collectives.select`` picks), ``profile_scale`` (a GPU profile's
measured NCCL collectives as a factor on it), ``collective`` (``collective_time``, what the
estimate reads), ``point_to_point`` (pipeline messages, two-rank collectives), ``dp_groups``
(the collectives over data-parallel copies), ``zero3_per_tensor`` (DeepSpeed 2021 ZeRO-3's
per-tensor calls), ``small_allreduce`` (latency-bound all-reduces: ring or tree) and
``dispatcher_metadata`` (an MoE dispatcher's small blocking collectives).

The names most callers read (``from strategies.cost import comm as cm``; ``cm.collective_time``)
are importable from here; the rest from their module.
"""
from strategies.cost.comm.links import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY, group_bandwidth
from strategies.cost.comm.profile_scale import measured_scale, profile_of
from strategies.cost.comm.collective import collective_time
from strategies.cost.comm.point_to_point import p2p_time, path_p2p_time
from strategies.cost.comm.dp_groups import (dp_collective_time, dp_parts, grad_shard_params,
                                            has_dp_copies)
from strategies.cost.comm.zero3_per_tensor import per_tensor_time
from strategies.cost.comm.small_allreduce import small_allreduce_time
from strategies.cost.comm.dispatcher_metadata import dispatcher_metadata_time

__all__ = ["NETWORK_EFFICIENCY", "NVLINK_EFFICIENCY", "collective_time",
           "dispatcher_metadata_time", "dp_collective_time", "dp_parts", "grad_shard_params",
           "group_bandwidth", "has_dp_copies", "measured_scale", "p2p_time", "path_p2p_time",
           "per_tensor_time", "profile_of", "small_allreduce_time"]
