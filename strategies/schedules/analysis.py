"""Pure helpers over schedules: activation stash, closed-form bubble, free-comm makespan."""
from __future__ import annotations

from typing import Iterable, Sequence

from strategies.errors import SpecError
from strategies.schedules.base import Step, get_schedule


def peak_stash(steps: Iterable[Step]) -> int:
    """Most forwards whose backward has not yet run, counted per (microbatch, chunk)."""
    live: set[tuple[int, int]] = set()
    peak = 0
    for s in steps:
        key = (s.microbatch, s.chunk)
        if s.kind == "F":
            live.add(key)
            peak = max(peak, len(live))
        else:
            live.discard(key)
    return peak


def bubble_fraction_closed_form(schedule: str, pp: int, m: int, vpp: int = 1) -> float:
    """Idle time over ideal compute time: ``(pp-1)/m``, or ``(pp-1)/(vpp*m)`` interleaved."""
    get_schedule(schedule)
    if m < 1:
        raise SpecError("num_microbatches", m, "must be >= 1")
    if schedule == "interleaved":
        return (pp - 1) / (vpp * m)
    return (pp - 1) / m


def _deps(step: Step, vstage: int, last: int) -> list[tuple[str, int, int]]:
    """Keys ``(kind, microbatch, virtual_stage)`` that ``step`` waits on (free comm)."""
    i = step.microbatch
    if step.kind == "F":
        return [("F", i, vstage - 1)] if vstage > 0 else []
    if vstage == last:
        return [("F", i, vstage)]
    return [("B", i, vstage + 1)]


def simulate_free_comm(schedule: str, pp: int, m: int, vpp: int, t_f: float, t_b: float,
                       group_size: int | None = None,
                       slowdown: Sequence[float] | None = None) -> float:
    """Makespan in seconds of all ``pp`` ranks running ``schedule`` with free communication.

    ``t_f``/``t_b`` are seconds of forward/backward per stage and micro-batch; each of the
    ``vpp`` chunks takes ``t_f/vpp``/``t_b/vpp``, times ``slowdown[r]`` on rank ``r`` (a
    straggling stage; default 1 everywhere). A step starts when its rank is free and
    its dependency has finished. Runs in O(total steps); raises ``RuntimeError`` on deadlock.

    >>> simulate_free_comm("1f1b", 4, 8, 1, 1.0, 2.0)
    33.0
    """
    fn = get_schedule(schedule)
    programs = [fn(r, pp, m, vpp, group_size) for r in range(pp)]
    dur = {"F": t_f / vpp, "B": t_b / vpp}
    slow = [1.0] * pp if slowdown is None else [float(x) for x in slowdown]
    if len(slow) != pp:
        raise SpecError("slowdown", len(slow), f"must give one factor per stage (pp={pp})")
    last = pp * vpp - 1
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
            vstage = step.chunk * pp + r
            deps = _deps(step, vstage, last)
            missing = [d for d in deps if d not in done]
            if missing:
                waiting[missing[0]] = r  # each key has at most one dependent step
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
