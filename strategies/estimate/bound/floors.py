"""The least time of a communication on the simulated network (seconds; point 2 of
``strategies.estimate.lower_bound``'s docstring): a flow never moves faster than its slowest
link (every GPU link at most ``link_rate_cap``, a flow between nodes at most
``nic_rate_cap``) and every route costs at least ``min_route_latency``. ``group_floor``: a
ring collective; ``a2a_floor``: the expert all-to-all; ``p2p_send_floor``: a pipeline
send."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from strategies import collectives as colls
from strategies.collectives.phase import call_latency
from strategies.cost import comm as cm
from strategies.cost.comm.profile_scale import measured_least
from strategies.cost.stage import StageCostArrays
from topologies.cluster import Cluster
from topologies.routing import transfer_rate


def link_rate_cap(cl: Cluster) -> float:
    """The fastest achievable rate of any single GPU link of the simulated network (bytes/s)."""
    return max(cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY,
               cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY)


def nic_rate_cap(cl: Cluster) -> float:
    """The fastest achievable rate of a flow between two nodes: ``topologies.routing``'s
    path rule for the fastest such path (no relay, one whole NIC, its plane ports striped;
    a relay only adds a hop to the minimum)."""
    return float(transfer_rate(link_rate_cap(cl), cl.inter_node_bandwidth
                               * cm.NETWORK_EFFICIENCY, True, False, cl.planes))


def egress_rate_cap(cl: Cluster) -> float:
    """All of a GPU's links together: one into the node fabric (at most the GPU's NVLink
    bandwidth in any intra-node topology) and one to its NIC (bytes/s, achievable)."""
    return (cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
            + cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY)


def min_route_latency(cl: Cluster) -> float:
    """The least latency of any GPU-to-GPU route (seconds)."""
    return min(cl.intra_node_latency, cl.inter_node_latency)


def group_floor(nbytes: ArrayLike, n: ArrayLike, stride: ArrayLike, passes: ArrayLike,
                cl: Cluster) -> np.ndarray:
    """Least seconds of a ring collective (``passes``: 2 for all-reduce, 1 for
    reduce-scatter or all-gather; an array or a number) of an ``nbytes`` buffer over ``n``
    ranks ``stride`` apart in rank order.

    The algorithm is ``strategies.collectives.select``'s (the compiler's rule) and its time
    that algorithm's closed form at the fastest rates and least latency the network offers:
    in one node a ring at the fastest link rate; one member per node a ring at the NIC rate;
    ``k > 1`` members on each of several nodes the striped ring (``ring.striped_time`` at
    those rates, no relay, every step at the least latency). Groups of this shape that
    differ (``mixed``): the ``passes·(n-1)/n·S`` bytes every member moves, at the fastest
    link rate. Plus the call's own latency (``phase.call_latency``), which every call
    pays."""
    G = cl.gpus_per_node
    n, stride = np.asarray(n, dtype=float), np.asarray(stride, dtype=float)
    lat, B, nic = min_route_latency(cl), link_rate_cap(cl), nic_rate_cap(cl)
    uniform, k, nodes = colls.select.strided_layout(n, stride, G)

    def floor(kind):
        p = colls.PASSES[kind]
        algo = colls.strided_algorithm(n, stride, G, kind)
        striped = uniform & (nodes > 1) & (k > 1) & (algo == colls.RING)
        return np.where(striped, colls.ring.striped_time(p, nbytes, n, np.maximum(k, 2.0),
                                                         nodes, B, lat, nic, lat),
               np.where(algo == colls.RING,
                        colls.ring.time(p, nbytes, n, np.where(nodes > 1, nic, B), lat),
                        p * (n - 1) / np.maximum(n, 1) * nbytes / B)) + call_latency(n)
    t = np.where(np.asarray(passes) == 2, floor("allreduce"), floor("reduce_scatter"))
    if cm.profile_of(cl) is not None:
        # a GPU profile's measured collectives within a node (``comm.measured_scale``) may
        # run faster than the model: the floor times the least of the kinds' ratios (<= 1)
        one = uniform & (nodes == 1)
        r1 = np.minimum(cm.measured_scale("reduce_scatter", nbytes, n, one, cl),
                        cm.measured_scale("allgather", nbytes, n, one, cl))
        r = np.where(np.asarray(passes) == 2,
                     cm.measured_scale("allreduce", nbytes, n, one, cl), r1)
        t = t * np.minimum(r, 1.0)
    return np.where(n > 1, t, 0.0)


def a2a_floor(cl: Cluster, nbytes: ArrayLike, n: ArrayLike, stride: ArrayLike,
              remote_scale: ArrayLike) -> np.ndarray:
    """Least seconds of one all-to-all of ``nbytes`` per member over ``n`` ranks ``stride``
    apart (the expert group: ``ep`` ranks ``etp`` apart, ``placement.groups``), from what
    every member must move over links of its own: at least ``(n-1)/n`` of its buffer times
    the share between nodes (``remote_scale`` ``r`` <= 1 of the per-pair bytes where the
    dispatcher deduplicates per node) through all its links at once (``egress_rate_cap``); and where
    the groups are laid out alike on every node (``select.strided_layout``: ``k`` members on
    each of ``nodes`` nodes, at the same local indices), the ``(k-1)/n`` of it bound for its
    node peers over its node-fabric link and the ``(n-k)/n·r`` bound for other nodes over
    its GPU-NIC link. A flow between nodes leaves the source node by one GPU-NIC link: the
    member's own, or (PXN, a rail topology) that of the source node's GPU with the
    destination's local index, another member of the group (``topologies.routing``); a
    forwarded all-to-all sends between nodes to the member of its own position only
    (``all_to_all.phases``). Every member moves the same, so the busiest GPU-NIC link of a
    node carries at least ``(n-k)/n·r·nbytes`` (``all_to_all.two_level_time``'s NIC term at
    the link's achievable rate). Plus the least route latency and the call's own
    (``phase.call_latency``); 0 for ``n < 2``. Vectorised."""
    n = np.asarray(n, dtype=float)
    uniform, k, nodes = colls.select.strided_layout(n, stride, cl.gpus_per_node)
    r = np.asarray(remote_scale, dtype=float)
    any_link = (n - 1) / np.maximum(n, 1) * nbytes * np.minimum(r, 1.0) / egress_rate_cap(cl)
    fabric = np.where(uniform, (k - 1) / np.maximum(n, 1) * nbytes
                      / (cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY), 0.0)
    nic = np.where(uniform & (nodes > 1), (n - k) / np.maximum(n, 1) * nbytes * r
                   / (cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY), 0.0)
    t = min_route_latency(cl) + call_latency(n) + np.maximum(any_link, np.maximum(fabric, nic))
    return np.where(n > 1, t * measured_least(cl, "alltoall"), 0.0)


def p2p_send_floor(cl: Cluster, sc: StageCostArrays, n: np.ndarray,
                   pp: np.ndarray) -> np.ndarray:
    """Seconds one pipeline send takes at least (across nodes when stages are whole nodes
    apart). The all-gather over tp after a receive without SP is not counted: a receive
    with no send before it in its exchange may finish early."""
    nbytes = sc.p2p_bytes
    stride = n / pp
    G = cl.gpus_per_node
    cross = (stride >= G) & (np.mod(stride, G) == 0)
    send = min_route_latency(cl) + nbytes / np.where(cross, nic_rate_cap(cl), link_rate_cap(cl))
    return np.where(pp > 1, send, 0.0)
