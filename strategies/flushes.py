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
from typing import Mapping

from strategies.job import Job

#: breakdown parts that run once per optimizer step, whatever the flushes
ONCE_PER_STEP = ("optimizer",)


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
