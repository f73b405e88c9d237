"""Long pipelines simulated on fewer micro-batches and extended exactly (affine extension).

With ``m`` micro-batches per pipeline and ``g`` the schedule's period (``pp``, or the
interleaved micro-batch group size), a 1F1B or interleaved step is warm-up + ``m/g``
identical steady-state periods + cool-down and tail, so every additive figure of the step
(its seconds, each part of the breakdown, exposed and overlapped communication, each stage's
bubble seconds, the event count) is affine in ``m`` for ``m >= g``::

    y(m) = y(2g) + (m - 2g) / g * (y(2g) - y(g))

The step time is affine from ``m = g`` on. How it splits into parts is affine from
``m = base·g`` on, ``base`` being the schedule's ``figures_affine_from``: an interleaved step with
``m = g`` is all warm-up and cool-down (no steady state), which puts its step time on the
line but not its breakdown, so those figures are extended from ``2g`` and ``3g``.

GPipe queues every forward first (no steady state) and is never extended; nor is an
interleaved job whose ranks hold unequal layer counts (``uneven_chunks``: first/last-stage
counts, a layout string, ``layers_per_stage``): its ranks drift apart for many periods
before they settle (Qwen3-30B-A3B, ``tp=1,pp=2,dp=16,ep=8,mbs=1,interleaved,vpp=2,first 26,
last 22`` on 4 DGX H100: each micro-batch adds 0.15493 s up to ``m = 28``, 0.15665 s after,
so the extension from 4 and 6 gave 15.065 s where the full 96 give 15.181 s; without ep
21.567 against 22.775 s). The embedding and loss as layer slots keep equal slots a chunk
and are extended (Qwen3-235B-A22B's
``tp=2,pp=8,dp=8,ep=8,etp=1,interleaved,vpp=4,slots+E+L`` on 16 DGX H100: to 1e-13 of the
full run). Nor is a job whose ``m`` is not a multiple of ``g``, nor one where the two short
runs would simulate more than ``1/SAVING`` of its micro-batches: ``m < SAVING · (2·base + 1) · g``.
A run's cost is a fixed part (building the programs and the network, warm-up, cool-down, the optimizer)
plus a part per micro-batch, and two short runs pay the fixed part twice: measured on the
GPT-3 175B search's plans (CPU seconds, ``docs/simulator.md``), an interleaved pipeline
with ``m = 6g`` costs more extended than in full, one with ``m = 12g`` half as much.
Ratios (the bubble fraction) are derived from extended seconds, never extended themselves.
``tests/test_extend.py`` checks every figure against the full simulation.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from simulator.metrics import stage_bubbles
from strategies.estimate.terms.stages import bubble_share
from strategies.job import Job, make_job
from strategies.schedules import get_schedule

#: Extend only when the two short runs hold at most 1/SAVING of the micro-batches.
SAVING = 2


def period(job: Job) -> int:
    """Micro-batches per steady-state period of the job's schedule (``g``,
    ``Schedule.period``)."""
    p = job.plan
    return get_schedule(p.schedule).period(p.pp, p.microbatch_group_size)


def base(job: Job, figures: bool = True) -> int | None:
    """The short runs are ``base·g`` and ``(base+1)·g`` micro-batches: 1 for the step time
    alone (``figures=False``), the schedule's ``figures_affine_from`` for every figure (None:
    not known for this schedule; a schedule with a steady state but no such figure has its
    step time extended (validate) and its figures simulated in full (search))."""
    return get_schedule(job.plan.schedule).figures_affine_from if figures else 1


def uneven_chunks(job: Job) -> bool:
    """Whether ``job`` interleaves chunks (vpp > 1) whose layer counts differ from rank to
    rank (first/last-stage counts, a layout string, ``layers_per_stage``)."""
    p = job.plan
    return p.vpp > 1 and (p.first_stage_layers is not None or p.last_stage_layers is not None
                          or p.layout is not None or p.layers_per_stage is not None)


def can_extend(job: Job, figures: bool = True) -> bool:
    """Whether ``job``'s step may be simulated on two short runs and extended (not with
    several pipeline flushes: ``simulate`` runs one flush and composes the step,
    ``strategies.flushes``)."""
    m, g, b = job.num_microbatches, period(job), base(job, figures)
    return (job.plan.pp > 1 and job.plan.group_microbatches is None and job.plan.flushes == 1
            and get_schedule(job.plan.schedule).steady_state and not uneven_chunks(job)
            and b is not None and m % g == 0 and m >= SAVING * (2 * b + 1) * g)


def with_microbatches(job: Job, m: int) -> Job:
    """``job`` with ``m`` micro-batches per pipeline (the global batch changed to match)."""
    p = job.plan
    return make_job(job.model, job.cluster, replace(p, gbs=m * p.mbs * p.dp), dtype=job.dtype,
                    framework=job.named_framework, system=job.system)


def affine(y_a, y_b, m: int, g: int, b: int = 1):
    """``y(m)`` from ``y(b·g)`` and ``y((b+1)·g)`` (scalars or numpy arrays alike)."""
    return y_b + (m - (b + 1) * g) / g * (y_b - y_a)


def how(job: Job, figures: bool = True) -> str:
    """How the step of ``job`` is simulated, in words."""
    if not can_extend(job, figures):
        return "full"
    g, b = period(job), base(job, figures)
    return f"extended from m={b * g} and m={(b + 1) * g} (of {job.num_microbatches})"


def extended_step_time(job: Job, exact: bool = False) -> tuple[float, str]:
    """Simulated seconds per step and how they were obtained (``how``): from ``g`` and
    ``2g`` micro-batches when ``can_extend(job, figures=False)`` and not ``exact``. Each run
    derives the step figures alone (``figures_only``: the same step time, bit for bit,
    without the activation memory and link metrics nothing here reads)."""
    from simulator.simulate import simulate
    if exact or not can_extend(job, figures=False):
        return simulate(job, figures_only=True).step_time_s, "full"
    m, g = job.num_microbatches, period(job)
    t1 = simulate(with_microbatches(job, g), figures_only=True).step_time_s
    t2 = simulate(with_microbatches(job, 2 * g), figures_only=True).step_time_s
    return affine(t1, t2, m, g), how(job, figures=False)


def step_figures(res) -> dict[str, Any]:
    """The additive figures of one ``SimResult`` (seconds, events) and the bubble seconds of
    each stage; ``finish`` turns them into the reported figures."""
    m = res.metrics
    step = float(res.step_time_s)
    return {"step_time_s": step, "exposed_comm_s": float(m["exposed_comm_s"]),
            "overlapped_comm_s": float(m["overlapped_comm_s"]),
            "breakdown_s": {k: float(v) for k, v in m["breakdown_s"].items()},
            "bubble_s_by_stage": [f * step for f in m["bubble_fraction_by_stage"]],
            "events": float(res.events), "wall_s": float(res.wall_s)}


def extend_figures(a: dict[str, Any], b: dict[str, Any], m: int, g: int,
                   base: int = 1) -> dict[str, Any]:
    """``step_figures`` at ``m`` micro-batches from those at ``base·g`` (``a``) and
    ``(base+1)·g`` (``b``); ``wall_s`` is what the two runs took."""
    def ext(x, y):
        return affine(x, y, m, g, base)
    return {"step_time_s": ext(a["step_time_s"], b["step_time_s"]),
            "exposed_comm_s": ext(a["exposed_comm_s"], b["exposed_comm_s"]),
            "overlapped_comm_s": ext(a["overlapped_comm_s"], b["overlapped_comm_s"]),
            "breakdown_s": {k: ext(a["breakdown_s"][k], b["breakdown_s"][k])
                            for k in a["breakdown_s"]},
            "bubble_s_by_stage": ext(np.array(a["bubble_s_by_stage"]),
                                     np.array(b["bubble_s_by_stage"])).tolist(),
            "events": ext(a["events"], b["events"]),
            "wall_s": a["wall_s"] + b["wall_s"]}


def finish(fig: dict[str, Any], method: str) -> dict[str, Any]:
    """The figures the search reports (``simulator.search.executors.evaluate``)."""
    step = fig["step_time_s"]
    fractions = [float(bubble_share(s, step)) for s in fig["bubble_s_by_stage"]]
    return {"step_time_s": step, "bubble_fraction": stage_bubbles(fractions)["bubble_fraction"],
            "exposed_comm_s": fig["exposed_comm_s"],
            "overlapped_comm_s": fig["overlapped_comm_s"],
            "breakdown_s": dict(fig["breakdown_s"]), "events": int(round(fig["events"])),
            "wall_s": fig["wall_s"], "method": method}


def simulate_figures(job: Job, exact: bool = False) -> dict[str, Any]:
    """The search's figures of ``job``: simulated on ``base·g`` and ``(base+1)·g``
    micro-batches and extended when ``can_extend`` (unless ``exact``), else in full."""
    from simulator.simulate import simulate
    if exact or not can_extend(job):
        return finish(step_figures(simulate(job, figures_only=True)), "full")
    m, g, b = job.num_microbatches, period(job), base(job)
    short = [step_figures(simulate(with_microbatches(job, k * g), figures_only=True))
             for k in (b, b + 1)]
    return finish(extend_figures(*short, m, g, b), how(job))
