"""The SimPy engine: replays per-rank programs over a flow network.

Each (rank, stream) runs its ops in order; an op first waits for its dependencies (ops of
the same rank, resolved from the programs into counters), with no polling and no SimPy
process: what ends an op calls its stream back. ``Compute`` takes its ``seconds``. ``Send``
starts a transfer at once (eager) and ends when its last byte lands; ``Recv`` waits for the
next message from its source with its tag (first-in first-out per ``(src, dst, tag)``). A
``Collective`` waits until every simulated member has arrived (rendezvous on ``(group, tag)``,
in order), then runs its algorithm (``simulator.engine.collectives``) over the network, where
it contends with all other traffic. The network is any
``simulator.network.backend.NetworkBackend`` (``flows``: max-min fair sharing;
``contention-free``: every transfer as if alone); the engine uses only that interface. A run
that ends with ops still waiting raises ``DeadlockError`` naming them. With ``sm_of``
(``SystemConfig.comm_sm_share`` on) a compute op runs at ``(sm − k)/sm`` of its rate while its
rank's collectives holding ``k`` SMs (``Collective.sms``) are in flight, its end moved at each
change of ``k`` (``sm_hold``; one entry per op then, no runs); without it nothing changes.

Events at one instant (issue 17): the engine keeps SimPy's queue and its order (time,
priority, then scheduling order) but gives many ops one entry: a run of compute ops that
nothing waits on ends with one entry; the replicas' ends of one op (the streams of one class:
ranks whose programs share a structure) due at one instant share one, and so do their
messages whose latency ends then and their closed-form collectives that end then; a message's
last byte and a collective's end call their streams without an event.
So ops that end at the same instant may be recorded in another order than one entry per op
would give (each stream's own order never changes); every time, record and metric is the same
(``experiments/compare_outputs.py``), and the same inputs give the same order, run to run.

The engine knows nothing about plans or transformers; ``simulator.simulate`` builds the
programs and the network and derives the metrics.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
from heapq import heappop, heappush
from operator import attrgetter
from typing import Callable, Iterable

import simpy
from simpy.events import NORMAL

from simulator.engine.channels import exclusive_channels
from simulator.engine.collectives import CollectiveRunner, CollectiveRun, WatchedRun
from simulator.engine.deadlock import check_finished
from simulator.gc_pause import paused_gc
from simulator.engine.messages import Messaging
from simulator.engine.sm_hold import SmHold
from simulator.engine.streams import (CODE, COMPUTE, RECV, SEND, Rendezvous, Shape, Stream,
                                      new_record, release)
from simulator.program.ops import Program, Send
from simulator.result import Record, SimResult
from simulator.network.backend import NetworkBackend
from simulator.network.cluster_net import SimNetwork


class NotAlone(RuntimeError):
    """The watched collective's flows shared the network with another flow (``run``'s
    ``watch``): the folding that rested on it is not exact, run again without it."""


_ID, _DEPS, _BLOCKING = attrgetter("id"), attrgetter("deps"), attrgetter("blocking")
_END = attrgetter("end")


class Engine(Messaging):
    """Holds one run's state; use :func:`run`. Its messages and rendezvous: ``Messaging``
    (``simulator.engine.messages``).

    Streams are not SimPy processes: an op that can start starts at once, and what ends it
    calls the stream back: a compute op's (or a run of compute ops') end is the stream's
    place in an entry of SimPy's queue (shared with its replicas); a message's last byte calls the sending stream from the network
    (no event); a collective's end calls its waiting members from the timeout or process that
    timed it (no event); a message whose receiver is already waiting finishes the receive at
    once, else it is left in ``mail`` for the receive to take (no event). Dependencies are
    resolved from the programs before the run into counters: finishing an op counts it done
    for the ops that wait on it and queues the streams parked on an op it was the last
    dependency of; one loop (``_loop``) takes SimPy's queue in order and, after each entry,
    starts the queued streams' ops until each has to wait (issue 17: the per-event cost of
    the engine)."""

    def __init__(self, programs: dict[int, Program], net: NetworkBackend, free_comm: bool = False,
                 node_of: Callable = lambda r: r, record: bool = True,
                 sm_of: dict[int, int] | None = None,
                 watch: Iterable[tuple] | None = None) -> None:
        self.programs, self.net, self.env = programs, net, net.env
        self.free_comm, self.record = free_comm, record
        self.sim = set(programs)
        self.records: list[Record] = []
        # message (src, dst, tag, n) -> when it was sent (it landed, no receive yet) or the
        # receiving stream (waiting for it)
        self.mail: dict[tuple, float | Stream] = {}
        self.seq: dict[tuple, int] = defaultdict(int)
        self.meet: dict[int, Rendezvous] = {}        # rendezvous by its number (``_collective``)
        self.chan_of: dict[tuple, int] = {}          # (group, tag) -> channel number
        self.chan_by_ops: dict[tuple, tuple] = {}    # a stream's op ids -> its ops' channels
        self.members: list[int] = []                 # channel -> its simulated members
        self.nchan = 0                               # channels (``len(members)``)
        self.cseq: dict[int, int] = {}               # (channel, rank) -> calls so far
        self.span = max(programs, default=0) + 1     # ranks per channel in ``cseq`` keys
        # blocking sends (a rendezvous with the receive) are tracked only when a program has
        # one: eager channels would otherwise leave every early receive in ``posted``
        self.rendezvous = any(any(map(_BLOCKING, [op for op in ops if type(op) is Send]))
                              for prog in programs.values() for ops in prog.streams.values()
                              if Send in set(map(type, ops)))
        self.posted: set[tuple] = set()              # receives posted before their send
        self.parked: dict[tuple, Stream] = {}       # blocking sends waiting for a receive
        self.started: dict[tuple, float] = {}        # when a parked send's transfer began
        self.where: dict[tuple[int, str], Stream] = {}
        self.exclusive: dict[tuple, bool] = {}
        shared = net.shares_links
        self.runner = CollectiveRunner(
            net, self.sim, node_of,
            lambda op: self.exclusive.get((op.group, op.tag), False) if shared else True,
            free_comm, watch)
        if shared and not free_comm:
            self.exclusive = exclusive_channels(programs, net, self.runner)
        self.ready: deque[Stream] = deque()
        # entries due now that only this loop takes (collective runs): per priority (SimPy's
        # URGENT 0, NORMAL 1) (sequence number, run) in the order queued (``_loop``)
        self.lanes = net.env.lanes = (deque(), deque())
        # (time, class, op) -> the streams whose compute ops end then (``_loop``)
        self.ends: dict[tuple, list[Stream]] = {}
        # the SMs collectives hold, taken from the compute beside them (``sm_hold``): only
        # with ``sm_of`` (``SystemConfig.comm_sm_share`` on)
        self.smh = SmHold(sm_of, self.ends, self.env) if sm_of else None

    # ------------------------------------------------------------------ streams
    def start(self) -> None:
        """Build the streams and queue them all (``_loop`` starts their first ops). The
        structure of a program (``Shape``) is worked out once per distinct structure."""
        shapes: dict[tuple, Shape] = {}
        classes: dict[tuple, int] = {}    # (shape, stream) -> the streams' class (``cls``)
        for rank in sorted(self.programs):
            prog = self.programs[rank]
            names = tuple(sorted(prog.streams))
            streams = [prog.streams[name] for name in names]
            ids = tuple(tuple(map(_ID, ops)) for ops in streams)
            deps = tuple(tuple(map(_DEPS, ops)) for ops in streams)
            codes = tuple(tuple(map(CODE.__getitem__, map(type, ops))) for ops in streams)
            key = (names, ids, deps, codes)
            shape = shapes.get(key)
            if shape is None:
                shape = shapes[key] = Shape(names, ids, deps, codes)
            left, hold = list(shape.left), {}
            for k, name in enumerate(names):
                cls = classes.setdefault((id(shape), k), len(classes))
                st = self.where[(rank, name)] = Stream(self, prog, shape, k, left, hold, cls)
                self.ready.append(st)
        sim = self.sim
        self.members = [sum(1 for r in group if r in sim) for group, _ in self.chan_of]
        self.nchan = len(self.members)

    def _loop(self) -> int:
        """Run to the end; return the SimPy queue entries processed. Each turn first starts
        every queued stream's ops until each has to wait (for a dependency, time or a peer),
        then takes SimPy's next entry: ``Environment.step`` written out (the same order: time,
        priority, then scheduling order), where an entry whose item is a list of streams holds
        the compute ops (or runs of them) of one stream class and op index that end at its
        time, scheduled without an event object, and an entry whose item is a collective
        run (``collectives.CollectiveRun``) resumes that run. One function for the whole run: the locals are bound once (issue 17)."""
        env, ready = self.env, self.ready
        queue, eid, mail, rendezvous = env._queue, env._eid, self.mail, self.rendezvous
        seq = self.seq
        urgent, normal = self.lanes
        popleft, pop, push = ready.popleft, heappop, heappush
        ends, smh = self.ends, self.smh
        records = self.records if self.record else None
        put = records.append if records is not None else None
        steps = 0
        now = env._now
        while True:
            while ready:
                st = popleft()
                ops, codes, left, off = st.ops, st.codes, st.left, st.off
                n, i = st.n, st.idx
                while i < n:
                    if left[off + i]:          # a dependency is not done: park on this op
                        st.hold[off + i] = st
                        break
                    st.start = now
                    code, op = codes[i], ops[i]
                    if code == COMPUTE:
                        if smh is not None:     # its end moves with the SMs held (sm_hold)
                            st.last = i
                            smh.start(st, i, op.seconds, now)
                            break
                        # a timeout without an event: the stream itself (``_loop`` below). The
                        # compute ops after it that nothing waits on and whose dependencies are
                        # done end with the same entry: their ends are the same sums (issue 17)
                        t, j, wakes = now + op.seconds, i, st.wakes
                        while not wakes[j] and j + 1 < n and codes[j + 1] == COMPUTE \
                                and not left[off + j + 1]:
                            j += 1
                            t += ops[j].seconds
                        st.last = j
                        # the same run of the same stream class (the replicas of a stage) ending
                        # at t: one entry for all (keyed by the program, not by which
                        # unrelated instants are equal in floating point)
                        key = (t, st.cls, i)
                        due = ends.get(key)
                        if due is None:
                            ends[key] = due = [st]
                            push(queue, (t, NORMAL, next(eid), due))
                        else:
                            due.append(st)
                        break
                    if code == SEND:  # its end calls the stream back (instant: queued again)
                        st.idx = i
                        self._send(st, op)
                        i = st.idx
                        break
                    if code == RECV:  # the n-th message of its channel, counted here
                        src, tag = op.src, op.tag
                        key = (src, st.rank, tag, "r")
                        k = seq[key]
                        seq[key] = k + 1
                        key = (src, st.rank, tag, k)
                        if rendezvous:
                            self._post_recv(key)
                        if mail.pop(key, None) is None:    # not here yet: wait for it
                            mail[key] = st
                            st.key = key
                            break
                        kind, wait, peer, nbytes = "pp_recv", 0.0, op.src, 0.0   # sent before
                    else:
                        inst = self._collective(st, op, i)
                        if not inst.fired:
                            inst.waiters.append(st)
                            break
                        kind, wait, peer, nbytes = (op.category, inst.go - now, -1,
                                                    op.nbytes * op.repeat)
                    if put is not None:
                        put(new_record((st.rank, st.name, kind, op.label, op.microbatch, st.stage,
                                     now, now, op.chunk, nbytes, peer, wait)))
                    wakes = st.wakes[i]
                    if wakes:
                        release(wakes, left, st.hold, ready)
                    i += 1
                st.idx = i
            if urgent or normal:   # an entry due now in a lane, unless the heap's comes first
                lane = urgent if urgent else normal
                head = lane[0][0]
                if not queue or (now, 0 if lane is urgent else 1, head) < queue[0]:
                    steps += 1
                    lane.popleft()[1].resume()
                    continue
            elif not queue:
                return steps
            now, _, _, ev = pop(queue)
            env._now = now
            steps += 1
            kind = type(ev)
            if kind is CollectiveRun or kind is WatchedRun:   # a run's entry (no event object)
                ev.resume()
                continue
            if kind is not list:
                callbacks, ev.callbacks = ev.callbacks, None
                for callback in callbacks:
                    callback(ev)
                if not ev._ok and not hasattr(ev, "_defused"):   # a failed event stops the run
                    exc = type(ev._value)(*ev._value.args)
                    exc.__cause__ = ev._value
                    raise exc
                continue
            if not ev:                 # every op of it moved (``sm_hold``): nothing ends
                continue
            st = ev[0]
            del ends[(now, st.cls, st.idx)]
            if smh is not None:
                smh.ended(ev)
            for st in ev:              # compute ops (or runs of them) that end now
                i, j = st.idx, st.last
                if put is not None:    # each op of the run: its start and end, summed op by op
                    ops, rank, name, stage = st.ops, st.rank, st.name, st.stage
                    t = st.start
                    for k in range(i, j + 1):
                        op = ops[k]
                        end = now if k == j else t + op.seconds
                        put(new_record((rank, name, op.kind, op.label, op.microbatch, stage,
                                     t, end, op.chunk, 0.0, -1, 0.0)))
                        t = end
                wakes = st.wakes[j]
                if wakes:
                    release(wakes, st.left, st.hold, ready)
                st.idx = j + 1
                ready.append(st)       # streams woken by this op go first, then this one

    def close(self) -> None:
        """Break the engine's reference cycles (streams and the collective runner refer back
        to it) so that reference counting frees a finished run at once: the collector is paused
        during a run and what the run allocated is not walked after it (``gc_pause``)."""
        for st in self.where.values():
            st.eng = st.hold = st.ready = None
        self.runner = None


def run(programs: dict[int, Program], graph=None, route_fn: Callable | None = None, *,
        net: NetworkBackend | None = None, link_map: Callable | None = None,
        free_comm: bool = False, node_of: Callable | None = None, num_ranks: int | None = None,
        rank_map: dict[int, list[int]] | None = None, record: bool = True,
        sm_of: dict[int, int] | None = None,
        watch: Iterable[tuple] | None = None) -> SimResult:
    """Run ``programs`` to completion and return the records (seconds from the step start).

    The network is ``net`` (any ``simulator.network.backend.NetworkBackend``), or a new
    ``SimNetwork`` (the ``flows`` backend) over ``graph`` (a graph of
    ``topologies.graph``) with ``route_fn`` (e.g. ``topologies.routing.route``) and the
    folding ``link_map``. ``node_of(rank)`` groups ranks by node for hierarchical
    collectives (default: from the graph's ``gpus_per_node``). ``free_comm`` makes every
    transfer instant (test hook). ``sm_of``: each simulated rank's SM count, where the SMs
    collectives hold (``Collective.sms``) slow the compute beside them (``sm_hold``; None:
    not charged). ``watch``: ``(group, label)`` of collectives whose flows must run alone on
    a shared network, started together (``simulator.fold_stats``). Raises ``DeadlockError``
    if ops are left waiting, ``NotAlone`` (after the run) if ``watch``'s flows did not run so.
    """
    t0 = time.perf_counter()
    own = net is None                 # a network of its own, closed with the run
    if own:
        net = SimNetwork(simpy.Environment(), graph, route_fn, link_map)
    if node_of is None:
        per_node = net.graph.graph.get("gpus_per_node", 1)
        node_of = lambda r: r // per_node  # noqa: E731
    with paused_gc():                 # the collector would walk every record (gc_pause)
        eng = Engine(programs, net, free_comm, node_of, record, sm_of, watch)
        eng.start()
        steps = eng._loop() + getattr(net, "quiet_events", 0)
    breach = eng.runner.breach
    try:
        check_finished(eng)
    finally:                          # also on a deadlock: no cycles left for the collector
        eng.close()
        if own:
            net.close()
    if breach:
        raise NotAlone(f"the flows of the {len(watch)} watched collectives did not run "
                       "alone on the network")
    end = max(map(_END, eng.records), default=0.0)
    n = num_ranks if num_ranks is not None else len(programs)
    rank_map = rank_map or {r: [r] for r in programs}
    return SimResult(step_time_s=end, records=eng.records, num_ranks=n,
                     simulated_ranks=sorted(programs), folded=len(programs) < n,
                     events=steps, wall_s=time.perf_counter() - t0, rank_map=rank_map)
