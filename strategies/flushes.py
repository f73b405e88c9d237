"""Pipeline flushes per optimizer step (plan ``flushes``): the one rule the estimate and the
simulator read.

A stack built on ``torch.distributed.pipelining`` runs its pipeline schedule once per *local
batch*, not once per global batch: NeMo AutoModel (89e3a9fdd, ``recipes/llm/train_ft.py``
``_run_train_optim_step`` and ``recipes/llm/benchmark.py`` ``run_benchmark``) calls
``schedule.step()`` once per gradient-accumulation step, ``ga = gbs / (local_batch_size ·
dp)`` times per optimizer step, each over ``local_batch_size / pp_microbatch_size``
micro-batches. Each call fills and drains the pipeline, and ends with the schedule's
``REDUCE_GRAD`` action (``PipelineStage.perform_reduce_grad``: FSDP2's post-backward, the
stage's gradient reduce-scatter and the parameters' reshard, so the next call gathers them
again); the optimizer runs once after the last. So a step of ``k`` flushes of ``m``
micro-batches each is ``k`` times one flush less its optimizer, plus one optimizer:

    T(k) = k · (T_1 − t_opt) + t_opt

(1F1B: the bubble is ``k · (p − 1) · (t_f + t_b)``, not ``(p − 1) · (t_f + t_b)``). One flush
is the job with ``gbs / k`` (``flush_job``); every part of its breakdown but the optimizer
repeats (``ONCE_PER_STEP``). docs/calibration.md §5.43.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

if TYPE_CHECKING:
    from strategies.job import Job

#: breakdown parts that run once per optimizer step, whatever the flushes
ONCE_PER_STEP = ("optimizer",)


#: the per-step figures of an estimate's arrays that ``flushed_arrays`` composes besides the
#: breakdown (``scalar.BREAKDOWN_KEYS``): the step, and those that scale with ``k·T_1/T``
RATE_KEYS = ("tokens_per_s", "mfu", "hfu", "bubble_fraction")


def flush_rules(pp: Any, m: Any, k: Any, grouped: Any = False) -> list:
    """The rules on ``flushes`` ``k`` of plans with ``pp`` pipeline ranks and ``m``
    micro-batches per pipeline and step (``gbs/(mbs·dp)``), as ``(field, value, ok, why)``
    (``schedules.validity.Rule``; scalars or arrays): the one rule ``make_job`` raises and the
    search's mask applies. ``grouped``: the plan gives ``group_microbatches``."""
    ka, pp, ma = np.asarray(k), np.asarray(pp), np.asarray(m)
    one = ka == 1
    return [("flushes", k, one | (pp > 1),
             lambda: "needs pipeline parallelism (pp > 1): without it the local batches are "
                     "plain gradient accumulation (flushes=1)"),
            ("flushes", k, one | ~np.asarray(grouped, bool),
             lambda: "is not combined with group_microbatches"),
            ("flushes", k, one | (ma % np.maximum(ka, 1) == 0),
             lambda: f"must divide the {m} micro-batches per pipeline (gbs/(mbs*dp))")]


def flushed_arrays(one: Mapping[str, Any], k: Any, breakdown: tuple[str, ...]
                   ) -> dict[str, Any]:
    """An estimate's arrays (``analytic.estimate_arrays``) of plans of ``k`` flushes (an array
    or a number) from those of one flush, as ``estimate.scalar`` composes one plan: the step
    ``flushed_step_s``, the ``breakdown`` keys ``flushed_breakdown``'s way, ``RATE_KEYS``
    times ``k·T_1/T`` (``bubble_fraction`` the flushed bubble over the flushed step,
    ``bubble_share``: the same value without the rescaling's rounding), ``num_microbatches``
    ``k`` times; every other entry (per-layer and per-message seconds, the stage-cost
    record) one flush's. Where ``k`` is 1 the figures
    are one flush's bit for bit."""
    k = np.asarray(k, dtype=float)
    t1 = np.asarray(one["step_time_s"], dtype=float)
    opt = np.asarray(one["optimizer"], dtype=float)
    step = np.where(k == 1, t1, flushed_step_s(t1, opt, k))
    scale = k * t1 / np.where(step > 0, step, 1.0)
    out = dict(one)
    for key in breakdown:
        if key not in ONCE_PER_STEP:
            out[key] = np.where(k == 1, one[key], k * np.asarray(one[key], dtype=float))
    for key in RATE_KEYS:
        out[key] = np.where(k == 1, one[key], np.asarray(one[key], dtype=float) * scale)
    if "bubble" in breakdown and "bubble_fraction" in one:    # the one rule, not a rescaling
        from strategies.estimate.terms.stages import bubble_share
        out["bubble_fraction"] = np.where(k == 1, one["bubble_fraction"],
                                          bubble_share(out["bubble"], step))
    out["step_time_s"] = step
    if "num_microbatches" in one:
        out["num_microbatches"] = np.where(k == 1, one["num_microbatches"],
                                           k * np.asarray(one["num_microbatches"]))
    return out


def flush_job(job: Job) -> Job:
    """The job of one of ``job``'s flushes: ``gbs / flushes`` sequences, one flush."""
    p = job.plan
    if p.flushes == 1:
        return job
    return replace(job, plan=replace(p, gbs=p.gbs // p.flushes, flushes=1))


def flushed_breakdown(breakdown: Mapping[str, float], k: int) -> dict[str, float]:
    """A step's breakdown (seconds) from one flush's: every part ``k`` times but those in
    ``ONCE_PER_STEP``."""
    return {key: float(v) if key in ONCE_PER_STEP else k * float(v)
            for key, v in breakdown.items()}


def flushed_step_s(step_s: float, once_s: float, k: int) -> float:
    """``T(k) = k·(T_1 − t_once) + t_once`` seconds: ``k`` flushes of one flush's ``step_s``
    seconds, of which ``once_s`` (the optimizer) run once per step."""
    return k * (step_s - once_s) + once_s
