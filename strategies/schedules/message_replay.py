"""A schedule's makespan with its pipeline messages: the order's exchanges (``Schedule.actions``,
the records the simulator's compiler turns into sends and receives) replayed on each rank's
compute and point-to-point streams, so the messages a schedule exposes are counted on its own
order rather than by a closed form (docs/calibration.md §5.225).

The rules are the simulator's (``simulator.program.pipeline_p2p.PipelineTransfers.exchange``,
``simulator.engine.messages``) for eager, blocking batched exchanges on one ``pp-comm``
stream per rank:

* a send starts once its pass has ended and the stream is free, and ends when its last byte
  lands, ``t_send`` later (the message lands then);
* a receive, queued on the same stream after what came before it, ends when the stream reaches
  it or when its message lands, whichever is later; without sequence parallelism its
  tensor-parallel all-gather (``t_gather``) follows it on the tensor-parallel stream, after
  the rank's previous all-gather and the previous pass that runs tensor-parallel collectives
  (a forward or backward: its last layer's closes it, after its all-to-all; a weight-gradient
  step alone runs none, ``MessageOrder.collective``): DualPipeV's turn on rank ``pp - 1``
  receives while its chunk-0 forward's last all-reduce runs (docs/calibration.md §5.231);
* the next pass waits for the last transfer of every exchange before it (``self.wait``).

Passes (a step, or an overlapped group of steps, ``Step.overlap``) last ``seconds(rank,
members)`` (``analysis.event_seconds``' callback). Scalar; O(actions). Seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Callable

from strategies.schedules.exchanges import Exchange

#: the members of one pass: ``(kind, chunk)`` of each step (``analysis.Members``)
Members = tuple[tuple[str, int], ...]


def _program(sched: Any, rank: int, pp: int, m: int, vpp: int, group_size: int | None,
             sig_of: dict[tuple, int], slot_of: dict[tuple, int]) -> list[tuple]:
    """``rank``'s actions as ``MessageOrder`` ops, message keys ``(direction, microbatch,
    sender's position)`` not yet numbered: a pass ``(0, rank, sig, slots)``, an exchange's
    sends ``(1, rank, ((key, slot), ...))`` (none where it sends nothing) and its receives
    ``(2, rank, (key, ...))`` (the call's wait, even with nothing to receive). ``sig_of``/
    ``slot_of``: the numbers of the ``(rank, members)`` and of the ``(rank, (kind, microbatch,
    chunk))`` seen so far, added to."""
    vs = sched.virtual_stage
    out: list[tuple] = []
    group: list = []
    for a in sched.actions(rank, pp, m, vpp, group_size):
        if a.__class__ is Exchange or isinstance(a, Exchange):
            if group:
                raise AssertionError("an exchange inside an overlapped group")
            if a.sends:
                out.append((1, rank, tuple([
                    ((d, i, vs(rank, c, pp, vpp, i)),
                     slot_of[(rank, ("F" if d == "fwd" else "B", i, c))])
                    for d, i, c in a.sends])))
            out.append((2, rank, tuple([(d, i, vs(rank, c, pp, vpp, i) + (-1 if d == "fwd" else 1))
                                        for d, i, c in a.recvs])))
            continue
        group.append(a)
        if a.overlap:
            continue
        out.append(_pass(rank, group, sig_of, slot_of))
        group = []
    if group:
        out.append(_pass(rank, group, sig_of, slot_of))
    return out


def _pass(rank: int, group: list, sig_of: dict[tuple, int], slot_of: dict[tuple, int]
          ) -> tuple:
    """The op ``(0, rank, sig, slots)`` of an overlapped group of steps (or one step)."""
    members = tuple([(s.kind, s.chunk) for s in group])
    return (0, rank, sig_of.setdefault((rank, members), len(sig_of)),
            tuple([slot_of.setdefault((rank, (s.kind, s.microbatch, s.chunk)), len(slot_of))
                   for s in group]))


@dataclass(frozen=True)
class MessageRun:
    """One iteration of an order with its messages (``message_ranks``), per rank: the first
    pass's start, the last end (a pass or a transfer), the busy seconds, the passes'
    ``(start, end)`` and the point-to-point intervals the simulator's metrics count as
    ``pp_comm`` where no pass runs (``simulator.metrics.rank_breakdown``: a send's transfer,
    a receive from its message's send, or its posting if later, to its landing, an all-gather
    whole). Seconds."""

    first: list[float]
    end: list[float]
    busy: list[float]
    passes: list[list[tuple[float, float]]]
    comm: list[list[tuple[float, float]]]

    @property
    def makespan(self) -> float:
        """The latest end: one iteration's pipeline with its messages."""
        return max(self.end)

    def exposed_comm(self, rank: int) -> float:
        """Seconds of ``rank``'s point-to-point intervals during which it runs no pass (each
        pass is one block of the rank's time, its layers' own communication inside it)."""
        return _measure(_subtract(_union(self.comm[rank]), _union(self.passes[rank])))


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(x for x in iv if x[1] > x[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _subtract(iv: list[tuple[float, float]], cut: list[tuple[float, float]]
              ) -> list[tuple[float, float]]:
    out = []
    for a, b in iv:
        for c, d in cut:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def _measure(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in iv)


@dataclass(frozen=True)
class MessageOrder:
    """A schedule's order with its exchanges, compiled once per ``(schedule, pp, m, vpp,
    group_size)`` (``message_order``): the order does not depend on the seconds, so every
    replay of one shape (the estimate's run with messages and without, a validation's same
    job again, each plan of a search of that shape) walks the same ops.

    ``ops`` in an order that meets every wait (a rank's items in program order, a receive
    after the send of each message it takes): ``(0, rank, sig, slots)`` a pass (``sigs[sig]``
    the ``(rank, members)`` whose seconds it lasts; it writes its end to the ``slots`` of
    the steps it runs), ``(1, rank, ((key, slot), ...))`` an exchange's sends (message
    ``key`` leaves after the step at ``slot``), ``(2, rank, (key, ...))`` its receives.
    ``slots``/``keys``: how many step ends and messages; ``collective``: which passes run
    tensor-parallel collectives."""

    pp: int
    sigs: tuple[tuple[int, Members], ...]
    ops: tuple[tuple, ...]
    slots: int
    keys: int

    @cached_property
    def collective(self) -> tuple[bool, ...]:
        """Whether each kind of pass (``sigs``) runs tensor-parallel collectives: all but
        a weight-gradient step alone (compute only)."""
        return tuple([any(k != "W" for k, _ in g) for _, g in self.sigs])


@lru_cache(maxsize=128)
def message_order(sched: Any, pp: int, m: int, vpp: int,
                  group_size: int | None = None) -> MessageOrder:
    """``sched``'s order with its exchanges (``_program`` of each rank) as a ``MessageOrder``:
    the event loop that finds which receive can go next, run once with no seconds. Raises
    ``RuntimeError`` on deadlock."""
    sig_of: dict[tuple, int] = {}
    slot_of: dict[tuple, int] = {}
    progs = [_program(sched, r, pp, m, vpp, group_size, sig_of, slot_of) for r in range(pp)]
    pos = [0] * pp
    key_of: dict[tuple, int] = {}
    waiting: dict[tuple, list[int]] = {}
    ops: list[tuple] = []
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        prog = progs[r]
        n = len(prog)
        while pos[r] < n:
            op = prog[pos[r]]
            kind = op[0]
            if kind == 0:
                ops.append(op)
            elif kind == 1:
                for key, _ in op[2]:
                    key_of.setdefault(key, len(key_of))
                    todo.extend(waiting.pop(key, ()))
                ops.append((1, r, tuple([(key_of[key], q) for key, q in op[2]])))
            else:
                late = None
                for key in op[2]:
                    if key not in key_of:
                        late = key
                        break
                if late is not None:
                    waiting.setdefault(late, []).append(r)
                    break
                ops.append((2, r, tuple([key_of[key] for key in op[2]])))
            pos[r] += 1
    stuck = [r for r in range(pp) if pos[r] < len(progs[r])]
    if stuck:
        raise RuntimeError(f"schedule {sched.name!r} deadlocks with messages on ranks {stuck} "
                           f"(pp={pp}, m={m}, vpp={vpp})")
    return MessageOrder(pp, tuple(sig_of), tuple(ops), len(slot_of), len(key_of))


def message_ranks(sched: Any, pp: int, m: int, vpp: int,
                  seconds: Callable[[int, Members], float], t_send: float,
                  t_gather: float = 0.0, group_size: int | None = None) -> MessageRun:
    """``sched``'s order on ``pp`` ranks and ``m`` micro-batches run with its exchanges
    (module docstring): one message ``t_send`` seconds, a receive's all-gather ``t_gather``.
    The order is ``message_order``'s (kept by shape); each kind of pass is timed once.
    Raises ``RuntimeError`` on deadlock."""
    order = message_order(sched, pp, m, vpp, group_size)
    return replay_messages(order, [seconds(r, g) for r, g in order.sigs], t_send, t_gather)


def replay_messages(order: MessageOrder, dur: list, t_send: float,
                    t_gather: float = 0.0) -> MessageRun:
    """``order`` (``message_order``) run with each kind of pass's seconds ``dur``
    (``order.sigs``'), one message ``t_send`` seconds, a receive's all-gather ``t_gather``:
    the module docstring's rules, operation for operation."""
    pp = order.pp
    ready = [0.0] * pp          # the next pass may start (its waits met)
    stream = [0.0] * pp         # the pp-comm stream is free
    gather = [0.0] * pp         # the tensor-parallel stream's last all-gather ends
    tp_free = [0.0] * pp        # and the last pass with tensor-parallel collectives
    collective = order.collective
    first: list[Any] = [None] * pp
    end = [0.0] * pp
    busy = [0.0] * pp
    passes: list[list] = [[] for _ in range(pp)]
    comm: list[list] = [[] for _ in range(pp)]
    done = [0.0] * order.slots          # each step's end
    sent = [0.0] * order.keys           # each message's send start
    land = [0.0] * order.keys           # and landing
    for op in order.ops:
        kind, r = op[0], op[1]
        if kind == 0:                   # a pass
            start = ready[r]
            if first[r] is None:
                first[r] = start
            d = dur[op[2]]
            e = ready[r] = end[r] = start + d
            busy[r] += d
            passes[r].append((start, e))
            for q in op[3]:
                done[q] = e
            if collective[op[2]]:
                tp_free[r] = e
        elif kind == 1:                 # an exchange's sends (a batched call: first)
            s = stream[r]
            for k, q in op[2]:
                a = max(s, done[q])
                s = a + t_send
                sent[k], land[k] = a, s
                comm[r].append((a, s))
            stream[r] = s
        else:                           # its receives
            s = stream[r]
            last = max(ready[r], s)
            for k in op[2]:
                at = land[k]
                if at > s:
                    comm[r].append((max(s, sent[k]), at))
                    s = at
                if t_gather > 0:
                    g0 = max(gather[r], s, tp_free[r])
                    gather[r] = g0 + t_gather
                    comm[r].append((g0, gather[r]))
                last = max(last, s, gather[r])
            stream[r] = s
            ready[r] = end[r] = max(end[r], last)
    return MessageRun([x or 0.0 for x in first], end, busy, passes, comm)
