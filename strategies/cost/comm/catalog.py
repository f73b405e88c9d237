"""``catalog_time``: the modelled seconds of a collective alone on its links, by the algorithm
``strategies.collectives.select`` picks for the group, at the link rates of ``links`` (the
cluster catalog's network, before a GPU profile's measured scale)."""
from __future__ import annotations

from typing import ContextManager

import numpy as np

from strategies.collectives import PASSES, all_to_all, ring
from strategies.collectives.phase import call_latency
from strategies.collectives.select import (RING, strided_algorithm, strided_layout,
                                          uneven_layouts)
from strategies.cost.comm.links import (NVLINK_EFFICIENCY, array_key, exact_key,
                                        group_bandwidth, hop_rate, hop_relays, keep_answer,
                                        memo_block, nic_rate, pxn_relay)
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster
from topologies.routing import transfer_latency, transfer_rate


def catalog_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                  remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """Seconds of collective ``kind`` of an ``nbytes`` buffer per rank over ``n`` ranks
    ``stride`` apart, alone on its links, with the algorithm ``strategies.collectives.select``
    picks for such groups (the compiler's rule): over ``k > 1`` members on each of
    several nodes ``ring.striped_time`` (NVLink, one GPU's NIC share, the relay where the hop
    between nodes changes rail); otherwise ``ring``'s at ``group_bandwidth``; an all-to-all,
    ``all_to_all.two_level_time`` over the members' NVLink and NIC ports (``remote_scale``:
    the share of its bytes between nodes, DeepEP's and HybridEP's per-node deduplication;
    ``nvlink_share``: the share of NVLink's rate its kernel reaches,
    ``ep_dispatch.ep_nvlink_share``). Groups of a shape that is
    laid out differently from one group to the next (``mixed``) run ``ring.uneven_time``
    where ``select.uneven_layouts`` knows them (NCCL's channels are the thinnest node's
    members, docs/calibration.md §5.228), else keep the NIC-striped ring of
    ``group_bandwidth``. Each call also pays ``phase.call_latency`` once (NCCL's per-call
    cost beyond its steps, docs/calibration.md §5.233). Vectorised."""
    if kind == "alltoall":
        uniform, k, intra, nic, lat2, relay, bw, lat = link_terms(
            kind, n, stride, cluster, remote_scale, nvlink_share)
        return (np.where(uniform, all_to_all.two_level_time(nbytes, n, k, intra, nic, lat2,
                                                            relay, remote_scale, nvlink_share),
                         all_to_all.time(nbytes, n, bw, lat)) + call_latency(n))[()]
    flat_on, *terms = link_terms(kind, n, stride, cluster)
    return (np.where(flat_on, ring.striped_of(nbytes, terms[:4]),
                     ring.time_of(nbytes, terms[4:])) + call_latency(n))[()]


#: ``link_terms`` of scalar arguments, kept by the cluster's id with the cluster itself
#: (``collective.collective_time``'s memo rule): a scalar estimate prices many buffers over
#: the same few groups (reference_mape: 34,512 collectives priced, the link terms of far fewer
#: groups). Each kept array is read-only.
_SCALAR_LINKS: dict[tuple, tuple[Cluster, tuple]] = {}


#: ``link_terms`` of arrays of plans, kept within ``kept_links`` blocks (one array estimate:
#: ``analytic.estimate_arrays``) by the cluster's id with the cluster itself and each
#: argument's dtype, shape and bytes (``links.array_key``): the search's estimate prices
#: every gradient and gather bucket over the same few groups (the qwen3-30b-a3b search on
#: dgx-h100:2: 2,249 calls, 61 distinct groups). Emptied when the outermost block ends, so
#: a cost function changed between two estimates is read afresh; each kept array read-only.
_ARRAY_LINKS: dict[tuple, tuple[Cluster, tuple]] = {}
_OPEN = {"depth": 0}
ARRAY_LINKS_KEPT = 32


def kept_links() -> ContextManager[None]:
    """Within the block ``link_terms`` keeps its answers for arrays (``_ARRAY_LINKS``);
    blocks nest, and the outermost one's end drops them (``links.memo_block``)."""
    return memo_block(_ARRAY_LINKS, _OPEN)


