"""Megatron-Core's layer-level CPU activation offloading (plan ``cpu_offloading_num_layers``,
``strategies.cost.layer_offload``; docs/calibration.md §5.211): Transformer Engine's offload
windows, the exposed copies in the stage record, the peak lower by exactly the offloaded
layers' stash less the one reloaded group, bad input exiting 2 with field, value and rule,
the export's flag, the plan key, a plan file and ``--fix`` read back."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.cost.layer_offload import (RESIDENT_GROUPS, offload_exposed_total,
                                           window_layers, window_spans)
from strategies.cost.offload import exposed_copy_seconds
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.offload_saved import dense_layer_stash_bytes
from strategies.memory.rank_activations import RankActivations
from strategies.memory.saved_precision import activation_cache_bytes
from strategies.memory.scalar import memory_components
from strategies.memory.te_linear_saved import job_te_linear_inputs
from strategies.plan import parse_plan
from strategies.plan.parse import plan_from_mapping
from strategies.plan_arrays import PlanArrays
from strategies.plan_file import plan_to_mapping
from strategies.presets import model_preset
from strategies.search.fix_parse import parse_fix
from strategies.search.plan_rows import plan_key
from strategies.stacks.profile import stack_system
from topologies.cluster import cluster_preset

LLAMA = model_preset("llama3-8b")      # 32 layers
BASE = "tp=1,dp=8,mbs=1,zero=1"


def _job(plan: str, cluster: str = "dgx-h100"):
    return make_job(LLAMA, cluster_preset(cluster, 1), parse_plan(plan), global_batch=64)


@pytest.mark.parametrize("layers,n,windows", [
    (80, 20, list(range(3, 80, 4))),                    # q 4, r 0
    (80, 40, list(range(1, 80, 2))),                    # q 2, r 0
    (10, 3, [3, 6, 9]),                                 # q 3, r 1: the first window one longer
    (126, 95, [2 * k + 1 for k in range(31)] + [k + 31 for k in range(31, 95)]),  # q 1, r 31
])
def test_windows_closed_form(layers, n, windows):
    """TE's ``layer_window_map``: ``w_k = q(k+1) - 1 + min(k+1, r)``; the last window is the
    block's last layer, and each group is produced before its copy starts (``k <= w_{k-1}``)."""
    w = window_layers(layers, n)
    assert w.tolist() == windows
    assert int(w[-1]) == layers - 1 and int(window_spans(layers, n).sum()) == layers - 1
    assert all(k <= int(w[k - 1]) for k in range(1, n))


def test_exposed_total_closed_form():
    """10 layers, 3 groups: windows ``3, 6, 9``, spans ``3, 3, 3``; a 2.5 s copy against
    1 s forward layers exposes nothing, against 0.5 s backward layers ``3 x (2.5 - 1.5)``."""
    f, b = offload_exposed_total(2.5, 1.0, 1.0, 0.5, 10, 3)
    assert f == 0.0 and b == pytest.approx(3.0, abs=1e-15)
    f, _ = offload_exposed_total(2.5, 1.0, np.array([1.0, 0.25]), 0.5, 10, 3)
    assert f.tolist() == [0.0, pytest.approx(3 * (2.5 - 0.75), abs=1e-15)]


def test_stash_bytes_are_the_memory_models_layer():
    """The group the copies move is the layer stash the memory arrays hold without offloading
    (one sum, read twice)."""
    job = _job(BASE)
    P, fw = PlanArrays.of_plan(job.plan), job.framework
    te = job_te_linear_inputs(fw, "bf16", job.cluster.gpu.fp8_tn_only)
    cache = activation_cache_bytes(fw.fp8_activation_cache, "bf16")
    acts = RankActivations(LLAMA, P, np.asarray(0), np.asarray(True), np.asarray(True),
                           np.asarray(False), np.asarray(8.0), np.asarray(1.0), 1.0,
                           act_cache=cache, te_inputs=te)
    g = dense_layer_stash_bytes(LLAMA, P.mbs, P.tp, P.cp, P.sp, P.recompute, P.flash_attn,
                                P.recompute_modules, fw.remat_named, cache, te, False)
    assert float(acts.per_layer(LLAMA)["act"]) == float(g) > 0


