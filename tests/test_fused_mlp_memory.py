"""What Transformer Engine's fused grouped MLP saves for the backward
(``activations.routed_token_saved_bytes``, ``activations.fused_mlp_input_bytes``;
docs/calibration.md §5.103): fc1's and fc2's inputs as column-wise MXFP8 copies, the GLU's
input in bf16. Closed forms to floating-point precision, the array model equal to the scalar
one, the simulator's activation track reading the same rule, and the unfused stacks
unchanged."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.cost import counts
from strategies.framework import with_fused_grouped_mlp
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import peak_memory_arrays, rank_memory_arrays
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

MX = 1 + 1 / 32                  # MXFP8: 1 B per element + one E8M0 scale per 32
QWEN = model_preset("qwen3-30b-a3b")


def _jobs(pp=1, dtype="mxfp8"):
    """Qwen3-30B-A3B on 8 B200 (every layer MoE), unfused and fused."""
    plan = Plan(pp=pp, ep=8 // pp, mbs=1, gbs=16, moe_dispatcher="hybridep")
    a = make_job(QWEN, cluster_preset("dgx-b200", 1), plan, dtype=dtype)
    return a, dataclasses.replace(a, framework=with_fused_grouped_mlp(a.framework))


def test_saved_bytes_only_for_the_fused_stack_in_mxfp8():
    assert act.fused_mlp_input_bytes(True, "mxfp8") == MX
    for fused, dtype in ((True, "bf16"), (True, "fp8-blockwise"), (True, "nvfp4"),
                         (False, "mxfp8")):
        assert act.fused_mlp_input_bytes(fused, dtype) is None
    a, b = _jobs()
    assert act.job_fused_mlp_bytes(a) is None and act.job_fused_mlp_bytes(b) == MX


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
    table, real = act.routed_activation_bytes(m, s, b, tp, cp, True, etp, load, fused=MX)
    want = share * load * T * k * (MX * h * etp / tp + (4 * f + MX * f) / tp)
    assert real == pytest.approx(want, rel=1e-12)
    assert table == act.routed_activation_bytes(m, s, b, tp, cp, True, etp, load)[0]


def test_layer_stash_moves_by_the_saved_bytes():
    """One MoE layer's stash, fused against unfused: ``load·T·k·(2 − q)·(h + F)`` less (tp,
    etp, cp 1: the fc1 and fc2 inputs one byte and a scale instead of two bytes)."""
    a, b = _jobs()
    p = a.plan
    load = counts.moe_load(p.ep, p.imbalance, p.capacity_factor, QWEN, p.mbs, p.tp, p.cp,
                           p.expert_tp)
    T, k = a.seq_len * p.mbs, QWEN.moe_router_topk
    want = load * T * k * (2 - MX) * (QWEN.hidden_size + QWEN.expert_ffn)
    got = act.job_layer_activation_bytes(a) - act.job_layer_activation_bytes(b)
    assert got == pytest.approx(want, rel=1e-12)


def test_fused_stack_outside_mxfp8_saves_what_the_unfused_one_does():
    a, b = _jobs(dtype="bf16")
    assert act.job_layer_activation_bytes(a) == act.job_layer_activation_bytes(b)


@pytest.mark.parametrize("pp", [1, 2])
def test_array_model_equals_scalar(pp):
    """``rank_memory_arrays``/``peak_memory_arrays`` given ``fused_mlp`` equal
    ``memory_by_stage`` of the fused job on every rank; without it, the unfused job's."""
    a, b = _jobs(pp)
    P = PlanArrays.from_plans([b.plan])
    kw = dict(loss_bytes=b.framework.loss, dispatch_bytes=act.job_dispatch_bytes(b))
    fused, unfused = memory_by_stage(b), memory_by_stage(a)
    for s in range(pp):
        got = float(rank_memory_arrays(b.model, P, s, b.dtype, b.system, b.cluster.gpu,
                                       fused_mlp=MX, **kw)[0])
        assert got == pytest.approx(fused[s].total, rel=1e-12), s
        off = float(rank_memory_arrays(a.model, P, s, a.dtype, a.system, a.cluster.gpu,
                                       **kw)[0])
        assert off == pytest.approx(unfused[s].total, rel=1e-12), s
        assert fused[s].activations < unfused[s].activations
    peak = float(peak_memory_arrays(b.model, P, b.dtype, b.system, b.cluster.gpu,
                                    fused_mlp=MX, **kw)[0])
    assert peak == pytest.approx(max(x.total for x in fused), rel=1e-12)


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
