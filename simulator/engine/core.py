"""The SimPy engine: replays per-rank programs over a flow network.

One SimPy process per (rank, stream) runs that stream's ops in order; an op first waits
for its dependencies (events of ops of the same rank), with no polling. ``Compute`` is a
timeout. ``Send`` starts a transfer at once (eager) and ends when its last byte lands;
``Recv`` waits for the next message from its source with its tag (first-in first-out per
``(src, dst, tag)``). A ``Collective`` waits until every simulated member has arrived
(rendezvous on ``(group, tag)``, in order), then runs its algorithm
(``simulator.engine.collectives``) over the network, where it contends with all other traffic.
The network is any ``simulator.network.backend.NetworkBackend`` (``flows``: max-min fair
sharing; ``contention-free``: no sharing); the engine uses only that interface.
A run that ends with ops still waiting raises ``DeadlockError`` naming them.

The engine knows nothing about plans or transformers; ``simulator.simulate`` builds the
programs and the network and derives the metrics.
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable

import simpy

from simulator.engine.collectives import CollectiveRunner
from simulator.program.ops import Collective, Compute, Program, Recv, Send
from simulator.result import Record, SimResult
from simulator.network.backend import NetworkBackend
from simulator.network.cluster_net import SimNetwork


class DeadlockError(RuntimeError):
    """Ops were still waiting when nothing was left to happen."""


class UnmatchedSendError(RuntimeError):
    """A message was sent that no ``Recv`` ever took."""


class _Rendezvous:
    __slots__ = ("expected", "arrived", "done", "go", "op")

    def __init__(self, expected: int, done: simpy.Event, op: Collective) -> None:
        self.expected, self.arrived, self.done, self.go, self.op = expected, 0, done, None, op


class Engine:
    """Holds one run's state; use :func:`run`."""

    def __init__(self, programs: dict[int, Program], net: NetworkBackend, free_comm: bool = False,
                 node_of: Callable = lambda r: r, record: bool = True) -> None:
        self.programs, self.net, self.env = programs, net, net.env
        self.free_comm, self.record = free_comm, record
        self.sim = set(programs)
        self.records: list[Record] = []
        self.events: dict[tuple[int, int], simpy.Event] = {}
        self.mail: dict[tuple, simpy.Event] = {}
        self.seq: dict[tuple, int] = defaultdict(int)
        self.meet: dict[tuple, _Rendezvous] = {}
        self.where: dict[tuple[int, str], list] = {}
        self.exclusive: dict[tuple, bool] = {}
        shared = net.shares_links
        self.runner = CollectiveRunner(
            net, self.sim, node_of,
            lambda op: self.exclusive.get((op.group, op.tag), False) if shared else True,
            free_comm)
        if shared and not free_comm:
            self.exclusive = exclusive_channels(programs, net, self.runner)
        for prog in programs.values():
            for op in prog.ops():
                for d in op.deps:
                    if (prog.rank, d) not in self.events:
                        self.events[(prog.rank, d)] = self.env.event()

    # ------------------------------------------------------------------ streams
    def start(self) -> None:
        for rank in sorted(self.programs):
            prog = self.programs[rank]
            for stream in sorted(prog.streams):
                state = [0, None]
                self.where[(rank, stream)] = state
                self.env.process(self._stream(prog, stream, prog.streams[stream], state))

    def _stream(self, prog: Program, stream: str, ops: tuple, state: list):
        env, events, rank = self.env, self.events, prog.rank
        for idx, op in enumerate(ops):
            state[0] = idx
            for d in op.deps:
                ev = events[(rank, d)]
                if not ev.triggered:
                    state[1] = ("dep", d)
                    yield ev
            state[1] = None
            start, wait, peer, nbytes = env.now, 0.0, -1, 0.0
            if type(op) is Compute:
                yield env.timeout(op.seconds)
            elif type(op) is Send:
                peer, nbytes = op.dst, op.nbytes
                yield from self._send(rank, op, start)
            elif type(op) is Recv:
                peer = op.src
                state[1] = ("recv", op)
                sent_at = yield from self._recv(rank, op)
                wait = max(0.0, min(sent_at, env.now) - start)
            else:
                nbytes = op.nbytes * op.repeat
                state[1] = ("coll", op)
                go = yield from self._collective(rank, op)
                wait = go - start
            if self.record:
                self.records.append(Record(rank, stream, op.record_kind, op.label, op.microbatch,
                                           prog.stage, start, env.now, op.chunk, nbytes, peer,
                                           wait))
            ev = events.get((rank, op.id))
            if ev is not None:
                ev.succeed()
        state[0] = len(ops)

    # ------------------------------------------------------------------ messages
    def _slot(self, key: tuple) -> simpy.Event:
        ev = self.mail.get(key)
        if ev is None:
            ev = self.mail[key] = self.env.event()
        return ev

    def _send(self, rank: int, op: Send, start: float):
        if op.dst not in self.sim:
            raise ValueError(f"rank {rank} sends to rank {op.dst}, which is not simulated "
                             "(folding must keep pipeline peers)")
        key = (rank, op.dst, op.tag)
        n = self.seq[key]
        self.seq[key] = n + 1
        if not self.free_comm:
            yield self.net.transfer(rank, op.dst, op.nbytes, op.tag)
        slot = self._slot(key + (n,))
        slot.succeed(start)

    def _recv(self, rank: int, op: Recv):
        key = (op.src, rank, op.tag, "r")
        n = self.seq[key]
        self.seq[key] = n + 1
        slot = self._slot((op.src, rank, op.tag, n))
        if not slot.triggered:
            yield slot
        self.mail.pop((op.src, rank, op.tag, n), None)
        return slot.value

    def _collective(self, rank: int, op: Collective):
        key = (op.group, op.tag)
        n = self.seq[(rank,) + key]
        self.seq[(rank,) + key] = n + 1
        inst = self.meet.get(key + (n,))
        if inst is None:
            expected = sum(1 for r in op.group if r in self.sim)
            inst = self.meet[key + (n,)] = _Rendezvous(expected, self.env.event(), op)
        elif (inst.op.kind, inst.op.nbytes, inst.op.repeat) != (op.kind, op.nbytes, op.repeat):
            raise ValueError(f"rank {rank}: collective {op.label!r} does not match "
                             f"{inst.op.label!r} of the same rendezvous ({key[1]} #{n})")
        inst.arrived += 1
        if inst.arrived == inst.expected:
            inst.go = self.env.now
            del self.meet[key + (n,)]
            self.runner.start(op, inst.done)
        if not inst.done.triggered:
            yield inst.done
        return inst.go

    # ------------------------------------------------------------------ deadlock
    def check_finished(self) -> None:
        stuck = []
        for (rank, stream), (idx, why) in sorted(self.where.items()):
            ops = self.programs[rank].streams[stream]
            if idx < len(ops):
                stuck.append(f"rank {rank} stream {stream} op {ops[idx].id} "
                             f"{ops[idx].label!r} {self._why(rank, why)}")
        if stuck:
            more = f" (and {len(stuck) - 8} more)" if len(stuck) > 8 else ""
            raise DeadlockError("deadlock: " + "; ".join(stuck[:8]) + more)
        left = sorted(k for k, ev in self.mail.items() if ev.triggered)
        if left:
            src, dst, tag, n = left[0]
            raise UnmatchedSendError(f"{len(left)} message(s) never received, first: rank {src} "
                                     f"-> rank {dst} tag {tag!r} (message #{n})")

    def _why(self, rank: int, why) -> str:
        if why is None:
            return "(never started)"
        if why[0] == "dep":
            op = self.programs[rank].by_id().get(why[1])
            return f"waits for op {why[1]} {op.label if op else '?'!r}"
        if why[0] == "recv":
            return f"waits for a message from rank {why[1].src} tag {why[1].tag!r}"
        return f"waits for the other members of {why[1].tag} group {list(why[1].group)}"


