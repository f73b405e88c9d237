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
from functools import partial
from heapq import heappop, heappush
from operator import attrgetter
from typing import Callable

import simpy
from simpy.events import NORMAL, PENDING

from simulator.engine.collectives import CollectiveRunner
from simulator.engine.gc_pause import paused_gc
from simulator.program.ops import Collective, Compute, Program, Recv, Send
from simulator.result import Record, SimResult
from simulator.network.backend import NetworkBackend
from simulator.network.cluster_net import SimNetwork


_COMPUTE, _SEND, _RECV, _COLL = range(4)   # op kind codes of a stream's ``codes``
_CODE = {Compute: _COMPUTE, Send: _SEND, Recv: _RECV, Collective: _COLL}
_ID, _DEPS, _KIND = attrgetter("id"), attrgetter("deps"), attrgetter("record_kind")
_END = attrgetter("end")
_record = partial(tuple.__new__, Record)   # a Record from a 12-tuple, without a Python frame
_GO = object()                             # no dependency left to wait for


class DeadlockError(RuntimeError):
    """Ops were still waiting when nothing was left to happen."""


class UnmatchedSendError(RuntimeError):
    """A message was sent that no ``Recv`` ever took."""


class _Rendezvous:
    __slots__ = ("expected", "arrived", "done", "go", "op")

    def __init__(self, expected: int, done: simpy.Event, op: Collective) -> None:
        self.expected, self.arrived, self.done, self.go, self.op = expected, 0, done, None, op


class _Stream:
    """One (rank, stream): its ops and, resolved before the run, their kind codes, dependency
    ids, record kinds and whether another op depends on them (``needed``); the index of the op
    it is at, when that op started, and what the op waits on (``key``: its message or
    rendezvous). A stream is itself the SimPy callback of the event that ends its current op
    (no closure per op)."""

    __slots__ = ("eng", "rank", "stage", "name", "ops", "codes", "deps", "kinds", "needed",
                 "chan", "n", "idx", "start", "done", "waiting", "key", "slot", "records", "env",
                 "ready", "drain")

    def __init__(self, eng: "Engine", prog: Program, name: str, needed: set) -> None:
        ops = prog.streams[name]
        self.eng, self.rank, self.stage, self.name = eng, prog.rank, prog.stage, name
        self.ops = ops
        self.codes = tuple(map(_CODE.__getitem__, map(type, ops)))
        self.deps = tuple(map(_DEPS, ops))
        self.kinds = tuple(map(_KIND, ops))
        self.needed = tuple(map(needed.__contains__, map(_ID, ops)))
        # a collective's channel (group, tag) as a number, resolved once here: the rendezvous
        # bookkeeping then hashes small integers, not the group's tuple of ranks (issue 17)
        chan_of = eng.chan_of
        self.chan = tuple(chan_of.setdefault((op.group, op.tag), len(chan_of)) if c == _COLL
                          else -1 for op, c in zip(ops, self.codes)) if _COLL in self.codes \
            else None
        self.n, self.idx, self.start, self.key, self.slot = len(ops), 0, 0.0, None, None
        self.done, self.waiting = eng.done[prog.rank], eng.waiting[prog.rank]
        # the engine's state the callbacks touch, bound here (one attribute load, not two)
        self.records = eng.records if eng.record else None
        self.env, self.ready, self.drain = eng.env, eng.ready, eng._drain

    def ended(self) -> None:
        """The current op, a compute op, ended: ``__call__``'s compute case, called by the
        event loop (``_loop``) for the stream's own queue entry, with no event."""
        i = self.idx
        records = self.records
        if records is not None:
            op = self.ops[i]
            records.append(_record((self.rank, self.name, self.kinds[i], op.label,
                                    op.microbatch, self.stage, self.start, self.env._now,
                                    op.chunk, 0.0, -1, 0.0)))
        ready = self.ready
        if self.needed[i]:
            oid = self.ops[i].id
            self.done.add(oid)
            blocked = self.waiting.pop(oid, None)
            if blocked:
                ready.extend(blocked)
        self.idx = i + 1
        ready.append(self)             # streams woken by this op go first, then this one
        self.drain()

    def __call__(self, ev: simpy.Event) -> None:
        """The event that ends the current op fired: finish the op (record it, mark it done,
        wake the streams blocked on it) and move on. ``Engine._finish`` written out here: this
        runs once per event (issue 17)."""
        i = self.idx
        code = self.codes[i]
        op = self.ops[i]
        start = self.start
        if code == _COLL:
            wait, peer, nbytes = self.slot.go - start, -1, op.nbytes * op.repeat
        elif code == _SEND:            # the last byte landed; a blocking send waited until
            eng = self.eng             # ``started``
            go = eng.started.pop(self.key, start) if eng.rendezvous else start
            self.slot.succeed(go)
            wait, peer, nbytes = go - start, op.dst, op.nbytes
        elif code == _RECV:            # a receive's message arrived (``ev`` is its mail slot)
            self.eng.mail.pop(self.key, None)
            now = self.env._now
            sent = ev._value
            wait = (sent if sent < now else now) - start
            if not wait > 0.0:
                wait = 0.0
            peer, nbytes = op.src, 0.0
        else:                          # a compute op's end as an event (``ended`` otherwise)
            wait, peer, nbytes = 0.0, -1, 0.0
        records = self.records
        if records is not None:
            records.append(_record((self.rank, self.name, self.kinds[i], op.label,
                                    op.microbatch, self.stage, start, self.env._now,
                                    op.chunk, nbytes, peer, wait)))
        ready = self.ready
        if self.needed[i]:
            oid = op.id
            self.done.add(oid)
            blocked = self.waiting.pop(oid, None)
            if blocked:
                ready.extend(blocked)
        self.idx = i + 1
        ready.append(self)             # streams woken by this op go first, then this one
        self.drain()

    def why(self) -> tuple:
        """What the current op waits for (the deadlock report), derived from the state."""
        done, op = self.done, self.ops[self.idx]
        for d in op.deps:
            if d not in done:
                return ("dep", d)
        code = self.codes[self.idx]
        if code == _RECV:
            return ("recv", op)
        if code == _COLL:
            return ("coll", op)
        if code == _SEND and op.blocking and self.key in self.eng.parked:
            return ("send", op)
        return ("run", None)


