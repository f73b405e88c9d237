"""Parts of a coordinate under symmetry folding (``simulator.fold``): translations *inside*
the expert groups and the nodes, and the all-to-all's flows under any translation.

**Why the coordinate translations fold EP plans poorly.** ``simulator.fold`` moves the tp, cp
or dp coordinate by ``k`` mod its size, carrying across the whole coordinate. Where a stage's
data-parallel ranks span several expert groups, a move by a node or a GPU maps an expert group
onto no group (DeepSeek-V3's ``pp16 dp128 ep64`` on 256 HGX H800 nodes: dp by 8 sends the
group ``{0..63}`` onto ``{8..71}``), and a move by one GPU of a coordinate that spans nodes
is no network symmetry (it carries GPU 7 of a node into the next node). Only the move by a
whole expert group (64) is left: 1,024 of 2,048 ranks simulated.

**Parts of a coordinate.** Within a stage the expert layer indexes the ranks as
``u + etp·(j + ep·m)`` (``strategies.placement``: expert tensor-parallel rank ``u``, expert
rank ``j``, expert-data-parallel rank ``m``). Cut the stage's rank index (``tp``, ``cp``,
``dp`` strides) also at ``etp``, ``etp·ep``, the hybrid-sharding replica (``tp·cp·dp_shard``)
and the node (``G`` GPUs, where a stage spans nodes) when these cuts form a chain (each
divides the next); each *part* then lies inside one coordinate (``part_digits``). Moving one
part by ``k`` mod its size and leaving the others (no carry) is a *part translation*. For
DeepSeek-V3, dp = ``g + 8·h + 64·m``: moving ``g`` (the GPU in its node) by one permutes the
GPUs of every node the same way, moving ``h`` by one rotates the expert group's eight nodes
(both rotate the expert index inside its group, by a GPU and by a node's worth mod ep), and
moving ``m`` by one is the old move by 64. A part translation is a network symmetry under
``simulator.fold``'s rules (a part inside a node: one local permutation; a part above it:
whole nodes; ``fold._maps_gpus`` checks it), keeps the stage, so every rank's program
(programs depend on the stage and on the groups only), and maps every expert group and every
expert-data-parallel group onto a group (checked). The translations that parts generate act
freely (each moves its own part, so any but the identity moves every rank), the
representatives being the ranks with every part below its step. What they do not keep is the
ring order of a coordinate that was cut: the dense data-parallel ring (``dp``, ``dpcp``)
goes ``0 -> 1 -> ... -> 127``, and moving ``g`` by one sends the edge ``7 -> 8`` onto
``0 -> 9``. Those rings are kept as sets, and their folding rests on their flows forming an
equitable partition (``simulator.fold_rings``' (E1), (E2), checked on the representatives),
the gradient norm's ring on ``simulator.fold_stats``. A failed check makes the parts' fold fall
back as the coordinate fold does (rings to their order, the stats ring to the next rule), and
``fold_spec`` keeps whichever of the two folds simulates fewer ranks, the coordinate one (the
fold before this module) on a tie: never a fold that a check refused.

**Dense plans** (``ep = 1``) are cut at the node and the hybrid-sharding replica alone, by
the same argument: nothing in it needs expert groups. Llama 3 8B ``tp2 pp2 dp4 cp2`` on four
8-GPU nodes: a stage (16 ranks) spans two nodes, dp = ``g + 2·h`` (``g`` the dp rank inside
the node, ``h`` the node); the coordinate move of dp by one carries GPUs across nodes, by two
is whole nodes, and the dpcp ring's (E1) refuses cp's move, so 8 of 32 ranks. Moving ``g``
by one permutes every node's GPUs the same way, moving ``h`` swaps the nodes, moving cp keeps
the dp ring as a set: with the rings' (E1) and (E2) checked, one rank a stage (2 of 32). On
nodes that differ only the parts inside a node move (``simulator.fold``'s rules), so one
rank a node.

**The all-to-all's flows.** The engine runs an all-to-all over group ``g``
(``strategies.collectives.all_to_all.phases``) either *direct*, a flow for every ordered pair,
or *forwarded* (DeepEP's and HybridEP's kernels, node-limited routing: ``remote_scale`` or
``nvlink_share`` not 1, with equally many members on each node): every pair inside a node and
every pair of the same *position* (rank among the node's members) on two nodes, the bytes of
a flow depending only on whether it stays in a node. Let ``p`` be a permutation that moves
whole nodes and permutes local indices the same way in every node (``fold._maps_gpus``) and
maps ``g`` onto a group ``g'`` as a set. Then ``p`` maps the direct flows of ``g`` onto those
of ``g'``. If every node of ``g`` holds members with the same local indices in the same
order (as listed in ``g``), equal position is equal local index, and ``p`` keeps both "in one node" and "same local index", so it maps
the forwarded flows of ``g`` onto those of ``g'``, with their bytes and latency steps (same
members per node). A flow that crosses nodes off its rail relays through its source node's
GPU on the destination's rail (``topologies.routing.relays``, NCCL's PXN): ``p`` maps that
relay onto the relay of the image flow (node and local index move separately). So ``p`` maps
the all-to-all's flows onto flows with the same bytes, routes and start: an automorphism of
the flow set, where ``simulator.fold``'s first argument applies as it stands, and no
equitable-partition or run-alone argument is needed. ``fold_spec`` checks the premise for
every translation it accepts, coordinate or part (``a2a_table``): every all-to-all group
(``ep``; ``cpa``, which the engine runs direct, the stricter way too) lists the same local
indices on each of its nodes (``same_locals``, which placement's layouts meet), else the
engine's forwarded flows must map onto themselves (``a2a_kept``). Tests (``tests/test_fold_ep.py``) compare folded
and unfolded runs record for record, bit for bit, with the alltoall, DeepEP and HybridEP
dispatchers, 1F1B and DualPipe, with and without pp.
"""
from __future__ import annotations

