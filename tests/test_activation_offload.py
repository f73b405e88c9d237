"""Megatron-Core's fine-grained activation offloading (plan ``offload_modules``,
``strategies.cost.offload``; docs/calibration.md §5.209): a layer's offloaded bytes in closed
form, the exposed copy time ``max(0, bytes/bw - window)`` in the stage record, the peak lower
by exactly the offloaded bytes, the host link's rates, bad input exiting 2 with field, value
and rule, and the export's flags read back."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cli.main import main
from strategies.cost import token_counts
from strategies.cost.offload import (IN_FLIGHT_GROUPS, exposed_copy_seconds, offload_mask,
                                     routed_parts)
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.cost.stage.inputs import stage_inputs
from strategies.cost.stage.offload_time import gemms_bwd
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.offload_saved import offloaded_bytes, routed_offload_bytes
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan
from strategies.plan.parse import plan_from_mapping
from strategies.plan_file import plan_to_mapping
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.plan_rows import plan_key
from strategies.stacks.profile import stack_system
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu
from topologies.gpus.host_link import PCIE_GEN4_X16, PCIE_GEN5_X16

MIXTRAL = model_preset("mixtral-8x7b")
BASE = "tp=1,ep=8,dp=8,mbs=1"
ON = ",offload_modules=expert_fc1+moe_act"


def _job(plan: str, cluster: str = "dgx-h100"):
    return make_job(MIXTRAL, cluster_preset(cluster, 1), parse_plan(plan), global_batch=64)


def test_layer_bytes_closed_form():
    """At load 1 in 16 bits, a Mixtral layer (T tokens, k=2, h=4096, gated F=14336) offloads
    fc1's input ``T·k·2h`` (expert_fc1), the activation's input ``T·k·4F`` (moe_act), all
    three with fc2's ``T·k·2F`` (fused_group_mlp); moe_act's recomputation keeps fc2's input
    out; a layer recomputed whole and a dense model offload nothing."""
    T, k, h, F = 4096, 2, 4096, 14336

    def off(names, rc=0, modules=0, model=MIXTRAL):
        return routed_offload_bytes(model, T, 1, 1, 1, False, 1, 1.0, rc, modules,
                                    offload_mask(names))
    assert off(("expert_fc1",)) == T * k * 2 * h
    assert off(("moe_act",)) == T * k * 4 * F
    assert off(("expert_fc1", "moe_act")) == T * k * (2 * h + 4 * F)
    assert off(("fused_group_mlp",)) == T * k * (2 * h + 4 * F + 2 * F)
    moe_act = 1 << 3            # cost.recompute.MODULES bit of moe_act
    assert off(("fused_group_mlp",), rc=1, modules=moe_act) == T * k * (2 * h + 4 * F)
    assert off(("fused_group_mlp",), rc=2) == 0.0
    assert off(("fused_group_mlp",), model=model_preset("llama3-8b")) == 0.0
    assert routed_parts(offload_mask(("expert_fc1", "moe_act"))) == (1.0, 1.0, 0.0)


def test_exposed_copy_time_closed_form():
    assert exposed_copy_seconds(1e9, 50e9, 0.01) == pytest.approx(0.01, rel=1e-15)
    assert exposed_copy_seconds(1e9, 50e9, 0.03) == 0.0
    assert PCIE_GEN5_X16 == 16 * 32e9 * 128 / 130 / 8 == 2 * PCIE_GEN4_X16
    assert get_gpu("H100").host_link_bandwidth == PCIE_GEN5_X16
    assert get_gpu("A100").host_link_bandwidth == PCIE_GEN4_X16
    assert get_gpu("GB200").host_link_bandwidth == 225e9


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100"])
def test_stage_record_charges_the_exposed_copies(cluster):
    """The offloaded layer's forward grows by ``max(0, bytes/bw - forward)``. Its backward,
    group by group (``offload_reload``): ``moe_act``'s reload starts where the previous
    layer's fc1 backward ends and is due where this layer's activation backward starts (after
    fc2's), ``max(0, t_act - (backward - fc1 backward))``; ``expert_fc1``'s starts where the
    activation's backward ends, right where fc1's starts: all of it, ``t_fc1``. The layer's
    compute without offloading as the windows (a model of one layer kind)."""
    off_job, on_job = _job(BASE, cluster), _job(BASE + ON, cluster)
    m, cl, fw = MIXTRAL, off_job.cluster, off_job.framework
    a = stage_cost_arrays(m, cl, "bf16", PlanArrays.of_plan(off_job.plan), fw)
    b = stage_cost_arrays(m, cl, "bf16", PlanArrays.of_plan(on_job.plan), fw)
    si = stage_inputs(m, cl, "bf16", PlanArrays.of_plan(on_job.plan), fw)
    P = si.P

    def nbytes(names):
        return routed_offload_bytes(m, m.seq_length, 1, 1, 1, False, 1, si.load, 0, 0,
                                    offload_mask(names))
    bw = cl.gpu.host_link_bandwidth
    f = exposed_copy_seconds(nbytes(("expert_fc1", "moe_act")), bw, a.layer_fwd)
    fc1 = gemms_bwd(m, si, lambda part, g: part == "routed_mlp" and g[4] is False)
    t_fc1 = nbytes(("expert_fc1",)) / bw
    g = max(0.0, nbytes(("moe_act",)) / bw - (float(a.layer_bwd) - fc1)) + t_fc1
    assert f > 0 and g >= t_fc1 > 0     # PCIe: the copies outlast the layer
    assert float(b.layer_fwd) == pytest.approx(float(a.layer_fwd + f), rel=1e-12)
    assert float(b.layer_bwd) == pytest.approx(float(a.layer_bwd) + g, rel=1e-12)
    assert P.offload_modules == offload_mask(("expert_fc1", "moe_act"))


@pytest.mark.parametrize("model,plan,mods", [
    ("mixtral-8x7b", BASE, ("expert_fc1", "moe_act")),
    ("llama3-8b", "tp=1,dp=8,mbs=1", ("qkv_linear", "core_attn", "attn_proj")),   # §5.213
])
def test_peak_lower_by_exactly_the_offloaded_bytes(model, plan, mods):
    """One micro-batch in flight (pp 1): the layers' stash is lower by 32 layers' offloaded
    bytes and ``IN_FLIGHT_GROUPS`` of them stay on the GPU (the recompute origin's
    transient); the routed experts' groups and the attention side's alike."""
    m, cl = model_preset(model), cluster_preset("dgx-h100", 1)
    off = make_job(m, cl, parse_plan(plan), global_batch=64)
    on = make_job(m, cl, parse_plan(plan + ",offload_modules=" + "+".join(mods)),
                  global_batch=64)
    a, b = memory_components(off, 0), memory_components(on, 0)
    load = token_counts.moe_load(8, on.plan.imbalance, on.plan.capacity_factor, m, 1, 1,
                                 1, 1, False) if m.is_moe else 1.0
    g = offloaded_bytes(m, m.seq_length, 1, 1, 1, False, 1, load, 0, 0, offload_mask(mods),
                        True)[0]
    assert a["layers"].activations - b["layers"].activations == pytest.approx(32 * g, rel=1e-12)
    assert b["recompute"].activations - a["recompute"].activations == pytest.approx(
        IN_FLIGHT_GROUPS * g, rel=1e-12)
    frag = stack_system(on.framework, on.system).fragmentation
    drop = sum(x.total for x in a.values()) - sum(x.total for x in b.values())
    assert drop == pytest.approx((1 + frag) * (32 - IN_FLIGHT_GROUPS) * g, rel=1e-12)


@pytest.mark.parametrize("framework,plan,field,words", [
    ("megatron-core", BASE + ",offload_modules=gdp_qkv", "offload_modules", "not modelled"),
    ("megatron-core", BASE + ",offload_modules=attn_proj", "offload_modules", "needs core_attn"),
    ("megatron-core", BASE + ",offload_modules=attn_mlp", "offload_modules", "unknown module"),
    ("megatron-core", BASE + ",offload_modules=fused_group_mlp", "offload_modules",
     "fused grouped MLP"),
    ("megatron-core", BASE + ",recompute=selective,recompute_modules=moe,offload_modules=moe_act",
     "offload_modules", "moe"),
    ("torchtitan", "tp=1,dp=8,offload_modules=moe_act", "offload_modules", "torchtitan"),
])
def test_bad_input_exits_2_naming_field_value_rule(framework, plan, field, words, capsys):
    rc = main(["estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100:1",
               "--global-batch", "64", "--framework", framework, "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and field in err and words in err and "Traceback" not in err


@pytest.mark.parametrize("model,fix,words", [
    ("mixtral-8x7b", "tp=1,recompute_modules=moe,offload_modules=moe_act",
     "recompute_modules has moe"),
    ("llama3-8b", "offload_modules=moe_act", "llama3-8b is dense"),
    ("mixtral-8x7b", "offload_modules=gdp_qkv", "not modelled"),
    ("deepseek-v3", "offload_modules=qkv_linear", "not modelled with MLA"),
])
def test_search_fix_refuses_before_any_plan(model, fix, words, capsys):
    rc = main(["search", "--model", model, "--cluster", "dgx-h100:1", "--global-batch", "64",
               "--fix", fix, "--top", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "offload_modules" in err and words in err and "Traceback" not in err


def test_dense_model_refuses_the_key(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
               "64", "--plan", "tp=1,offload_modules=moe_act"])
    err = capsys.readouterr().err
    assert rc == 2 and "offload_modules='moe_act'" in err and "is dense" in err


def test_no_host_link_is_refused():
    bare = replace(get_gpu("H100"), host_link_bandwidth=None)
    job = _job(BASE + ON)
    si = stage_inputs(MIXTRAL, job.cluster, "bf16", PlanArrays.of_plan(job.plan),
                      job.framework, gpu=bare)
    from strategies.cost.stage.offload_time import offload_exposed
    with pytest.raises(SpecError) as e:
        offload_exposed(MIXTRAL, si, 1.0, 1.0)
    assert e.value.field == "offload_modules" and "host link" in e.value.rule


def test_export_flags_read_back():
    """``--export`` emits Megatron's two flags; the listed modules, given back as the plan
    key, give the same plan; the plan key round-trips too."""
    job = _job(BASE + ON)
    text, notes = megatron_args(job)
    assert "--fine-grained-activation-offloading" in text
    listed = text.split("--offload-modules ")[1].split("\\")[0].split()
    assert listed == ["expert_fc1", "moe_act"]
    assert parse_plan(BASE + ",offload_modules=" + ",".join(listed)) == parse_plan(BASE + ON)
    assert any("NVTE_CPU_OFFLOAD_V1" in n for n in notes)
    assert parse_plan(plan_key(job.plan)) == job.plan
    assert plan_from_mapping(plan_to_mapping(job.plan)) == job.plan     # a saved plan file
    assert "--offload-modules" not in megatron_args(_job(BASE))[0]
