"""SystemConfig: the policy constants live in one record that a study varies by passing it
(no module global is patched), and every consumer reads the one it is given."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.program.compiler import compile_job
from simulator.search.run import SearchConfig, run_search
from strategies.cost import tp_ends
from strategies.cost.stage import stage_costs
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.scalar import stage_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions
from topologies.cluster import cluster_preset


def job(plan: str, system=None, dtype="bf16"):
    return make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), parse_plan(plan),
                    global_batch=32, dtype=dtype, system=system)


def test_default_is_the_module_default():
    j = job("tp=2,pp=2")
    assert j.system is DEFAULT_SYSTEM and "system" not in j.to_dict()
    # no override: the default stack's (Megatron-Core's) rule at the plan's dp, 40M below dp 40
    assert DEFAULT_SYSTEM.bucket_params == 0.0
    assert stage_costs(j).bucket_params == DEFAULT_SYSTEM.dp_bucket_params(j.plan.dp) == 40e6


def test_hbm_efficiency_scales_every_memory_bound_time():
    """Halving the usable HBM bandwidth doubles the optimizer step (Adam is memory-bound:
    ``adam_step_bytes`` per parameter over the usable bandwidth) on every stage."""
    half = SystemConfig(hbm_efficiency=DEFAULT_SYSTEM.hbm_efficiency / 2)
    a, b = stage_costs(job("tp=2,pp=4,zero=1")), stage_costs(job("tp=2,pp=4,zero=1", half))
    for x, y in zip(a.optimizer_by_stage, b.optimizer_by_stage):
        assert y == pytest.approx(2 * x, rel=1e-15)
    # less the embedding's TP collective (§5.88: network time, no HBM pass in Megatron's)
    j = job("tp=2,pp=4,zero=1")
    end = float(tp_ends.tp_end_times(j.model, j.plan.mbs, 2, 1, j.plan.sp, j.cluster.gpu,
                                     j.cluster, j.framework)[0])
    assert end > 0
    assert b.embedding_fwd - end == pytest.approx(2 * (a.embedding_fwd - end), rel=1e-12)
    assert estimate(job("tp=2,pp=4,zero=1", half)).step_time_s > \
        estimate(job("tp=2,pp=4,zero=1")).step_time_s


def test_cp_fraction_reaches_the_compiled_program():
    sy = SystemConfig(cp_exposed_fraction=0.25)
    j = job("tp=2,cp=2,pp=2", sy)
    c = stage_costs(j)
    assert c.cp_exposed_fraction == 0.25
    prog = compile_job(j, ranks=[0])[0]
    cp = [op for op in prog.streams["cp-comm"] if op.microbatch == 0 and op.label == "CP F0.c0"]
    layers = 32 // 2                                      # one chunk of llama3-8b on 2 stages
    assert sorted(op.repeat for op in cp) == [layers * 0.25, layers * 0.75]   # tail, hidden
    assert estimate(j).breakdown_s["cp_comm"] >= estimate(job("tp=2,cp=2,pp=2")).breakdown_s["cp_comm"]


def test_memory_constants_come_from_the_system():
    sy = replace(DEFAULT_SYSTEM, fixed_other_bytes=0.0, fragmentation=0.0)
    mem = stage_memory(job("tp=2,pp=2", sy), 0)
    assert mem.other == 0.0
    heavy = SystemConfig(optimizer_state_bytes=24.0)
    a, b = stage_memory(job("tp=2,pp=2"), 0), stage_memory(job("tp=2,pp=2", heavy), 0)
    assert b.optimizer == pytest.approx(2 * a.optimizer, rel=1e-15)


def test_a_search_reads_its_system():
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    opts = SpaceOptions(max_mbs=1, fixed={"tp": 2, "pp": 2, "cp": 1, "schedule": "1f1b", "zero": 1,
                                         "recompute": "none", "sp": True})
    base = run_search(SearchConfig(model=m, cluster=cl, gbs=16, options=opts, k=1))
    slow = run_search(SearchConfig(model=m, cluster=cl, gbs=16, options=opts, k=1,
                                   system=SystemConfig(hbm_efficiency=0.2)))
    assert slow["plans"][0]["step_time_s"] > base["plans"][0]["step_time_s"]


@pytest.mark.parametrize("field,value", [("cp_exposed_fraction", 1.5), ("hbm_efficiency", 0.0),
                                         ("tp_overlap_chunks", 0), ("bucket_params", -1),
                                         ("param_bytes", "2")])
def test_bad_values_name_field_value_and_rule(field, value):
    with pytest.raises(SpecError) as e:
        SystemConfig(**{field: value})
    assert field in str(e.value) and str(value) in str(e.value)


def test_make_job_refuses_a_non_system():
    with pytest.raises(SpecError, match="system"):
        job("tp=2", system={"bucket_params": 1})
