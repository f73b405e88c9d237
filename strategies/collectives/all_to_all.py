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
           remote_scale: float = 1.0) -> list[Phase]:
    """The one phase of an all-to-all over ``group`` (``nbytes`` sent per member); with
    ``remote_scale`` != 1 (and ``node_of``) the flows between nodes carry that share of
    ``nbytes/n`` (node-limited routing, ``strategies.cost.counts.ep_remote_scale``)."""
    g = tuple(group)
    if len(g) < 2:
        return []
    flows = tuple((a, b) for a in g for b in g if a != b)
    remote = nbytes * remote_scale / len(g) if remote_scale != 1.0 and node_of else None
    return [Phase(flows, nbytes / len(g), steps("alltoall", len(g)), remote)]


def time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Seconds of an all-to-all alone on its links (``nbytes`` sent per member over ``n``
    members, port ``bw`` bytes/s, ``lat`` s); 0 when ``n < 2``. Vectorised. The one-port
    case of ``two_level_time`` (all members in one node)."""
    return two_level_time(nbytes, n, n, bw, np.inf, lat, False)


def two_level_time(nbytes: Num, n: Num, k: Num, bw_in: Num, bw_out: Num, lat: Num,
                   relay: Num, remote_scale: Num = 1.0) -> Num:
    """Seconds of an all-to-all over ``n`` members, ``k`` on each of ``n/k`` nodes, alone on
    its links: each member's ``k-1`` flows to its node peers cross its NVLink port
    (``bw_in`` bytes/s each way) and its ``n-k`` flows to other nodes cross its NIC
    (``bw_out``). With ``relay`` (NCCL's PXN on a rail-optimised fabric: a flow to a GPU of
    another local index first crosses NVLink to the node's GPU of that index, which sends it
    on its own NIC) each NVLink port also carries ``(n/k-1)(k-1)`` relayed flows, so
    ``(k-1)·n/k`` in all. Every flow carries ``nbytes/n``; the flows sharing a port get equal
    shares until the port with the most work is done (max-min fair sharing ends every flow
    of the busiest port class together, the other class first), so

        t = max(F_in·nbytes/(n·bw_in), (n-k)·nbytes/(n·bw_out)) + lat

    with ``F_in = (k-1)·n/k`` relayed, else ``k-1``; 0 when ``n < 2``. One node (``k = n``)
    gives ``(n-1)/n·nbytes/bw_in``, one member per node ``(n-1)/n·nbytes/bw_out``.
    ``remote_scale`` ``r``: the flows between nodes carry ``r·nbytes/n`` (node-limited
    routing), so the NIC term and the relayed share of the NVLink term scale by ``r``: each
    port still works without pause until its own bytes are through. Vectorised."""
    n, k = np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    r = remote_scale
    nodes = n / np.maximum(k, 1)
    f_in = (k - 1) * (1 + np.where(relay, (nodes - 1) * r, 0.0))
    t_in = f_in * nbytes / (n * bw_in)
    t_out = np.where(n > k, (n - k) * r * nbytes / (n * bw_out), 0.0)
    return np.where(n > 1, np.maximum(t_in, t_out) + lat, 0.0)[()]