@pytest.mark.parametrize("n", [8, 31])
def test_peak_lower_by_exactly_the_offloaded_layers(n):
    """pp 1, one micro-batch stashed: the layers' stash is lower by ``n`` layers' stash and
    ``RESIDENT_GROUPS`` of them come back at the peak (the recompute origin's transient)."""
    off, on = _job(BASE), _job(BASE + f",cpu_offloading_num_layers={n}")
    a, b = memory_components(off, 0), memory_components(on, 0)
    g = a["layers"].activations / 32
    assert a["layers"].activations - b["layers"].activations == pytest.approx(n * g, rel=1e-12)
    assert b["recompute"].activations - a["recompute"].activations == pytest.approx(
        RESIDENT_GROUPS * g, rel=1e-12)
    frag = stack_system(on.framework, on.system).fragmentation
    drop = sum(x.total for x in a.values()) - sum(x.total for x in b.values())
    assert drop == pytest.approx((1 + frag) * (n - RESIDENT_GROUPS) * g, rel=1e-12)


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100"])
def test_stage_record_charges_the_exposed_copies(cluster):
    """The mean layer's forward and backward grow by the groups' exposed copies over the
    block's 32 layers (``exposed_copy_seconds`` against each window's layers of the record's
    compute without offloading); over PCIe a 16-layer window's copies are exposed."""
    off_job, on_job = _job(BASE, cluster), _job(BASE + ",cpu_offloading_num_layers=16",
                                                cluster)
    cl, fw = off_job.cluster, off_job.framework
    a = stage_cost_arrays(LLAMA, cl, "bf16", PlanArrays.of_plan(off_job.plan), fw)
    b = stage_cost_arrays(LLAMA, cl, "bf16", PlanArrays.of_plan(on_job.plan), fw)
    P = PlanArrays.of_plan(on_job.plan)
    g = dense_layer_stash_bytes(LLAMA, P.mbs, P.tp, P.cp, P.sp, P.recompute, P.flash_attn,
                                P.recompute_modules, fw.remat_named,
                                activation_cache_bytes(fw.fp8_activation_cache, "bf16"),
                                job_te_linear_inputs(fw, "bf16", cl.gpu.fp8_tn_only), False)
    bw = cl.gpu.host_link_bandwidth
    # q = 2: every span is 2 layers, the first 1
    f = sum(exposed_copy_seconds(g, bw, s * a.layer_fwd) for s in [1] + [2] * 15)
    k = sum(exposed_copy_seconds(g, bw, s * a.layer_bwd) for s in [1] + [2] * 15)
    assert f > 0
    assert float(b.layer_fwd) == pytest.approx(float(a.layer_fwd + f / 32), rel=1e-12)
    assert float(b.layer_bwd) == pytest.approx(float(a.layer_bwd + k / 32), rel=1e-12)


@pytest.mark.parametrize("model,plan,words", [
    ("llama3-8b", BASE + ",pp=2,cpu_offloading_num_layers=4", "needs pp=1"),
    ("llama3-8b", BASE + ",recompute=full,cpu_offloading_num_layers=4", "recompute=none"),
    ("llama3-8b", BASE + ",cuda_graph=true,cpu_offloading_num_layers=4", "CUDA graphs"),
    ("llama3-8b", BASE + ",cpu_offloading_num_layers=-2", ">= 0"),
    ("llama3-8b", BASE + ",cpu_offloading_num_layers=32", "below llama3-8b's 32 layers"),
    ("mixtral-8x7b", "tp=1,ep=8,dp=8,cpu_offloading_num_layers=4", "dense transformer"),
    ("mixtral-8x7b", "tp=1,ep=8,dp=8,offload_modules=moe_act,cpu_offloading_num_layers=4",
     "offload_modules"),
])
def test_bad_input_exits_2_naming_field_value_rule(model, plan, words, capsys):
    rc = main(["estimate", "--model", model, "--cluster", "dgx-h100:1", "--global-batch", "64",
               "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and "cpu_offloading_num_layers" in err and words in err
    assert "Traceback" not in err


def test_a_stack_without_it_refuses(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
               "64", "--framework", "torchtitan", "--plan", "tp=1,cpu_offloading_num_layers=4"])
    err = capsys.readouterr().err
    assert rc == 2 and "cpu_offloading_num_layers" in err and "torchtitan" in err


def test_export_flag_plan_key_and_file_read_back():
    job = _job(BASE + ",cpu_offloading_num_layers=12")
    text, _ = megatron_args(job)
    assert text.split("--cpu-offloading-num-layers ")[1].split()[0] == "12"
    assert parse_plan(plan_key(job.plan)) == job.plan
    assert plan_from_mapping(plan_to_mapping(job.plan)) == job.plan
    assert "--cpu-offloading" not in megatron_args(_job(BASE))[0]
    assert parse_plan(BASE + ",cpu_offloading_num_layers=0").cpu_offloading_num_layers is None


def test_fix_carries_the_rules():
    """``--fix`` fixes pp 1 and no recomputation with it, and refuses a contradicting key or a
    model it cannot run on before any plan."""
    assert parse_fix("cpu_offloading_num_layers=8") == {"cpu_offloading_num_layers": 8,
                                                        "pp": 1, "recompute": "none"}
    for bad in ("cpu_offloading_num_layers=8,pp=2", "cpu_offloading_num_layers=8,recompute=full"):
        with pytest.raises(Exception) as e:
            parse_fix(bad)
        assert e.value.field == "--fix" and "cpu_offloading_num_layers" in str(e.value.value)


def test_search_fix_refuses_a_model_it_cannot_run(capsys):
    rc = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
               "64", "--fix", "cpu_offloading_num_layers=40", "--top", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "cpu_offloading_num_layers" in err and "32 layers" in err


def test_search_fix_plans_carry_the_key(capsys):
    """Every plan a search with the key fixed ranks carries it, at pp 1."""
    rc = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
               "64", "--fix", "cpu_offloading_num_layers=16", "--top", "3"])
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln[:1].isdigit() and " tp" in ln]
    assert rc == 0 and rows and all("cpu-offload:16" in r and " pp1 " in r for r in rows)
