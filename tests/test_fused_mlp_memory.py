"""What Transformer Engine's fused grouped MLP saves for the backward
(``activations.routed_token_saved_bytes``, ``activations.expert_input_bytes``;
docs/calibration.md §5.103): on Megatron-Core's unfused ``TEGroupedMLP`` path and the fused
one alike, fc1's and fc2's inputs as column-wise MXFP8 copies, the GLU's input in bf16.
Closed forms to floating-point precision, the array model and the search equal to the scalar
one, the simulator's activation track reading the same rule, the 16-bit stacks unchanged."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.cost import token_counts
from strategies.framework import get_profile
from strategies.stacks.variants import with_fused_grouped_mlp
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.stacks.megatron import MEGATRON_CORE
from tests.memory_checks import assert_arrays_equal_scalar, assert_search_equals_scalar
from topologies.cluster import cluster_preset

MX = 1 + 1 / 32                  # MXFP8: 1 B per element + one E8M0 scale per 32
QWEN = model_preset("qwen3-30b-a3b")


def _jobs(pp=1, dtype="mxfp8", imbalance=None):
    """Qwen3-30B-A3B on 8 B200 (every layer MoE), unfused and fused."""
    plan = Plan(pp=pp, ep=8 // pp, mbs=1, gbs=16, moe_dispatcher="hybridep",
                moe_imbalance=imbalance)
    # TE's dense modules' saved copies (§5.113) apart: the expert rule alone
    fw = dataclasses.replace(MEGATRON_CORE, te_linears=False)
    a = make_job(QWEN, cluster_preset("dgx-b200", 1), plan, dtype=dtype, framework=fw)
    # the fused stack as the rule builds it for MXFP8, also under another job precision (the
    # memory rule must then fall back to the unfused bytes)
    return a, dataclasses.replace(a, framework=with_fused_grouped_mlp(a.framework, "mxfp8"))


def test_saved_bytes_for_both_te_paths_in_mxfp8_only():
    """The unfused ``GroupedLinear`` path (Megatron-Core's ``TEGroupedMLP``) and the fused
    grouped MLP save the same column-wise MXFP8 inputs; bf16, fp8-blockwise, nvfp4 and a
    stack without TE's experts keep the 16-bit table."""
    assert act.expert_input_bytes(True, "mxfp8") == MX
    for te, dtype in ((True, "bf16"), (True, "fp8-blockwise"), (True, "nvfp4"),
                      (False, "mxfp8")):
        assert act.expert_input_bytes(te, dtype) is None
    a, b = _jobs()
    assert a.framework.grouped_mlp_casts and not a.framework.fused_grouped_mlp
    assert act.job_expert_input_bytes(a) == MX and act.job_expert_input_bytes(b) == MX
    assert not act.runs_te_experts(get_profile("torchtitan"))


def test_bytes_per_routed_token_closed_form():
    """Qwen3-30B-A3B (h 2048, F_e 768, SwiGLU): unfused 2h + 4F + 2F = 8704 B per routed
    copy; fused (1 + 1/32)·h + 4F + (1 + 1/32)·F = 2112 + 3072 + 792 = 5976 B."""
    h, f = QWEN.hidden_size, QWEN.expert_ffn
    assert (h, f) == (2048, 768)
    assert act.routed_token_saved_bytes(QWEN) == (2 * h, 4 * f, 2 * f)
    assert act.routed_token_saved_bytes(QWEN, MX) == (MX * h, 4 * f, MX * f)
    assert sum(act.routed_token_saved_bytes(QWEN)) == 8704
    assert sum(act.routed_token_saved_bytes(QWEN, MX)) == pytest.approx(5976, rel=1e-15)


@pytest.mark.parametrize("tp,etp,load", [(1, 1, 1.0), (2, 1, 1.3), (4, 2, 1.0)])
def test_routed_bytes_as_run_closed_form(tp, etp, load):
    """As the fused op runs them, per GPU: ``share·load·T·k·(q·h·etp/t + (4F + q·F)/t)``;
    the table's count (what the stash's own terms hold) is the unfused one either way."""
    m, s, b, cp = model_preset("deepseek-v3"), 4096, 2, 2
    h, f, k = m.hidden_size, m.expert_ffn, m.moe_router_topk
    T, share = s * b / cp, m.num_moe_layers / m.num_layers
    table, real = act.routed_activation_bytes(m, s, b, tp, cp, True, etp, load, expert_input=MX)
    want = share * load * T * k * (MX * h * etp / tp + (4 * f + MX * f) / tp)
    assert real == pytest.approx(want, rel=1e-12)
    assert table == act.routed_activation_bytes(m, s, b, tp, cp, True, etp, load)[0]


def _load(job):
    p = job.plan
    return token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, job.model, p.mbs, p.tp,
                           p.cp, p.expert_tp)


