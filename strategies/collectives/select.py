"""The one rule that picks a collective's algorithm, and the registry of algorithms.

A group runs ``all_to_all`` for an all-to-all, and ``ring`` for an all-reduce, an all-gather
or a reduce-scatter: NCCL runs these as one flat ring over all the group's ranks, and across
nodes with ``k > 1`` members on each ``ring`` stripes its channels over the node's members
(``strategies.collectives.ring.striped``). NVIDIA/nccl ``src/graph/tuning.cc``
(``ncclTopoTuneModel``, v2.10 to v2.30) times all-gather and reduce-scatter only as ``RING``
(besides NVLS, CollNet/SHARP and, from 2.23, PAT with one GPU per node, none of which the
model's networks carry); an all-reduce it times as ``RING`` or ``TREE`` (intra-node chains
and a double binary tree between nodes) and ``src/enqueue.cc`` picks the cheaper per call.
The model keeps the ring for all-reduce too (docs/calibration.md §3.21: the tree's bandwidth
is ``0.92·0.5`` of its bus rate against the ring's ``n/(2(n-1))``, so the ring wins for large
buffers; where the tree wins at small ones depends on per-size correction tables and
protocols the model does not carry). paraplan's ``hierarchical`` algorithm (intra-node rings,
rings across nodes, intra-node rings, with barriers between) stays registered for explicit
use but is never picked: NCCL has no such algorithm. ``algorithm_for`` applies the rule to
one explicit group (the compiler), ``strided_algorithm`` to every group of ``n`` ranks
``stride`` apart as ``strategies.placement`` lays them out (the estimate and the bound),
where all such groups get the same layout or the answer is ``MIXED``.

>>> algorithm_for("allreduce", (0, 2, 4, 6, 8, 10, 12, 14), 8)
'ring'
>>> algorithm_for("allgather", (0, 2, 4, 6, 8, 10, 12, 14), 8)
'ring'
>>> algorithm_for("allreduce", tuple(range(12)), 8), algorithm_for("alltoall", (0, 8), 8)
('ring', 'all_to_all')
>>> [str(a) for a in strided_algorithm([8, 8, 2, 3], [2, 1, 8, 1], 8)]
['ring', 'ring', 'ring', 'mixed']
>>> [str(a) for a in strided_algorithm([8, 8, 2, 3], [2, 1, 8, 1], 8, "reduce_scatter")]
['ring', 'ring', 'ring', 'mixed']
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from strategies.collectives import all_to_all, hierarchical, ring
from strategies.collectives.phase import KINDS, Phase

RING, HIERARCHICAL, ALL_TO_ALL, MIXED = "ring", "hierarchical", "all_to_all", "mixed"
ALGORITHMS = {RING: ring, HIERARCHICAL: hierarchical, ALL_TO_ALL: all_to_all}


def algorithm_for(kind: str, group: Sequence[int], gpus_per_node: int) -> str:
    """The algorithm of collective ``kind`` over ``group`` (global ranks; rank ``r`` on node
    ``r // gpus_per_node``)."""
    if kind not in KINDS:
        raise ValueError(f"collective kind={kind!r}: must be one of {KINDS}")
    if kind == "alltoall":
        return ALL_TO_ALL
    return RING


# ``strided_layout``'s answers by the bytes of its arguments: the search's estimate and bound
# ask it of the same few group columns again and again (GPT-3 175B on 1,024 A100: 374 calls,
# 8 distinct, over 10,466 plans); kept up to this many bytes of arguments and answers
_LAYOUT_BYTES = 32 << 20
_LAYOUTS: dict = {}
_layout_room = [_LAYOUT_BYTES]


def strided_layout(n, stride, gpus_per_node: int):
    """``(uniform, k, nodes)`` for the groups of ``n`` ranks ``stride`` apart that placement
    builds (each group inside a block of ``n·stride`` consecutive ranks that starts at a
    multiple of it): ``uniform`` where every such group has ``k`` members on each of ``nodes``
    nodes, whatever its offset (in one node; one member per node; or ``stride`` dividing the
    node and the node dividing the block). Vectorised; the answer is a fresh copy of the one
    kept for the same arguments (``_LAYOUTS``)."""
    n, stride = np.asarray(n, dtype=float), np.asarray(stride, dtype=float)
    key = (n.shape, stride.shape, n.tobytes(), stride.tobytes(), gpus_per_node)
    hit = _LAYOUTS.get(key)
    if hit is None:
        hit = _strided_layout(n, stride, gpus_per_node)
        size = 2 * (n.nbytes + stride.nbytes) + sum(np.asarray(x).nbytes for x in hit)
        if size > _layout_room[0]:
            _LAYOUTS.clear()
            _layout_room[0] = _LAYOUT_BYTES
        if size <= _layout_room[0]:
            _LAYOUTS[key] = hit
            _layout_room[0] -= size
    return tuple(x.copy() for x in hit)


def _strided_layout(n: np.ndarray, stride: np.ndarray, gpus_per_node: int) -> tuple:
    """``strided_layout`` computed (float arrays ``n`` and ``stride``)."""
    G = gpus_per_node
    span = n * stride
    in_node = (span <= G) & (np.mod(G, np.maximum(span, 1)) == 0)
    per_node = (stride >= G) & (np.mod(stride, G) == 0)
    across = ((stride < G) & (np.mod(G, np.maximum(stride, 1)) == 0) & (span > G)
              & (np.mod(span, G) == 0))
    k = np.where(in_node, n, np.where(per_node, 1.0,
                 np.maximum(1.0, np.floor(G / np.maximum(stride, 1)))))
    nodes = np.where(in_node, 1.0, np.maximum(n / k, 1.0))
    return in_node | per_node | across, k, nodes


def slot_layouts(n, stride, gpus_per_node: int) -> tuple:
    """What ``tree_layouts`` and ``uneven_layouts`` read of the groups of ``n`` ranks
    ``stride`` apart: ``strided_layout``'s ``(uniform, k, nodes)``, where ``stride`` divides
    the node (``sub``), and along a trailing axis of the offsets ``o`` a group may start at
    (``tree_layouts``' rule) the members ``m``, the slots a node ``s``, the members on the
    first node and the nodes spanned. Vectorised."""
    n, stride = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(stride, dtype=float))
    G = gpus_per_node
    uniform, k_u, nodes_u = strided_layout(n, stride, G)
    sub = (stride < G) & (np.mod(G, np.maximum(stride, 1)) == 0)
    slots = np.where(sub, G / np.maximum(stride, 1), 1.0)
    gcd = np.gcd(np.maximum(n, 1).astype(np.int64), slots.astype(np.int64)).astype(float)
    o = np.arange(G, dtype=float) * gcd[..., None]
    o = np.where(o < slots[..., None], o, 0.0)
    m, s = n[..., None], slots[..., None]
    first = np.minimum(m, s - o)
    return uniform, k_u, nodes_u, sub, m, s, o, first, 1.0 + np.ceil((m - first) / s)


