"""Running one ``Collective`` op over the network once all its members have arrived.

The algorithms live in ``strategies.collectives`` (one module each: ``ring``,
``hierarchical``, ``all_to_all``): each describes a collective as phases of flows, and this
module runs those phases on a ``simulator.network.backend.NetworkBackend``. A phase waits its
``steps`` latencies of its slowest hop, then starts its flows together and ends when the last
one does; with other traffic the flows share links max-min fairly (the ``flows`` backend).
Alone on the wire a collective takes exactly the closed form its module's ``time`` gives, the
time the analytic estimate and the lower bound use, the call's own latency
(``phase.CALL_LATENCY_S``, once a call, before its first phase) included. ``repeat``
back-to-back calls scale the bytes and the latency terms.

``ring_stepwise`` runs ``simulator.network.stepwise_oracle``'s lock-step ring instead, the test
oracle (no folding).

With folding only the members in ``issuers`` (the simulated representatives) start flows; the
others' flows are their symmetric images (see ``simulator.fold``). A phase whose flows share
no link with each other nor with any other channel (``exclusive``) is timed in closed form
without touching the flow network: the result is the same, only cheaper.
"""
from __future__ import annotations

from functools import partial
from heapq import heappush
from itertools import starmap
from typing import Callable, Iterable

import numpy as np
from simpy.events import NORMAL, URGENT

from simulator.network.backend import NetworkBackend
from simulator.network.queue_entry import call_at
from simulator.network.stepwise_oracle import start_collective
from simulator.program.ops import Collective
from strategies.collectives import phases_of
from strategies.collectives.phase import CALL_LATENCY_S

STEPWISE = {"allreduce": "ring_allreduce", "reduce_scatter": "ring_reduce_scatter",
            "allgather": "ring_allgather"}
# (latency seconds per call, flows (src, dst), bytes per call: one number for every flow, or a
# tuple with one per flow where flows between nodes carry other bytes, Phase.remote_nbytes)
RunPhase = tuple[float, list, "float | tuple"]
_min_reduce = np.minimum.reduce    # ``a.min()`` without its Python wrapper (the same reduction)


def plan_phases(net: NetworkBackend, op: Collective, issuers, node_of: Callable) -> list[RunPhase]:
    """The phases of ``op`` for one call as the engine runs them: the phase's latency (its
    ``steps`` times its slowest hop's latency, plus its ``local_steps`` times its slowest
    hop's inside a node; the first phase also the call's own ``CALL_LATENCY_S``), the flows
    the ``issuers`` start, the bytes of each flow."""
    out = []
    for i, ph in enumerate(phases_of(op.algorithm, op.kind, op.group, op.nbytes, node_of,
                                     op.remote_scale, op.nvlink_share)):
        lat = ph.steps * max(starmap(net.latency, ph.flows))   # (a, b) pairs, in order
        if i == 0:              # the call's own latency, once a call (``phase.call_latency``)
            lat += CALL_LATENCY_S
        if ph.local_steps:      # NCCL's ring: the steps that stay in a node, at their latency
            lat += ph.local_steps * max(net.latency(a, b) for a, b in ph.flows
                                        if node_of(a) == node_of(b))
        if ph.flow_nbytes is not None:      # flows of several sizes (``ring.uneven``)
            kept = [(f, x) for f, x in zip(ph.flows, ph.flow_nbytes) if f[0] in issuers]
            out.append((lat, [f for f, _ in kept], tuple(x for _, x in kept)))
            continue
        flows = [f for f in ph.flows if f[0] in issuers]
        nbytes = ph.nbytes if ph.remote_nbytes is None else tuple(
            ph.remote_nbytes if node_of(a) != node_of(b) else ph.nbytes for a, b in flows)
        out.append((lat, flows, nbytes))
    return out


