"""One source for two readers, bit for bit:

- the memory model's stack terms (``memory.stack_terms.StackMemory``) are the scalar model's
  and the search's alike (``job_stack_memory``, ``search.space_memory``);
- the real stages' free-communication replay (``stage_correction.real_replay``) is done once
  per estimate and read by ``per_stage`` and ``stage_slack``.
"""
from __future__ import annotations

import inspect

import pytest

import strategies.estimate.stage_correction as sc
from strategies.cost.system import SystemConfig
from strategies.estimate.scalar import estimate
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.framework import PROFILES
from strategies.job import make_job
from strategies.memory.arrays import memory_component_arrays, peak_memory_arrays
from strategies.memory.scalar import memory_by_stage
from strategies.memory.stack_terms import StackMemory, job_stack_memory, stack_memory
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.space_memory import space_memory
from strategies.stacks.profile import stack_system
from topologies.cluster import cluster_preset

H100 = cluster_preset("dgx-h100", 2)


def test_stack_terms_are_the_keywords_of_both_memory_entry_points():
    """Every field of ``StackMemory`` is a keyword of ``memory_component_arrays`` and of
    ``peak_memory_arrays`` (a field the arrays do not take would raise, one they take and the
    terms omit would silently stay at its default)."""
    names = {f for f in StackMemory.__dataclass_fields__}
    for fn in (memory_component_arrays, peak_memory_arrays):
        params = set(inspect.signature(fn).parameters)
        assert names <= params, names - params
    stack_like = {"clamp", "remat_named", "loss_bytes", "act_cache", "optimizer_bytes", "fsdp2",
                  "dispatch_bytes", "expert_input", "te_inputs", "mixer_d_inner", "cp_impl"}
    assert stack_like | {"system"} == names


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_the_search_and_the_scalar_model_read_one_stack_terms(name, dtype):
    """The search's rule (``space_memory``) holds the very terms the scalar model reads for a
    job of that stack (``job_stack_memory``); the stack's system is set once whether the
    caller passes the raw system or one the stack already set (``stack_system`` is
    idempotent), and is the one ``stack_system`` gives."""
    fw = PROFILES[name]
    gpu = H100.gpu
    raw = SystemConfig(bucket_params=0.0)
    terms = stack_memory(fw, dtype, bool(gpu.fp8_tn_only), raw)
    assert terms.system == stack_system(fw, raw)
    assert stack_memory(fw, dtype, bool(gpu.fp8_tn_only), stack_system(fw, raw)) == terms
    assert space_memory(model_preset("llama3-8b"), gpu, dtype, fw, raw).stack == terms


def test_job_terms_price_the_scalar_memory_as_the_search_does():
    """A MoE plan under NeMo in fp8 (dispatch, expert inputs, TE inputs all non-default): the
    search's peak over the job's plan equals the scalar model's peak stage, and the job's terms
    are the search's."""
    m = model_preset("mixtral-8x7b")
    job = make_job(m, H100, parse_plan("tp=2,pp=2,ep=4,mbs=1,gbs=64,recompute=selective"),
                   dtype="fp8", framework="nemo")
    rule = space_memory(m, H100.gpu, "fp8", job.framework, job.system)
    assert rule.stack == job_stack_memory(job)
    got = float(rule.peak(PlanArrays.from_plans([job.plan]))[0])
    assert got == pytest.approx(max(s.total for s in memory_by_stage(job)), rel=1e-12)
    # the terms matter here: without them (the 16-bit defaults) the peak differs
    bare = float(peak_memory_arrays(m, PlanArrays.from_plans([job.plan]), "fp8",
                                    job_stack_memory(job).system, H100.gpu)[0])
    assert bare != got


def _zb_uneven():
    return make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                    parse_plan("tp=2,pp=4,mbs=1,gbs=64,schedule=zb-h1,"
                               "layers_per_stage=6/10/10/6"))


def test_real_replay_is_kept_per_estimate_and_is_a_fresh_ones():
    job = _zb_uneven()
    costs = StageCostMemo(job)
    kept = sc.real_replay(job, costs)
    assert sc.real_replay(job, costs) is kept           # once per memo
    times, ranks = kept
    assert times == sc.stage_times(job, None)           # the real stages' seconds
    fresh = sc.real_replay(job)                          # another estimate's: equal numbers
    assert [x.end.hex() for x in fresh[1]] == [x.end.hex() for x in ranks]
    assert sc.stage_slack(job, costs) == sc.stage_slack(job)
    ends = [x.end for x in ranks]
    s0, _, s3 = sc.stage_slack(job, costs)
    assert (s0, s3) == (max(ends) - ends[0], max(ends) - ends[3])
    assert min(s0, s3) >= 0.0 and max(ends) > min(ends)


def test_estimate_replays_the_real_stages_once(monkeypatch):
    """A ZB-H1 plan on uneven stages reads the real replay twice (``per_stage``'s makespan,
    ``stage_slack``'s barrier tails, §5.203): the schedule is replayed once for the real
    stages and once for the even ones, and the estimate is the one replaying three times gave
    (its JSON, bit for bit, against a run whose memo keeps nothing)."""
    job = _zb_uneven()
    want = estimate(job).to_json()
    calls = []
    real = sc._free_ranks

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(sc, "_free_ranks", counted)
    assert estimate(job).to_json() == want
    assert len(calls) == 2                               # the even and the real stages
    monkeypatch.setattr(StageCostMemo, "keep", lambda self, key, make: make())
    calls.clear()
    assert estimate(job).to_json() == want              # nothing kept: the same figures
    assert len(calls) == 3