def link_terms(kind: str, n: Num, stride: Num, cluster: Cluster, remote_scale: Num = 1.0,
               nvlink_share: Num = 1.0) -> tuple:
    """What ``catalog_time`` reads of the group and its links, all but the buffer's bytes:
    for an all-to-all ``(uniform, k, NVLink bytes/s, NIC bytes/s, latency, relay, ring
    bytes/s, ring latency)``, else ``(striped, *ring.striped_terms, *ring.time_terms)``
    (``striped``: where NCCL's striped ring runs, its terms at NVLink's rate and latency
    and the hop's between nodes, the relay; the ring's at ``group_bandwidth``). Vectorised; scalar arguments' kept
    (``_SCALAR_LINKS``), arrays' within a ``kept_links`` block (``_ARRAY_LINKS``), the same
    values a fresh call gives."""
    args = (n, stride) + ((remote_scale, nvlink_share) if kind == "alltoall" else ())
    key = (kind, id(cluster)) + tuple(map(exact_key, args))
    if None in key:
        if not _OPEN["depth"]:
            return _link_terms(kind, n, stride, cluster, remote_scale, nvlink_share)
        key = (kind, id(cluster)) + tuple(map(array_key, args))
        if None in key:
            return _link_terms(kind, n, stride, cluster, remote_scale, nvlink_share)
        hit = _ARRAY_LINKS.get(key)
        if hit is not None and hit[0] is cluster:
            return hit[1]
        out = _link_terms(kind, n, stride, cluster, remote_scale, nvlink_share)
        return keep_answer(_ARRAY_LINKS, key, cluster, out, out, ARRAY_LINKS_KEPT)
    hit = _SCALAR_LINKS.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    out = _link_terms(kind, n, stride, cluster, remote_scale, nvlink_share)
    return keep_answer(_SCALAR_LINKS, key, cluster, out, out)


def _link_terms(kind: str, n: Num, stride: Num, cluster: Cluster, remote_scale: Num,
                nvlink_share: Num) -> tuple:
    """``link_terms`` computed."""
    bw, lat = group_bandwidth(cluster, n, stride)
    G = cluster.gpus_per_node
    uniform, k, nodes = strided_layout(n, stride, G)
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    if kind == "alltoall":
        # the NVLink and NIC ports of each member at once (two_level_time); groups laid out
        # unevenly keep the one-port form at group_bandwidth's rate
        relay = pxn_relay(cluster)
        # the slowest pair's route: across nodes, through a PXN relay first, or forwarded
        # over NVLink after (remote_scale != 1: all_to_all.two_level_time), when k > 1
        hop = (relay | (np.asarray(remote_scale) != 1.0) | (np.asarray(nvlink_share) != 1.0)) \
            & (k > 1)
        lat2 = np.where(nodes > 1, cluster.inter_node_latency
                        + np.where(hop, cluster.intra_node_latency, 0.0),
                        cluster.intra_node_latency)
        return uniform, k, intra, nic_rate(cluster), lat2, relay, bw, lat
    algo = strided_algorithm(n, stride, G, kind)
    lat_in = cluster.intra_node_latency
    # NCCL's flat ring striped over the members of each node (``ring.striped``): member j's
    # hop between nodes goes to member j+1 of the next node, ``stride`` local indices on (the
    # last member's to the first: ``-(k-1)·stride``), relayed where that changes rail
    s = np.asarray(stride, dtype=np.int64)
    relay = hop_relays(cluster, (s, -(np.maximum(np.asarray(k), 1).astype(np.int64) - 1) * s))
    out = transfer_rate(hop_rate(cluster), nic_rate(cluster), True, relay, cluster.planes)
    kk = np.maximum(k, 2.0)     # (priced only where k > 1: no division by k - 1 = 0 elsewhere)
    striped = uniform & (nodes > 1) & (k > 1)
    passes = PASSES[kind]
    terms = ring.striped_terms(passes, n, kk, nodes, intra, lat_in, out, transfer_latency(
        lat_in, cluster.inter_node_latency, True, relay), relay)
    # groups over nodes holding different member counts (``ring.uneven``, where the layout
    # is known: ``select.uneven_layouts``): the thinnest node's members are the channels
    on_u, k_u, nodes_u = uneven_layouts(n, stride, G)
    if np.any(on_u):
        relay_u = hop_relays(cluster, (s, -(np.maximum(G // np.maximum(s, 1), 1) - 1) * s))
        out_u = transfer_rate(hop_rate(cluster), nic_rate(cluster), True, relay_u,
                              cluster.planes)
        u = ring.uneven_terms(passes, n, np.where(on_u, k_u, 1.0), nodes_u, intra, lat_in,
                              out_u, transfer_latency(lat_in, cluster.inter_node_latency,
                                                      True, relay_u), relay_u)
        terms = tuple(np.where(on_u, a, b) for a, b in zip(u, terms))
    return ((algo == RING) & striped | on_u, *terms, *ring.time_terms(passes, n, bw, lat))