class CollectiveRunner:
    """Starts collectives on ``net``; ``exclusive(op)`` says whether a channel may use the
    closed form (decided by the engine from every channel's links)."""

    def __init__(self, net: NetworkBackend, issuers: set, node_of: Callable,
                 exclusive: Callable[[Collective], bool], free_comm: bool = False,
                 watch: Iterable[tuple] | None = None) -> None:
        self.net, self.env, self.issuers = net, net.env, issuers
        self.node_of, self.exclusive, self.free_comm = node_of, exclusive, free_comm
        # the (group, label) of the collectives whose flows folding needs alone on a shared
        # network, started together
        # (``WatchedRun``; ``simulator.fold_stats``), whether that failed, the watched runs
        # with flows live, those ended, the instant the first started and the network's
        # count of flows started after the latest one started
        self.watch = set(watch) if watch and getattr(net, "shares_links", False) else None
        self.breach = False
        self.w_live, self.w_done, self.w_at, self.w_mark = 0, 0, 0.0, -1
        self._plans: dict = {}
        self._solo: dict = {}
        self._links: dict = {}
        self._closed: dict = {}      # call signature -> ((seconds, link loads, phases) or None,
        #                              its phases, each phase's one-block start or None)
        self._due: dict[tuple, list] = {}   # closed-form collectives' ends: (end time, share)
        self._log_load = getattr(net, "record_load", False)    # SimNetwork's load series
        self._count_bytes = getattr(net, "count_bytes", True)   # per-link bytes read after

    def phases(self, op: Collective) -> list[RunPhase]:
        key = (op.group, op.kind, op.algorithm, op.nbytes, op.remote_scale, op.nvlink_share)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = plan_phases(self.net, op, self.issuers, self.node_of)
        return plan

    def start(self, op: Collective, then: Callable[[object], None], share=None) -> None:
        """Run ``op`` from now on; ``then(x)`` is called when it ends (``x``: the SimPy event
        that ended it, or None). No event of its own (issue 17): a closed-form collective is one
        timeout whose callback is ``then`` (shared by the closed-form collectives with the same
        ``share``, not None, that end at the same instant); with instant communication or no
        phases ``then`` is called before this returns."""
        if self.free_comm:
            then(None)
            return
        if op.algorithm == "ring_stepwise":
            self.env.process(self._stepwise(op, then))
            return
        # the same call (group, tag, algorithm, bytes, repeat) recurs thousands of times a
        # step: whether it runs in closed form, and its time and link loads, are worked out once
        sig = (op.group, op.tag, op.kind, op.algorithm, op.nbytes, op.repeat, op.remote_scale,
               op.nvlink_share)
        hit = self._closed.get(sig)
        if hit is None:                 # (closed form or None, the phases, their block starts):
            closed = self._closed_form(op)      # one look-up a call
            phases = self.phases(op)
            watched = self.watch is not None and (op.group, op.label) in self.watch
            if watched and closed is not None:  # timed alone in closed form: not the argument
                self.breach = True
            hit = self._closed[sig] = (closed, phases,
                                       None if closed is not None else self._blocks(op, phases),
                                       WatchedRun if watched else CollectiveRun)
        closed, phases, blocks, run = hit
        if closed is not None:
            total, loads, phases = closed
            if self._count_bytes:
                count = self.net.count_solo
                for idx, nbytes in loads:
                    count(idx, nbytes)
            if self._log_load and not any(isinstance(ph[2], tuple) for ph in phases):
                self.net.log_solo([(op.repeat * lat, flows, nbytes * op.repeat)
                                   for lat, flows, nbytes in phases], (id(phases), op.repeat))
            if share is None:
                call_at(self.env, total, then)
                return
            key = (self.env._now + total, share)    # the instant the timeout fires at
            due = self._due.get(key)
            if due is None:
                due = self._due[key] = []
                call_at(self.env, total, partial(self._end_due, key))
            due.append(then)
            return
        if not phases:
            then(None)
            return
        if run is WatchedRun:
            WatchedRun(self.net, op, phases, then, blocks, self)
        else:
            CollectiveRun(self.net, op, phases, then, blocks)

    def _blocks(self, op: Collective, phases: list[RunPhase]) -> list | None:
        """Per phase, ``(FlowBlock, bytes of each flow)`` when the flows backend can start all
        its flows as one block (``start_block``: every flow moves bytes), else ``(None, None)``;
        None when the backend has no blocks. Worked out once per call signature."""
        if not hasattr(self.net, "flow_block"):
            return None
        out = []
        for _, flows, nbytes in phases:
            block, sized = self.net.flow_block(flows), None
            if block is not None:
                if isinstance(nbytes, tuple):
                    sized = np.array(nbytes) * op.repeat
                    if not _min_reduce(sized) > 0:
                        block = None
                else:
                    sized = nbytes * op.repeat
                    if not sized > 0:
                        block = None
            out.append((block, sized) if block is not None else (None, None))
        return out

    def _end_due(self, key: tuple, ev: object) -> None:
        """The closed-form collectives due at ``key`` (end time, share) end, in the order they
        started: one timeout for all of them (issue 17: the replicas of a large step run the
        same collectives at the same instants)."""
        for then in self._due.pop(key):
            then(ev)

    def _closed_form(self, op: Collective) -> tuple[float, list, list] | None:
        """``(seconds, [(link indices, bytes)] per phase, phases)`` of ``op`` if it may run in
        closed form (an exclusive channel whose flows do not collide), else None."""
        phases = self.phases(op)
        if not phases or not self.exclusive(op):
            return None
        total = self._solo_total(op, phases)
        if total is None:
            return None
        loads = []
        for ph in phases:
            if isinstance(ph[2], tuple):                  # flows of different sizes
                loads += [(self.net.links(a, b), n * op.repeat) for (a, b), n in zip(ph[1], ph[2])]
            else:
                loads.append((self._phase_links(ph), ph[2] * op.repeat))
        return total, loads, phases

    def _solo_total(self, op: Collective, phases: list[RunPhase]) -> float | None:
        """Closed-form seconds of ``op`` alone on its links, or None if its flows collide."""
        key = (id(phases), op.repeat)
        if key not in self._solo:
            total = 0.0
            for lat, flows, nbytes in phases:
                if isinstance(nbytes, tuple):        # flows of two sizes
                    sized = getattr(self.net, "solo_seconds_sized", None)
                    if sized is None or self.net.shares_links:   # the flow model tells
                        total = None
                        break
                    total += op.repeat * lat + sized(flows, [n * op.repeat for n in nbytes])
                    continue
                xfer = self.net.solo_seconds(flows, nbytes * op.repeat)
                if xfer is None:
                    total = None
                    break
                total += op.repeat * lat + xfer
            self._solo[key] = total
        return self._solo[key]

    def _phase_links(self, ph: RunPhase) -> np.ndarray:
        """The (representative) links a closed-form phase's flows load, repeats kept."""
        idx = self._links.get(id(ph))
        if idx is None:
            parts = [self.net.links(a, b) for a, b in ph[1]]
            idx = self._links[id(ph)] = np.concatenate(parts) if parts else np.zeros(0, int)
        return idx

    def _stepwise(self, op: Collective, then: Callable[[object], None]):
        reps = int(round(op.repeat))
        if abs(op.repeat - reps) > 1e-12:
            raise ValueError(f"ring_stepwise needs a whole repeat count, got {op.repeat}")
        for _ in range(reps):
            yield start_collective(self.net, STEPWISE[op.kind], op.group, op.nbytes, tag=op.tag)
        then(None)


