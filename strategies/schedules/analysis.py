"""Pure helpers over schedules: activation stash, closed-form bubble, free-comm makespan."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from strategies.errors import SpecError
from strategies.schedules.base import Step, get_schedule, peak_pending_w, peak_stash

__all__ = ["peak_stash", "peak_pending_w", "bubble_fraction_closed_form", "free_comm_ranks",
           "RankSpan", "simulate_free_comm"]


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


@dataclass(frozen=True)
class RankSpan:
    """One rank's run with free communication: first step's start, last step's end and the
    seconds it computes (``end - start - busy`` is its bubble)."""

    start: float
    end: float
    busy: float

    @property
    def bubble(self) -> float:
        """Idle seconds between the rank's first start and its last end."""
        return self.end - self.start - self.busy


def _groups(prog: list[Step]) -> list[list[Step]]:
    """Consecutive steps linked by ``Step.overlap`` as groups (one step alone otherwise)."""
    out: list[list[Step]] = []
    cur: list[Step] = []
    for step in prog:
        cur.append(step)
        if not step.overlap:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def free_comm_ranks(schedule: str, pp: int, m: int, vpp: int, t_f: float, t_b: float,
                    group_size: int | None = None, t_w: float = 0.0,
                    t_fb: float | None = None,
                    slowdown: Sequence[float] | None = None,
                    chunk_times: Sequence[Sequence[Sequence[float]]] | None = None
                    ) -> list[RankSpan]:
    """Each rank's span when all ``pp`` ranks run ``schedule`` with free communication.

    ``t_f``/``t_b`` are seconds of forward/backward per stage and micro-batch: a step of a
    chunk takes ``t/k``, ``k`` the chunks a micro-batch's path crosses on one rank
    (``num_virtual_stages / pp``: ``vpp`` on the ring and the V, 1 on DualPipe's two
    directions). ``t_w`` is the weight gradient's part of ``t_b``: a schedule that splits the
    backward runs ``B`` in ``t_b - t_w`` and ``W`` in ``t_w``, others ignore it. A step
    starts when its rank is free and its dependency (the same pass at the neighbouring
    position of the micro-batch's path, ``Schedule.virtual_stage``) has finished. An
    overlapped group (``Step.overlap``) starts when the rank is free and all its members'
    outside dependencies have finished, and all its members end together after ``t_fb/k``
    (``t_fb``: seconds of a forward overlapped with a whole backward, ``F&B``; default
    ``t_f + t_b``, no compute overlap). Every step (and group) of rank ``r`` lasts
    ``slowdown[r]`` times longer (a straggling stage; default 1 everywhere).
    ``chunk_times[r][c]``: ``(F, B, W)`` seconds of one step of rank ``r``'s chunk ``c``
    (stages and chunks that hold different layers, ``strategies.layout``); given, it replaces
    ``t_f``/``t_b``/``t_w``/``slowdown`` (``B`` is the whole backward, of which ``W`` is run
    apart by a schedule that splits it; an overlapped group lasts its members' sum).
    Runs in O(total steps); raises ``RuntimeError`` on deadlock.

    >>> [r.bubble for r in free_comm_ranks("1f1b", 2, 2, 1, 1.0, 2.0)]
    [3.0, 0.0]
    """
    sched = get_schedule(schedule)
    programs = _rank_plans(sched, pp, m, vpp, group_size)
    split = sched.splits_backward
    k = max(sched.num_virtual_stages(pp, vpp) // pp, 1)
    dur = {"F": t_f / k, "B": (t_b - t_w if split else t_b) / k, "W": t_w / k}
    t_group = (t_f + t_b if t_fb is None else t_fb) / k
    slow = [1.0] * pp if slowdown is None else [float(x) for x in slowdown]
    if len(slow) != pp:
        raise SpecError("slowdown", len(slow), f"must give one factor per stage (pp={pp})")
    done: dict[tuple[str, int, int], float] = {}
    waiting: dict[tuple[str, int, int], int] = {}
    pos = [0] * pp
    free = [0.0] * pp
    first = [None] * pp
    busy = [0.0] * pp
    ready = list(range(pp))
    while ready:
        r = ready.pop()
        prog = programs[r]
        while pos[r] < len(prog):
            group, keys, deps = prog[pos[r]]
            missing = [d for d in deps if d not in done]
            if missing:
                # each key has at most one dependent step on another rank (a W waits only for
                # its own rank's B, which the order runs first)
                waiting[missing[0]] = r
                break
            start = max([free[r]] + [done[d] for d in deps])
            if first[r] is None:
                first[r] = start
            if chunk_times is not None:
                free[r] = start + sum(_chunk_dur(chunk_times[r][st.chunk], st.kind, split,
                                                 len(group) > 1) for st in group)
            elif len(group) == 1:
                free[r] = start + dur[group[0].kind] * slow[r]
            else:
                free[r] = start + t_group * slow[r]
            busy[r] += free[r] - start
            pos[r] += 1
            for key in keys:
                done[key] = free[r]
                if key in waiting:
                    ready.append(waiting.pop(key))
    stuck = [r for r in range(pp) if pos[r] < len(programs[r])]
    if stuck:
        raise RuntimeError(f"schedule {schedule!r} deadlocks on ranks {stuck} "
                           f"(pp={pp}, m={m}, vpp={vpp}, group_size={group_size})")
    return [RankSpan(first[r] or 0.0, free[r], busy[r]) for r in range(pp)]


# ``_rank_plans`` of each (schedule object, pp, m, vpp, group_size), the schedule held so that
# its id stays its own; bounded, cleared when full
_PLANS: dict[tuple, tuple] = {}
_PLANS_KEPT = 256


def _rank_plans(sched, pp: int, m: int, vpp: int, group_size: int | None
                ) -> tuple[tuple[tuple[tuple[Step, ...], tuple, tuple], ...], ...]:
    """Each rank's order for ``free_comm_ranks``: its groups (``_groups``), each with the keys
    ``(kind, microbatch, position)`` its steps complete and those they wait on outside the
    group (``_deps``). Times play no part: worked out once per order and kept (an estimate
    runs the same order on the even split's times and on the layout's)."""
    key = (id(sched), pp, m, vpp, group_size)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is sched:
        return hit[1]
    last = sched.num_virtual_stages(pp, vpp) - 1
    plans = []
    for r in range(pp):
        rows = []
        for group in _groups(sched.steps(r, pp, m, vpp, group_size)):
            keys: list = []
            deps: list = []
            for step in group:
                vstage = sched.virtual_stage(r, step.chunk, pp, vpp, step.microbatch)
                deps += [d for d in _deps(step, vstage, last) if d not in keys]
                keys.append((step.kind, step.microbatch, vstage))
            rows.append((tuple(group), tuple(keys), tuple(deps)))
        plans.append(tuple(rows))
    if len(_PLANS) >= _PLANS_KEPT:
        _PLANS.clear()
    _PLANS[key] = (sched, tuple(plans))
    return _PLANS[key][1]


def _chunk_dur(times: Sequence[float], kind: str, split: bool, paired: bool = False) -> float:
    """Seconds of one ``kind`` step of a chunk whose ``(F, B, W)`` are ``times``; with
    ``(F, B, W, aF, aB, pF, pB)`` a forward or backward run alone adds ``aF``/``aB`` (its
    exposed communication) and one in an overlapped group (``paired``) ``pF``/``pB``."""
    f, b, w = times[:3]
    t = f if kind == "F" else w if kind == "W" else (b - w if split else b)
    if len(times) > 3 and kind != "W":
        t += times[(5 if paired else 3) + (kind == "B")]
    return t


def simulate_free_comm(schedule: str, pp: int, m: int, vpp: int, t_f: float, t_b: float,
                       group_size: int | None = None, t_w: float = 0.0,
                       t_fb: float | None = None,
                       slowdown: Sequence[float] | None = None,
                       chunk_times: Sequence[Sequence[Sequence[float]]] | None = None
                       ) -> float:
    """Makespan in seconds of all ``pp`` ranks running ``schedule`` with free communication:
    the latest end of ``free_comm_ranks`` (same arguments).

    >>> simulate_free_comm("1f1b", 4, 8, 1, 1.0, 2.0)
    33.0
    """
    return max(r.end for r in free_comm_ranks(schedule, pp, m, vpp, t_f, t_b, group_size,
                                              t_w, t_fb, slowdown, chunk_times))
