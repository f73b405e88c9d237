"""Checks shared by the memory tests: the search's array model equals the scalar one."""
from __future__ import annotations

import pytest


def assert_arrays_match_scalar(job) -> None:
    """Every pipeline rank's peak from ``rank_memory_arrays``, given the stack's loss (its
    bytes at each tp) and FSDP2 state (what the search passes), is ``memory_by_stage``'s total
    for ``job`` (bytes, to 1e-9)."""
    from strategies.memory.arrays import rank_memory_arrays
    from strategies.memory.scalar import memory_by_stage
    from strategies.plan_arrays import PlanArrays
    P = PlanArrays.from_plans([job.plan])
    for r, want in enumerate(memory_by_stage(job)):
        got = rank_memory_arrays(job.model, P, r, job.dtype, job.system, job.cluster.gpu,
                                 loss_bytes=job.framework.loss,
                                 fsdp2=job.framework.fsdp2)[0]
        assert float(got) == pytest.approx(want.total, rel=1e-9), r
