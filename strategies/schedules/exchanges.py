"""A pipeline rank's step list with its blocking point-to-point exchanges.

``pipeline_actions(schedule, stage, pp, m, vpp, group_size)`` returns the schedule's steps
interleaved with ``Exchange`` records: batched send/receive calls (where each schedule puts
them is its ``Schedule.actions``; 1F1B and interleaved follow Megatron-LM's
``megatron/core/pipeline_parallel/schedules.py``, see docs/schedules.md). A message is
``(direction, microbatch, chunk)``: ``fwd`` carries the output of forward ``(i, c)`` to the
next position of the micro-batch's path, ``bwd`` the input gradient of backward ``(i, c)``
to the previous one (the schedule's placement; Megatron's ring: rank ``pp-1`` chunk ``c``
feeds rank 0 chunk ``c+1``). Sends and receives the boundary makes pointless are dropped
(the first position receives no activation, the last sends none), and so are exchanges left
empty. Pure; no SimPy.

>>> [str(a) for a in pipeline_actions("1f1b", 0, 2, 2)]
['F0.c0', 'X(send fwd 0.0)', 'F1.c0', 'X(send fwd 1.0 | recv bwd 0.0)', 'B0.c0', \
'X(recv bwd 1.0)', 'B1.c0']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strategies.schedules.registry import get_schedule
from strategies.schedules.step import Step

Msg = tuple[str, int, int]   # (direction "fwd"/"bwd", microbatch, chunk on this rank)


@dataclass(frozen=True)
class Exchange:
    """One blocking batched call: ``sends`` then ``recvs`` (messages named on this rank).
    ``overlapped``: an ``overlap_p2p_comm`` call instead (Megatron-Core's interleaved
    schedule): lone transfers on NCCL's per-peer streams (``p2p_streams.stream_of``), each
    receive waited for only just before the next pass of its kind (docs/calibration.md
    §5.68). ``waited``: an ``overlapped`` call the next pass waits for whole, its sends and
    receives (``p2p_communication._communicate(wait_on_reqs=True)``: Megatron-Core's
    interleaved warm-up and cool-down calls without ``overlap_p2p_comm_warmup_flush``,
    docs/calibration.md §5.207)."""

    sends: tuple[Msg, ...] = ()
    recvs: tuple[Msg, ...] = ()
    overlapped: bool = False
    waited: bool = False

    def __str__(self) -> str:
        parts = [" ".join(f"send {d} {i}.{c}" for d, i, c in self.sends),
                 " ".join(f"recv {d} {i}.{c}" for d, i, c in self.recvs)]
        return "X(" + " | ".join(p for p in parts if p) + ")"


class Boundary:
    """What each step of rank ``stage`` sends and receives under ``schedule``'s placement."""

    def __init__(self, schedule: Any, stage: int, pp: int, vpp: int) -> None:
        self.s, self.stage, self.pp, self.vpp = schedule, stage, pp, vpp
        self.last = schedule.num_virtual_stages(pp, vpp) - 1

    def vs(self, step: Step) -> int:
        return self.s.virtual_stage(self.stage, step.chunk, self.pp, self.vpp, step.microbatch)

    def remote(self, s: Step, pos: int) -> bool:
        """Position ``pos`` of ``s``'s micro-batch is on another rank (on a V the turn from
        chunk 0 to chunk 1 stays on the rank: no message)."""
        return self.s.rank_chunk(pos, self.pp, self.vpp, s.microbatch)[0] != self.stage

    def send_out(self, s: Step | None) -> tuple[Msg, ...]:
        """What a finished step sends: a forward's output, a backward's input gradient."""
        if s is None or s.kind == "W":
            return ()
        v = self.vs(s)
        if s.kind == "F":
            ok = v < self.last and self.remote(s, v + 1)
            return (("fwd", s.microbatch, s.chunk),) if ok else ()
        return (("bwd", s.microbatch, s.chunk),) if v > 0 and self.remote(s, v - 1) else ()

    def recv_in(self, s: Step | None) -> tuple[Msg, ...]:
        """What a step must receive first: a forward's input, a backward's output gradient."""
        if s is None or s.kind == "W":      # a weight gradient needs no message
            return ()
        v = self.vs(s)
        if s.kind == "F":
            return (("fwd", s.microbatch, s.chunk),) if v > 0 and self.remote(s, v - 1) else ()
        ok = v < self.last and self.remote(s, v + 1)
        return (("bwd", s.microbatch, s.chunk),) if ok else ()


def add_exchange(out: list, sends: tuple = (), recvs: tuple = (),
                 overlapped: bool = False, waited: bool = False) -> None:
    """Append ``Exchange(sends, recvs, overlapped, waited)`` unless both are empty."""
    if sends or recvs:
        out.append(Exchange(tuple(sends), tuple(recvs), overlapped, waited))


def split_passes(steps: list[Step]) -> tuple[list[Step], list[Step]]:
    """The forwards and the backwards of ``steps``, each in order."""
    return [s for s in steps if s.kind == "F"], [s for s in steps if s.kind == "B"]


def around_each_step(steps: list[Step], ring: Boundary) -> list:
    """Each step receives its input in an exchange of its own just before it and sends its
    output in one just after it (GPipe; the default). An overlapped group (``Step.overlap``)
    receives all its members' inputs before it and sends all their outputs after it, so no
    exchange splits the group."""
    out: list = []
    group: list[Step] = []
    for s in steps:
        group.append(s)
        if s.overlap:
            continue
        add_exchange(out, recvs=sum((ring.recv_in(g) for g in group), ()))
        out += group
        add_exchange(out, sends=sum((ring.send_out(g) for g in group), ()))
        group = []
    out += group
    return out


def pipeline_actions(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                     group_size: int | None = None, ep_overlap: bool = False,
                     overlap_p2p: bool = False, warmup_flush: bool = False) -> list:
    """The steps of ``schedule`` on ``stage`` with the exchanges it issues; ``ep_overlap``:
    Megatron-Core's combined 1F1B order (``strategies.schedules.combined``); ``overlap_p2p``:
    the stack runs ``overlap_p2p_comm`` (only schedules with ``overlaps_p2p`` change);
    ``warmup_flush``: its ``overlap_p2p_comm_warmup_flush`` too."""
    if ep_overlap:
        from strategies.schedules.combined import combined_actions
        return combined_actions(schedule, stage, pp, m, vpp, group_size)
    sched = get_schedule(schedule)
    if overlap_p2p and sched.overlaps_p2p and pp > 1:
        return sched.overlapped_actions(stage, pp, m, vpp, group_size, warmup_flush)
    return sched.actions(stage, pp, m, vpp, group_size)
