"""What Transformer Engine's ``GroupedLinear`` saves for the backward under the per-tensor fp8
recipes (delayed and current scaling; ``activations.expert_input_bytes``; docs/calibration.md
§5.103, extension memfp8): fc1's and fc2's inputs as one 1-byte ``Float8Tensor`` copy each
(the transpose on Hopper, the data on Blackwell), the GLU's input in bf16. Closed forms to
floating-point precision, the array model and the search equal to the scalar one, the
simulator's activation track reading the same rule, bf16 and fp8-blockwise unchanged."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.cost import token_counts
from strategies.stacks.variants import with_fused_grouped_mlp
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.stacks.megatron import MEGATRON_CORE
from tests.memory_checks import assert_arrays_equal_scalar, assert_search_equals_scalar
from topologies.cluster import cluster_preset

QWEN = model_preset("qwen3-30b-a3b")
PER_TENSOR = ("fp8", "fp8-delayed", "fp8-current")
CLUSTERS = ("dgx-h100", "dgx-b200")      # Hopper keeps the transpose, Blackwell the data


def _job(dtype, cluster="dgx-h100", pp=1, imbalance=None, **kw):
    """Qwen3-30B-A3B on 8 GPUs (every layer MoE), Megatron-Core's unfused TE path."""
    plan = Plan(pp=pp, ep=8 // pp, mbs=1, gbs=16, moe_imbalance=imbalance, **kw)
    # TE's dense modules' saved copies (§5.113) apart: the expert rule alone
    fw = dataclasses.replace(MEGATRON_CORE, te_linears=False)
    return make_job(QWEN, cluster_preset(cluster, 1), plan, dtype=dtype, framework=fw)


def _load(job):
    p = job.plan
    return token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, job.model, p.mbs, p.tp,
                           p.cp, p.expert_tp)


@pytest.mark.parametrize("dtype", PER_TENSOR)
def test_one_byte_per_element_where_te_runs_the_experts(dtype):
    """1 B per element (the per-tensor fp32 scale neglected) on TE's expert path only;
    bf16 and fp8-blockwise (not read) keep the 16-bit table."""
    assert act.expert_input_bytes(True, dtype) == 1.0
    assert act.expert_input_bytes(False, dtype) is None
    for other in ("bf16", "fp16", "fp8-blockwise"):
        assert act.expert_input_bytes(True, other) is None
    assert act.job_expert_input_bytes(_job(dtype)) == 1.0


def test_bytes_per_routed_token_closed_form():
    """Qwen3-30B-A3B (h 2048, F_e 768, SwiGLU): h + 4F + F = 2048 + 3072 + 768 = 5888 B per
    routed copy against the table's 8704."""
    h, f = QWEN.hidden_size, QWEN.expert_ffn
    assert act.routed_token_saved_bytes(QWEN, 1.0) == (h, 4 * f, f)
    assert sum(act.routed_token_saved_bytes(QWEN, 1.0)) == 5888


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("dtype", PER_TENSOR)
@pytest.mark.parametrize("imbalance", [None, 1.25])
def test_layer_stash_moves_by_one_byte_per_input_element(dtype, cluster, imbalance):
    """One MoE layer's stash in per-tensor fp8 against the same stack in bf16:
    ``load·T·k·(2 − 1)·(h + F)`` less (tp, etp, cp 1), on Hopper and Blackwell."""
    job = _job(dtype, cluster, imbalance=imbalance)
    ref = make_job(QWEN, job.cluster, job.plan, dtype="bf16", framework=job.framework)
    load, T, k = _load(job), job.seq_len * job.plan.mbs, QWEN.moe_router_topk
    want = load * T * k * (2 - 1.0) * (QWEN.hidden_size + QWEN.expert_ffn)
    got = act.job_layer_activation_bytes(ref) - act.job_layer_activation_bytes(job)
    assert got == pytest.approx(want, rel=1e-12)


def test_moe_act_drops_fc2_input_at_one_byte():
    """Selective ``moe_act`` frees fc2's saved input at every load: the stash falls by
    ``load·T·k·1·F`` in per-tensor fp8."""
    a = _job("fp8-current", imbalance=1.25)
    b = dataclasses.replace(a, plan=dataclasses.replace(
        a.plan, recompute="selective", recompute_modules=("moe_act",)))
    load, T, k = _load(a), a.seq_len * a.plan.mbs, QWEN.moe_router_topk
    assert load > 1
    got = act.job_layer_activation_bytes(a) - act.job_layer_activation_bytes(b)
    assert got == pytest.approx(load * T * k * 1.0 * QWEN.expert_ffn, rel=1e-12)


def test_fused_flag_outside_mxfp8_is_the_unfused_path():
    """TE fuses the grouped MLP only under MXFP8: a fused stack in per-tensor fp8 saves what
    the unfused one does, to the bit."""
    a = _job("fp8")
    b = dataclasses.replace(a, framework=with_fused_grouped_mlp(a.framework, "mxfp8"))  # the MXFP8 stack, run in fp8
    assert act.job_layer_activation_bytes(a) == act.job_layer_activation_bytes(b)


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("dtype", PER_TENSOR)
def test_array_model_equals_scalar(dtype, pp):
    """``rank_memory_arrays``/``peak_memory_arrays`` given ``expert_input`` 1 equal
    ``memory_by_stage`` on every rank and at the peak; below the bf16 job's activations."""
    assert_arrays_equal_scalar(_job(dtype, pp=pp), 1.0)


def test_search_space_reads_the_rule():
    """The search's memory prune for Megatron-Core in fp8-current on H100 equals
    ``peak_memory`` of each sampled plan's job."""
    assert_search_equals_scalar(QWEN, cluster_preset("dgx-h100", 1), "fp8-current", 1.0)


def test_simulated_activation_peak_reads_the_rule():
    """The simulator's activation track equals ``memory_by_stage``'s activations of a
    delayed-scaling fp8 job on every rank."""
    from simulator.output.metrics_json import activation_memory_json
    from simulator.simulate import simulate
    b = _job("fp8", pp=2)
    stages = memory_by_stage(b)
    rows = activation_memory_json(simulate(b), b)
    assert rows
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r
