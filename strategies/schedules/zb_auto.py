"""ZB-1p and ZB-2p, the automatically scheduled zero-bubble pipelines of Qi et al., "Zero
Bubble (Almost) Pipeline Parallelism" (ICLR 2024), section 3: a greedy heuristic that, given
the times ``T_F``, ``T_B`` (input gradient), ``T_W`` (weight gradient), the point-to-point
time ``T_comm`` and a memory limit ``M_limit``, orders every rank's ``F``, ``B`` and ``W`` to
fill the bubbles, run under optimizer post-validation (no synchronisation before the step).
``zb-1p`` takes ``M_limit = p·M_B`` (1F1B's peak activation memory), ``zb-2p`` twice that.

The heuristic (docs/schedules.md, "ZB-1p and ZB-2p"), as the authors' released scheduler
(sail-sg/zero-bubble-pipeline-parallelism, ``zerobubble/scheduler/zb.py``) runs it, restated:

* memory in units of one stage's activations of a micro-batch ``M_B``: ``F`` adds 1, ``B``
  frees ``1 - w`` and ``W`` the rest ``w = M_W/M_B`` (what a pending ``W`` keeps);
* micro-batch 0: every rank runs ``F0``; walking back from the last rank, each rank adds
  warm-up forwards while memory allows and while it would otherwise idle before ``B0``
  arrives (or, in the variant that allows a bubble before the first ``B``, while the next
  forward still ends by then); a rank keeps fewer than the rank before it; then ``B0`` runs
  from the last rank back;
* each later micro-batch ``i``: every rank that has forwards left runs one more ``F``
  (a rank two forwards ahead of its successor may skip it when the successor is behind, in
  the variant that prioritises ``B``; a rank only runs one if its successor does), then
  ``B(i)`` from the last rank back; before each ``F`` or ``B`` a rank runs pending ``W``
  while memory is over the limit and while one ``W`` fits before the input it waits for
  arrives, and one more ``W`` when the wait left is no more than the largest bubble another
  rank already has (or, in the greedy variant, always);
* once rank 0 has run all forwards it clears its ``W`` before each ``B``; every rank runs its
  remaining ``W`` at the end;
* of the 8 variants (bubble before the first ``B`` or not, prioritise ``B`` or not, greedy
  ``W`` or not) the one with the shortest rank span (first ``F``'s start to last ``W``'s end,
  the longest over ranks: what an iteration costs under post-validation) wins, the first
  in that order on a tie.

Each rank's order is the order the heuristic placed its steps in. Deterministic: pure
arithmetic on the inputs; memory is counted from integer step counts, not accumulated. The
order depends on the times: ``Schedule.for_job`` binds a plan's stage-cost record (the
median stage's per-micro-batch ``F``, ``B`` and ``W`` seconds, the pipeline message time and
the activation model's ``M_W/M_B``), as the released scheduler uses its stages' median times;
unbound (tests, closed forms) it runs ``T_F = T_B = T_W``, free communication and ``w = 1/2``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from strategies.errors import SpecError
from strategies.schedules.base import Schedule
from strategies.schedules.registry import register
from strategies.schedules.step import Step, check_common
from strategies.schedules.validity import raise_first


@dataclass(frozen=True)
class AutoTimes:
    """Inputs of the heuristic: seconds of ``F``, ``B`` (input gradient), ``W`` and one
    point-to-point message per stage and micro-batch, and ``w_mem = M_W/M_B``."""

    t_f: float = 1.0
    t_b: float = 1.0
    t_w: float = 1.0
    t_comm: float = 0.0
    w_mem: float = 0.5

    def __post_init__(self) -> None:
        for name in ("t_f", "t_b", "t_w", "t_comm"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise SpecError(name, v, "must be a finite number of seconds >= 0")
        if not 0 <= self.w_mem <= 1:
            raise SpecError("w_mem", self.w_mem, "M_W/M_B must be in [0, 1]")


@dataclass(frozen=True)
class AutoResult:
    """The heuristic's schedule: ``orders[r]`` the steps of rank ``r``, ``ends`` each step's
    end time (seconds, same shape) with the given times, ``span`` the longest rank span
    (first ``F``'s start to last ``W``'s end: an iteration under post-validation, when
    iterations follow each other) and ``makespan`` the last end of one iteration alone (all
    ranks start at 0)."""

    orders: tuple[tuple[Step, ...], ...]
    ends: tuple[tuple[float, ...], ...]
    span: float
    makespan: float


class CannotFit(ValueError):
    """The memory limit admits no order (a forward needs memory no ``W`` can free)."""


def _greedy(pp: int, m: int, t: AutoTimes, limit: float, bubble_before_b: bool,
            prioritize_b: bool, greedy_w: bool
            ) -> tuple[list[list[tuple[str, int]]], list[list[float]], float, float]:
    """One variant of the heuristic (module docstring): each rank's ``(kind, micro-batch)``
    order, the steps' end times, the longest rank span and the makespan."""
    cost = {"F": t.t_f, "B": t.t_b, "W": t.t_w}
    comm, w = t.t_comm, t.w_mem
    n = {k: [0] * pp for k in "FBW"}          # steps of each kind placed per rank
    free = [0.0] * pp                          # when each rank is next free
    bubble = [0.0] * pp
    done = {k: [[0.0] * m for _ in range(pp)] for k in "FBW"}   # end of each step
    orders: list[list[tuple[str, int]]] = [[] for _ in range(pp)]
    ends: list[list[float]] = [[] for _ in range(pp)]

    def mem(j: int, df: int = 0, db: int = 0, dw: int = 0) -> float:
        f, b, ww = n["F"][j] + df, n["B"][j] + db, n["W"][j] + dw
        return (f - b) + w * (b - ww)

    def put(j: int, kind: str) -> None:
        counts = n[kind]
        i = counts[j]
        c = cost[kind]
        no_wait = free[j] + c
        end = no_wait
        if kind == "F" and j > 0:
            end = max(end, done["F"][j - 1][i] + comm + c)
        elif kind == "B" and j < pp - 1:
            end = max(end, done["B"][j + 1][i] + comm + c)
        if n["F"][j] > 0:
            bubble[j] += end - no_wait
        free[j] = done[kind][j][i] = end
        counts[j] = i + 1
        orders[j].append((kind, i))
        ends[j].append(end)

    def fill_w(j: int, ready: float) -> None:
        """``W`` that fit before an input arriving at ``ready``, then perhaps one more."""
        while n["W"][j] < n["B"][j] and free[j] + cost["W"] <= ready:
            put(j, "W")
        if n["W"][j] < n["B"][j] and free[j] < ready:
            if ready - free[j] <= max(bubble) - bubble[j]:
                if greedy_w:
                    put(j, "W")
            else:
                put(j, "W")

    def make_room(j: int, df: int, db: int) -> None:
        while mem(j, df, db) > limit:
            if n["W"][j] >= n["B"][j]:
                raise CannotFit(f"memory limit {limit:g} M_B admits no order")
            put(j, "W")

    for i in range(m):
        if i == 0:
            for j in range(pp):
                put(j, "F")
            extra = [0] * pp
            last = done["F"][pp - 1][0] + cost["B"]
            for j in range(pp - 2, -1, -1):
                busy = free[j]
                while n["F"][j] + extra[j] < m and mem(j, extra[j] + 1) <= limit:
                    if bubble_before_b:
                        if busy + cost["F"] > last + comm:
                            break
                    elif busy >= last + comm:
                        break
                    busy += cost["F"]
                    extra[j] += 1
                last = max(busy, last + comm) + cost["B"]
            for j in range(1, pp):
                while extra[j] > 0 and extra[j] >= extra[j - 1] and n["F"][j] + extra[j] < m:
                    extra[j] -= 1
            for j in range(pp):
                for _ in range(extra[j]):
                    put(j, "F")
            for j in range(pp - 1, -1, -1):
                put(j, "B")
            continue
        want = [0] * pp
        for j in range(pp):
            if n["F"][j] >= m:
                continue
            if prioritize_b and j + 1 < pp and n["F"][j] >= n["F"][j + 1] + 2:
                nxt = free[j + 1] + cost["F"] + cost["B"] + comm
                if free[j] >= nxt:
                    continue
                w_cost, k = 0.0, 0
                while mem(j, 1, 0, k) > limit and n["W"][j] + k < n["B"][j]:
                    w_cost += cost["W"]
                    k += 1
                if free[j] + cost["F"] + w_cost <= nxt:
                    want[j] = 1
                    continue
                if nxt - free[j] <= max(bubble) - bubble[j]:
                    continue
            want[j] = 1
        for j in range(pp - 2, -1, -1):
            want[j] = min(want[j], want[j + 1])
        for j in range(pp):
            if not want[j]:
                continue
            make_room(j, 1, 0)
            if j > 0:
                fill_w(j, done["F"][j - 1][n["F"][j]] + comm)
            put(j, "F")
        for j in range(pp - 1, -1, -1):
            make_room(j, 0, 1)
            if j + 1 < pp:
                fill_w(j, done["B"][j + 1][i] + comm)
            if j == 0 and n["F"][j] == m:
                while n["W"][j] < n["B"][j]:
                    put(j, "W")
            put(j, "B")
    for j in range(pp):
        while n["W"][j] < m:
            put(j, "W")
    span = max(done["W"][j][m - 1] - done["F"][j][0] + cost["F"] for j in range(pp))
    return orders, ends, span, max(free)