class Engine:
    """Holds one run's state; use :func:`run`.

    Streams are not SimPy processes: an op that can start starts at once, and its end is a
    callback on the event that ends it (a compute timeout, the last byte of a transfer, a
    collective's completion, a message already waiting); the stream object itself is that
    callback. Dependencies are resolved from the programs before the run: finishing an op
    marks it done (only if some op depends on it) and retries the streams blocked on it, with
    no event of its own. One SimPy event per compute op, no generator resumption and no
    per-op closure (issue 17: the per-event cost of the engine)."""

    def __init__(self, programs: dict[int, Program], net: NetworkBackend, free_comm: bool = False,
                 node_of: Callable = lambda r: r, record: bool = True) -> None:
        self.programs, self.net, self.env = programs, net, net.env
        self.free_comm, self.record = free_comm, record
        self.sim = set(programs)
        self.records: list[Record] = []
        self.mail: dict[tuple, simpy.Event] = {}
        self.seq: dict[tuple, int] = defaultdict(int)
        self.meet: dict[int, _Rendezvous] = {}        # rendezvous by its number (``_collective``)
        self.chan_of: dict[tuple, int] = {}          # (group, tag) -> channel number
        self.members: list[int] = []                 # channel -> its simulated members
        self.cseq: dict[int, int] = {}               # (channel, rank) -> calls so far
        self.span = max(programs, default=0) + 1     # ranks per channel in ``cseq`` keys
        # blocking sends (a rendezvous with the receive) are tracked only when a program has
        # one: eager channels would otherwise leave every early receive in ``posted``
        self.rendezvous = any(op.blocking for prog in programs.values()
                              for ops in prog.streams.values() if Send in set(map(type, ops))
                              for op in ops if type(op) is Send)
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
        for rank in sorted(self.programs):
            prog = self.programs[rank]
            needed: set = set()
            for ops in prog.streams.values():
                needed.update(*map(_DEPS, ops))
            for name in sorted(prog.streams):
                st = self.where[(rank, name)] = _Stream(self, prog, name, needed)
                self.ready.append(st)
        sim = self.sim
        self.members = [sum(1 for r in group if r in sim) for group, _ in self.chan_of]
        self._drain()

    def _drain(self) -> None:
        """Advance every stream that may move, until none can without time passing: start a
        stream's ops until one has to wait (for a dependency, time or a peer). One loop for
        every stream, no call per stream (issue 17)."""
        ready, env, finish = self.ready, self.env, self._finish
        popleft, queue, eid, mail = ready.popleft, env._queue, env._eid, self.mail
        while ready:
            st = popleft()
            ops, codes, deps_of, done = st.ops, st.codes, st.deps, st.done
            n = st.n
            while st.idx < n:
                i = st.idx
                deps = deps_of[i]
                if deps:
                    for d in deps:
                        if d not in done:
                            break
                    else:
                        d = _GO
                    if d is not _GO:
                        st.waiting.setdefault(d, []).append(st)
                        break
                st.start = now = env._now
                code, op = codes[i], ops[i]
                if code == _COMPUTE:       # a timeout without an event: the stream itself
                    heappush(queue, (now + op.seconds, NORMAL, next(eid), st))   # (``_loop``)
                    break
                if code == _SEND:
                    key, slot, ev = self._send(st.rank, op)
                    if ev is not None:
                        st.key, st.slot = key, slot
                        ev.callbacks.append(st)
                        break
                    slot.succeed(now)
                    finish(st, 0.0, op.dst, op.nbytes)     # instant, receiver posted
                elif code == _RECV:
                    key = self._recv_key(st.rank, op)
                    if self.rendezvous:
                        self._post_recv(key)
                    slot = mail.get(key)
                    if slot is None:
                        slot = mail[key] = env.event()
                    if slot._value is PENDING:
                        st.key = key
                        slot.callbacks.append(st)
                        break
                    mail.pop(key, None)
                    sent = slot._value
                    wait = (sent if sent < now else now) - now
                    finish(st, wait if wait > 0.0 else 0.0, op.src, 0.0)
                else:
                    inst = self._collective(st.rank, op, st.chan[i])
                    if inst.done._value is PENDING:
                        st.slot = inst
                        inst.done.callbacks.append(st)
                        break
                    finish(st, inst.go - now, -1, op.nbytes * op.repeat)

    def _finish(self, st: _Stream, wait: float, peer: int, nbytes: float) -> None:
        """Record the op ``st`` is at, mark it done, wake the streams blocked on it; the caller
        moves ``st`` on (``_drain`` goes on itself; a stream's callback, which writes this out,
        queues it)."""
        i = st.idx
        op = st.ops[i]
        if self.record:
            self.records.append(_record((st.rank, st.name, st.kinds[i], op.label, op.microbatch,
                                         st.stage, st.start, self.env._now, op.chunk, nbytes,
                                         peer, wait)))
        if st.needed[i]:
            oid = op.id
            st.done.add(oid)
            blocked = st.waiting.pop(oid, None)
            if blocked:
                self.ready.extend(blocked)
        st.idx = i + 1

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
        key = (rank, op.dst, op.tag, n)
        slot = self.mail.get(key)
        if slot is None:
            slot = self.mail[key] = self.env.event()
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

    def _recv_key(self, rank: int, op: Recv) -> tuple:
        key = (op.src, rank, op.tag, "r")
        n = self.seq[key]
        self.seq[key] = n + 1
        return (op.src, rank, op.tag, n)

    def _collective(self, rank: int, op: Collective, chan: int) -> _Rendezvous:
        """``rank`` arrives at its next call of ``op``'s channel (number ``chan``): the
        rendezvous of that call (the n-th of the channel on every member), started when the
        last simulated member arrives."""
        seq, span = self.cseq, self.span
        k = chan * span + rank
        n = seq.get(k, 0)
        seq[k] = n + 1
        key = n * len(self.members) + chan
        inst = self.meet.get(key)
        if inst is None:
            inst = self.meet[key] = _Rendezvous(self.members[chan], self.env.event(), op)
        elif (inst.op.kind, inst.op.nbytes, inst.op.repeat) != (op.kind, op.nbytes, op.repeat):
            raise ValueError(f"rank {rank}: collective {op.label!r} does not match "
                             f"{inst.op.label!r} of the same rendezvous ({op.tag} #{n})")
        inst.arrived += 1
        if inst.arrived == inst.expected:
            inst.go = self.env._now
            del self.meet[key]
            self.runner.start(op, inst.done)
        return inst

    def close(self) -> None:
        """Break the engine's reference cycles (streams and the collective runner refer back
        to it) so that reference counting frees a finished run at once: the collector is paused
        during a run and what the run allocated is not walked after it (``gc_pause``)."""
        for st in self.where.values():
            st.eng = st.done = st.waiting = st.drain = st.ready = None
        self.runner = None

    # ------------------------------------------------------------------ deadlock
    def check_finished(self) -> None:
        stuck = []
        for (rank, stream), st in sorted(self.where.items()):
            ops = self.programs[rank].streams[stream]
            if st.idx < len(ops):
                stuck.append(f"rank {rank} stream {stream} op {ops[st.idx].id} "
                             f"{ops[st.idx].label!r} {self._why(rank, st.why())}")
        if stuck:
            more = f" (and {len(stuck) - 8} more)" if len(stuck) > 8 else ""
            raise DeadlockError("deadlock: " + "; ".join(stuck[:8]) + more)
        left = sorted(k for k, ev in self.mail.items() if ev.triggered)
        if left:
            src, dst, tag, n = left[0]
            raise UnmatchedSendError(f"{len(left)} message(s) never received, first: rank {src} "
                                     f"-> rank {dst} tag {tag!r} (message #{n})")

    def _why(self, rank: int, why: tuple) -> str:
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
    seen: set = set()                # channels already counted (a step repeats each many times)
    for prog in programs.values():
        for op in prog.ops():
            kind = type(op)
            if kind is Collective:
                ch = (op.group, op.tag)
                if ch in seen or op.algorithm == "ring_stepwise":
                    continue
                seen.add(ch)
                links: set = set()
                for _, flows, _ in runner.phases(op):
                    for a, b in flows:
                        links.update(net.links(a, b).tolist())
                colls[ch] = links
            elif kind is Send:
                ch = ("p2p", prog.rank, op.dst)
                if ch in seen:
                    continue
                seen.add(ch)
                links = set(net.links(prog.rank, op.dst).tolist())
            else:
                continue
            for link in links:
                users[link].add(ch)
    return {ch: all(len(users[l]) == 1 for l in links) for ch, links in colls.items()}


