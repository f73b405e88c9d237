"""The engine's per-(rank, stream) state: the op kind codes, a program's structure worked
out once (``Shape``), a stream that runs its ops in order (``Stream``) and a collective call's
rendezvous (``Rendezvous``). What ends an op calls its stream back (``Stream.finish``,
``Stream.__call__``, ``Rendezvous.fire``): it records the op, counts it done for the ops
waiting on it and queues the streams it frees, and the engine's loop (``core.Engine._loop``)
starts their next ops.
"""
from __future__ import annotations

from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from simulator.program.ops import Collective, Compute, Program, Recv, Send
from simulator.result import Record

if TYPE_CHECKING:
    from simulator.engine.core import Engine

COMPUTE, SEND, RECV, COLL = range(4)   # op kind codes of a stream's ``codes``
CODE = {Compute: COMPUTE, Send: SEND, Recv: RECV, Collective: COLL}
new_record = partial(tuple.__new__, Record)   # a Record from a 12-tuple, without a Python frame


def release(wakes: tuple, left: list, hold: dict, ready: deque) -> None:
    """An op is done: count it done for the ops that wait on it (``wakes``: their places in
    the rank's dependency counters ``left``) and queue on ``ready`` the streams parked
    (``hold``) on those it was the last dependency of."""
    for g in wakes:
        c = left[g] - 1
        left[g] = c
        if not c:
            other = hold.pop(g, None)
            if other is not None:
                ready.append(other)


class Shape:
    """What the engine needs of a program's structure, worked out once for every program
    with the same streams, op ids, dependencies and op kinds (the ranks of a pipeline stage
    share one: ``compile_job`` relabels one template): per stream (in sorted name order) its
    kind codes and the offset of its ops in the rank's dependency counters; per op the
    positions of the ops that wait on it (``wakes``, empty when none does) and its number of
    dependencies (``left``, the counters' start)."""

    __slots__ = ("names", "codes", "offsets", "wakes", "left")

    def __init__(self, names: tuple, ids: tuple, deps: tuple, codes: tuple) -> None:
        self.names, self.codes = names, codes
        self.offsets, off = [], 0
        pos: dict[int, int] = {}
        for stream_ids in ids:
            self.offsets.append(off)
            for i, oid in enumerate(stream_ids):
                pos.setdefault(oid, off + i)
            off += len(stream_ids)
        wakes: list[list[int]] = [[] for _ in range(off)]
        left = [0] * off
        for o, stream_deps in zip(self.offsets, deps):
            for i, ds in enumerate(stream_deps):
                if ds:
                    left[o + i] = len(ds)
                    for d in ds:
                        at = pos.get(d)
                        if at is not None:     # an unknown id is never done: a deadlock
                            wakes[at].append(o + i)
        self.wakes = tuple(tuple(map(tuple, wakes[o:o + len(i)]))
                           for o, i in zip(self.offsets, ids))
        self.left = left


class Rendezvous:
    """One call of a collective channel: its members' arrivals, when the last one came
    (``go``), the streams waiting for its end and whether it has ended (``fired``)."""

    __slots__ = ("expected", "arrived", "go", "op", "waiters", "fired")

    def __init__(self, expected: int, op: Collective) -> None:
        self.expected, self.arrived, self.go, self.op = expected, 0, None, op
        self.waiters: list[Stream] = []
        self.fired = False

    def fire(self, _ev: object = None) -> None:
        """The collective ended (called by ``CollectiveRunner``; ``_ev`` is the timeout or
        process that ended it, or None): every waiting member finishes its op now, in the
        order they arrived. No event of its own (issue 17)."""
        self.fired = True
        go = self.go
        waiters, self.waiters = self.waiters, None
        for st in waiters:
            op = st.ops[st.idx]
            st.finish(op.category, go - st.start, -1, op.nbytes * op.repeat)


class Stream:
    """One (rank, stream): its ops, their kind codes and who waits on each (``wakes``, from
    the rank's ``Shape``); the rank's dependency counters (``left``: the number of each op's
    dependencies not done yet, at ``off`` + the op's index) and the streams parked on one
    (``hold``); the index of the op it is at, when that op started, the last op of the compute
    run it is in (``last``: a run of compute ops that nothing waits on ends with one queue
    entry) and the message its send or receive is (``key``); its class (``cls``: one number for
    the same stream of every rank with the same ``Shape``, the replicas whose ops may share
    queue entries). A stream is itself the callable the network calls when its send's last
    byte lands (``__call__``: no event, no closure)."""

    __slots__ = ("eng", "rank", "stage", "name", "ops", "codes", "wakes", "left", "hold", "off",
                 "cls", "chan", "n", "idx", "start", "last", "key", "records", "env", "ready")

    def __init__(self, eng: "Engine", prog: Program, shape: Shape, k: int, left: list,
                 hold: dict, cls: int) -> None:
        name = shape.names[k]
        ops = prog.streams[name]
        self.eng, self.rank, self.stage, self.name = eng, prog.rank, prog.stage, name
        self.ops, self.codes, self.wakes = ops, shape.codes[k], shape.wakes[k]
        self.left, self.hold, self.off, self.cls = left, hold, shape.offsets[k], cls
        # a collective's channel (group, tag) as a number, resolved once here: the rendezvous
        # bookkeeping then hashes small integers, not the group's tuple of ranks (issue 17);
        # the ranks of a group share their collective ops, so the members' streams of a group
        # hold the same ops and are worked out once (``Engine.chan_by_ops``)
        if COLL in self.codes:
            same = tuple(map(id, ops))
            self.chan = eng.chan_by_ops.get(same)
            if self.chan is None:
                chan_of = eng.chan_of
                self.chan = eng.chan_by_ops[same] = tuple(
                    chan_of.setdefault((op.group, op.tag), len(chan_of)) if c == COLL else -1
                    for op, c in zip(ops, self.codes))
        else:
            self.chan = None
        self.n, self.idx, self.start, self.last, self.key = len(ops), 0, 0.0, 0, None
        # the engine's state the callbacks touch, bound here (one attribute load, not two)
        self.records = eng.records if eng.record else None
        self.env, self.ready = eng.env, eng.ready

    def finish(self, kind: str, wait: float, peer: int, nbytes: float) -> None:
        """The current op (record kind ``kind``) ended now: record it, count it done for the
        ops that wait on it and queue those it was the last for (they go first), then queue
        this stream behind them; the event loop moves them on."""
        i = self.idx
        op = self.ops[i]
        records = self.records
        if records is not None:
            records.append(new_record((self.rank, self.name, kind, op.label, op.microbatch,
                                    self.stage, self.start, self.env._now, op.chunk, nbytes,
                                    peer, wait)))
        wakes = self.wakes[i]
        if wakes:
            release(wakes, self.left, self.hold, self.ready)
        self.idx = i + 1
        self.ready.append(self)

    def __call__(self, _tag: object = None) -> None:
        """The current op, a send, ended: its last byte landed (or, instant communication, it
        started). The message is delivered to its receiver after the send is recorded; a
        blocking send waited until its transfer began (``Engine.started``)."""
        eng, start, key = self.eng, self.start, self.key
        go = eng.started.pop(key, start) if eng.rendezvous else start
        op = self.ops[self.idx]
        self.finish("pp_send", go - start, op.dst, op.nbytes)
        eng.deliver(key, go)
