"""The bandwidth and latency a group of ranks gets on a cluster: the link rates the
communication costs read (``strategies.cost.comm``).

Achieved bus bandwidth is the link bandwidth times ``NVLINK_EFFICIENCY`` inside a node and
``NETWORK_EFFICIENCY`` between nodes (nccl-tests on DGX A100/H100 reach about 80% of NVLink
and 90% of InfiniBand line rate for large messages). Latency: one hop per ring step.
``group_bandwidth`` keeps the ring that crosses node boundaries for groups laid out
differently from one group to the next (``mixed``: e.g. 12 ranks over 8-GPU nodes), where the
``k`` local members share the node's NICs and the ring's inter-node hop gets ``k`` GPUs' worth
of NIC bandwidth (NCCL stripes its channels over the NICs), reduced by the fabric's
oversubscription.

Between nodes the path rule is ``topologies.routing``'s, the one the simulator's routes
follow: a hop between nodes crosses the GPU's NIC link and its plane ports (striped over a
multi-plane network: together the NIC), and on a rail topology (rail fat tree, rail-only,
torus, ring) first one hop of the source node's fabric when the destination sits on another
rail (``relays``), which adds that hop's rate to the minimum and its latency to the sum
(``transfer_rate``, ``transfer_latency``). Rings with one member per node join GPUs of the
same rail (no relay); the striped ring's hop to member ``j+1`` of the next node and a ring that
crosses node boundaries elsewhere (``mixed``) and a pipeline hop between GPUs of different
local indices relay.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import numpy as np

from strategies.collectives.select import strided_layout
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster
from topologies.routing import fabric_hop_share, relays, transfer_latency, transfer_rate

NVLINK_EFFICIENCY = 0.80
NETWORK_EFFICIENCY = 0.90

#: answers each of the communication costs' per-cluster memos keeps before it starts over
#: (``hop_relays``' here, ``collective.collective_time``'s, ``profile_scale``'s tables)
MEMO_KEPT = 8192
#: ``hop_relays`` of 0-d offsets, kept by the cluster's id with the cluster itself
#: (``collective``'s memo rule)
_SCALAR_RELAYS: dict[tuple, tuple[Cluster, np.ndarray]] = {}
_FLOATS = (float, np.float64)
_INTS = (int, np.int64)


def exact_key(x) -> tuple | None:
    """``x`` (a Python or numpy scalar, or a 0-d array) as a memo key that tells apart every
    value and type (a 0-d array's dtype too; ``float.hex``: -0.0 is not 0.0), so a kept
    answer is the one a fresh call with ``x`` gives, bit for bit; None for anything else
    (an array of plans: not kept). The communication costs' memos of scalar arguments
    (``collective.collective_time``, ``catalog.link_terms``) read it."""
    t = type(x)
    if t in _FLOATS:
        return (t, float.hex(float(x)))
    if t in _INTS:
        return (t, int(x))
    if t is np.ndarray and x.ndim == 0 and x.dtype.kind in "fi":  # a 0-d array (np.where's)
        v = x[()]
        return (t, x.dtype.str, float.hex(float(v)) if x.dtype.kind == "f" else int(v))
    return None


def array_key(x) -> tuple | None:
    """``exact_key`` of ``x``, or for an array of numbers its dtype, shape and bytes (every
    value and type told apart, -0.0 from 0.0): the key of a memo kept within one estimate
    (``catalog.kept_links``); None for anything else."""
    key = exact_key(x)
    if key is None and type(x) is np.ndarray and x.dtype.kind in "fiub":
        return (np.ndarray, x.dtype.str, x.shape, x.tobytes())
    return key


@contextmanager
def memo_block(memo: dict, state: dict) -> Iterator[None]:
    """A block within which ``memo`` keeps answers (its reader checks ``state["depth"]``):
    blocks nest, and the outermost one's end empties ``memo`` (``catalog.kept_links``,
    ``cost_arrays.kept_records``)."""
    state["depth"] += 1
    try:
        yield
    finally:
        state["depth"] -= 1
        if not state["depth"]:
            memo.clear()


def keep_answer(memo: dict, key: tuple, held: Any, out: Any, arrays: Iterable,
                limit: int = MEMO_KEPT) -> Any:
    """``out`` kept in ``memo`` under ``key`` with ``held`` (the objects whose ids the key
    names, so they stay their own), each numpy array among ``arrays`` (``out``'s) made
    read-only first, as it is handed out again; ``memo`` started over when it holds
    ``limit`` answers. Returns ``out``."""
    for x in arrays:
        if isinstance(x, np.ndarray):
            x.flags.writeable = False
    if len(memo) >= limit:
        memo.clear()
    memo[key] = (held, out)
    return out


def hop_relays(cluster: Cluster, offsets) -> np.ndarray:
    """Whether a hop between nodes from some GPU to the GPU ``offset`` local indices further
    (mod the node) relays through the source node's fabric (``topologies.routing.relays``;
    true when it does for any source GPU: the step waits for its slowest hop). Vectorised
    over ``offsets`` (a tuple of arrays: any of them relaying counts)."""
    G = cluster.gpus_per_node
    rails = min(cluster.nics_per_node, G)
    offsets = np.broadcast_arrays(*(np.asarray(o, dtype=np.int64) for o in offsets))
    key = None
    if offsets[0].ndim == 0:         # one hop's answer, kept (``collective``'s memo rule: by id)
        key = (id(cluster),) + tuple(int(o) for o in offsets)
        hit = _SCALAR_RELAYS.get(key)
        if hit is not None and hit[0] is cluster:
            return hit[1].copy()
    # the answer depends on the offset mod the node only: one row per residue, then a look-up
    # per offset (not a (GPUs per node, plans) matrix per offset)
    local = np.arange(G)
    per = np.any(relays(cluster.inter_node_topology, rails, local[:, None],
                        np.mod(local[:, None] + local, G)), axis=0)
    out = np.zeros(offsets[0].shape, dtype=bool)
    for off in offsets:
        np.logical_or(out, per[np.mod(off, G)], out=out)
    if key is not None:
        if len(_SCALAR_RELAYS) >= MEMO_KEPT:
            _SCALAR_RELAYS.clear()
        _SCALAR_RELAYS[key] = (cluster, out.copy())
    return out


def hop_rate(cluster: Cluster) -> float:
    """Achievable bytes/s of one GPU-to-GPU hop of the node fabric (a relay's hop)."""
    return (cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
            * fabric_hop_share(cluster.intra_node_topology, cluster.gpus_per_node))


def nic_rate(cluster: Cluster, k: Num = 1) -> Num:
    """Achievable bytes/s of ``k`` GPUs' share of their node's NICs, reduced by the
    fabric's oversubscription (every GPU of the node sends at once)."""
    return (k * cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY
            / cluster.oversubscription)


def group_bandwidth(cluster: Cluster, n: Num, stride: Num) -> tuple[Num, Num]:
    """(bytes/s, per-step latency s) of a ring over ``n`` ranks spaced ``stride`` apart in rank
    order (tp has stride 1; dp has stride tp·cp, the dp·cp copies of a parameter tp; pp
    neighbours are tp·cp·dp apart). Inside a node the fabric's rate; across nodes
    ``topologies.routing.transfer_rate`` and ``transfer_latency`` of the ring's hops between
    nodes (``k`` members' NIC share; the relay when a hop, or the ring's closing hop, joins
    GPUs of different rails, as in the simulator's rank-order ring)."""
    G = cluster.gpus_per_node
    n, stride = np.asarray(n), np.asarray(stride)
    span = n * stride
    in_node = span <= G
    k = np.maximum(1, np.minimum(n, G // np.maximum(stride, 1)))  # group members per node
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    s = np.asarray(stride, dtype=np.int64)
    relay = hop_relays(cluster, (s, -(np.asarray(n, dtype=np.int64) - 1) * s))
    across = transfer_rate(hop_rate(cluster), nic_rate(cluster, k), True, relay,
                           cluster.planes)
    bw = np.where(in_node, intra, across)
    lat = np.where(in_node, cluster.intra_node_latency,
                   transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency,
                                    True, relay))
    return bw[()], lat[()]


def pxn_relay(cluster: Cluster) -> bool:
    """True where a flow to another node's GPU of a different local index is relayed over
    NVLink to the local GPU of that index first (NCCL's PXN): ``topologies.routing.relays``,
    the rule the simulator's routes follow, asked for every other local index."""
    G = cluster.gpus_per_node
    return G > 1 and bool(np.any(hop_relays(cluster, (np.arange(1, G),))))


def in_one_node(n: Num, stride: Num, gpus_per_node: int) -> Num:
    """True where every group of ``n`` ranks ``stride`` apart (placement's layout,
    ``strategies.collectives.select.strided_layout``) lies within one node. Vectorised."""
    uniform, _, nodes = strided_layout(n, stride, gpus_per_node)
    return (uniform & (nodes == 1))[()]
