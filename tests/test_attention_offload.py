"""The attention side of Megatron-Core's fine-grained activation offloading (plan
``offload_modules``: ``attn_norm``, ``qkv_linear``, ``core_attn``, ``attn_proj``, ``mlp_norm``;
``memory.offload_saved.attention_offload_bytes``; docs/calibration.md §5.213): each module's
bytes in closed form at tp/sp/cp settings, precisions and recomputations (the peak lower by
exactly them: ``test_activation_offload``), a plan that fits only with it, the exposed copies
as the breakdown's own ``offload`` entry in the estimate and the simulation to floating-point
precision, and bad input exiting 2 with field, value and rule."""
from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.cost.offload import offload_mask
from strategies.cost.recompute import modules_mask
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.cost.stage.inputs import stage_inputs
from strategies.cost.stage.offload_reload import RELOAD_ORDER, group_spans, reload_wait
from strategies.cost.stage.offload_time import gemms_bwd
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.offload_saved import attention_offload_bytes
from strategies.memory.scalar import fits
from strategies.plan import parse_plan
from strategies.plan.parse import plan_from_mapping
from strategies.plan_file import plan_to_mapping
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.plan_rows import plan_key
from topologies.cluster import cluster_preset

LLAMA = model_preset("llama3-8b")       # h 4096, 32 heads of 128, 8 KV heads, no dropout
S, H, A, D, G = 8192, 4096, 32, 128, 8
ATTN = ("qkv_linear", "core_attn", "attn_proj")


def _bytes(names, tp=1, sp=False, cp=1, rc=0, modules=0, flash=True, te=None, model=LLAMA,
           b=1):
    return attention_offload_bytes(model, S, b, tp, cp, sp, rc, modules, flash,
                                   offload_mask(names), None, te)


@pytest.mark.parametrize("tp,sp,cp", [(1, False, 1), (4, True, 2), (8, False, 4)])
def test_module_bytes_closed_form(tp, sp, cp):
    """16 bits, fused attention: ``qkv_linear`` the norm's input and output ``2·2sbh``
    (``/tp`` only with SP), ``core_attn`` q, k, v and the output
    ``(2ad + 2g(d + d) + 2ad)·sb/tp``, ``attn_proj`` nothing held (the kernel's own output) but
    that output copied again; all ``/cp``; ``attn_norm`` and ``mlp_norm`` nothing on a dense
    transformer (their norms are fused into the linears)."""
    seq = tp if sp else 1
    sb = S * 2          # micro-batch 2
    qkv = 4 * sb * H / seq / cp
    core = (2 * A * D + 2 * G * 2 * D + 2 * A * D) * sb / tp / cp
    out = 2 * A * D * sb / tp / cp
    assert _bytes(("qkv_linear",), tp, sp, cp, b=2) == (pytest.approx(qkv, rel=1e-15),) * 2
    assert _bytes(("core_attn",), tp, sp, cp, b=2) == (pytest.approx(core, rel=1e-15),) * 2
    held, copied = _bytes(ATTN, tp, sp, cp, b=2)
    assert held == pytest.approx(qkv + core, rel=1e-15)
    assert copied == pytest.approx(qkv + core + out, rel=1e-15)
    assert _bytes(("attn_norm", "mlp_norm"), tp, sp, cp, b=2) == (0.0, 0.0)


def test_saved_precision_and_recomputation():
    """Transformer Engine's fp8 copies (``te`` bytes per element of Linear, LayerNormLinear
    without and with SP, projection): the QKV group keeps the 2-byte norm input and the 1-byte
    norm output; the projection's own 1-byte copy is held and copied once (0: it saves the
    kernel's 16-bit output, copied again). ``core_attn``'s recompute bypasses its group; then
    the projection's input is the only copy. ``layernorm``'s recompute drops the norm output.
    A layer recomputed whole offloads nothing. Unfused attention offloads its scores."""
    sb = S
    fp8 = (1.0, 1.0, 1.0, 1.0)
    assert _bytes(("qkv_linear",), te=fp8)[0] == pytest.approx(3 * sb * H, rel=1e-15)
    assert _bytes(("core_attn", "attn_proj"), te=fp8)[0] - _bytes(("core_attn",))[0] \
        == pytest.approx(A * D * sb, rel=1e-15)
    held, copied = _bytes(("core_attn", "attn_proj"), te=(1.0, 1.0, 1.0, 0.0))
    assert copied - held == pytest.approx(2 * A * D * sb, rel=1e-15)
    core_rc = modules_mask(("core_attn",))
    assert _bytes(("core_attn",), rc=1, modules=core_rc) == (0.0, 0.0)
    assert _bytes(("core_attn", "attn_proj"), rc=1, modules=core_rc) == (
        pytest.approx(2 * A * D * sb, rel=1e-15),) * 2
    assert _bytes(("qkv_linear",), rc=1, modules=modules_mask(("layernorm",)))[0] \
        == pytest.approx(2 * sb * H, rel=1e-15)
    assert _bytes(ATTN, rc=2) == (0.0, 0.0)
    unfused = _bytes(("core_attn",), flash=False)[0] - _bytes(("core_attn",))[0]
    assert unfused == pytest.approx(2 * A * S * S - 2 * A * D * sb, rel=1e-15)


