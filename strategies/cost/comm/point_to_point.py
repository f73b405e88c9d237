"""Point-to-point costs: a pipeline's messages between neighbouring stages (``p2p_time``,
``path_p2p_time``) and a collective between two ranks (``pair_time``)."""
from __future__ import annotations

import numpy as np

from strategies.collectives import PASSES, ring
from strategies.collectives.phase import call_latency
from strategies.cost.comm.links import NVLINK_EFFICIENCY, hop_rate, hop_relays, nic_rate
from strategies.cost.comm.profile_scale import measured_scale
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster
from topologies.routing import transfer_latency, transfer_rate


def pair_time(kind: str, nbytes: Num, in_node: Num, cluster: Cluster) -> Num:
    """Seconds of collective ``kind`` of ``nbytes`` per rank between two ranks (NCCL's ring for
    ``n = 2``, ``strategies.collectives.ring``): over NVLink when both are in one node, else
    over the network at one GPU's NIC share (every pair of the two stages crosses at once, each
    on its own GPU's NIC). The tied embedding's gradient all-reduce between the first and the
    last pipeline stage. One call: its own latency too (``phase.call_latency``, as
    ``collective_time`` charges it). Vectorised."""
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    # across nodes the two end ranks share a local index (one rail, no relay):
    # ``topologies.routing``'s path rule
    across = transfer_rate(hop_rate(cluster), nic_rate(cluster), True, False, cluster.planes)
    bw = np.where(in_node, intra, across)
    lat = np.where(in_node, cluster.intra_node_latency,
                   transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency,
                                    True, False))
    return ((ring.time(PASSES[kind], nbytes, 2, bw, lat) + call_latency(2))
            * measured_scale(kind, nbytes, 2, in_node, cluster))[()]


def p2p_time(nbytes: Num, cluster: Cluster, stride: Num) -> Num:
    """One point-to-point message from one GPU to its pipeline neighbour ``stride`` ranks
    further (seconds): inside a node at the fabric's rate when ``stride`` is below the node
    size, else between nodes by ``topologies.routing``'s path rule (the relay when the two
    GPUs sit on different rails). Vectorised."""
    stride = np.asarray(stride)
    crosses = stride >= cluster.gpus_per_node
    relay = hop_relays(cluster, (np.asarray(stride, dtype=np.int64),))
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    across = transfer_rate(hop_rate(cluster), nic_rate(cluster), True, relay, cluster.planes)
    lat = transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency, crosses,
                           relay)
    return (nbytes / np.where(crosses, across, intra) + lat)[()]


def path_p2p_time(nbytes: Num, cluster: Cluster, stride: int,
                  hops: tuple[tuple[int, int], ...]) -> Num:
    """Seconds of one point-to-point message on a pipeline's critical path: the mean over
    the hops next to the worst rank (its one or two neighbours on the path,
    ``Schedule.path_hops``: ``(stage, next stage)`` pairs), each hop priced by ``p2p_time``
    at its own distance: inside a node when both ranks are in one, else between nodes (the
    relay when the two GPUs sit on different rails). Pipeline stage ``s`` holds ranks
    ``s·stride + o``; the slowest pipeline (offset ``o``) counts. Where the pipeline spans
    several nodes with stages closer than a node (``stride < gpus_per_node``: 4 stages of
    tp 4 × dp 4 per 64-GPU NVLink domain), a rank next to a node boundary sends and
    receives each steady-state micro-batch once across it and once inside its node (1F1B's
    two exchanges, interleaved's batched exchange waiting on both neighbours), so its
    messages cost ``(t_across + t_inside) / 2`` each; ``p2p_time(stride)`` where every hop
    is alike. Vectorised over ``nbytes``."""
    G = cluster.gpus_per_node
    if not hops:
        return np.asarray(p2p_time(nbytes, cluster, stride))[()]
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for a, b in hops:                       # a pair of ranks once, the path's direction
        pairs.setdefault((min(a, b), max(a, b)), (a, b))
    o = np.arange(min(stride, G))
    t_in = np.asarray(p2p_time(nbytes, cluster, 0))
    times = {}
    for key, (a, b) in pairs.items():
        across = ((a * stride + o) // G != (b * stride + o) // G).reshape(
            (-1,) + (1,) * t_in.ndim)
        t_x = np.asarray(p2p_time(nbytes, cluster, G + (b - a) * stride % G))
        times[key] = np.where(across, t_x, t_in)            # (pipeline, ...)
    worst = None
    for r in {x for k in pairs for x in k}:
        own = [t for k, t in times.items() if r in k]
        mean = sum(own) / len(own)
        worst = mean if worst is None else np.maximum(worst, mean)
    return worst.max(axis=0)[()]
