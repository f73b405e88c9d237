"""Checks shared by the memory tests: the search's array model equals the scalar one, and
the search's memory prune equals the scalar peak."""
from __future__ import annotations

import math

import pytest

from strategies.job import Job, make_job
from strategies.memory import activations as act
from strategies.memory.arrays import peak_memory_arrays, rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, peak_memory
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from topologies.cluster import Cluster


def assert_arrays_match_scalar(job) -> None:
    """Every pipeline rank's peak from ``rank_memory_arrays``, given the stack's loss (its
    bytes at each tp) and FSDP2 state (what the search passes), is ``memory_by_stage``'s total
    for ``job`` (bytes, to 1e-9)."""
    P = PlanArrays.from_plans([job.plan])
    for r, want in enumerate(memory_by_stage(job)):
        got = rank_memory_arrays(job.model, P, r, job.dtype, job.system, job.cluster.gpu,
                                 loss_bytes=job.framework.loss,
                                 fsdp2=job.framework.fsdp2)[0]
        assert float(got) == pytest.approx(want.total, rel=1e-9), r


def assert_arrays_equal_scalar(job: Job, expert_input: float) -> None:
    """``rank_memory_arrays`` on every rank and ``peak_memory_arrays`` given
    ``expert_input`` equal ``memory_by_stage`` of ``job`` (1e-12); the same job in bf16,
    arrays without it, equal its own and stash more activations on every rank."""
    ref = make_job(job.model, job.cluster, job.plan, dtype="bf16", framework=job.framework)
    P = PlanArrays.from_plans([job.plan])
    kw = dict(loss_bytes=job.framework.loss, dispatch_bytes=act.job_dispatch_bytes(job))
    got_stages, ref_stages = memory_by_stage(job), memory_by_stage(ref)
    for s in range(job.plan.pp):
        got = float(rank_memory_arrays(job.model, P, s, job.dtype, job.system,
                                       job.cluster.gpu, expert_input=expert_input,
                                       te_inputs=act.job_te_linear_bytes(job), **kw)[0])
        assert got == pytest.approx(got_stages[s].total, rel=1e-12), s
        off = float(rank_memory_arrays(ref.model, P, s, ref.dtype, ref.system,
                                       ref.cluster.gpu, **kw)[0])
        assert off == pytest.approx(ref_stages[s].total, rel=1e-12), s
        assert got_stages[s].activations < ref_stages[s].activations
    peak = float(peak_memory_arrays(job.model, P, job.dtype, job.system, job.cluster.gpu,
                                    expert_input=expert_input,
                                    te_inputs=act.job_te_linear_bytes(job), **kw)[0])
    assert peak == pytest.approx(max(x.total for x in got_stages), rel=1e-12)


def assert_search_equals_scalar(model: ModelSpec, cluster: Cluster, dtype: str,
                                expert_input: float, framework=None) -> None:
    """The search's memory prune (``framework``, default Megatron-Core; ``dtype``) equals
    ``peak_memory`` of at least 10 sampled plans' jobs (1e-12), each priced at
    ``expert_input``."""
    from strategies.search.space import SpaceOptions, enumerate_space
    sp = enumerate_space(model, cluster, 16, SpaceOptions(memory_limit_bytes=math.inf,
                                                         max_bubble=1e9),
                         framework=framework, dtype=dtype)
    assert sp.size > 0
    checked = 0
    for i in range(0, sp.size, max(1, sp.size // 25)):
        job = make_job(model, cluster, sp.plan(i), dtype=dtype, framework=framework)
        assert act.job_expert_input_bytes(job) == expert_input
        assert sp.peak_memory[i] == pytest.approx(peak_memory(job)[1].total, rel=1e-12)
        checked += 1
    assert checked >= 10