def test_norm_groups_where_the_norm_is_its_own_module():
    """MLA's input norm is a module of its own (its input, ``2sbh``, in ``attn_norm``); an MoE
    layer's pre-MLP norm too (``mlp_norm``); both split by ``tp`` only with SP."""
    ds, mx = model_preset("deepseek-v3"), model_preset("mixtral-8x7b")
    got = attention_offload_bytes(ds, 4096, 1, 8, 1, True, 0, 0, True,
                                  offload_mask(("attn_norm",)))[0]
    assert got == pytest.approx(2 * 4096 * ds.hidden_size / 8, rel=1e-15)
    got = attention_offload_bytes(mx, 4096, 1, 2, 2, False, 0, 0, True,
                                  offload_mask(("mlp_norm",)))[0]
    assert got == pytest.approx(2 * 4096 * mx.hidden_size / 2, rel=1e-15)


def test_a_plan_fits_only_with_attention_offloading():
    cl = cluster_preset("dgx-h100", 1)
    plan = "tp=2,dp=4,zero=3,mbs=3,sp=true"
    assert not fits(make_job(LLAMA, cl, parse_plan(plan), global_batch=96))
    assert fits(make_job(LLAMA, cl, parse_plan(plan + ",offload_modules=" + "+".join(ATTN)),
                         global_batch=96))


def test_exposed_copies_are_the_offload_entry_in_estimate_and_simulation():
    """Unfused attention offloads its scores (4.4 GB a layer) over A100's PCIe Gen4: each
    layer exposes ``(copy - forward) + (copy - (backward - core backward))`` exactly, in the
    estimate's and the simulation's ``offload`` entry (32 layers, 2 micro-batches); the step
    grows by that and ``compute`` does not move."""
    cl = cluster_preset("dgx-a100", 1)
    base = "tp=1,dp=8,mbs=1,flash_attn=false"
    off = make_job(LLAMA, cl, parse_plan(base), global_batch=16)
    on = make_job(LLAMA, cl, parse_plan(base + ",offload_modules=core_attn"), global_batch=16)
    a = stage_cost_arrays(LLAMA, cl, "bf16", PlanArrays.of_plan(off.plan), off.framework)
    t = _bytes(("core_attn",), flash=False)[1] / cl.gpu.host_link_bandwidth
    per = (t - float(a.layer_fwd)) + (t - (float(a.layer_bwd) - float(a.attn_bwd)))
    assert t > float(a.layer_fwd) and per > 0
    e0, e = estimate(off), estimate(on)
    assert e.breakdown_s["offload"] == pytest.approx(32 * 2 * per, rel=1e-12)
    assert e0.breakdown_s["offload"] == 0.0
    assert e.breakdown_s["compute"] == pytest.approx(e0.breakdown_s["compute"], rel=1e-12)
    assert e.step_time_s - e0.step_time_s == pytest.approx(32 * 2 * per, rel=1e-12)
    s0, s = simulate(off), simulate(on)
    b0, b = s0.metrics["breakdown_s"], s.metrics["breakdown_s"]
    assert b["offload"] == pytest.approx(32 * 2 * per, rel=1e-12) and b0["offload"] == 0.0
    assert b["compute"] == pytest.approx(b0["compute"], rel=1e-12)
    assert s.step_time_s - s0.step_time_s == pytest.approx(32 * 2 * per, rel=1e-12)