class CollectiveRun:
    """One collective run over the flow network, phase after phase: each phase waits its
    latency, starts its flows together and ends when the last one has. No SimPy process:
    its queue entries are those the process ``for phase: yield timeout(latency); yield
    all_of(flows)`` put there, at the same instants, priorities and places in the sequence
    (its start, urgent; each latency; the phase's last flow's end; the phase's end once that
    has been taken off the queue), so events keep their order and every result its last digit;
    only the process, condition and event objects go, and the other flows' ends, which only
    counted down to the last one (``_landed``; still counted in the run's events), and the
    process's own end, which nothing waits on (counted, not queued).

    The run is itself its queue entries' item (no ``QueueEntry``, callback list or bound
    method per entry): the engine's loop (``simulator.engine.core``) calls ``resume`` when it
    takes one off. An entry due now (its start, urgent; a phase's end and the entry before
    it) goes in the engine's lane of its priority (``env.lanes``: first in, first out, with
    its sequence number) instead of SimPy's heap; the loop takes the lanes and the heap in
    the one order of (time, priority, sequence number), so nothing moves. A run has at most
    one entry queued at a time; ``counting`` says that entry is its phase's last flow's end
    (the next one is the phase's end)."""

    __slots__ = ("net", "env", "op", "phases", "then", "k", "waited", "left", "blocks",
                 "counting")

    def __init__(self, net: NetworkBackend, op: Collective, phases: list[RunPhase],
                 then: Callable[[object], None], blocks: list | None = None) -> None:
        self.net, self.env, self.op, self.phases, self.then = net, net.env, op, phases, then
        self.k, self.waited, self.left, self.counting = 0, False, 0, False
        self.blocks = blocks          # per phase (block, bytes) or (None, None): ``_blocks``
        env = self.env
        env.lanes[URGENT].append((next(env._eid), self))    # the process's start, urgent now

    def resume(self) -> None:
        """Its queue entry was taken off: the phase's last flow's end puts the phase's end on
        the queue (``_counted``); any other entry runs the run on (``_step``)."""
        if self.counting:
            self.counting = False
            env = self.env
            env.lanes[NORMAL].append((next(env._eid), self))
        else:
            self._step()

    def _step(self, _entry: object = None) -> None:
        """Run on from where the last wait ended, until the next wait or the end."""
        env, op, phases = self.env, self.op, self.phases
        while self.k < len(phases):
            lat, flows, nbytes = phases[self.k]
            if lat > 0 and not self.waited:
                self.waited = True
                heappush(env._queue, (env._now + op.repeat * lat, NORMAL, next(env._eid), self))
                return
            self.waited = False
            block, sized = self.blocks[self.k] if self.blocks is not None else (None, None)
            self.k += 1
            self.left = len(flows)
            if block is not None:         # every flow moves bytes: all started as one block
                self.net.start_block(block, sized, self._block_landed, op.tag)
            else:
                sizes = nbytes if isinstance(nbytes, tuple) else (nbytes,) * len(flows)
                start, landed = self.net.start_flow, self._landed
                for (a, b), nb in zip(flows, sizes):
                    if not start(a, b, nb * op.repeat, op.tag, landed):
                        landed(op.tag)            # nothing to move: ended at once
            if flows:
                return
        self.then(None)
        self.net.quiet_events += 1                    # the process's own end: nothing waits on it

    def _landed(self, _tag: object) -> None:
        """A flow's last byte landed. The process put its end on the queue (an event's
        ``succeed``) and, when the last of the phase's ends was taken off, the phase's end (a
        condition's ``succeed``). Only the last flow's end does anything when taken off, and
        it is taken off after every other one (the latest time, the latest in the sequence),
        so only it goes on the queue, where and when the process put it; the others are
        counted (``FlowNetwork.quiet_events``, added to the run's events) and dropped: the
        same order of everything else, without an entry per flow (an all-to-all's
        thousands)."""
        self.left -= 1
        if self.left:
            self.net.quiet_events += 1
        else:
            self._counted_next()

    def _block_landed(self, _tag: object) -> None:
        """The last flow of the phase's block landed (``start_block``, which counted the
        others' ends in ``quiet_events``): ``_landed`` of the last flow."""
        self.left = 0
        self._counted_next()

    def _counted_next(self) -> None:
        """The phase's last flow's end goes on the queue; when it is taken off (``resume``)
        the phase's end goes on it."""
        self.counting = True
        env = self.env
        env.lanes[NORMAL].append((next(env._eid), self))


