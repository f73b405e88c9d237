"""Analytic times of collectives on a cluster: the bandwidth a group really gets.

A group of ``n`` ranks with ``k`` of them per node runs over NVLink when it fits in a node;
otherwise its ring crosses node boundaries, where the ``k`` local members share the node's NICs
and the ring's inter-node hop gets ``k`` GPUs' worth of NIC bandwidth (NCCL stripes its
channels over the NICs), reduced by the fabric's oversubscription. Achieved bus bandwidth is
the link bandwidth times ``NCCL_EFFICIENCY`` (nccl-tests on DGX A100/H100 reach about 80% of
NVLink and 90% of InfiniBand line rate for large messages). Latency: one hop per ring step.

Closed forms (nccl-tests PERFORMANCE.md): all-reduce ``2(n-1)/n · S/B``, reduce-scatter and
all-gather ``(n-1)/n · S/B``, with S the per-rank buffer in bytes.
"""
from __future__ import annotations

import numpy as np

from strategies.cost.counts import Num
from topologies.cluster import Cluster

NVLINK_EFFICIENCY = 0.80
NETWORK_EFFICIENCY = 0.90


def group_bandwidth(cluster: Cluster, n: Num, stride: Num) -> tuple[Num, Num]:
    """(bytes/s, per-step latency s) of a ring over ``n`` ranks spaced ``stride`` apart in rank
    order (tp has stride 1; dp has stride tp·cp; pp neighbours are tp·cp·dp apart)."""
    G = cluster.gpus_per_node
    span = n * stride
    in_node = span <= G
    k = np.maximum(1, np.minimum(n, G // np.maximum(stride, 1)))  # group members per node
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = (k * cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY
             / cluster.oversubscription)
    bw = np.where(in_node, intra, np.minimum(intra, inter))
    lat = np.where(in_node, cluster.intra_node_latency, cluster.inter_node_latency)
    return bw, lat


def allreduce_time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Ring all-reduce of ``nbytes`` per rank over ``n`` ranks (seconds); 0 when n == 1."""
    return np.where(n > 1, 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat, 0.0)


def reduce_scatter_time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Ring reduce-scatter (or all-gather) of an ``nbytes`` buffer (seconds)."""
    return np.where(n > 1, (n - 1) / n * nbytes / bw + (n - 1) * lat, 0.0)


allgather_time = reduce_scatter_time


def alltoall_time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """All-to-all where each rank sends ``nbytes`` in total, ``(n-1)/n`` of it off-GPU."""
    return np.where(n > 1, (n - 1) / n * nbytes / bw + lat, 0.0)


def p2p_time(nbytes: Num, cluster: Cluster, crosses_node: Num) -> Num:
    """One point-to-point message from one GPU to its pipeline neighbour (seconds)."""
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY / cluster.oversubscription
    return np.where(crosses_node, nbytes / np.minimum(intra, inter) + cluster.inter_node_latency,
                    nbytes / intra + cluster.intra_node_latency)