import numpy as np

from strategies import placement
from strategies.collectives import all_to_all
from strategies.job import Job

#: a part of the stage's rank index: ``(name, size, stride)`` (``simulator.fold``'s digits)
Digit = tuple[str, int, int]
A2A_DIMS = ("ep", "cpa")          # the group dimensions the engine runs all-to-alls over


def part_digits(job: Job, coords: tuple[Digit, ...]) -> tuple[Digit, ...] | None:
    """The coordinates ``coords`` (``(name, size, stride)``, tp, cp, dp) cut into parts at the
    expert layer's boundaries (plans with ``ep > 1``), the hybrid-sharding replica's and the
    node's (module doc), each part named after its coordinate and its place in it (``dp0``
    innermost); None where the cuts do not form a chain or nothing is cut."""
    p = job.plan
    S = p.tp * p.cp * p.dp
    G = job.cluster.gpus_per_node
    cuts = {1, S, p.tp * p.cp * p.shard_dp}
    if p.ep > 1:
        etp, ep, _ = placement.expert_sizes(p)
        cuts |= {etp, etp * ep}
    cuts |= {stride for _, _, stride in coords} | {stride * size for _, size, stride in coords}
    if G < S and S % G == 0:
        cuts.add(G)
    chain = sorted(c for c in cuts if c <= S)
    if any(b % a for a, b in zip(chain, chain[1:])):
        return None
    out: list[Digit] = []
    for name, size, stride in coords:
        inner = [c for c in chain if stride <= c <= stride * size]
        parts = list(zip(inner, inner[1:]))
        if len(parts) <= 1:
            out.append((name, size, stride))
        else:
            out += [(f"{name}{i}", hi // lo, lo) for i, (lo, hi) in enumerate(parts)]
    return tuple(out) if len(out) > len(coords) else None


def a2a_table(job: Job) -> list[tuple[str, np.ndarray | None]]:
    """Per all-to-all dimension with groups of more than one rank: its name and None where
    every group holds, on each node with as many members as every other, the same local
    indices in the same order (``same_locals``: its forwarded flows are the pairs in one node
    or on one local index, which every node-times-local permutation that maps the groups
    onto groups keeps, module doc), else the forwarded all-to-all's flows over all its groups
    (the engine's ``all_to_all.phases`` with a ``remote_scale`` below 1) as sorted codes
    ``src·n + dst``, for ``a2a_kept`` to map."""
    n = placement.world_size(job.plan)
    G = job.cluster.gpus_per_node
    out: list[tuple[str, np.ndarray | None]] = []
    sizes = {"ep": job.plan.ep, "cpa": job.plan.hierarchical_cp or 1}
    for dim in A2A_DIMS:
        if sizes[dim] < 2:                          # groups of one rank: no all-to-all
            continue
        groups = np.asarray(placement.groups(job.plan, dim))
        if groups.shape[1] < 2:
            continue
        out.append((dim, None if same_locals(groups, G) else forwarded_codes(groups, G, n)))
    return out


def forwarded_codes(groups: np.ndarray, G: int, n: int) -> np.ndarray:
    """The forwarded all-to-all's flows over every group (rows of ``groups``; ``G`` GPUs a
    node, ``n`` ranks), as the engine lays them out (``all_to_all.phases`` with a
    ``remote_scale`` below 1), as sorted codes ``src·n + dst``."""
    node_of = G.__rfloordiv__                       # rank -> its node (r // G)
    flows = np.array([f for g in np.asarray(groups).tolist()
                      for ph in all_to_all.phases("alltoall", g, 1.0, node_of, 0.5)
                      for f in ph.flows], dtype=np.int64).reshape(-1, 2)
    return np.sort(flows[:, 0] * n + flows[:, 1])


def same_locals(groups: np.ndarray, G: int) -> bool:
    """Does every group (a row, in group order) with equally many members ``k`` on each of
    two or more nodes (``G`` GPUs a node) list the same local indices on each of its nodes,
    in the same order? (Groups in one node, or unevenly spread, run direct: every pair.)"""
    node = groups // G
    order = np.argsort(node, axis=1, kind="stable")       # by node, group order inside one
    node, local = np.take_along_axis(node, order, 1), np.take_along_axis(groups % G, order, 1)
    s = groups.shape[1]
    first = (node == node[:, :1]).sum(axis=1)             # members on the row's first node
    for k in np.unique(first).tolist():
        if s % k or s == k:
            continue                                      # uneven, or one node: direct
        rows = first == k
        blocks = node[rows].reshape(-1, s // k, k)
        even = np.all(blocks == blocks[:, :, :1], axis=(1, 2)) & np.all(   # k on each node
            blocks[:, 1:, 0] > blocks[:, :-1, 0], axis=1)
        loc = local[rows].reshape(-1, s // k, k)[even]
        if not np.all(loc == loc[:, :1, :]):
            return False
    return True


def a2a_kept(perm: np.ndarray, table: list[tuple[str, np.ndarray | None]]) -> bool:
    """Does ``perm`` (rank -> rank, a node-times-local permutation mapping the groups onto
    groups) map every all-to-all dimension's forwarded flows (``a2a_table``) onto
    themselves? (None: kept, by ``same_locals``.)"""
    n = perm.size
    for _, codes in table:
        if codes is None:
            continue
        image = perm[codes // n] * n + perm[codes % n]
        if not np.array_equal(np.sort(image), codes):
            return False
    return True