def tree_layouts(n, stride, gpus_per_node: int) -> tuple:
    """``(known, k, nodes)`` of the groups of ``n`` ranks ``stride`` apart that placement
    builds, for NCCL's tree (``src/graph/connect.cc``: a chain of each node's local ranks, a
    double binary tree between the nodes; uneven nodes allowed, ``init.cc`` keeps
    ``minLocalRanks``/``maxLocalRanks``): ``k`` the fullest node's members and ``nodes`` the
    nodes one group spans, along a trailing axis of the groups' offsets in the node (length
    ``gpus_per_node``, unused places repeating the first). ``known`` where every group's
    layout follows: ``strided_layout``'s uniform groups (one entry, repeated), or ``stride``
    dividing the node, where the group is ``n`` consecutive slots of ``G/stride`` a node
    starting at ``o``, a multiple of ``gcd(n, G/stride)`` (every such ``o`` where there are
    that many groups): ``ceil((o+n)/(G/stride))`` nodes. Vectorised."""
    uniform, k_u, nodes_u, sub, m, s, o, first, nodes = slot_layouts(n, stride, gpus_per_node)
    k = np.where(nodes == 1, m, np.where(nodes == 2, np.maximum(first, m - first), s))
    u = uniform[..., None]
    return (uniform | sub, np.where(u, k_u[..., None], k),
            np.where(u, nodes_u[..., None], nodes))


