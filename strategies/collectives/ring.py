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

>>> [ (p.flows, p.nbytes, p.steps) for p in phases("allreduce", (0, 1, 2, 3), 4e9)]
[(((0, 1), (1, 2), (2, 3), (3, 0)), 6000000000.0, 6)]
>>> float(time(2, 4e9, 4, 1e9, 0.5))
9.0
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from strategies.collectives.phase import Num, PASSES, Phase, steps


def phases(kind: str, group: Sequence[int], nbytes: float, node_of=None) -> list[Phase]:
    """The single phase of a ring ``kind`` over ``group`` (in ring order) of an ``nbytes``
    buffer per rank; no phase when the group has fewer than two members."""
    return rings(kind, [tuple(group)], nbytes)


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
    return np.where(n > 1, passes * (n - 1) / n * nbytes / bw + passes * (n - 1) * lat, 0.0)[()]


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
