"""Partial full recomputation (``recompute_layers`` with Megatron's block and uniform methods;
issue 13, item 3): between none and full in time and memory, monotone in N, with the
closed forms of ``strategies.cost.recompute``."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.cost import flop_counts
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import estimate
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory import activations as act
from strategies.memory.scalar import memory_components, peak_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

# (model, cluster, plan): 12, 10 and 8 layers per chunk, a dense GPT, a GQA Llama, an MoE
CASES = [("gpt3-175b", ("dgx-a100", 8), "tp=8,pp=8,sp=true"),
         ("llama2-70b", ("dgx-h100", 4), "tp=8,pp=4,sp=true,schedule=interleaved,vpp=2"),
         ("mixtral-8x7b", ("dgx-h100", 4), "tp=4,pp=4,ep=2,sp=true")]


def _job(model, cluster, plan, extra=""):
    return make_job(model_preset(model), cluster_preset(*cluster),
                    parse_plan(plan + (",recompute=" + extra if extra else "")), global_batch=64)


def _lpc(job):
    return job.model.num_layers // (job.plan.pp * job.plan.vpp)


@pytest.mark.parametrize("model,cluster,plan", CASES)
def test_between_none_and_full_and_monotone_in_n(model, cluster, plan):
    none, full = _job(model, cluster, plan, "none"), _job(model, cluster, plan, "full")
    lpc = _lpc(none)
    t = [estimate(_job(model, cluster, plan, f"full,recompute_layers={n}")).step_time_s
         for n in range(1, lpc + 1)]
    mem = [peak_memory(_job(model, cluster, plan, f"full,recompute_layers={n}"))[1].total
           for n in range(1, lpc + 1)]
    t_none, t_full = estimate(none).step_time_s, estimate(full).step_time_s
    m_none, m_full = peak_memory(none)[1].total, peak_memory(full)[1].total
    assert t_none < t[0] and all(a < b for a, b in zip(t, t[1:]))
    assert t[-1] == pytest.approx(t_full, rel=1e-12)            # N = l is full recompute
    assert m_none > mem[0] and all(a > b for a, b in zip(mem, mem[1:]))
    assert mem[-1] == pytest.approx(m_full, rel=1e-12)


@pytest.mark.parametrize("model,cluster,plan", CASES)
def test_recompute_time_and_flops_are_n_over_l_of_full(model, cluster, plan):
    """Block with N of l layers: exactly N/l of full recompute's extra time per layer, TP
    collectives and FLOPs (closed form)."""
    full = _job(model, cluster, plan, "full")
    lpc, m, gbs = _lpc(full), full.model, full.plan.gbs
    c_full = stage_costs(full)
    extra_full = (flop_counts.hardware_flops_per_step(m, gbs, True, 2)
                  - flop_counts.hardware_flops_per_step(m, gbs, True, 0))
    for n in range(1, lpc + 1):
        job = _job(model, cluster, plan, f"full,recompute_layers={n}")
        c = stage_costs(job)
        assert c.layer_recompute * lpc == pytest.approx(n * c_full.layer_recompute, rel=1e-12)
        # n/l of full's collectives (2 per layer; 1 in a MoE layer under expert parallelism
        # without a shared expert, whose MLP collective the all-to-all replaces)
        assert c.tp_per_layer_recompute * lpc == pytest.approx(
            n * c_full.tp_per_layer_recompute, rel=1e-12)
        assert (c.layer_fwd, c.layer_bwd) == (c_full.layer_fwd, c_full.layer_bwd)
        extra = (flop_counts.hardware_flops_per_step(m, gbs, True, 2, n / lpc)
                 - flop_counts.hardware_flops_per_step(m, gbs, True, 0))
        assert extra == pytest.approx(n / lpc * extra_full, rel=1e-12)
        hfu = estimate(job).hfu * estimate(job).step_time_s
        assert hfu == pytest.approx(flop_counts.hfu(m, gbs, True, 2, 1.0, full.cluster.num_gpus,
                                                    full.cluster.mean_peak(full.dtype), n / lpc),
                                    rel=1e-12)


@pytest.mark.parametrize("model,cluster,plan", CASES)
def test_memory_closed_form_block_and_uniform(model, cluster, plan):
    """Block: a chunk keeps N layer inputs and l-N layers' activations; uniform: ceil(l/N)
    inputs, and N layers rebuilt at once in the backward; the array model (memory report)
    and the scalar one (the simulator's timeline) agree."""
    job0 = _job(model, cluster, plan, "full")
    lpc = _lpc(job0)
    x_in = act.job_layer_activation_bytes(job0)                       # checkpointed input
    x_all = act.job_layer_activation_bytes(job0, recompute="none")    # every activation
    for n in (1, max(1, lpc // 2), lpc):
        for method in ("block", "uniform"):
            job = _job(model, cluster, plan, f"full,recompute_layers={n},recompute_method={method}")
            chunk = act.chunk_layer_activation_bytes(job, 0)
            trans = act.transient_activation_bytes(job, 0) - act.transient_activation_bytes(
                _job(model, cluster, plan, "none"), 0)
            if method == "block":
                assert chunk == pytest.approx(n * x_in + (lpc - n) * x_all, rel=1e-12)
                assert trans == pytest.approx(x_all, rel=1e-12)
            else:
                assert chunk == pytest.approx(math.ceil(lpc / n) * x_in, rel=1e-12)
                assert trans == pytest.approx(n * x_all, rel=1e-12)
            for s in range(job.plan.pp):
                comps = memory_components(job, s)
                stash = act.in_flight_microbatches(job, s) * act.chunk_layer_activation_bytes(job, s)
                assert comps["layers"].activations == pytest.approx(stash, rel=1e-12)
                assert comps["recompute"].activations == pytest.approx(
                    act.transient_activation_bytes(job, s)
                    - act.transient_activation_bytes(_job(model, cluster, plan, "none"), s),
                    rel=1e-12)


def test_uniform_recomputes_every_layer():
    model, cluster, plan = CASES[0]
    full = estimate(_job(model, cluster, plan, "full")).step_time_s
    for n in (2, 3, 12):
        job = _job(model, cluster, plan, f"full,recompute_layers={n},recompute_method=uniform")
        assert estimate(job).step_time_s == pytest.approx(full, rel=1e-12)


def test_simulated_step_between_none_and_full():
    from simulator.simulate import simulate
    runs = {}
    for extra in ("none", "full,recompute_layers=2", "full,recompute_layers=4", "full"):
        job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                       parse_plan("tp=2,pp=4,recompute=" + extra), global_batch=8)
        runs[extra] = simulate(job).step_time_s
    t = list(runs.values())
    assert all(a < b for a, b in zip(t, t[1:]))


def test_export_megatron_flags():
    job = _job(*CASES[0], "full,recompute_layers=5")
    text, _ = megatron_args(job)
    assert "--recompute-granularity full" in text and "--recompute-method block" in text
    assert "--recompute-num-layers 5" in text
    text, _ = megatron_args(_job(*CASES[0], "full"))
    assert "--recompute-method uniform" in text and "--recompute-num-layers 1" in text
    job = _job(*CASES[0], "full,recompute_layers=3,recompute_method=uniform")
    text = megatron_args(job)[0]
    assert "--recompute-method uniform" in text and "--recompute-num-layers 3" in text


def test_search_gives_the_fewest_layers_that_fit():
    """Each fitting full-recompute plan carries the smallest N whose plan fits: N fits,
    N - 1 does not (or N = 1); the space's size and pruning counts do not change."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8)
    limit = 0.95 * cl.min_hbm_bytes
    sp = enumerate_space(m, cl, 64, SpaceOptions(max_mbs=2))
    rc_full = np.flatnonzero(sp.cols["rc"] == 2)
    partial = [i for i in rc_full if sp.cols["rcl"][i] > 0]
    assert partial                     # some full-recompute plans fit with fewer layers
    for i in partial[:: max(1, len(partial) // 25)]:
        p = sp.plan(i)
        job = make_job(m, cl, p)
        assert peak_memory(job)[1].total <= limit
        assert peak_memory(job)[1].total == pytest.approx(sp.peak_memory[i], rel=1e-9)
        if p.recompute_layers > 1:
            less = dataclasses.replace(p, recompute_layers=p.recompute_layers - 1)
            assert peak_memory(make_job(m, cl, less))[1].total > limit
        assert parse_plan(sp.key(i)) == p


@pytest.mark.parametrize("plan,field,rule", [
    ("tp=8,pp=8,recompute=full,recompute_layers=13", "recompute_layers", "at most the 12"),
    ("tp=8,pp=8,schedule=interleaved,vpp=3,recompute=full,recompute_layers=5",
     "recompute_layers", "at most the 4"),
    ("tp=8,pp=8,recompute=full,recompute_layers=0", "recompute_layers", ">= 1"),
    ("tp=8,pp=8,recompute=selective,recompute_layers=2", "recompute_layers",
     "needs recompute=full"),
    ("tp=8,pp=8,recompute_layers=2", "recompute_layers", "needs recompute=full"),
    ("tp=8,pp=8,recompute=full,recompute_layers=2,recompute_method=blocky", "recompute_method",
     "block, uniform"),
    ("tp=8,pp=8,recompute=selective,recompute_modules=core_attn,mlpp", "recompute_modules",
     "core_attn, layernorm, mlp"),
    ("tp=8,pp=8,recompute=full,recompute_modules=mlp", "recompute_modules",
     "needs recompute=selective"),
    ("tp=8,pp=8,recompute=selective,recompute_modules=moe_act", "recompute_modules",
     "MoE"),
])
def test_bad_input_exits_2_naming_field_value_rule(plan, field, rule, capsys):
    rc = main(["estimate", "--model", "gpt3-175b", "--cluster", "dgx-a100:8",
               "--global-batch", "64", "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and field in err and rule in err and "Traceback" not in err


def test_plan_files_and_keys_round_trip():
    """A plan file (YAML list or JSON) and the search's key read back to the same plan."""
    import json

    import yaml

    from strategies.plan import plan_from_mapping
    from strategies.plan_file import plan_file_text
    from strategies.search.plan_rows import plan_key
    for text in ("tp=2,recompute=full,recompute_layers=3,recompute_method=uniform",
                 "tp=2,recompute=selective,recompute_modules=mlp,layernorm"):
        p = dataclasses.replace(parse_plan(text), dp=1, gbs=4)
        for path in ("x.yaml", "x.json"):
            body = plan_file_text(p, path)
            data = json.loads(body) if path.endswith(".json") else yaml.safe_load(body)
            assert plan_from_mapping(data) == p
        assert parse_plan(plan_key(p)) == p
    p = parse_plan("recompute=selective,recompute_modules=mlp+layernorm")
    assert p.recompute_modules == ("layernorm", "mlp")       # stored in MODULES order
    with pytest.raises(SpecError, match="names mlp twice"):  # a repeat is refused, not dropped
        parse_plan("recompute=selective,recompute_modules=mlp+layernorm+mlp")


@pytest.mark.parametrize("gran", ["chunk", "layer"])
def test_uneven_stages_recompute_min_n_and_their_layers(gran):
    """Block with N = 6 on stages of 4/8/8/4 layers: each stage's program recomputes
    min(6, n_s) layers per micro-batch at one full layer's cost (not the mean share), and the
    estimate's per-stage backward does the same."""
    from simulator.program.compiler import compile_job
    from simulator.program.ops import Compute
    from strategies.estimate.stage_correction import stage_times
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                   parse_plan("tp=2,pp=4,layers_per_stage=4/8/8/4,recompute=full,"
                              "recompute_layers=6"), global_batch=8)
    full = make_job(job.model, job.cluster, dataclasses.replace(
        job.plan, recompute_layers=None, recompute_method=None), global_batch=8)
    c, each = stage_costs(job), stage_costs(full).layer_recompute
    assert c.recompute_cap == 6 and c.layer_recompute_each == each
    progs = compile_job(job, granularity=gran)
    for rank, prog in progs.items():
        n_s = job.layers_of_stage(prog.stage)
        secs = sum(op.seconds for op in prog.ops()
                   if isinstance(op, Compute) and op.kind == "recompute")
        assert secs == pytest.approx(job.num_microbatches * min(6, n_s) * each, rel=1e-12)
    _, b, _ = stage_times(job)
    _, b_none, _ = stage_times(make_job(job.model, job.cluster, dataclasses.replace(
        job.plan, recompute="none", recompute_layers=None, recompute_method=None),
        global_batch=8))
    for s in range(4):
        assert b[s] - b_none[s] == pytest.approx(min(6, job.layers_of_stage(s)) * each,
                                                 rel=1e-9)


def test_deepspeed_export_checkpoints_uniform_groups_only():
    from strategies.errors import SpecError
    from strategies.export.deepspeed import deepspeed_config
    base = "tp=1,pp=2,schedule=1f1b,recompute=full,recompute_layers=3"
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                   parse_plan(base + ",recompute_method=uniform"), global_batch=16)
    _, notes = deepspeed_config(job)
    assert any("activation_checkpoint_interval=3" in n for n in notes)
    block = make_job(job.model, job.cluster, parse_plan(base), global_batch=16)
    with pytest.raises(SpecError, match="block"):
        deepspeed_config(block)