def uneven_layouts(n, stride, gpus_per_node: int) -> tuple:
    """``(known, k, nodes)`` of the groups of ``n`` ranks ``stride`` apart that placement
    builds and ``strided_layout`` does not call uniform, for NCCL's ring over nodes holding
    different member counts (``ring.uneven``): where ``stride`` divides the node, over the
    offsets ``tree_layouts`` enumerates, the thinnest node's members ``k`` (the ring's
    channels) and the nodes a group spans, each at its worst offset (the fewest members,
    the most nodes). Vectorised."""
    uniform, _, _, sub, m, s, o, first, nodes = slot_layouts(n, stride, gpus_per_node)
    last = np.mod(o + m, s)
    k = np.where(nodes == 1, m, np.minimum(first, np.where(last > 0, last, s)))
    nodes = np.max(nodes, axis=-1)
    return (~uniform & sub & (nodes > 1))[()], np.min(k, axis=-1)[()], nodes[()]


def strided_algorithm(n, stride, gpus_per_node: int, kind: str = "allreduce") -> np.ndarray:
    """``ring`` or ``mixed`` (groups of this shape differ) for collective
    ``kind`` over every group of ``n`` ranks ``stride`` apart (placement's layout; not
    all-to-all). Vectorised."""
    if kind == "alltoall":
        raise ValueError("strided_algorithm: an all-to-all always runs all_to_all")
    if kind not in KINDS:
        raise ValueError(f"collective kind={kind!r}: must be one of {KINDS}")
    uniform, _, _ = strided_layout(n, stride, gpus_per_node)
    return np.where(~uniform, MIXED, RING)


def register(name: str, module) -> None:
    """Add algorithm ``name``: ``module`` (a module or any object) has ``phases(kind, group,
    nbytes, node_of) -> list[Phase]`` and ``time(...)``; a ``Collective`` op whose
    ``algorithm`` is ``name`` then runs its phases. The selector does not pick it by itself
    (add a case to ``algorithm_for`` and ``strided_algorithm`` for that). Refuses a name that
    is taken."""
    if name in ALGORITHMS or name == "ring_stepwise":
        raise ValueError(f"collective algorithm {name!r} is already registered")
    for attr in ("phases", "time"):
        if not callable(getattr(module, attr, None)):
            raise ValueError(f"collective algorithm {name!r}: needs a callable {attr!r}")
    ALGORITHMS[name] = module


def phases_of(algorithm: str, kind: str, group: Sequence[int], nbytes: float,
              node_of: Callable[[int], int], remote_scale: float = 1.0,
              nvlink_share: float = 1.0) -> list[Phase]:
    """The phases of ``kind`` over ``group`` with ``algorithm`` (``ALGORITHMS``' keys);
    ``remote_scale``: the share of an all-to-all's per-pair bytes that crosses between nodes
    (DeepEP's and HybridEP's per-node deduplication), ``nvlink_share``: the share of the
    node fabric's rate its kernel reaches (DeepEP, HybridEP); only ``all_to_all`` takes
    them."""
    if (kind == "alltoall" and algorithm in (RING, HIERARCHICAL)) or \
            (kind != "alltoall" and algorithm == ALL_TO_ALL):
        raise ValueError(f"collective kind={kind!r} with algorithm {algorithm!r}: all-to-all "
                         "runs as all_to_all, and all_to_all runs only all-to-all")
    try:
        module = ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"collective algorithm {algorithm!r} is not known "
                         f"({', '.join(ALGORITHMS)})") from None
    if nvlink_share != 1.0:
        return module.phases(kind, group, nbytes, node_of, remote_scale=remote_scale,
                             nvlink_share=nvlink_share)
    if remote_scale != 1.0:
        return module.phases(kind, group, nbytes, node_of, remote_scale=remote_scale)
    return module.phases(kind, group, nbytes, node_of)
