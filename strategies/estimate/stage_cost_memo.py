"""``StageCostMemo``: one job's stage-cost records, each GPU type's once per estimate."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from strategies.job import Job

T = TypeVar("T")


class StageCostMemo:
    """``cost.stage.stage_costs(job, gpu)`` of one job, computed once per GPU type and kept
    for the rest of one estimate (the rank fields, the per-stage and per-chunk makespans and
    the all-to-all shift all read it, a pipelined estimate once per stage and GPU before).
    ``stage_costs`` is a pure function of the job and the GPU, so the answer is the same
    object, bit for bit, as a fresh call's. Keyed by the GPU object (``gpu=None``: the
    cluster's slowest, as ``stage_costs``); the memo holds the GPU so its id stays its own."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._by_gpu: dict[int, tuple[Any, Any]] = {}
        self._kept: dict[str, Any] = {}

    def __call__(self, gpu: Any = None) -> Any:
        """The stage-cost record of the memo's job on ``gpu`` (default the cluster's slowest)."""
        gpu = self.job.cluster.gpu if gpu is None else gpu
        hit = self._by_gpu.get(id(gpu))
        if hit is None:
            from strategies.cost.stage import stage_costs
            hit = self._by_gpu[id(gpu)] = (gpu, stage_costs(self.job, gpu))
        return hit[1]

    def keep(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, computed on the first call under ``key`` and the same object after, for
        the rest of one estimate: ``make`` must be a pure function of the memo's job (and of
        this memo's records), so a kept answer is a fresh call's, bit for bit (e.g. the real
        stages' replay, ``stage_correction.real_replay``)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]