def exclusive_channels(programs: dict[int, Program], net: NetworkBackend,
                       runner: CollectiveRunner) -> dict[tuple, bool]:
    """``(group, tag) -> True`` when no other channel (collective group and tag, or
    point-to-point pair) ever loads one of that collective channel's links."""
    users: dict[int, set] = defaultdict(set)
    colls: dict[tuple, set] = {}
    for prog in programs.values():
        for op in prog.ops():
            if type(op) is Collective:
                ch = (op.group, op.tag)
                if ch in colls or op.algorithm == "ring_stepwise":
                    continue
                links: set = set()
                for _, flows, _ in runner.phases(op):
                    for a, b in flows:
                        links.update(net.links(a, b).tolist())
                colls[ch] = links
            elif type(op) is Send:
                ch = ("p2p", prog.rank, op.dst)
                links = set(net.links(prog.rank, op.dst).tolist())
            else:
                continue
            for link in links:
                users[link].add(ch)
    return {ch: all(len(users[l]) == 1 for l in links) for ch, links in colls.items()}


def run(programs: dict[int, Program], graph=None, route_fn: Callable | None = None, *,
        net: NetworkBackend | None = None, link_map: Callable | None = None,
        free_comm: bool = False, node_of: Callable | None = None, num_ranks: int | None = None,
        rank_map: dict[int, list[int]] | None = None, record: bool = True) -> SimResult:
    """Run ``programs`` to completion and return the records (seconds from the step start).

    The network is ``net`` (any ``simulator.network.backend.NetworkBackend``), or a new
    ``SimNetwork`` (the ``flows`` backend) over ``graph`` (a graph of
    ``topologies.graph``) with ``route_fn`` (e.g. ``topologies.routing.route``) and the
    folding ``link_map``. ``node_of(rank)`` groups ranks by node for hierarchical
    collectives (default: from the graph's ``gpus_per_node``). ``free_comm`` makes every
    transfer instant (test hook). Raises ``DeadlockError`` if ops are left waiting.
    """
    t0 = time.perf_counter()
    if net is None:
        net = SimNetwork(simpy.Environment(), graph, route_fn, link_map)
    if node_of is None:
        per_node = net.graph.graph.get("gpus_per_node", 1)
        node_of = lambda r: r // per_node  # noqa: E731
    eng = Engine(programs, net, free_comm, node_of, record)
    eng.start()
    env, steps = net.env, 0
    step = env.step
    try:
        while True:
            step()
            steps += 1
    except simpy.core.EmptySchedule:
        pass
    eng.check_finished()
    end = max((r.end for r in eng.records), default=0.0)
    n = num_ranks if num_ranks is not None else len(programs)
    rank_map = rank_map or {r: [r] for r in programs}
    return SimResult(step_time_s=end, records=eng.records, num_ranks=n,
                     simulated_ranks=sorted(programs), folded=len(programs) < n,
                     events=steps, wall_s=time.perf_counter() - t0, rank_map=rank_map)
