"""``estimate(job)``: the analytic answer for one plan — step time, its breakdown, MFU, memory."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strategies.estimate.analytic import estimate_arrays
from strategies.job import Job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm",
                  "bubble", "optimizer")


def plan_arrays(plan: Plan) -> PlanArrays:
    """The estimator's ``PlanArrays`` of one resolved plan (0-d arrays)."""
    return PlanArrays.of_plan(plan)


@dataclass(frozen=True)
class Estimate:
    """The analytic estimate of one plan. Times in seconds, memory in bytes inside."""

    job: Job
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    bubble_fraction: float
    breakdown_s: dict[str, float]
    memory: Any = field(repr=False)           # MemoryBreakdown of the peak stage
    memory_by_stage: list = field(repr=False)
    num_microbatches: int = 0

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.job.cluster.min_hbm_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu, "hfu": self.hfu, "bubble_fraction": self.bubble_fraction,
            "memory": self.memory.to_gib_dict(),
            "memory_by_stage": [mb.to_gib_dict() for mb in self.memory_by_stage],
            "fits": self.fits, "breakdown_s": dict(self.breakdown_s),
            "num_microbatches": self.num_microbatches,
            "inputs": self.job.to_dict(),
        }


def estimate(job: Job) -> Estimate:
    """Analytic estimate of ``job`` (microseconds of work; see strategies.estimate.analytic)."""
    from strategies.memory.scalar import memory_by_stage
    arrays = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(job.plan),
                             job.framework, job.system)
    r = {k: float(v) for k, v in arrays.items() if k != "stage_costs"}   # the one plan
    stages = memory_by_stage(job)
    peak = max(stages, key=lambda x: x.total)
    return Estimate(job=job, step_time_s=r["step_time_s"], tokens_per_s=r["tokens_per_s"],
                    mfu=r["mfu"], hfu=r["hfu"], bubble_fraction=r["bubble_fraction"],
                    breakdown_s={k: r[k] for k in BREAKDOWN_KEYS}, memory=peak,
                    memory_by_stage=stages, num_microbatches=int(r["num_microbatches"]))
