"""All-to-all: every member sends ``S/n`` bytes to every other member at once, after one
latency of the slowest pair. Alone on the wire, with each member's ``(n-1)`` flows sharing
its port of ``B`` bytes/s, it takes ``(n-1)/n · S/B + lat`` (``S``: the bytes each member
sends in total, its own share included); across nodes the NVLink and NIC ports work at once
and the busier one sets the time (``two_level_time``).

>>> p, = phases("alltoall", (0, 1, 2), 3.0)
>>> p.flows, p.nbytes, p.steps
(((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)), 1.0, 1)
>>> float(time(3.0, 3, 1.0, 0.5))
2.5
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from strategies.collectives.phase import Num, Phase, steps


def phases(kind: str, group: Sequence[int], nbytes: float, node_of=None,
           remote_scale: float = 1.0, nvlink_share: float = 1.0) -> list[Phase]:
    """The one phase of an all-to-all over ``group`` (``nbytes`` sent per member); with
    ``remote_scale`` or ``nvlink_share`` != 1 (and ``node_of``) the all-to-all is forwarded
    (``two_level_time``'s ``forwarded``: DeepEP's and HybridEP's per-node deduplication,
    node-limited routing included, ``strategies.cost.ep_dispatch.ep_dedup``):
    each member sends one flow to the member of the same position on every other node,
    carrying that node's ``k·remote_scale·nbytes/n`` (its tokens, once per node), and one
    flow to each of its node's other members, carrying the ``nodes·nbytes/n`` it forwards
    to it from every node (its own tokens and those it received for that peer); the
    forwarding hop inside the node adds one latency of the node's fabric. Groups with
    unequal members per node keep the direct flows, those between nodes carrying
    ``remote_scale·nbytes/n``. ``nvlink_share`` (a kernel that reaches that share of the
    fabric's rate: ``strategies.cost.ep_dispatch.ep_nvlink_share``): the flows inside a node carry
    ``1/nvlink_share`` of their bytes on the wire (without ``node_of``, every flow)."""
    g = tuple(group)
    if len(g) < 2:
        return []
    flows = tuple((a, b) for a in g for b in g if a != b)
    n = len(g)
    s = nvlink_share
    if (remote_scale == 1.0 and s == 1.0) or not node_of:
        return [Phase(flows, nbytes / (n * s), steps("alltoall", n))]
    by_node: dict = {}
    for x in g:
        by_node.setdefault(node_of(x), []).append(x)
    sizes = {len(v) for v in by_node.values()}
    if len(by_node) < 2:
        return [Phase(flows, nbytes / (n * s), steps("alltoall", n))]
    if len(sizes) != 1:
        return [Phase(flows, nbytes / (n * s), steps("alltoall", n), nbytes * remote_scale / n)]
    k, nodes = sizes.pop(), len(by_node)
    pos = {x: i for members in by_node.values() for i, x in enumerate(members)}
    fwd = tuple((a, b) for a, b in flows
                if node_of(a) == node_of(b) or pos[a] == pos[b])
    return [Phase(fwd, nodes * nbytes / (n * s), steps("alltoall", n),
                  k * remote_scale * nbytes / n, local_steps=1 if k > 1 else 0)]


def time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Seconds of an all-to-all alone on its links (``nbytes`` sent per member over ``n``
    members, port ``bw`` bytes/s, ``lat`` s); 0 when ``n < 2``. Vectorised. The one-port
    case of ``two_level_time`` (all members in one node)."""
    return two_level_time(nbytes, n, n, bw, np.inf, lat, False)


def two_level_time(nbytes: Num, n: Num, k: Num, bw_in: Num, bw_out: Num, lat: Num,
                   relay: Num, remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """Seconds of an all-to-all over ``n`` members, ``k`` on each of ``n/k`` nodes, alone on
    its links: each member's ``k-1`` flows to its node peers cross its NVLink port
    (``bw_in`` bytes/s each way) and its ``n-k`` flows to other nodes cross its NIC
    (``bw_out``). With ``relay`` (NCCL's PXN on a rail-optimised fabric: a flow to a GPU of
    another local index first crosses NVLink to the node's GPU of that index, which sends it
    on its own NIC) each NVLink port also carries ``(n/k-1)(k-1)`` relayed flows, so
    ``(k-1)·n/k`` in all. Every flow carries ``nbytes/n``; the flows sharing a port get equal
    shares until the port with the most work is done (max-min fair sharing ends every flow
    of the busiest port class together, the other class first), so

        t = max(F_in·nbytes/(n·bw_in), r·(n-k)·nbytes/(n·bw_out)) + lat

    with ``F_in = (k-1)·n/k`` relayed or forwarded, else ``k-1``; 0 when ``n < 2``. One node
    (``k = n``) gives ``(n-1)/n·nbytes/bw_in``, one member per node
    ``(n-1)/n·nbytes/bw_out``.

    ``remote_scale`` ``r`` != 1: the all-to-all is *forwarded* (DeepEP's normal kernels and
    HybridEP, node-limited routing or not): a member sends a token once to each destination node, to
    the GPU of its own local index there (``r`` of the per-pair bytes cross the NICs: the
    NIC term scales by ``r``), and that GPU forwards it over NVLink to each of its node's
    members that holds one of the token's experts, so the NVLink leg carries every node's
    per-rank copies unscaled: ``F_in = (k-1)·n/k`` whatever ``r``. DeepEP's normal internode
    kernels work this way (deepseek-ai/DeepEP at its first commit ebfe47e,
    ``csrc/kernels/internode.cu``: a token goes by RDMA to the peer of the same NVLink index
    on each destination node, ``SourceMeta`` carries the NVLink ranks it is forwarded to;
    ``docs/legacy.md``: "forwarding data from NVLink domain to RDMA domain"), and so does
    HybridEP (NVIDIA's "Hybrid-EP" blog post, February 2026: RDMA between nodes, NVLink
    inside, hierarchically);
    docs/calibration.md §5.27 checks it against DeepEP's published bandwidths
    (``experiments/a2a_measured.py``). ``nvlink_share`` != 1 (DeepEP's and HybridEP's
    kernels, ``strategies.cost.ep_dispatch.ep_nvlink_share``): the NVLink port runs at that share
    of ``bw_in``, and the all-to-all is forwarded as above (those kernels always are).
    Vectorised."""
    n, k = np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    r, s = remote_scale, nvlink_share
    nodes = n / np.maximum(k, 1)
    fwd = np.asarray(relay) | (np.asarray(r) != 1.0) | (np.asarray(s) != 1.0)
    f_in = (k - 1) * np.where(fwd, nodes, 1.0)
    t_in = f_in * nbytes / (n * bw_in * s)
    t_out = np.where(n > k, (n - k) * r * nbytes / (n * bw_out), 0.0)
    return np.where(n > 1, np.maximum(t_in, t_out) + lat, 0.0)[()]
