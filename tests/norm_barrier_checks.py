"""The gradient norm's barrier of a job as the estimate adds it (docs/calibration.md §5.202):
for the suite's closed forms of ``dp_comm`` and the step, which hold with the switch on
(``StepPasses.norm_barrier``, the default) or off."""
from __future__ import annotations

from dataclasses import replace

from strategies.cost.norm_barrier import barrier_on, barrier_time
from strategies.job import Job


def barrier_s(job: Job) -> float:
    """Seconds of the norm's all-reduce the job's step waits for (``norm_barrier.barrier_time``
    over the job's grad-stats group; 0 where its stack does not clip or the switch is off)."""
    p = job.plan
    dp = p.dp or job.cluster.num_gpus // (p.tp * p.pp * p.cp)
    return float(barrier_time(barrier_on(job.framework.step), p.tp, p.pp, p.cp, dp, p.zero,
                              job.cluster))


def without_barrier(job: Job) -> Job:
    """The job with its stack's norm barrier switched off (``StepPasses.norm_barrier``), for
    a test that isolates another mechanism and says why."""
    fw = job.framework
    return replace(job, framework=replace(fw, step=replace(fw.step, norm_barrier=False)))
