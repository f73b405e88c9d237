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
  tensor-parallel all-gather (``t_gather``) follows it (taken whole here: the simulator
  starts it after the previous pass's last tensor-parallel collective, which can hide part of
  it under that pass's tail);
* the next pass waits for the last transfer of every exchange before it (``self.wait``).

Passes (a step, or an overlapped group of steps, ``Step.overlap``) last ``seconds(rank,
members)`` (``analysis.event_seconds``' callback). Scalar; O(actions). Seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from strategies.schedules.exchanges import Exchange

#: the members of one pass: ``(kind, chunk)`` of each step (``analysis.Members``)
Members = tuple[tuple[str, int], ...]


def _program(sched: Any, rank: int, pp: int, m: int, vpp: int,
             group_size: int | None) -> list[tuple]:
    """``rank``'s actions as items: ``("x", sends, recvs)`` (message keys ``(direction,
    microbatch, sender's position)``) and ``("c", members, produced)`` (a pass and the
    ``(kind, microbatch, chunk)`` of its steps)."""
    vs = sched.virtual_stage
    out: list[tuple] = []
    group: list = []
    for a in sched.actions(rank, pp, m, vpp, group_size):
        if isinstance(a, Exchange):
            if group:
                raise AssertionError("an exchange inside an overlapped group")
            sends = tuple(((d, i, vs(rank, c, pp, vpp, i)), ("F" if d == "fwd" else "B", i, c))
                          for d, i, c in a.sends)
            recvs = tuple((d, i, vs(rank, c, pp, vpp, i) + (-1 if d == "fwd" else 1))
                          for d, i, c in a.recvs)
            out.append(("x", sends, recvs))
            continue
        group.append(a)
        if a.overlap:
            continue
        out.append(("c", tuple((s.kind, s.chunk) for s in group),
                    tuple((s.kind, s.microbatch, s.chunk) for s in group)))
        group = []
    if group:
        out.append(("c", tuple((s.kind, s.chunk) for s in group),
                    tuple((s.kind, s.microbatch, s.chunk) for s in group)))
    return out


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


def message_ranks(sched: Any, pp: int, m: int, vpp: int,
                  seconds: Callable[[int, Members], float], t_send: float,
                  t_gather: float = 0.0, group_size: int | None = None) -> MessageRun:
    """``sched``'s order on ``pp`` ranks and ``m`` micro-batches run with its exchanges
    (module docstring): one message ``t_send`` seconds, a receive's all-gather ``t_gather``.
    Raises ``RuntimeError`` on deadlock."""
    progs = [_program(sched, r, pp, m, vpp, group_size) for r in range(pp)]
    pos = [0] * pp
    posted = [-1] * pp          # the exchange whose sends have left
    ready = [0.0] * pp          # the next pass may start (its waits met)
    stream = [0.0] * pp         # the pp-comm stream is free
    gather = [0.0] * pp         # the tensor-parallel stream's last all-gather ends
    first: list[Any] = [None] * pp
    end = [0.0] * pp
    busy = [0.0] * pp
    passes: list[list] = [[] for _ in range(pp)]
    comm: list[list] = [[] for _ in range(pp)]
    landed: dict[tuple, tuple[float, float]] = {}       # key -> (send start, landing)
    produced: list[dict] = [{} for _ in range(pp)]
    waiting: dict[tuple, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        prog = progs[r]
        while pos[r] < len(prog):
            item = prog[pos[r]]
            if item[0] == "c":
                _, members, steps = item
                start = ready[r]
                if first[r] is None:
                    first[r] = start
                dur = seconds(r, members)
                ready[r] = end[r] = start + dur
                busy[r] += dur
                passes[r].append((start, ready[r]))
                for key in steps:
                    produced[r][key] = ready[r]
                pos[r] += 1
                continue
            _, sends, recvs = item
            if posted[r] != pos[r]:         # the call's sends leave first (a batched call)
                posted[r] = pos[r]
                s = stream[r]
                for key, step in sends:
                    a = max(s, produced[r][step])
                    s = a + t_send
                    landed[key] = (a, s)
                    comm[r].append((a, s))
                    todo.extend(waiting.pop(key, ()))
                stream[r] = s
            late = next((k for k in recvs if k not in landed), None)
            if late is not None:
                waiting.setdefault(late, []).append(r)
                break
            s = stream[r]
            last = max(ready[r], s)
            for key in recvs:
                sent, land = landed[key]
                if land > s:
                    comm[r].append((max(s, sent), land))
                    s = land
                if t_gather > 0:
                    g0 = max(gather[r], s)
                    gather[r] = g0 + t_gather
                    comm[r].append((g0, gather[r]))
                last = max(last, s, gather[r])
            stream[r] = s
            ready[r] = end[r] = max(end[r], last)
            pos[r] += 1
    stuck = [r for r in range(pp) if pos[r] < len(progs[r])]
    if stuck:
        raise RuntimeError(f"schedule {sched.name!r} deadlocks with messages on ranks {stuck} "
                           f"(pp={pp}, m={m}, vpp={vpp})")
    return MessageRun([x or 0.0 for x in first], end, busy, passes, comm)