@lru_cache(maxsize=4096)
def auto_schedule(pp: int, m: int, times: AutoTimes, limit: float) -> AutoResult:
    """The heuristic's orders for ``pp`` ranks and ``m`` micro-batches under ``limit``
    (units of ``M_B``): the best of its 8 variants (module docstring). ``CannotFit`` when
    no variant fits."""
    best = None
    for before_b in (True, False):
        for prio_b in (True, False):
            for greedy_w in (True, False):
                try:
                    r = _greedy(pp, m, times, limit, before_b, prio_b, greedy_w)
                except CannotFit:
                    continue
                if best is None or r[2] < best[2]:
                    best = r
    if best is None:
        raise CannotFit(f"memory limit {limit:g} M_B admits no order")
    orders, ends, span, makespan = best
    return AutoResult(tuple(tuple(Step(k, i) for k, i in o) for o in orders),
                      tuple(map(tuple, ends)), span, makespan)


class ZBAuto(Schedule):
    """The heuristic's schedule under ``limit_factor·p·M_B`` (module docstring)."""

    splits_backward = True
    in_default_search = False
    #: the memory limit in units of 1F1B's peak activations ``p·M_B``
    limit_factor: int = 1
    times: AutoTimes = AutoTimes()
    #: the order is found by a search over times, so no affine extension from short runs
    steady_state = False

    def limit(self, pp: int) -> float:
        """``M_limit`` in units of ``M_B``: ``limit_factor·pp``."""
        return float(self.limit_factor * pp)

    def with_times(self, times: AutoTimes) -> "ZBAuto":
        """A copy of this schedule ordering with ``times``."""
        out = copy.copy(self)
        out.times = times
        return out

    def for_job(self, job: Any) -> "ZBAuto":
        """This schedule with the times of ``job``'s stage-cost record (module docstring)."""
        from strategies.schedules.zb_auto_costs import job_times
        return self.with_times(job_times(job))

    def result(self, pp: int, m: int) -> AutoResult:
        return auto_schedule(pp, m, self.times, self.limit(pp))

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """The heuristic's order of pipeline rank ``stage``; ``group_size`` is ignored."""
        check_common(stage, pp, m)
        raise_first(Schedule.shape_rules(self, pp, vpp, None))     # one chunk per rank
        return list(self.result(pp, m).orders[stage])

    def _unit(self, pp: int, m: int, f_share: float, w_share: float) -> AutoResult:
        """The heuristic with free communication, per-stage times summing to 1."""
        b = max(0.0, 1.0 - f_share - w_share)
        t = AutoTimes(f_share, b, w_share, 0.0, self.times.w_mem)
        return auto_schedule(int(pp), int(m), t, self.limit(int(pp)))

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """The heuristic's longest rank span (``AutoResult.span``) with free communication,
        ``T_F = T_B`` and ``W``'s share ``w_share``, over the ideal ``m·(T_F + T_B + T_W)``,
        less 1: the idle of an iteration under post-validation."""
        pp, m, w = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (pp, m, w_share)))
        out = np.zeros(pp.shape)
        for idx in np.ndindex(pp.shape):
            f = (1.0 - w[idx]) / 2
            # never below 0 (a span covers its work); rounding of the shares can give -1e-16
            out[idx] = max(0.0, self._unit(pp[idx], m[idx], f, float(w[idx])).span / m[idx] - 1)
        return out if out.shape else float(out)

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """One iteration's makespan, as the simulator runs it: ``m·t_max + (t_sum - t_max)·x``
        with ``x`` the heuristic's idle per filling stage (its free-communication makespan for
        unit stage time, ``AutoResult.makespan``, less ``m``, over ``pp - 1``); exact for
        balanced stages."""
        arrs = np.broadcast_arrays(*(np.asarray(a, dtype=float)
                                     for a in (m, t_max, t_sum, w_share, f_share, pp)))
        mm, tmax, tsum, w, f, p = arrs
        out = np.zeros(mm.shape)
        for idx in np.ndindex(mm.shape):
            if p[idx] <= 1:
                out[idx] = mm[idx] * tmax[idx]
                continue
            unit = self._unit(p[idx], mm[idx], float(f[idx]), float(w[idx]))
            x = (unit.makespan - mm[idx]) / (p[idx] - 1)
            out[idx] = mm[idx] * tmax[idx] + (tsum[idx] - tmax[idx]) * x
        return out if out.shape else float(out)

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        k = self.limit_factor
        return [], [f"Megatron-LM has no ZB-{k}p schedule; Sea AI Lab's fork "
                    "(sail-sg/zero-bubble-pipeline-parallelism) runs this heuristic with "
                    f"--enable-zero-bubble --zero-bubble-max-pending-backward {k * job.plan.pp} "
                    "--enable-optimizer-post-validation; it will run 1F1B"]

    def deepspeed_refusal(self, job: Any) -> str | None:
        return f"DeepSpeed's pipeline engine runs 1F1B, not ZB-{self.limit_factor}p"


@register("zb-1p")
class ZB1P(ZBAuto):
    """ZB-1p: the heuristic under 1F1B's activation memory ``p·M_B``."""

    text_patterns = (r"\bzb-?1p\b",)
    aliases = ("zb-auto-1x",)
    limit_factor = 1


@register("zb-2p")
class ZB2P(ZBAuto):
    """ZB-2p: the heuristic under twice 1F1B's activation memory, ``2p·M_B``."""

    text_patterns = (r"\bzb-?2p\b",)
    aliases = ("zb-auto", "zb-auto-2x")
    limit_factor = 2