class WatchedRun(CollectiveRun):
    """A ``CollectiveRun`` of the collectives whose flows folding needs alone on the network
    (the gradient norm's rings, ``simulator.fold_stats``): it sets its ``runner``'s
    ``breach`` unless every watched run starts its flows at one instant with no other flow
    live then, none of them ended before, and no other flow starts before the last of them
    has ended (the network's ``live_flows`` and ``flows_started``)."""

    __slots__ = ("runner", "mark")

    def __init__(self, net: NetworkBackend, op: Collective, phases: list[RunPhase],
                 then: Callable[[object], None], blocks: list | None,
                 runner: CollectiveRunner) -> None:
        self.runner, self.mark = runner, -1
        super().__init__(net, op, phases, then, blocks)

    def _step(self, _entry: object = None) -> None:
        k, net, run = self.k, self.net, self.runner
        live, before = net.live_flows(), net.flows_started
        self.mark = -1                  # (flows that move nothing end inside the call)
        super()._step(_entry)
        if self.k > k:                  # a phase's flows started
            now = self.env._now
            if run.w_live == 0:         # the first: nothing else live, none ended before
                if live or run.w_done:
                    run.breach = True
                run.w_at = now
            elif now != run.w_at or before != run.w_mark:
                run.breach = True
            run.w_live += 1
            run.w_mark = self.mark = net.flows_started

    def _counted_next(self) -> None:
        run = self.runner
        if self.mark < 0 or self.net.flows_started != run.w_mark:
            run.breach = True
        run.w_live -= 1
        run.w_done += 1
        super()._counted_next()