@pytest.mark.parametrize("model,plan,value,words", [
    ("llama3-8b", "tp=1,offload_modules=attn_proj", "'attn_proj'", "needs core_attn"),
    ("deepseek-v3", "tp=8,ep=8,offload_modules=qkv_linear", "'qkv_linear'",
     "not modelled with MLA"),
    ("nemotron-h-56b", "tp=8,offload_modules=core_attn", "'core_attn'", "hybrid"),
    ("llama3-8b", "tp=1,offload_modules=gdp_qkv", "'gdp_qkv'", "GatedDeltaProduct"),
    ("llama3-8b", "tp=1,offload_modules=core_attn+expert_fc1", "'expert_fc1+core_attn'",
     "is dense"),
])
def test_bad_input_exits_2_naming_field_value_rule(model, plan, value, words, capsys):
    rc = main(["estimate", "--model", model, "--cluster", "dgx-h100:8", "--global-batch",
               "64", "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and "offload_modules=" + value in err and words in err
    assert "Traceback" not in err


def test_export_lists_the_attention_modules():
    job = make_job(LLAMA, cluster_preset("dgx-h100", 1),
                   parse_plan("tp=1,dp=8,offload_modules=core_attn+attn_proj+qkv_linear"),
                   global_batch=64)
    text, _ = megatron_args(job)
    listed = text.split("--offload-modules ")[1].split("\\")[0].split()
    assert sorted(listed) == sorted(ATTN)
    back = parse_plan("tp=1,dp=8,offload_modules=" + ",".join(listed))
    assert back.offload_modules == job.plan.offload_modules == ("qkv_linear", "core_attn",
                                                                "attn_proj")
    assert parse_plan(plan_key(job.plan)) == job.plan                   # the search's key
    assert plan_from_mapping(plan_to_mapping(job.plan)) == job.plan     # a saved plan file
    row = PlanArrays.of_plan(job.plan).offload_modules                  # the arrays' bit mask
    assert int(row) == offload_mask(ATTN)


def test_adjacent_groups_reload_one_after_the_other():
    """``attn_proj`` then ``core_attn`` in the backward (``offload_reload``): the projection's
    group (the kernel's output, copied again) is reloaded from the previous layer's core end,
    due at this layer's projection backward; the core's reload starts where the projection's
    backward ends, right where the core's starts, so all of it waits:
    ``max(0, t_proj - (bwd - proj - core)) + t_core`` a layer, in the estimate's ``offload``
    entry and the simulation's (32 layers, 2 micro-batches)."""
    cl = cluster_preset("dgx-h100", 1)
    base = "tp=1,dp=8,mbs=1"
    off = make_job(LLAMA, cl, parse_plan(base), global_batch=16)
    on = make_job(LLAMA, cl, parse_plan(base + ",offload_modules=core_attn+attn_proj"),
                  global_batch=16)
    a = stage_cost_arrays(LLAMA, cl, "bf16", PlanArrays.of_plan(off.plan), off.framework)
    si = stage_inputs(LLAMA, cl, "bf16", PlanArrays.of_plan(on.plan), on.framework)
    bw = cl.gpu.host_link_bandwidth
    t_core = _bytes(("core_attn",))[1] / bw
    t_proj = (_bytes(("core_attn", "attn_proj"))[1] - _bytes(("core_attn",))[1]) / bw
    proj = gemms_bwd(LLAMA, si, lambda part, g: part == "attn" and g[4] is True)
    per = max(0.0, t_proj - (float(a.layer_bwd) - proj - float(a.attn_bwd))) + t_core
    assert t_core > 0 and t_proj == pytest.approx(2 * A * D * S / bw, rel=1e-15)
    assert estimate(on).breakdown_s["offload"] == pytest.approx(32 * 2 * per, rel=1e-12)
    assert simulate(on).metrics["breakdown_s"]["offload"] == pytest.approx(32 * 2 * per,
                                                                          rel=1e-12)


def test_reload_wait_closed_forms():
    """A 10 s layer backward: MLP side 6 s (fc2 1 s, fc1 1 s at its start), projection 1 s,
    core 2 s, QKV 1 s. One group: ``max(0, copy - (period - its span))``. ``attn_proj`` then
    ``core_attn``: the core's reload starts where the projection's backward ends, all of it
    waits, after any wait of the projection's. ``mlp_norm`` with ``fused_group_mlp``: the
    fused MLP's group is needed before any module end starts its reload: on demand."""
    spans = group_spans(10.0, 2.0, 1.0, 1.0, 1.0, 1.0)
    assert spans["mlp_norm"] == (0.0, 6.0) and spans["core_attn"] == (7.0, 9.0)

    def wait(copies):
        on = {n: n in copies for n in RELOAD_ORDER}
        return float(reload_wait(spans, on, {n: copies.get(n, 0.0) for n in RELOAD_ORDER},
                                 10.0))
    assert wait({"core_attn": 3.0}) == 0.0
    assert wait({"core_attn": 9.0}) == pytest.approx(9.0 - (10.0 - 2.0), rel=1e-15)
    assert wait({"attn_proj": 1.0, "core_attn": 0.5}) == pytest.approx(0.5, rel=1e-15)
    assert wait({"attn_proj": 8.0, "core_attn": 0.5}) == pytest.approx(1.0 + 0.5, rel=1e-15)
    assert wait({"mlp_norm": 1.0, "fused_group_mlp": 1.0}) == pytest.approx(1.0, rel=1e-15)