@pytest.mark.parametrize("imbalance", [None, 1.25])
def test_layer_stash_moves_by_the_saved_bytes(imbalance):
    """One MoE layer's stash in MXFP8 against the same stack in bf16, on both TE paths:
    ``load·T·k·(2 − q)·(h + F)`` less (tp, etp, cp 1: the fc1 and fc2 inputs one byte and a
    scale instead of two bytes)."""
    for job in _jobs(imbalance=imbalance):
        ref = make_job(QWEN, job.cluster, job.plan, dtype="bf16", framework=job.framework)
        load, T, k = _load(job), job.seq_len * job.plan.mbs, QWEN.moe_router_topk
        want = load * T * k * (2 - MX) * (QWEN.hidden_size + QWEN.expert_ffn)
        got = act.job_layer_activation_bytes(ref) - act.job_layer_activation_bytes(job)
        assert got == pytest.approx(want, rel=1e-12)


def test_fused_and_unfused_mxfp8_differ_only_by_the_eager_clamp():
    """The stated difference of the two TE paths' stash: Qwen3 (no clamp) none, to the
    bit; gpt-oss the eager clamp's saved inputs the unfused path alone runs
    (``clamp_activation_bytes``, ``4·T·k·F_e/t`` at the hottest rank's load)."""
    a, b = _jobs()
    assert act.job_layer_activation_bytes(a) == act.job_layer_activation_bytes(b)
    m = model_preset("gpt-oss-120b")
    plan = Plan(pp=1, ep=8, mbs=1, gbs=16, moe_dispatcher="hybridep")
    a = make_job(m, cluster_preset("dgx-b200", 1), plan, dtype="mxfp8")
    b = dataclasses.replace(a, framework=with_fused_grouped_mlp(a.framework, a.dtype))
    load, T = _load(a), a.seq_len
    want = (m.num_moe_layers / m.num_layers) * load * 4 * T * m.moe_router_topk * m.expert_ffn
    got = act.job_layer_activation_bytes(a) - act.job_layer_activation_bytes(b)
    assert want > 0 and got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("dtype,q", [("bf16", 2.0), ("mxfp8", MX)])
def test_moe_act_drops_fc2_input_as_it_runs(dtype, q):
    """Selective ``moe_act`` (Megatron-Core's output-discarding checkpoint frees fc2's saved
    input at every load): the stash falls by fc2's input as the hottest rank holds it,
    ``load·T·k·q·F``, on the unfused path in bf16 and MXFP8, with an imbalanced load."""
    a, _ = _jobs(dtype=dtype, imbalance=1.25)
    b = dataclasses.replace(a, plan=dataclasses.replace(
        a.plan, recompute="selective", recompute_modules=("moe_act",)))
    load, T, k = _load(a), a.seq_len * a.plan.mbs, QWEN.moe_router_topk
    assert load > 1
    got = act.job_layer_activation_bytes(a) - act.job_layer_activation_bytes(b)
    assert got == pytest.approx(load * T * k * q * QWEN.expert_ffn, rel=1e-12)


def test_fused_stack_outside_mxfp8_saves_what_the_unfused_one_does():
    a, b = _jobs(dtype="bf16")
    assert act.job_layer_activation_bytes(a) == act.job_layer_activation_bytes(b)
    assert act.job_expert_input_bytes(a) is None and act.job_expert_input_bytes(b) is None


@pytest.mark.parametrize("pp", [1, 2])
def test_array_model_equals_scalar(pp):
    """``rank_memory_arrays``/``peak_memory_arrays`` given ``expert_input`` equal
    ``memory_by_stage`` of the fused and the unfused MXFP8 job on every rank; without it,
    the bf16 job's (larger)."""
    for b in _jobs(pp):
        assert_arrays_equal_scalar(b, MX)


def test_search_space_reads_the_rule():
    """The search's memory prune for Megatron-Core in MXFP8 (the unfused TE path) equals
    ``peak_memory`` of each plan's job."""
    assert_search_equals_scalar(QWEN, cluster_preset("dgx-b200", 1), "mxfp8", MX)


def test_simulated_activation_peak_reads_the_rule():
    """The simulator's activation track equals ``memory_by_stage``'s activations of the
    fused job on every rank."""
    from simulator.output.metrics_json import activation_memory_json
    from simulator.simulate import simulate
    _, b = _jobs(pp=2)
    stages = memory_by_stage(b)
    rows = activation_memory_json(simulate(b), b)
    assert rows
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r
