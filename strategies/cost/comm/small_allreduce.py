"""All-reduces of latency-bound buffers (amaxes, norms): the lesser of the ring and NCCL's
tree."""
from __future__ import annotations

import numpy as np

from strategies.collectives.phase import call_latency
from strategies.collectives.select import tree_layouts
from strategies.cost.comm.collective import collective_time
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster
from topologies.routing import transfer_latency


def tree_latency(n: Num, stride: Num, cluster: Cluster) -> Num:
    """Latency seconds of NCCL's tree all-reduce over ``n`` ranks ``stride`` apart with the
    cluster's per-hop latencies: intra-node chains of the local members and a double binary
    tree between the nodes, ``2((k-1)·lat_in + log2i(nodes)·lat_out)`` (NVIDIA/nccl
    ``src/graph/tuning.cc`` ``ncclTopoTuneModel``, tag v2.19.3-1; ``log2i`` = floor(log2));
    the tree's hops between nodes join GPUs of one rail (no relay). Over groups that span
    nodes unevenly (``select.tree_layouts``) ``k`` is the fullest node's chain, the one on
    the slowest path (NCCL's model takes the mean ``nRanks/nNodes``), and the answer the
    slowest group's over the groups' offsets. docs/calibration.md §3.21 (nccltree), §5.64,
    §5.223. Vectorised."""
    return tree_parts(n, stride, cluster)[1]


def tree_parts(n: Num, stride: Num, cluster: Cluster) -> tuple[Num, Num]:
    """(where the tree is priced: a known layout over more than one node, ``tree_latency``
    seconds). Vectorised."""
    known, k, nodes = tree_layouts(n, stride, cluster.gpus_per_node)
    lat_out = transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency, True,
                               False)
    log2i = np.floor(np.log2(np.maximum(nodes, 1.0)))
    lat = np.max(2 * ((k - 1) * cluster.intra_node_latency + log2i * lat_out), axis=-1)
    return (known & np.any(nodes > 1, axis=-1))[()], lat[()]


def small_allreduce_time(nbytes: Num, n: Num, stride: Num, cluster: Cluster) -> Num:
    """Seconds of an all-reduce of a latency-bound buffer (bytes to kilobytes: amaxes, norms)
    over ``n`` ranks ``stride`` apart: the lesser of ``collective_time``'s ring and NCCL's
    tree, for groups over several nodes whose layout is known (``select.tree_layouts``: evenly, or
    unevenly with ``stride`` dividing the node; §5.223) (one latency per hop for both, the
    tree at the ring's bus bandwidth: ``bw·n/(n-1) + tree_latency``; docs/calibration.md
    §3.21 nccltree states why the model keeps the ring for the gradient buckets, where the
    crossover is not sure; for a few kilobytes over ``nodes > 1`` the tree's
    ``log2(nodes)`` network latencies beat the ring's ``2(nodes-1)`` at any efficiency).
    0 for ``n < 2``. Vectorised."""
    ring_t = collective_time("allreduce", nbytes, n, stride, cluster)
    ring_lat = collective_time("allreduce", 0.0, n, stride, cluster)
    nf = np.asarray(n, dtype=float)
    tree_ok, tree_lat = tree_parts(n, stride, cluster)
    # (``ring_lat`` holds the call's own latency, ``phase.call_latency``: the tree pays it too)
    tree_t = (ring_t - ring_lat) * nf / np.maximum(nf - 1.0, 1.0) + tree_lat + call_latency(n)
    return np.where(nf > 1, np.where(tree_ok, np.minimum(ring_t, tree_t), ring_t), 0.0)[()]
