"""Which ranks share an NVLink domain: the one rule every "does this traffic stay on
NVLink?" reads (ranks are numbered domain by domain, ``nvlink_domain_size`` GPUs each).

>>> from topologies.cluster.presets import cluster_preset
>>> cl = cluster_preset("gb200-nvl72", 32)      # 2 racks of 16 trays: domains of 64 GPUs
>>> same_nvlink_domain(cl, 0, 63), same_nvlink_domain(cl, 63, 64), fits_nvlink_domain(cl, 16)
(True, False, True)
"""
from __future__ import annotations

from typing import Any

from topologies.cluster.spec import Cluster


def nvlink_domain_of(cluster: Cluster, rank: Any) -> Any:
    """NVLink domain index of global rank(s) ``rank`` (int or numpy array): ``rank //
    nvlink_domain_size``. The one rule for "is this traffic on NVLink?"."""
    return rank // cluster.nvlink_domain_size


def same_nvlink_domain(cluster: Cluster, a: Any, b: Any) -> Any:
    """True where ranks ``a`` and ``b`` share an NVLink domain (broadcasts over arrays)."""
    return nvlink_domain_of(cluster, a) == nvlink_domain_of(cluster, b)


def fits_nvlink_domain(cluster: Cluster, group_size: Any) -> Any:
    """True where contiguous groups of ``group_size`` ranks (tp, or ep over adjacent ranks)
    never straddle two NVLink domains: the size divides the domain."""
    return cluster.nvlink_domain_size % group_size == 0
