"""Ring collectives (NCCL's pipelined ring).

Every member streams to its ring successor at once; each flow carries ``steps·S/n`` bytes
(``steps`` from ``strategies.collectives.phase.steps``: ``2(n-1)`` for all-reduce, ``n-1``
for reduce-scatter and all-gather) after ``steps`` latencies of the ring's slowest hop. Alone
on the wire, with per-hop bandwidth ``B`` and latency ``lat``, it takes the closed form of
nccl-tests' PERFORMANCE.md plus one latency per step:

    all-reduce        2(n-1)/n · S/B + 2(n-1)·lat
    reduce-scatter     (n-1)/n · S/B +  (n-1)·lat     (all-gather the same)

with ``S`` the per-rank buffer in bytes (NCCL's count: the full vector for all-reduce, the
gathered vector for all-gather and reduce-scatter).

**Across nodes, ``k > 1`` members on each.** NCCL runs one flat ring over all ``n`` ranks,
in ``k`` or more channels whose rings cross between nodes at different members, so that
the node's ``k`` NICs share the traffic between nodes (NVIDIA/nccl ``src/graph/search.cc``,
``connect.cc``; nccl-tests' multi-node bus bandwidth is the NICs' together). Here channel
``c`` carries ``S/k`` and enters every node at its ``c``-th member; member ``j`` sends its
intra-node successor ``j+1`` (cyclic in the node) ``k-1`` channels' bytes and the next
node's member ``j+1`` one channel's: two flows per member (``striped``). NCCL's latency
(``src/graph/tuning.cc``, ``ncclTopoTuneModel``, 2.10 to 2.30) charges the network's
latency only to the steps that cross nodes, ``nodes-1`` per pass, and the intra-node
latency to the other ``n-nodes``:

    p(n-1)/n · S/k · max(k_in/B_in, 1/B_out) + p((nodes-1)·lat_out + (n-nodes)·lat_in)

(``k_in = k-1``, or ``k`` where the hop between nodes relays through the intra-node
successor's port: ``striped_time``).

**Nodes holding different member counts** (a group that straddles nodes unevenly, e.g. 4
members on one node and 2 on the next). NCCL's communicator takes the fewest channels and
the lowest per-channel rate any rank found (``src/init.cc``, v2.29.7-1 l. 1261-1264: the
``nChannels`` and ``bwInter`` minima over the ranks' graphs), each channel enters and leaves
every node once (``src/graph/connect.cc`` ``connectRings``), so every byte of the pass
crosses into and out of the thinnest node through its ``k = min`` members' NICs. ``uneven``:
``k`` channels, channel ``c`` entering each node at its member ``c`` and leaving it at member
``c-1`` (mod the node's count) for the next node's member ``c``: a node's members pass ``k``
channels' chunks to their successor but the ``k`` exits, which pass ``k-1`` and send one
across (``Phase.flow_nbytes``):

    p(n-1)/n · S/k · max((k + relay)/B_in, 1/B_out) + p((nodes-1)·lat_out + (n-nodes)·lat_in)

(``uneven_time``; ``relay``: the hop between nodes crosses the source node's fabric to the
GPU on the destination's rail, whose port may also take a member's ``k`` chunks).

>>> [ (p.flows, p.nbytes, p.steps) for p in phases("allreduce", (0, 1, 2, 3), 4e9)]
[(((0, 1), (1, 2), (2, 3), (3, 0)), 6000000000.0, 6)]
>>> float(time(2, 4e9, 4, 1e9, 0.5))
9.0
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from strategies.collectives.phase import Num, PASSES, Phase, nodes_of, steps


def phases(kind: str, group: Sequence[int], nbytes: float, node_of=None) -> list[Phase]:
    """The single phase of a ring ``kind`` over ``group`` (in ring order) of an ``nbytes``
    buffer per rank; no phase when the group has fewer than two members. With ``node_of``,
    a group with the same ``k > 1`` members on each of several nodes runs ``striped``."""
    if node_of is not None and len(group) > 1:
        by = nodes_of(group, node_of)
        per = {len(m) for m in by}
        if len(by) > 1 and len(per) == 1 and per != {1}:
            return striped(kind, by, nbytes)
        if len(by) > 1 and len(per) > 1:
            return uneven(kind, by, nbytes)
    return rings(kind, [tuple(group)], nbytes)


def uneven(kind: str, nodes: Sequence[Sequence[int]], nbytes: float) -> list[Phase]:
    """The phase of NCCL's flat ring over ``nodes`` holding different member counts (each
    node's members in order; nodes in ring order) in ``k = min`` count channels of
    ``nbytes/k``: channel ``c`` enters each node at member ``c``, walks its members in
    order and leaves from member ``c-1`` (mod the count) for member ``c`` of the next node.
    Member ``j`` sends its successor in the node ``k`` channels' chunks (``k-1`` if it is an
    exit), and an exit one chunk across; ``passes·(nodes-1)`` steps at the slowest hop,
    ``passes·(n-nodes)`` at the slowest hop inside a node (tuning.cc's ``nInterSteps``)."""
    if kind not in PASSES:
        raise ValueError(f"collective kind={kind!r}: a ring runs {', '.join(PASSES)}")
    k, m = min(len(x) for x in nodes), len(nodes)
    n = sum(len(x) for x in nodes)
    chunk = steps(kind, n) * (nbytes / n) / k
    flows, sizes = [], []
    for i, node in enumerate(nodes):
        c_i, nxt = len(node), nodes[(i + 1) % m]
        exits = {(c - 1) % c_i: c for c in range(k)}      # exit member -> its channel
        for j, r in enumerate(node):
            if c_i > 1 and (k > 1 or j not in exits):
                flows.append((r, node[(j + 1) % c_i]))
                sizes.append((k - (j in exits)) * chunk)
            if j in exits:
                flows.append((r, nxt[exits[j]]))
                sizes.append(chunk)
    p = PASSES[kind]
    return [Phase(tuple(flows), k * chunk, p * (m - 1), local_steps=p * (n - m),
                  flow_nbytes=tuple(sizes))]


def striped(kind: str, nodes: Sequence[Sequence[int]], nbytes: float) -> list[Phase]:
    """The phase of NCCL's flat ring over ``nodes`` (each node's members, ``k`` each, in
    order; nodes in ring order) in ``k`` channels of ``nbytes/k``: member ``j`` of a node
    sends ``k-1`` channels' chunks to member ``j+1`` of its node and one channel's to member
    ``j+1`` of the next node (``remote_nbytes``); ``passes·(nodes-1)`` steps at the slowest
    hop, ``passes·(n-nodes)`` at the slowest hop inside a node."""
    if kind not in PASSES:
        raise ValueError(f"collective kind={kind!r}: a ring runs {', '.join(PASSES)}")
    k, m = len(nodes[0]), len(nodes)
    n = k * m
    flows = tuple(f for i, node in enumerate(nodes) for j, r in enumerate(node)
                  for f in ((r, node[(j + 1) % k]), (r, nodes[(i + 1) % m][(j + 1) % k])))
    chunk = steps(kind, n) * (nbytes / n) / k
    p = PASSES[kind]
    return [Phase(flows, (k - 1) * chunk, p * (m - 1), remote_nbytes=chunk,
                  local_steps=p * (n - m))]


def rings(kind: str, groups: Sequence[Sequence[int]], nbytes: float) -> list[Phase]:
    """One phase of several concurrent rings of the same size (``groups``, each in ring
    order), every ring reducing or gathering an ``nbytes`` buffer per rank."""
    if kind not in PASSES:
        raise ValueError(f"collective kind={kind!r}: a ring runs {', '.join(PASSES)}")
    groups = [tuple(g) for g in groups if len(g) > 1]
    if not groups:
        return []
    n = len(groups[0])
    if any(len(g) != n for g in groups):
        raise ValueError(f"concurrent rings of sizes {sorted({len(g) for g in groups})}: "
                         "must all be the same size")
    k = steps(kind, n)
    flows = tuple((g[i], g[(i + 1) % n]) for g in groups for i in range(n))
    return [Phase(flows, k * (nbytes / n), k)]


def time(passes: Num, nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Seconds of a ring collective alone on its links: ``passes`` (2 all-reduce, 1
    reduce-scatter or all-gather) of ``n-1`` steps over ``n`` ranks, an ``nbytes`` buffer per
    rank, ``bw`` bytes/s and ``lat`` seconds per hop; 0 when ``n < 2``. Vectorised (a
    float for scalar inputs)."""
    return time_of(nbytes, time_terms(passes, n, bw, lat))


def time_terms(passes: Num, n: Num, bw: Num, lat: Num) -> tuple:
    """What ``time`` reads besides the buffer: ``(n > 1, passes·(n-1)/n, bw, the latencies
    passes·(n-1)·lat)``, for ``time_of`` to price many buffers over one group. Vectorised."""
    return n > 1, passes * (n - 1) / n, bw, passes * (n - 1) * lat


def time_of(nbytes: Num, terms: tuple) -> Num:
    """``time`` of an ``nbytes`` buffer per rank from the group's ``time_terms``."""
    on, share, bw, lat = terms
    return np.where(on, share * nbytes / bw + lat, 0.0)[()]


def striped_time(passes: Num, nbytes: Num, n: Num, k: Num, nodes: Num, bw_in: Num,
                 lat_in: Num, bw_out: Num, lat_out: Num, relay=False) -> Num:
    """Seconds of ``striped`` alone on its links: ``n = k·nodes`` ranks, ``k > 1`` per node
    on ``nodes > 1`` nodes, ``bw_in``/``lat_in`` bytes/s and seconds of a hop inside a node,
    ``bw_out``/``lat_out`` of a hop between nodes; ``relay`` where that hop crosses the
    intra-node successor's port first (one more flow on it). Vectorised."""
    return striped_of(nbytes, striped_terms(passes, n, k, nodes, bw_in, lat_in, bw_out,
                                            lat_out, relay))


def striped_terms(passes: Num, n: Num, k: Num, nodes: Num, bw_in: Num, lat_in: Num,
                  bw_out: Num, lat_out: Num, relay=False) -> tuple:
    """What ``striped_time`` reads besides the buffer: ``(passes·(n-1)/n, k, seconds a byte
    of a channel's chunk at the slowest hop, the latencies)``, for ``striped_of`` to price
    many buffers over one group. Vectorised."""
    k_in = k - 1 + np.asarray(relay, dtype=float)
    return (passes * (n - 1) / n, k, np.maximum(k_in / bw_in, 1.0 / bw_out),
            passes * ((nodes - 1) * lat_out + (n - nodes) * lat_in))


def striped_of(nbytes: Num, terms: tuple) -> Num:
    """``striped_time`` of an ``nbytes`` buffer per rank from the group's
    ``striped_terms``: each of ``k`` channels' chunk at the slowest hop, plus the
    latencies."""
    share, k, per_byte, lat = terms
    return (share * nbytes / k * per_byte + lat)[()]


def uneven_time(passes: Num, nbytes: Num, n: Num, k: Num, nodes: Num, bw_in: Num,
                lat_in: Num, bw_out: Num, lat_out: Num, relay=False) -> Num:
    """Seconds of ``uneven`` alone on its links: ``n`` ranks on ``nodes > 1`` nodes, the
    thinnest holding ``k`` (``k`` channels), the others more; ``bw_in``/``lat_in`` and
    ``bw_out``/``lat_out`` as ``striped_time``'s. A non-exit member's port carries ``k``
    channels' chunks, ``k + 1`` where a relayed hop between nodes joins it. Vectorised."""
    return striped_of(nbytes, uneven_terms(passes, n, k, nodes, bw_in, lat_in, bw_out,
                                           lat_out, relay))


def uneven_terms(passes: Num, n: Num, k: Num, nodes: Num, bw_in: Num, lat_in: Num,
                 bw_out: Num, lat_out: Num, relay=False) -> tuple:
    """``striped_terms`` of ``uneven``: its member ports carry one channel's chunk more
    than the even ring's (``striped_terms`` at ``k + 1``'s NVLink load). Vectorised."""
    share, _, _, lat = striped_terms(passes, n, k, nodes, bw_in, lat_in, bw_out, lat_out,
                                     relay)
    k_in = k + np.asarray(relay, dtype=float)
    return share, k, np.maximum(k_in / bw_in, 1.0 / bw_out), lat


def kind_time(kind: str, nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """``time`` for collective ``kind`` (allreduce, reduce_scatter, allgather)."""
    return time(PASSES[kind], nbytes, n, bw, lat)


def allreduce_time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Ring all-reduce of ``nbytes`` per rank over ``n`` ranks (seconds); 0 when n == 1."""
    return time(PASSES["allreduce"], nbytes, n, bw, lat)


def reduce_scatter_time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Ring reduce-scatter (or all-gather) of an ``nbytes`` buffer (seconds)."""
    return time(PASSES["reduce_scatter"], nbytes, n, bw, lat)


allgather_time = reduce_scatter_time
