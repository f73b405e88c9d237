"""Analytic times of collectives on a cluster: the bandwidth a group really gets.

``collective_time`` is what the estimate reads: the algorithm ``strategies.collectives.select``
picks for the group (the compiler's rule), timed by that algorithm's closed form. A group of
``n`` ranks with ``k`` of them per node runs a ring over NVLink when it fits in a node, a ring
over the NICs with one member per node, and the hierarchical algorithm with ``k > 1`` members
on each of several nodes. Groups laid out differently from one group to the next (``mixed``:
e.g. 12 ranks over 8-GPU nodes) keep ``group_bandwidth``'s ring that crosses node boundaries,
where the ``k`` local members share the node's NICs and the ring's inter-node hop gets ``k``
GPUs' worth of NIC bandwidth (NCCL stripes its channels over the NICs), reduced by the
fabric's oversubscription. Achieved bus bandwidth is
the link bandwidth times ``NCCL_EFFICIENCY`` (nccl-tests on DGX A100/H100 reach about 80% of
NVLink and 90% of InfiniBand line rate for large messages). Latency: one hop per ring step.

Closed forms (nccl-tests PERFORMANCE.md): all-reduce ``2(n-1)/n · S/B``, reduce-scatter and
all-gather ``(n-1)/n · S/B``, with S the per-rank buffer in bytes; they are the ``time`` of
``strategies.collectives.ring`` and ``.all_to_all``, the definitions the simulator's engine runs
as flows.
"""
from __future__ import annotations

import numpy as np

from strategies.collectives import PASSES, all_to_all, hierarchical, ring
from strategies.collectives.select import HIERARCHICAL, strided_algorithm, strided_layout
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


# the closed forms live with their algorithms (strategies.collectives); the estimate reads them
allreduce_time = ring.allreduce_time
reduce_scatter_time = ring.reduce_scatter_time
allgather_time = ring.allgather_time
alltoall_time = all_to_all.time


def collective_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster) -> Num:
    """Seconds of collective ``kind`` of an ``nbytes`` buffer per rank over ``n`` ranks
    ``stride`` apart, alone on its links, with the algorithm ``strategies.collectives.select``
    picks for such groups (the compiler's rule): ``hierarchical``'s closed form at NVLink and
    per-GPU NIC rates; otherwise ``ring``'s (``all_to_all``'s for an all-to-all) at
    ``group_bandwidth``. Groups of a shape that is laid out differently from one group to
    the next (``mixed``) keep the NIC-striped ring of ``group_bandwidth``. Vectorised."""
    bw, lat = group_bandwidth(cluster, n, stride)
    if kind == "alltoall":
        return all_to_all.time(nbytes, n, bw, lat)
    passes = PASSES[kind]
    G = cluster.gpus_per_node
    _, k, nodes = strided_layout(n, stride, G)
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY / cluster.oversubscription
    hier = hierarchical.time(passes, nbytes, k, nodes, intra, cluster.intra_node_latency,
                             inter, cluster.inter_node_latency)
    return np.where(strided_algorithm(n, stride, G) == HIERARCHICAL, hier,
                    ring.time(passes, nbytes, n, bw, lat))[()]


def pair_time(kind: str, nbytes: Num, in_node: Num, cluster: Cluster) -> Num:
    """Seconds of collective ``kind`` of ``nbytes`` per rank between two ranks (NCCL's ring for
    ``n = 2``, ``strategies.collectives.ring``): over NVLink when both are in one node, else
    over the network at one GPU's NIC share (every pair of the two stages crosses at once, each
    on its own GPU's NIC). The tied embedding's gradient all-reduce between the first and the
    last pipeline stage. Vectorised."""
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY / cluster.oversubscription
    bw = np.where(in_node, intra, np.minimum(intra, inter))
    lat = np.where(in_node, cluster.intra_node_latency, cluster.inter_node_latency)
    return ring.time(PASSES[kind], nbytes, 2, bw, lat)


def p2p_time(nbytes: Num, cluster: Cluster, crosses_node: Num) -> Num:
    """One point-to-point message from one GPU to its pipeline neighbour (seconds)."""
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY / cluster.oversubscription
    return np.where(crosses_node, nbytes / np.minimum(intra, inter) + cluster.inter_node_latency,
                    nbytes / intra + cluster.intra_node_latency)


def per_tensor_time(count: Num, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                    copy_gap: float) -> Num:
    """Seconds of ``count`` all-gathers (or reduce-scatters) run one after another, one per
    parameter tensor, ``nbytes`` gathered in all per rank, over ``n`` ranks ``stride`` apart,
    as DeepSpeed's 2021 ZeRO-3 runs them through ``torch.distributed`` (the tensor-list
    forms): each is NCCL's ring over all ``n`` ranks (NCCL runs all-gather and reduce-scatter
    as rings: ``n - 1`` latency steps each, ``strategies.collectives.ring``, at
    ``group_bandwidth``) plus ``n`` copy kernels of ``copy_gap`` seconds (PyTorch's
    ``ProcessGroupNCCL`` copies the flat buffer to, or from, each of the ``n`` list entries).
    The simulator runs the same ring ``count`` times back to back (``repeat``) and the copies
    as compute. Vectorised; 0 where ``count`` is 0 or ``n < 2``."""
    bw, lat = group_bandwidth(cluster, n, stride)
    per = nbytes / np.maximum(count, 1)
    return np.where((count > 0) & (n > 1),
                    count * ring.time(1, per, n, bw, lat) + count * n * copy_gap, 0.0)[()]


def per_tensor_excess(kind: str, count: Num, nbytes: Num, n: Num, stride: Num,
                      cluster: Cluster, copy_gap: float) -> Num:
    """Seconds of ``per_tensor_time`` beyond ``count`` calls of the collective the
    simulator runs for the group (``collective_time``: the selector's algorithm, e.g. the
    hierarchical one over several nodes): NCCL's flat ring's extra latency steps and the
    ``n`` copies per call. The simulator runs the collective ``count`` times (``repeat``)
    then this much more on the communication stream, so alone on the wire it takes exactly
    ``per_tensor_time``; clipped at 0. Vectorised."""
    per = nbytes / np.maximum(count, 1)
    own = count * collective_time(kind, per, n, stride, cluster)
    return np.maximum(per_tensor_time(count, nbytes, n, stride, cluster, copy_gap) - own,
                      0.0)[()]
