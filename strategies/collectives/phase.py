"""What every collective algorithm is made of: phases of concurrent flows, and the number of
latency-bound steps per collective kind.

A ``Phase`` is a pure description (no network, no SimPy): the ``(src, dst)`` rank pairs whose
flows run concurrently, the bytes each flow carries per call, and the phase's latency steps
(the phase waits ``steps`` times the latency of its slowest hop before its bytes move). Phases
of one collective run one after the other (a barrier between them).

Step counts (NCCL's ring, per-rank buffer split into ``n`` chunks): all-reduce ``2(n-1)``
(a reduce-scatter pass and an all-gather pass), reduce-scatter and all-gather ``n-1``,
all-to-all ``1`` (every pair at once).

>>> steps("allreduce", 8), steps("reduce_scatter", 8), steps("alltoall", 8)
(14, 7, 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from strategies.stacks.profile import LAUNCH_GAP_S

Num = "float | np.ndarray"   # a scalar or an array of plans (closed forms are vectorised)
KINDS = ("allreduce", "reduce_scatter", "allgather", "alltoall")
# passes over the ring, of n-1 steps each: the one place the per-kind step counts live
PASSES = {"allreduce": 2, "reduce_scatter": 1, "allgather": 1}

#: Seconds one NCCL collective call takes beyond its ring steps and its bytes, measured: the
#: intercept of NVIDIA/nccl-tests#123's one-channel ring all-reduce on a DGX A100 (2-8 GPUs,
#: 8-128 B; least squares over its 7 points, 1.98 us a step; docs/calibration.md §5.229,
#: ``experiments/nccl_ring_protocol.py``). nccl-tests times calls launched back to back, so
#: the intercept holds the idle gap at the kernel boundary as well as the kernel's own
#: fixed cost.
NCCL_CALL_INTERCEPT_S = 5.56e-6
#: Seconds every collective call pays once, on top of its steps' latencies and its bytes
#: (``call_latency``): the intercept less the kernel-boundary gap (``LAUNCH_GAP_S``), which
#: the stacks' kernel counts already charge where a collective is one of a layer's kernels
#: (``FrameworkProfile.kernels_per_layer``), so that nothing is counted twice
#: (docs/calibration.md §5.233). Charged once per call, whatever its phases.
CALL_LATENCY_S = NCCL_CALL_INTERCEPT_S - LAUNCH_GAP_S


def nodes_of(group: Sequence[int], node_of: Callable[[int], int]) -> list[tuple[int, ...]]:
    """The group's members by node, nodes in order of first appearance."""
    by: dict = {}
    for r in group:
        by.setdefault(node_of(r), []).append(r)
    return [tuple(m) for m in by.values()]


def call_latency(n: "Num") -> "Num":
    """Seconds a collective call over ``n`` ranks pays once beyond its steps and bytes:
    ``CALL_LATENCY_S`` for a group of two or more, 0 for one rank (no call runs).
    Vectorised."""
    return np.where(np.asarray(n) > 1, CALL_LATENCY_S, 0.0)[()]


def steps(kind: str, n: int) -> int:
    """Latency-bound steps of collective ``kind`` over ``n`` ranks (0 when ``n < 2``)."""
    if kind not in KINDS:
        raise ValueError(f"collective kind={kind!r}: must be one of {KINDS}")
    if n < 2:
        return 0
    return 1 if kind == "alltoall" else PASSES[kind] * (n - 1)


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a collective: ``flows`` (``(src, dst)`` ranks, all started together), each
    carrying ``nbytes`` bytes per call, after ``steps`` latencies of the phase's slowest hop
    plus ``local_steps`` latencies of its slowest hop inside a node (NCCL's ring across
    nodes: only the steps that cross nodes pay the network's latency); with ``remote_nbytes``
    set, the flows between two nodes carry that instead (a forwarded all-to-all, the
    striped ring); with ``flow_nbytes`` set, flow ``i`` carries ``flow_nbytes[i]`` instead
    (the ring striped over nodes holding different member counts, ``ring.uneven``)."""

    flows: tuple[tuple[int, int], ...]
    nbytes: float
    steps: int
    remote_nbytes: float | None = None
    local_steps: int = 0
    flow_nbytes: tuple[float, ...] | None = None


def seconds_alone(phases: Sequence[Phase], bandwidth: Callable[[int, int], float],
                  latency: Callable[[int, int], float],
                  node_of: Callable[[int], int] | None = None) -> float:
    """Seconds of ``phases`` with nothing else on the wire, on a network where each rank's
    flows of a phase share its port of ``bandwidth(src, dst)`` bytes/s and nothing else is
    shared; ``latency(src, dst)`` in seconds. With ``node_of`` a rank has two ports, one
    into its node and one out of it (NVLink and the NIC), its flows inside the node sharing
    the first and those to other nodes the second, and ``remote_nbytes`` and
    ``local_steps`` are read; without it, phases that use them are refused. Each
    algorithm's closed-form ``time`` equals this for its own ``phases``
    (tests/test_collective_algorithms.py).

    >>> seconds_alone([Phase(((0, 1), (1, 0)), 2.0, 2)], lambda a, b: 1.0, lambda a, b: 0.5)
    3.0
    """
    total = 0.0
    for ph in phases:
        if node_of is None and (ph.local_steps or ph.remote_nbytes is not None):
            raise ValueError("seconds_alone: a phase with local_steps or remote_nbytes needs "
                             "node_of")
        port = (lambda a, b: node_of(a) != node_of(b)) if node_of else (lambda a, b: False)
        out: dict = {}
        for a, b in ph.flows:
            out[a, port(a, b)] = out.get((a, port(a, b)), 0) + 1
        total += ph.steps * max(latency(a, b) for a, b in ph.flows)
        if ph.local_steps:
            total += ph.local_steps * max(latency(a, b) for a, b in ph.flows
                                          if not port(a, b))
        if ph.flow_nbytes is not None:     # flows of several sizes: each port's bytes summed
            load: dict = {}
            for (a, b), x in zip(ph.flows, ph.flow_nbytes):
                load[a, port(a, b)] = load.get((a, port(a, b)), 0.0) + x / bandwidth(a, b)
            total += max(load.values())
            continue
        total += max((ph.remote_nbytes if port(a, b) and ph.remote_nbytes is not None
                      else ph.nbytes) * out[a, port(a, b)] / bandwidth(a, b)
                     for a, b in ph.flows)
    return total
