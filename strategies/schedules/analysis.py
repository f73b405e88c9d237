"""Pure helpers over schedules: activation stash, closed-form bubble, free-comm makespan."""
from __future__ import annotations

from typing import Sequence

from strategies.errors import SpecError
from strategies.schedules.base import Step, get_schedule, peak_stash

__all__ = ["peak_stash", "bubble_fraction_closed_form", "simulate_free_comm"]


def bubble_fraction_closed_form(schedule: str, pp: int, m: int, vpp: int = 1,
                                w_share: float = 0.0) -> float:
    """Idle time over ideal compute time (``Schedule.bubble_fraction``): ``(pp-1)/m``, or
    ``(pp-1)/(vpp*m)`` interleaved; ``w_share`` is the weight gradient's share of the time
    (schedules that split the backward)."""
    sched = get_schedule(schedule)
    if m < 1:
        raise SpecError("num_microbatches", m, "must be >= 1")
    return float(sched.bubble_fraction(pp, m, vpp, w_share))


def _deps(step: Step, pos: int, last: int) -> list[tuple[str, int, int]]:
    """Keys ``(kind, microbatch, position)`` that ``step`` waits on (free comm)."""
    i = step.microbatch
    if step.kind == "W":
        return [("B", i, pos)]
    if step.kind == "F":
        return [("F", i, pos - 1)] if pos > 0 else []
    if pos == last:
        return [("F", i, pos)]
    return [("B", i, pos + 1)]


def simulate_free_comm(schedule: str, pp: int, m: int, vpp: int, t_f: float, t_b: float,
                       group_size: int | None = None, t_w: float = 0.0,
                       slowdown: Sequence[float] | None = None) -> float:
    """Makespan in seconds of all ``pp`` ranks running ``schedule`` with free communication.

    ``t_f``/``t_b`` are seconds of forward/backward per stage and micro-batch; each of the
    ``vpp`` chunks takes ``t_f/vpp``/``t_b/vpp``. ``t_w`` is the weight gradient's part of
    ``t_b``: a schedule that splits the backward runs ``B`` in ``t_b - t_w`` and ``W`` in
    ``t_w`` (same per chunk), others ignore it. Every step of rank ``r`` lasts
    ``slowdown[r]`` times longer (a straggling stage; default 1 everywhere). A step starts
    when its rank is free and its dependency (the same pass at the neighbouring position of
    the micro-batch's path, ``Schedule.virtual_stage``) has finished. Runs in O(total
    steps); raises ``RuntimeError`` on deadlock.

    >>> simulate_free_comm("1f1b", 4, 8, 1, 1.0, 2.0)
    33.0
    """
    sched = get_schedule(schedule)
    programs = [sched.steps(r, pp, m, vpp, group_size) for r in range(pp)]
    split = sched.splits_backward
    dur = {"F": t_f / vpp, "B": (t_b - t_w if split else t_b) / vpp, "W": t_w / vpp}
    last = sched.num_virtual_stages(pp, vpp) - 1
    slow = [1.0] * pp if slowdown is None else [float(x) for x in slowdown]
    if len(slow) != pp:
        raise SpecError("slowdown", len(slow), f"must give one factor per stage (pp={pp})")
    done: dict[tuple[str, int, int], float] = {}
    waiting: dict[tuple[str, int, int], int] = {}
    pos = [0] * pp
    free = [0.0] * pp
    ready = list(range(pp))
    while ready:
        r = ready.pop()
        prog = programs[r]
        while pos[r] < len(prog):
            step = prog[pos[r]]
            vstage = sched.virtual_stage(r, step.chunk, pp, vpp, step.microbatch)
            deps = _deps(step, vstage, last)
            missing = [d for d in deps if d not in done]
            if missing:
                # each key has at most one dependent step on another rank (a W waits only for
                # its own rank's B, which the order runs first)
                waiting[missing[0]] = r
                break
            start = max([free[r]] + [done[d] for d in deps])
            free[r] = start + dur[step.kind] * slow[r]
            key = (step.kind, step.microbatch, vstage)
            done[key] = free[r]
            pos[r] += 1
            if key in waiting:
                ready.append(waiting.pop(key))
    stuck = [r for r in range(pp) if pos[r] < len(programs[r])]
    if stuck:
        raise RuntimeError(f"schedule {schedule!r} deadlocks on ranks {stuck} "
                           f"(pp={pp}, m={m}, vpp={vpp}, group_size={group_size})")
    return max(free)
