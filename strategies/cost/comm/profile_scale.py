"""The GPU profile's measured NCCL collectives (``paraplan calibrate``) as a factor on the
modelled time of a collective whose group lies within one node (``measured_scale``;
docs/calibration.md §5.71); between nodes the network model stays."""
from __future__ import annotations

import numpy as np

from strategies.cost import measured
from strategies.cost.comm.catalog import catalog_time
from strategies.cost.comm.links import MEMO_KEPT
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster


# the GPU profile's collective ratios (``strategies.cost.measured.collective_table``) of a
# cluster, kept by its id with the cluster itself (``collective._SCALAR_TIMES``' rule)
_MEASURED: dict[int, tuple[Cluster, object]] = {}


def profile_of(cluster: Cluster):
    """The GPU profile every node group's GPU carries (``topologies.gpu_profile``), else
    None: a cluster mixing GPUs measured differently (or not at all) keeps the network
    model for its collectives."""
    profs = [g.gpu.profile for g in cluster.groups]
    first = profs[0]
    return first if first is not None and all(p == first for p in profs[1:]) else None


def measured_table(cluster: Cluster):
    """The GPU profile's collective ratios of ``cluster`` (``strategies.cost.measured.
    collective_table`` of ``profile_of``, against ``catalog_time`` over ranks 1 apart), or
    None without a profile; kept per cluster object."""
    hit = _MEASURED.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    table = measured.collective_table(
        profile_of(cluster),
        lambda kind, nbytes, gpus: catalog_time(kind, nbytes, gpus, 1, cluster))
    if len(_MEASURED) >= MEMO_KEPT:
        _MEASURED.clear()
    _MEASURED[id(cluster)] = (cluster, table)
    return table


def measured_scale(kind: str, nbytes: Num, n: Num, in_node: Num, cluster: Cluster,
                   nvlink_share: Num = 1.0) -> Num:
    """Measured over modelled seconds of collective ``kind`` of ``nbytes`` per rank over
    ``n`` ranks (``strategies.cost.measured.collective_ratio`` of the cluster's GPU profile:
    NCCL measured on ``n`` GPUs of one node, interpolated in log bytes) where ``in_node``
    (the group lies within one node) and the collective is NCCL's (``nvlink_share == 1``:
    DeepEP's and HybridEP's kernels are not what calibrate measured); 1 elsewhere, between
    nodes (calibrate measures one machine: never the network), and without a profile. The
    one rule the estimate (``collective_time``, ``pair_time``), the lower bound and the
    simulator (``ProgramBuilder.coll``: the op's ``repeat``, so that alone on the wire it
    takes this times the model's seconds) read. Vectorised."""
    table = measured_table(cluster)
    if table is None:
        return 1.0
    r = measured.collective_ratio(table, kind, nbytes, n)
    on = np.asarray(in_node) & (np.asarray(nvlink_share) == 1.0)
    return np.where(on, r, 1.0)[()]


def measured_least(cluster: Cluster, kind: str) -> float:
    """The least of ``measured_scale`` over every size and group of collective ``kind``:
    ``min(1, least measured ratio)`` (the interpolation stays between measured ratios and
    is 1 elsewhere); 1 without a profile. A lower bound's factor."""
    table = measured_table(cluster)
    ratios = [r for (k, _), (_, ys) in (table or {}).items() if k == kind for r in ys]
    return min([1.0, *ratios])
