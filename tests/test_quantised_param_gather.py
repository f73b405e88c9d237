"""Quantised weights all-gathered at their stored width (``SystemConfig.param_gather_bytes``,
docs/calibration.md §5.95): the gathered width per rank, the estimate and the simulator moving
together, and the reader's per-row facts (NeMo 25.02-25.07 and Megatron-Bridge rows)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import param_counts
from strategies.cost.stage import stage_costs
from strategies.cost.stage.rank_params import gather_width
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import reference_cases
from topologies.cluster import cluster_preset
from tests.tp_backward_checks import bound

FP8_AG = SystemConfig(param_gather_bytes=1.0)


def _job(spec: str, system: SystemConfig = DEFAULT_SYSTEM, layers: int = 4, nodes: int = 2):
    m = replace(model_preset("llama3-8b"), num_layers=layers)
    return make_job(m, cluster_preset("dgx-h100", nodes), parse_plan(spec), dtype="fp8",
                    system=system)


def test_gather_bytes_default_and_set():
    assert DEFAULT_SYSTEM.gather_bytes() == DEFAULT_SYSTEM.param_bytes == 2.0
    assert FP8_AG.gather_bytes() == 1.0


def test_width_is_exact_mean_of_fp8_weights_and_bf16_ends():
    p, e = 1.0e9, 2.5e8
    assert gather_width(p, e, FP8_AG) == pytest.approx((1.0 * (p - e) + 2.0 * e) / p,
                                                       rel=1e-15)
    assert gather_width(p, 0.0, FP8_AG) == 1.0
    # the default stays the parameter width itself, bit for bit
    assert gather_width(p, e, DEFAULT_SYSTEM) == 2.0


def test_stage_widths_read_the_embedding_and_head_ranks():
    job = _job("tp=1,pp=4,dp=4,mbs=1,gbs=16,zero=1,schedule=1f1b", FP8_AG, layers=8)
    c = stage_costs(job)
    m = job.model
    emb = float(param_counts.embedding_params_per_gpu(m, 1))
    head = float(param_counts.head_params_per_gpu(m, 1, 4, False))
    assert c.gather_by_stage[1] == c.gather_by_stage[2] == 1.0        # layers only
    p0, p3 = c.params_by_stage[0], c.params_by_stage[3]
    assert c.gather_by_stage[0] == pytest.approx((p0 + emb) / p0, rel=1e-12)
    assert c.gather_by_stage[3] == pytest.approx((p3 + head) / p3, rel=1e-12)
    assert stage_costs(replace(job, system=DEFAULT_SYSTEM)).gather_by_stage == (2.0,) * 4


def test_estimate_and_simulation_move_together():
    """ZeRO-1 over two nodes without overlapped gathers: the gather after the optimizer is
    exposed in both, so halving the weights' bytes saves the same seconds (to 1e-9)."""
    spec = "tp=1,pp=1,dp=16,mbs=1,gbs=16,zero=1,overlap_param_gather=false"
    on, off = _job(spec, FP8_AG), _job(spec)
    e = estimate(off).step_time_s - estimate(on).step_time_s
    s_on = simulate(on, network="contention-free").step_time_s
    s = simulate(off, network="contention-free").step_time_s - s_on
    assert e > 0 and s == pytest.approx(e, rel=1e-9)
    assert bound(on) <= s_on * (1 + 1e-9)


def test_zero3_gathers_are_not_narrowed():
    spec = "tp=1,pp=1,dp=16,mbs=1,gbs=16,zero=3"
    assert estimate(_job(spec, FP8_AG)).step_time_s == estimate(_job(spec)).step_time_s


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in reference_cases() if c.job is not None}


@pytest.mark.parametrize("rid, gather, grad", [
    ("nemo2502_nemotron340b_b200_128", 1.0, 2.0),      # NeMo 25.02, delayed scaling
    ("nemo2504_gpt3175b_gb200_128", 1.0, 2.0),         # NeMo 25.04, current scaling
    ("nemo2507_llama31405b_gb200_128", 0.0, 2.0),      # Megatron FSDP: no FP8 gather
    ("mbridge260401_llama31405b_gb200_256_fp8", 1.0, 2.0),
    ("mbridge260401_llama31405b_gb200_256_mxfp8", 0.0, 2.0),   # gathered in bf16
    ("mbridge260401_llama31405b_gb200_256_nvfp4", 0.5, 2.0),   # packed two per byte
    ("dgxc2505_llama31_405b_gb200_128_fp8", 1.0, 2.0),         # dgxc v25.05.05: NeMo 25.04
    ("dgxc2504_nemotron_340b_h100_256_fp8", 1.0, 2.0),         # dgxc v25.04.02: d2b21556
    ("dgxc2504_grok1_314b_proxy_h100_32_fp8", 0.0, 4.0),       # NeMo 1, fp8_params false
    ("dgxc2505_llama31_405b_gb200_128_bf16", 0.0, 4.0),        # bf16: the stack default
])
def test_reader_facts(cases, rid, gather, grad):
    sy = cases[rid].job.system
    assert sy.param_gather_bytes == gather
    assert sy.main_grad_bytes(cases[rid].job.dtype) == grad


def test_stated_fp8_param_gather_rules():
    """A row's ``plan.fp8_param_gather`` (or NeMo's ``fp8_params``) is read before its
    table's rule: true keeps one byte per weight under per-tensor FP8 only (MXFP8 or bf16:
    not applied, said so), false turns the table's rule off, a non-boolean is refused."""
    from strategies.errors import SpecError
    from strategies.reference.stated_switches import stated_param_gather
    notes: list[str] = []
    on = {"plan": {"fp8_param_gather": True}}
    assert stated_param_gather(on, "fp8", notes)[0] == 1.0
    assert stated_param_gather({"plan": {"fp8_params": True}}, "fp8-current", notes)[0] == 1.0
    assert stated_param_gather({"plan": {}}, "fp8", notes) is None      # no table rule either
    assert notes == []
    assert stated_param_gather(on, "mxfp8", notes) is None and "not modelled" in notes[-1]
    assert stated_param_gather(on, "bf16", notes) is None
    # a NeMo 25.02 performance row, whose table's rule is on: a stated false wins
    from strategies.reference.cases import load_reference
    nemo = next(r for r in load_reference("strategies/reference/data/nemo_performance_25.json")
                if r["id"] == "nemo2502_gpt3175b_h100_512")
    assert stated_param_gather(nemo, "fp8", notes)[0] == 1.0
    off = {**nemo, "plan": {**nemo["plan"], "fp8_param_gather": False}}
    assert stated_param_gather(off, "fp8", notes) is None
    with pytest.raises(SpecError) as e:
        stated_param_gather({"plan": {"fp8_param_gather": "yes"}}, "fp8", notes)
    assert e.value.field == "plan.fp8_param_gather"