def _loop(env: simpy.Environment) -> int:
    """Process ``env``'s events until none is left; return how many. ``Environment.step``
    written out (the same order: time, priority, then scheduling order), with one addition: an
    entry whose item is a ``_Stream`` is a compute op's end, scheduled by ``Engine._drain``
    without an event object (one allocation and two calls fewer per compute op, issue 17)."""
    queue, pop, stream, steps = env._queue, heappop, _Stream, 0
    while queue:
        env._now, _, _, ev = pop(queue)
        steps += 1
        if type(ev) is stream:
            ev.ended()
            continue
        callbacks, ev.callbacks = ev.callbacks, None
        for callback in callbacks:
            callback(ev)
        if not ev._ok and not hasattr(ev, "_defused"):   # a failed event crashes the run
            exc = type(ev._value)(*ev._value.args)
            exc.__cause__ = ev._value
            raise exc
    return steps


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
    with paused_gc():                 # the collector would walk every record (gc_pause)
        eng = Engine(programs, net, free_comm, node_of, record)
        eng.start()
        steps = _loop(net.env)
    eng.check_finished()
    eng.close()
    end = max(map(_END, eng.records), default=0.0)
    n = num_ranks if num_ranks is not None else len(programs)
    rank_map = rank_map or {r: [r] for r in programs}
    return SimResult(step_time_s=end, records=eng.records, num_ranks=n,
                     simulated_ranks=sorted(programs), folded=len(programs) < n,
                     events=steps, wall_s=time.perf_counter() - t0, rank_map=rank_map)
