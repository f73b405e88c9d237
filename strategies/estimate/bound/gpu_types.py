"""The GPU types a cluster holds, for the lower bound: the stage-cost record on each
(``TypeRecords``), and the least of a figure over them (``fastest_of_each``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from strategies.cost.stage import StageCostArrays, stage_cost_arrays
from strategies.cost.system import SystemConfig
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster
from topologies.gpus import GPU


def gpu_types(cl: Cluster) -> list[GPU]:
    """Each GPU type ``cl`` holds, once (in node-group order; a uniform cluster: its one)."""
    return [cl.gpu] if cl.uniform else list({repr(g.gpu): g.gpu for g in cl.groups}.values())


def fastest_of_each(per_type: list) -> np.ndarray:
    """The least, plan by plan, of one figure (seconds) computed on each GPU type a mixed
    cluster holds: every op of a step runs on one of them, so the sum of these minima over
    the ops bounds any rank's chain from below. Not one type for all: the type of the highest
    peak (``Cluster.fastest_gpu``) can be the slower on small kernels, whose time is set by a
    GEMM's fixed time (``cost.gemm_kernel.gemm_fixed_s``: none on A100, 4.7 us on H100) or the
    launch gap rather than the peak (docs/calibration.md §5.39). One type: its figure."""
    out = per_type[0]
    for x in per_type[1:]:
        out = np.minimum(out, x)
    return out


@dataclass(frozen=True, eq=False)
class TypeRecords:
    """The plans' stage-cost record (``strategies.cost.stage.stage_cost_arrays``: seconds
    and bytes) on each GPU type present, each computed once: ``records(gpu)``. ``cluster``:
    the links every record assumes (the bound's: the fastest view of a mixed cluster);
    ``types``: the GPU types present (``gpu_types`` of the real cluster)."""

    model: ModelSpec
    cluster: Cluster
    dtype: str
    plans: PlanArrays
    framework: FrameworkProfile | str | None
    system: SystemConfig
    types: list[GPU]
    cache: dict[str, StageCostArrays] = field(default_factory=dict)

    def __call__(self, gpu: GPU) -> StageCostArrays:
        if repr(gpu) not in self.cache:
            self.cache[repr(gpu)] = stage_cost_arrays(self.model, self.cluster, self.dtype,
                                                      self.plans, self.framework, self.system,
                                                      gpu=gpu)
        return self.cache[repr(gpu)]
