"""The SimPy engine: replays per-rank programs over a flow network.

Each (rank, stream) runs its ops in order; an op first waits for its dependencies (ops of
the same rank, resolved from the programs), with no polling and no SimPy process: an op's end
is a callback on the event that ends it. ``Compute`` is a timeout. ``Send`` starts a transfer at once (eager) and ends when its last byte lands;
``Recv`` waits for the next message from its source with its tag (first-in first-out per
``(src, dst, tag)``). A ``Collective`` waits until every simulated member has arrived
(rendezvous on ``(group, tag)``, in order), then runs its algorithm
(``simulator.engine.collectives``) over the network, where it contends with all other traffic.
The network is any ``simulator.network.backend.NetworkBackend`` (``flows``: max-min fair
sharing; ``contention-free``: every transfer as if alone); the engine uses only that interface.
A run that ends with ops still waiting raises ``DeadlockError`` naming them.

The engine knows nothing about plans or transformers; ``simulator.simulate`` builds the
programs and the network and derives the metrics.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Callable

import simpy

from simulator.engine.collectives import CollectiveRunner
from simulator.program.ops import Collective, Compute, Program, Recv, Send
from simulator.result import Record, SimResult
from simulator.network.backend import NetworkBackend
from simulator.network.cluster_net import SimNetwork


_COMPUTE, _SEND, _RECV, _COLL = range(4)   # op kind codes of ``Engine._plan``


class DeadlockError(RuntimeError):
    """Ops were still waiting when nothing was left to happen."""


class UnmatchedSendError(RuntimeError):
    """A message was sent that no ``Recv`` ever took."""


class _Rendezvous:
    __slots__ = ("expected", "arrived", "done", "go", "op")

    def __init__(self, expected: int, done: simpy.Event, op: Collective) -> None:
        self.expected, self.arrived, self.done, self.go, self.op = expected, 0, done, None, op


class _Stream:
    """One (rank, stream): its ops with what the run needs resolved before it starts (kind
    code, dependency ids, whether another op waits for it, record kind), the index of the op
    it is at, and why that op is not running (for the deadlock report)."""

    __slots__ = ("rank", "stage", "name", "plan", "idx", "why", "start", "done", "waiting")

    def __init__(self, prog: Program, name: str, plan: list[tuple], done: set,
                 waiting: dict) -> None:
        self.rank, self.stage, self.name, self.plan = prog.rank, prog.stage, name, plan
        self.idx, self.why, self.start = 0, None, 0.0
        self.done, self.waiting = done, waiting     # the rank's finished op ids; id -> blocked


class Engine:
    """Holds one run's state; use :func:`run`.

    Streams are not SimPy processes: an op that can start starts at once, and its end is a
    callback on the event that ends it (a compute timeout, the last byte of a transfer, a
    collective's completion, a message already waiting). Dependencies are resolved from the
    programs before the run: finishing an op marks it done and retries the streams blocked on
    it, with no event of its own. One SimPy event per compute op instead of two, and no
    generator resumption (issue 17: the per-event cost of the engine)."""

    def __init__(self, programs: dict[int, Program], net: NetworkBackend, free_comm: bool = False,
                 node_of: Callable = lambda r: r, record: bool = True) -> None:
        self.programs, self.net, self.env = programs, net, net.env
        self.free_comm, self.record = free_comm, record
        self.sim = set(programs)
        self.records: list[Record] = []
        self.mail: dict[tuple, simpy.Event] = {}
        self.seq: dict[tuple, int] = defaultdict(int)
        self.meet: dict[tuple, _Rendezvous] = {}
        # blocking sends (a rendezvous with the receive) are tracked only when a program has
        # one: eager channels would otherwise leave every early receive in ``posted``
        self.rendezvous = any(type(op) is Send and op.blocking
                              for prog in programs.values() for op in prog.ops())
        self.posted: set[tuple] = set()              # receives posted before their send
        self.parked: dict[tuple, tuple] = {}         # blocking sends waiting for a receive
        self.started: dict[tuple, float] = {}        # when a parked send's transfer began
        self.where: dict[tuple[int, str], _Stream] = {}
        self.exclusive: dict[tuple, bool] = {}
        shared = net.shares_links
        self.runner = CollectiveRunner(
            net, self.sim, node_of,
            lambda op: self.exclusive.get((op.group, op.tag), False) if shared else True,
            free_comm)
        if shared and not free_comm:
            self.exclusive = exclusive_channels(programs, net, self.runner)
        self.done: dict[int, set] = {r: set() for r in programs}      # finished op ids
        self.waiting: dict[int, dict[int, list[_Stream]]] = {r: {} for r in programs}
        self.ready: deque[_Stream] = deque()

    # ------------------------------------------------------------------ streams
    def start(self) -> None:
        code = {Compute: _COMPUTE, Send: _SEND, Recv: _RECV, Collective: _COLL}
        for rank in sorted(self.programs):
            prog = self.programs[rank]
            for name in sorted(prog.streams):
                plan = [(op, code[type(op)], op.deps, op.record_kind)
                        for op in prog.streams[name]]
                st = self.where[(rank, name)] = _Stream(prog, name, plan, self.done[rank],
                                                        self.waiting[rank])
                self.ready.append(st)
        self._drain()

    def _drain(self) -> None:
        """Advance every stream that may move, until none can without time passing."""
        ready = self.ready
        while ready:
            self._advance(ready.popleft())

    def _advance(self, st: _Stream) -> None:
        """Start ops of ``st`` until one has to wait (for a dependency, time or a peer)."""
        env, plan, rank, done = self.env, st.plan, st.rank, st.done
        n = len(plan)
        while st.idx < n:
            op, code, deps, _ = plan[st.idx]
            for d in deps:
                if d not in done:
                    st.why = ("dep", d)
                    st.waiting.setdefault(d, []).append(st)
                    return
            st.why, st.start = None, env.now
            if code == _COMPUTE:
                env.timeout(op.seconds).callbacks.append(
                    lambda _ev, st=st: self._end(st, 0.0, -1, 0.0))
                st.why = ("run", None)
                return
            if code == _SEND:
                key, slot, ev = self._send(rank, op)
                if ev is not None:
                    ev.callbacks.append(lambda _ev, st=st, op=op, slot=slot, key=key: self._sent(
                        st, op, slot, key))
                    st.why = ("send", op) if op.blocking else ("run", None)
                    return
                slot.succeed(st.start)
                self._finish(st, 0.0, op.dst, op.nbytes)     # instant, receiver posted
            elif code == _RECV:
                key = self._recv_key(rank, op)
                if self.rendezvous:
                    self._post_recv(key)
                slot = self._slot(key)
                if not slot.triggered:
                    st.why = ("recv", op)
                    slot.callbacks.append(lambda ev, st=st, op=op, key=key: self._received(
                        st, op, key, ev))
                    return
                self._received(st, op, key, slot, now=True)
            else:
                inst = self._collective(rank, op)
                if not inst.done.triggered:
                    st.why = ("coll", op)
                    inst.done.callbacks.append(
                        lambda _ev, st=st, op=op, inst=inst: self._end(
                            st, inst.go - st.start, -1, op.nbytes * op.repeat))
                    return
                self._finish(st, inst.go - st.start, -1, op.nbytes * op.repeat)

    def _end(self, st: _Stream, wait: float, peer: int, nbytes: float) -> None:
        """An op ended with an event (called from SimPy): finish it and move on."""
        self._finish(st, wait, peer, nbytes)
        self.ready.append(st)
        self._drain()

    def _finish(self, st: _Stream, wait: float, peer: int, nbytes: float) -> None:
        """Record the op ``st`` is at, mark it done, wake the streams blocked on it; the caller
        moves ``st`` on (``_advance`` goes on itself; ``_end`` queues it)."""
        op, _, _, kind = st.plan[st.idx]
        if self.record:
            self.records.append(Record(st.rank, st.name, kind, op.label, op.microbatch,
                                       st.stage, st.start, self.env.now, op.chunk, nbytes, peer,
                                       wait))
        st.done.add(op.id)
        blocked = st.waiting.pop(op.id, None)
        if blocked:
            self.ready.extend(blocked)
        st.idx += 1
        st.why = None

    # ------------------------------------------------------------------ messages
    def _slot(self, key: tuple) -> simpy.Event:
        ev = self.mail.get(key)
        if ev is None:
            ev = self.mail[key] = self.env.event()
        return ev

    def _send(self, rank: int, op: Send) -> tuple[tuple, simpy.Event, simpy.Event | None]:
        """Start a message: its mail slot (the n-th of its channel, counted when it starts)
        and the event of its last byte (None: instant communication, already delivered). A
        blocking send whose receiver has not posted its receive yet parks until it does."""
        if op.dst not in self.sim:
            raise ValueError(f"rank {rank} sends to rank {op.dst}, which is not simulated "
                             "(folding must keep pipeline peers)")
        key = (rank, op.dst, op.tag)
        n = self.seq[key]
        self.seq[key] = n + 1
        key = key + (n,)
        slot = self._slot(key)
        if self.rendezvous:
            if op.blocking and key not in self.posted:
                done = self.env.event()
                self.parked[key] = (op, done)
                return key, slot, done
            self.posted.discard(key)
        if self.free_comm:
            return key, slot, None
        return key, slot, self.net.transfer(rank, op.dst, op.nbytes, op.tag)

    def _post_recv(self, key: tuple) -> None:
        """A receive is posted: a blocking send parked on it starts its transfer now."""
        parked = self.parked.pop(key, None)
        if parked is None:
            self.posted.add(key)
            return
        op, done = parked
        if self.free_comm:
            done.succeed()
        else:
            self.net.transfer(key[0], op.dst, op.nbytes, op.tag).callbacks.append(
                lambda _ev: done.succeed())
        self.started[key] = self.env.now

    def _sent(self, st: _Stream, op: Send, slot: simpy.Event, key: tuple) -> None:
        """The last byte landed; a blocking send waited for its receiver until ``started``."""
        go = self.started.pop(key, st.start)
        slot.succeed(go)
        self._end(st, go - st.start, op.dst, op.nbytes)

    def _recv_key(self, rank: int, op: Recv) -> tuple:
        key = (op.src, rank, op.tag, "r")
        n = self.seq[key]
        self.seq[key] = n + 1
        return (op.src, rank, op.tag, n)

    def _received(self, st: _Stream, op: Recv, key: tuple, slot: simpy.Event,
                  now: bool = False) -> None:
        self.mail.pop(key, None)
        wait = max(0.0, min(slot.value, self.env.now) - st.start)
        if now:
            self._finish(st, wait, op.src, 0.0)
        else:
            self._end(st, wait, op.src, 0.0)

    def _collective(self, rank: int, op: Collective) -> _Rendezvous:
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
        return inst

    # ------------------------------------------------------------------ deadlock
    def check_finished(self) -> None:
        stuck = []
        for (rank, stream), st in sorted(self.where.items()):
            ops = self.programs[rank].streams[stream]
            if st.idx < len(ops):
                stuck.append(f"rank {rank} stream {stream} op {ops[st.idx].id} "
                             f"{ops[st.idx].label!r} {self._why(rank, st.why)}")
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
        if why[0] == "run":
            return "never ended"
        if why[0] == "send":
            return f"waits for rank {why[1].dst} to post its receive of tag {why[1].tag!r}"
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
