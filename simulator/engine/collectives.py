"""Running one ``Collective`` op over the network once all its members have arrived.

Algorithms (per-rank buffer ``S`` bytes, ``n`` members, ``repeat`` back-to-back calls):

* ``ring``: NCCL's pipelined ring. Every member streams to its ring successor at once, each
  flow carrying ``steps·S/n`` bytes (``steps`` = ``2(n-1)`` for all-reduce, ``n-1`` for
  reduce-scatter and all-gather), after the ring's ``steps`` latency terms (the slowest hop's
  latency each). Alone on the wire it takes exactly ``steps·(lat + S/(n·B))``, the closed form
  of ``simulator.network.stepwise``; with other traffic the flows share links max-min fairly.
* ``hierarchical``: intra-node rings, then rings across nodes among members with the same
  position in their node (``S/k`` with ``k`` members per node), then intra-node rings again
  (all-reduce: reduce-scatter / all-reduce / all-gather; reduce-scatter: two reduce-scatters;
  all-gather: the reverse). Phases are separated by barriers.
* ``all_to_all``: one latency, then every member sends ``S/n`` to every other member.
* ``ring_stepwise``: ``simulator.network.stepwise``' lock-step ring (no folding).

With folding only the members in ``issuers`` (the simulated representatives) start flows; the
others' flows are their symmetric images (see ``simulator.fold``). A phase whose flows share
no link with each other nor with any other channel (``exclusive``) is timed in closed form
without touching the flow network: the result is the same, only cheaper.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from simulator.network.stepwise import start_collective
from simulator.program.ops import Collective
from simulator.network.cluster_net import SimNetwork

STEPS = {"allreduce": lambda n: 2 * (n - 1), "reduce_scatter": lambda n: n - 1,
         "allgather": lambda n: n - 1, "alltoall": lambda n: 1}
STEPWISE = {"allreduce": "ring_allreduce", "reduce_scatter": "ring_reduce_scatter",
            "allgather": "ring_allgather"}
Phase = tuple[float, list, float]   # (latency seconds per call, flows (src, dst), bytes per call)


def _ring_phase(net: SimNetwork, ring: list, steps: int, chunk: float, issuers) -> Phase:
    n = len(ring)
    hops = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    lat = max(net.latency(a, b) for a, b in hops)
    return steps * lat, [h for h in hops if h[0] in issuers], steps * chunk


def _rings(net: SimNetwork, rings: list[list], kind: str, nbytes: float, issuers) -> list[Phase]:
    """One phase made of several concurrent rings (the same shape each)."""
    out = [_ring_phase(net, r, STEPS[kind](len(r)), nbytes / len(r), issuers)
           for r in rings if len(r) > 1]
    if not out:
        return []
    return [(max(p[0] for p in out), [f for p in out for f in p[1]], out[0][2])]


def plan_phases(net: SimNetwork, op: Collective, issuers, node_of: Callable) -> list[Phase]:
    """The phases of ``op`` (for one call; ``repeat`` scales bytes and latency)."""
    g, S = list(op.group), op.nbytes
    if op.kind == "alltoall" or op.algorithm == "all_to_all":
        flows = [(a, b) for a in g for b in g if a != b]
        lat = max(net.latency(a, b) for a, b in flows if a in issuers)
        return [(lat, [f for f in flows if f[0] in issuers], S / len(g))]
    if op.algorithm == "ring":
        return _rings(net, [g], op.kind, S, issuers)
    if op.algorithm != "hierarchical":
        raise ValueError(f"collective algorithm {op.algorithm!r} is not known "
                         "(ring, hierarchical, all_to_all, ring_stepwise)")
    nodes: dict = {}
    for r in g:
        nodes.setdefault(node_of(r), []).append(r)
    intra = list(nodes.values())
    k = len(intra[0])
    if any(len(m) != k for m in intra):    # uneven nodes have no rings across them: one ring
        return _rings(net, [g], op.kind, S, issuers)
    inter = [[m[j] for m in intra] for j in range(k)]
    if op.kind == "allreduce":
        return (_rings(net, intra, "reduce_scatter", S, issuers)
                + _rings(net, inter, "allreduce", S / k, issuers)
                + _rings(net, intra, "allgather", S, issuers))
    if op.kind == "reduce_scatter":
        return (_rings(net, intra, "reduce_scatter", S, issuers)
                + _rings(net, inter, "reduce_scatter", S / k, issuers))
    return (_rings(net, inter, "allgather", S / k, issuers)
            + _rings(net, intra, "allgather", S, issuers))


class CollectiveRunner:
    """Starts collectives on ``net``; ``exclusive(op)`` says whether a channel may use the
    closed form (decided by the engine from every channel's links)."""

    def __init__(self, net: SimNetwork, issuers: set, node_of: Callable,
                 exclusive: Callable[[Collective], bool], free_comm: bool = False) -> None:
        self.net, self.env, self.issuers = net, net.env, issuers
        self.node_of, self.exclusive, self.free_comm = node_of, exclusive, free_comm
        self._plans: dict = {}
        self._solo: dict = {}
        self._links: dict = {}

    def phases(self, op: Collective) -> list[Phase]:
        key = (op.group, op.kind, op.algorithm, op.nbytes)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = plan_phases(self.net, op, self.issuers, self.node_of)
        return plan

    def start(self, op: Collective, done: simpy.Event) -> None:
        """Run ``op`` from now on; ``done`` succeeds when it ends."""
        if self.free_comm:
            done.succeed()
            return
        if op.algorithm == "ring_stepwise":
            self.env.process(self._stepwise(op, done))
            return
        phases = self.phases(op)
        if not phases:
            done.succeed()
            return
        if self.exclusive(op):
            total = self._solo_total(op, phases)
            if total is not None:
                self._count(op, phases)
                self.env.timeout(total).callbacks.append(lambda _e: done.succeed())
                return
        self.env.process(self._run(op, phases, done))

    def _solo_total(self, op: Collective, phases: list[Phase]) -> float | None:
        """Closed-form seconds of ``op`` alone on its links, or None if its flows collide."""
        key = (id(phases), op.repeat)
        if key not in self._solo:
            total = 0.0
            for lat, flows, nbytes in phases:
                xfer = self.net.solo_seconds(flows, nbytes * op.repeat)
                if xfer is None:
                    total = None
                    break
                total += op.repeat * lat + xfer
            self._solo[key] = total
        return self._solo[key]

    def _count(self, op: Collective, phases: list[Phase]) -> None:
        """Add the bytes a closed-form collective puts on each (representative) link."""
        for ph in phases:
            idx = self._links.get(id(ph))
            if idx is None:
                parts = [self.net.links(a, b) for a, b in ph[1]]
                idx = self._links[id(ph)] = np.concatenate(parts) if parts else np.zeros(0, int)
            self.net.count_solo(idx, ph[2] * op.repeat)
        if self.net.record_load:
            self.net.log_solo([(op.repeat * lat, flows, nbytes * op.repeat)
                               for lat, flows, nbytes in phases], (id(phases), op.repeat))

    def _run(self, op: Collective, phases: list[Phase], done: simpy.Event):
        env, net = self.env, self.net
        for lat, flows, nbytes in phases:
            if lat > 0:
                yield env.timeout(op.repeat * lat)
            events = [net.flow(a, b, nbytes * op.repeat, op.tag) for a, b in flows]
            if events:
                yield env.all_of(events)
        done.succeed()

    def _stepwise(self, op: Collective, done: simpy.Event):
        reps = int(round(op.repeat))
        if abs(op.repeat - reps) > 1e-12:
            raise ValueError(f"ring_stepwise needs a whole repeat count, got {op.repeat}")
        for _ in range(reps):
            yield start_collective(self.net, STEPWISE[op.kind], op.group, op.nbytes, tag=op.tag)
        done.succeed()
