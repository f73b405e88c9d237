"""Hierarchical (two-level) collectives over ``nodes`` nodes with ``k`` members each.

* all-reduce: a ring reduce-scatter inside every node, a ring all-reduce of ``S/k`` across
  nodes among the members with the same position in their node (``k`` concurrent rings), a
  ring all-gather inside every node;
* reduce-scatter: the intra-node reduce-scatter, then the inter-node reduce-scatter of ``S/k``;
* all-gather: the reverse (inter-node all-gather of ``S/k``, then the intra-node all-gather).

Phases are separated by barriers. Alone on the wire every kind takes the intra-node ring time
of ``S`` over ``k`` ranks plus the inter-node ring time of ``S/k`` over ``nodes`` ranks:

    t = ring.time(p, S, k, B_in, lat_in) + ring.time(p, S/k, nodes, B_out, lat_out)

(``p`` passes: 2 for all-reduce, 1 otherwise). Groups whose nodes hold different numbers of
members have no rings across nodes: they run one ring (``strategies.collectives.select`` never
picks this algorithm for them).

>>> [(p.flows, p.nbytes) for p in phases("reduce_scatter", (0, 1, 8, 9), 8.0, lambda r: r // 8)]
[(((0, 1), (1, 0), (8, 9), (9, 8)), 4.0), (((0, 8), (8, 0), (1, 9), (9, 1)), 2.0)]
"""
from __future__ import annotations

from typing import Callable, Sequence

from strategies.collectives import ring
from strategies.collectives.phase import Num, Phase, nodes_of


def phases(kind: str, group: Sequence[int], nbytes: float,
           node_of: Callable[[int], int]) -> list[Phase]:
    """The phases of a hierarchical ``kind`` (allreduce, reduce_scatter, allgather) over
    ``group``, ``node_of(rank)`` naming each member's node."""
    intra = nodes_of(group, node_of)
    k = len(intra[0])
    if any(len(m) != k for m in intra):
        return ring.phases(kind, group, nbytes)
    inter = [tuple(m[j] for m in intra) for j in range(k)]
    S = nbytes
    if kind == "allreduce":
        return (ring.rings("reduce_scatter", intra, S) + ring.rings("allreduce", inter, S / k)
                + ring.rings("allgather", intra, S))
    if kind == "reduce_scatter":
        return ring.rings("reduce_scatter", intra, S) + ring.rings("reduce_scatter", inter, S / k)
    if kind == "allgather":
        return ring.rings("allgather", inter, S / k) + ring.rings("allgather", intra, S)
    raise ValueError(f"collective kind={kind!r}: hierarchical runs allreduce, reduce_scatter "
                     "or allgather")


def time(passes: Num, nbytes: Num, k: Num, nodes: Num, bw_in: Num, lat_in: Num,
         bw_out: Num, lat_out: Num) -> Num:
    """Seconds alone on its links: the intra-node rings (``k`` members, ``bw_in`` bytes/s,
    ``lat_in`` s per hop) plus the inter-node rings of ``nbytes/k`` (``nodes`` members,
    ``bw_out``, ``lat_out``); ``passes`` 2 for all-reduce, 1 otherwise. Vectorised."""
    return (ring.time(passes, nbytes, k, bw_in, lat_in)
            + ring.time(passes, nbytes / k, nodes, bw_out, lat_out))
