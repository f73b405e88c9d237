"""A pipeline rank's step list with Megatron-LM's blocking point-to-point exchanges.

``pipeline_actions(schedule, stage, pp, m, vpp, group_size)`` returns the schedule's steps
(``strategies.schedules``) interleaved with ``Exchange`` records: the batched send/receive
calls of ``megatron/core/pipeline_parallel/schedules.py`` (see docs/schedules.md). A message is
``(direction, microbatch, chunk)``: ``fwd`` carries the output of forward ``(i, c)`` to the
next virtual stage, ``bwd`` the input gradient of backward ``(i, c)`` to the previous one.
Chunk ``c`` on rank ``r`` is virtual stage ``c*pp + r``; the pipeline is a ring (rank ``pp-1``
chunk ``c`` feeds rank 0 chunk ``c+1``). Sends and receives the boundary makes pointless are
dropped (the first virtual stage receives no activation, the last sends none), and so are
exchanges left empty. Pure; no SimPy.

>>> [str(a) for a in pipeline_actions("1f1b", 0, 2, 2)]
['F0.c0', 'X(send fwd 0.0)', 'F1.c0', 'X(send fwd 1.0 | recv bwd 0.0)', 'B0.c0', \
'X(recv bwd 1.0)', 'B1.c0']
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.schedules import Step, get_schedule
from strategies.schedules import interleaved as _il

Msg = tuple[str, int, int]   # (direction "fwd"/"bwd", microbatch, chunk on this rank)


@dataclass(frozen=True)
class Exchange:
    """One blocking batched call: ``sends`` then ``recvs`` (messages named on this rank)."""

    sends: tuple[Msg, ...] = ()
    recvs: tuple[Msg, ...] = ()

    def __str__(self) -> str:
        parts = [" ".join(f"send {d} {i}.{c}" for d, i, c in self.sends),
                 " ".join(f"recv {d} {i}.{c}" for d, i, c in self.recvs)]
        return "X(" + " | ".join(p for p in parts if p) + ")"


class _Ring:
    """Boundary rules of rank ``stage`` in a ring of ``pp`` ranks with ``vpp`` chunks."""

    def __init__(self, stage: int, pp: int, vpp: int) -> None:
        self.stage, self.pp, self.last = stage, pp, pp * vpp - 1

    def vs(self, chunk: int) -> int:
        return chunk * self.pp + self.stage

    def send_out(self, s: Step | None) -> tuple[Msg, ...]:
        """What a finished step sends: a forward's output, a backward's input gradient."""
        if s is None:
            return ()
        if s.kind == "F":
            return (("fwd", s.microbatch, s.chunk),) if self.vs(s.chunk) < self.last else ()
        return (("bwd", s.microbatch, s.chunk),) if self.vs(s.chunk) > 0 else ()

    def recv_in(self, s: Step | None) -> tuple[Msg, ...]:
        """What a step must receive first: a forward's input, a backward's output gradient."""
        if s is None:
            return ()
        if s.kind == "F":
            return (("fwd", s.microbatch, s.chunk),) if self.vs(s.chunk) > 0 else ()
        return (("bwd", s.microbatch, s.chunk),) if self.vs(s.chunk) < self.last else ()


def _x(out: list, sends: tuple = (), recvs: tuple = ()) -> None:
    if sends or recvs:
        out.append(Exchange(tuple(sends), tuple(recvs)))


def _split(steps: list[Step]) -> tuple[list[Step], list[Step]]:
    fwd = [s for s in steps if s.kind == "F"]
    bwd = [s for s in steps if s.kind == "B"]
    return fwd, bwd


def _gpipe(steps: list[Step], ring: _Ring) -> list:
    out: list = []
    for s in steps:
        _x(out, recvs=ring.recv_in(s))
        out.append(s)
        _x(out, sends=ring.send_out(s))
    return out


def _one_f_one_b(steps: list[Step], ring: _Ring, w: int) -> list:
    """Megatron ``forward_backward_pipelining_without_interleaving``."""
    fwd, bwd = _split(steps)
    m, out = len(fwd), []
    rem = m - w
    for k in range(w):
        _x(out, recvs=ring.recv_in(fwd[k]))
        out.append(fwd[k])
        _x(out, sends=ring.send_out(fwd[k]))
    if rem:
        _x(out, recvs=ring.recv_in(fwd[w]))
    for i in range(rem):
        out += [fwd[w + i]]
        _x(out, ring.send_out(fwd[w + i]), ring.recv_in(bwd[i]))
        out.append(bwd[i])
        nxt = fwd[w + i + 1] if i + 1 < rem else None
        _x(out, ring.send_out(bwd[i]), ring.recv_in(nxt))
    for i in range(rem, m):
        _x(out, recvs=ring.recv_in(bwd[i]))
        out.append(bwd[i])
        _x(out, sends=ring.send_out(bwd[i]))
    return out


def _interleaved(steps: list[Step], ring: _Ring, w: int) -> list:
    """Megatron ``forward_backward_pipelining_with_interleaving`` (no p2p overlap)."""
    fwd, bwd = _split(steps)
    total, out = len(fwd), []
    rem = total - w
    _x(out, recvs=ring.recv_in(fwd[0]))
    for k in range(w):
        out.append(fwd[k])
        nxt = ring.recv_in(fwd[k + 1] if k + 1 < total else None)
        grad = ring.recv_in(bwd[0]) if (k == w - 1 and rem) else ()
        _x(out, ring.send_out(fwd[k]), nxt + grad)
    for k in range(rem):
        out += [fwd[w + k], bwd[k]]
        nxt_f = fwd[w + k + 1] if w + k + 1 < total else None
        _x(out, ring.send_out(fwd[w + k]) + ring.send_out(bwd[k]),
           ring.recv_in(nxt_f) + ring.recv_in(bwd[k + 1]))
    if not rem:
        _x(out, recvs=ring.recv_in(bwd[0]))
    for k in range(rem, total):
        out.append(bwd[k])
        nxt_b = bwd[k + 1] if k + 1 < total else None
        _x(out, ring.send_out(bwd[k]), ring.recv_in(nxt_b))
    return out


def num_warmup(schedule: str, stage: int, pp: int, m: int, vpp: int,
               group_size: int | None) -> int:
    """Megatron's ``num_warmup_microbatches`` for the schedule (GPipe: all forwards)."""
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return _il.num_warmup_microbatches(stage, pp, m, vpp, group_size)
    return min(pp - stage - 1, m)


def pipeline_actions(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                     group_size: int | None = None) -> list:
    """The steps of ``schedule`` on ``stage`` with the exchanges Megatron-LM issues."""
    steps = get_schedule(schedule)(stage, pp, m, vpp, group_size)
    ring = _Ring(stage, pp, vpp)
    if pp == 1:
        return list(steps)
    if schedule == "gpipe":
        return _gpipe(steps, ring)
    w = num_warmup(schedule, stage, pp, m, vpp, group_size)
    if schedule == "interleaved":
        return _interleaved(steps, ring, w)
    return _one_f_one_b(steps, ring, w)


def peer(stage: int, pp: int, direction: str, sending: bool) -> int:
    """Pipeline rank at the other end of a message (the ring wraps around)."""
    towards_next = (direction == "fwd") == sending
    return (stage + 1) % pp if towards_next else (stage - 1) % pp
