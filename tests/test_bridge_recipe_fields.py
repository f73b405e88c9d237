"""The Megatron-Bridge v0.4.2 recipe fields the reference reader reads for every MoE family
(``strategies.reference.bridge_recipes.RECIPES``): each reaches a row's plan with the config's
value and its file cited; a partial CUDA-graph scope leaves the plan's full-iteration switch
off, said so; bad recipe values are refused with field, value and rule."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from strategies.errors import SpecError
from strategies.reference.bridge_recipes import RECIPES, recipe_for
from strategies.reference.moe_recipe import MoeRecipe
from strategies.reference.cases import case_from_entry

REF = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                   "megatron_bridge_2604.json")


def _row(rid):
    return next(r for r in json.load(open(REF)) if r["id"] == rid)


#: one row per family: (row, recipe's recompute_modules (None: selective not read, () none),
#: the recipe's cuda_graph_scope)
ROWS = [
    ("mbridge260401_deepseekv3_gb200_256_mxfp8", ("mlp",),
     ("attn", "moe_router", "moe_preprocess")),
    ("mbridge260401_deepseekv3_b300_256_mxfp8", ("mla_up_proj",),
     ("attn", "moe_router", "moe_preprocess")),
    ("mbridge260401_deepseekv3_b200_256_mxfp8", ("mlp", "mla_up_proj"),
     ("attn", "moe_router", "moe_preprocess")),
    ("mbridge260401_qwen330ba3b_gb300_8_mxfp8", (), ("moe_router", "moe_preprocess")),
    ("mbridge260401_qwen330ba3b_h100_16_fp8", (), None),
    ("mbridge260401_qwen3235ba22b_gb200_256_mxfp8", (), ("attn", "moe_router", "moe_preprocess")),
    ("mbridge260401_gptoss120b_gb300_64_bf16", None, ("attn", "moe_router", "moe_preprocess")),
    ("mbridge260401_gptoss120b_b200_64_bf16", ("layernorm", "moe_act"), None),
]


@pytest.mark.parametrize("rid,mods,scope", ROWS)
def test_recipe_fields_reach_the_plan(rid, mods, scope):
    row = _row(rid)
    r = recipe_for(row)
    assert r is not None and r.cuda_graph_scope == scope
    c = case_from_entry(row)
    p = c.job.plan
    if mods:
        assert p.recompute == "selective" and set(p.recompute_modules) == set(mods)
        assert any(a.startswith("recompute=selective") and r.source in a and r.lines in a
                   for a in c.assumptions)
    elif mods == ():
        assert p.recompute == "none"
        assert any(a.startswith("recompute=none (the recipe's") for a in c.assumptions)
    # no v0.4.2 config of these rows runs a full-iteration graph: the switch stays off, and
    # a partial scope is said to be one
    assert p.cuda_graph is False
    said = [a for a in c.assumptions if a.startswith("cuda_graph=false")]
    assert len(said) == 1 and r.source in said[0]
    if scope:
        assert "+".join(scope) in said[0] and "not the whole iteration" in said[0]


def test_a_full_iteration_scope_turns_the_switch_on(monkeypatch):
    """Megatron-Core's full_iteration scope under its local implementation is what the plan's
    ``cuda_graph`` means: a recipe that sets it turns the switch on."""
    import strategies.reference.recipe_options as recipe_options
    row = _row("mbridge260401_qwen330ba3b_gb300_8_mxfp8")
    full = replace(recipe_for(row), cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))
    assert full.full_iteration_graph
    monkeypatch.setattr(recipe_options, "recipe_for", lambda entry: full)
    c = case_from_entry(row)
    assert c.job.plan.cuda_graph is True
    assert any(a.startswith("cuda_graph=true") for a in c.assumptions)


def test_a_stated_recompute_wins_over_the_recipe():
    row = _row("mbridge260401_deepseekv3_b300_256_mxfp8")
    stated = dict(row, plan=dict(row["plan"], recompute="full"))
    assert case_from_entry(stated).job.plan.recompute == "full"


@pytest.mark.parametrize("field,name,value,bad", [
    ("dispatcher", "moe_flex_dispatcher_backend", "nccl", "nccl"),
    ("recompute_modules", "recompute_modules", ("attention",), "attention"),
    ("cuda_graph_impl", "cuda_graph_impl", "cudagraph", "cudagraph"),
    ("cuda_graph_scope", "cuda_graph_scope", ("whole",), "whole"),
    ("pp_layout", "pp_layout", "Et*4|(t*4|)*13tmL", "13"),
    ("pp_layout", "pp_layout", "Et*4|(t*4", "(t*4")])
def test_bad_recipe_values_are_refused(field, name, value, bad):
    with pytest.raises(SpecError) as e:
        replace(RECIPES[0], **{field: value})
    msg = str(e.value)
    assert name in msg and bad in msg      # the field and the value; the rule follows


def test_every_recipe_cites_its_lines():
    assert all(isinstance(r, MoeRecipe) and r.lines for r in RECIPES)


# ------------------------------------------------- gpt-oss's eager clamp: what it saves
def test_clamp_activation_closed_form():
    """4·T·k·F_e/t bytes per MoE layer (T = s·b/cp) at the hottest rank's load, on the MoE
    layers' share; 0 for a model without the clamp."""
    from strategies.memory.activations import clamp_activation_bytes
    from strategies.presets import model_preset
    m = model_preset("gpt-oss-120b")
    assert m.activation_clamp is not None
    s, b, tp, cp, load = 4096, 2, 2, 1, 1.3
    share = m.num_moe_layers / m.num_layers
    want = share * load * 4 * (s * b / cp) * m.moe_router_topk * m.expert_ffn / tp
    assert clamp_activation_bytes(m, s, b, tp, cp, load) == pytest.approx(want, rel=1e-15)
    assert clamp_activation_bytes(replace(m, activation_clamp=None), s, b, tp, cp, load) == 0


def test_clamp_bytes_are_stashed_where_the_stack_runs_the_clamp():
    """The stash holds the clamp's inputs under the stack that runs it (eager_variants), not
    where moe_act reruns the activation or the layer is recomputed whole."""
    import numpy as np
    from strategies.cost.recompute import modules_mask
    from strategies.memory.activations import clamp_activation_bytes, routed_stash_correction
    from strategies.presets import model_preset
    m = model_preset("gpt-oss-120b")
    args = (m, 4096, 1, 1, 1, False, 1, 1.0)
    cl = clamp_activation_bytes(m, 4096, 1, 1, 1, 1.0)
    off, _ = routed_stash_correction(*args, 0, 0)
    on, on_none = routed_stash_correction(*args, 0, 0, clamp=True)
    assert on - off == pytest.approx(cl, rel=1e-12) and cl > 0
    act = modules_mask(("moe_act",))
    a_off, _ = routed_stash_correction(*args, 1, act)
    a_on, a_none = routed_stash_correction(*args, 1, act, clamp=True)
    assert a_on == pytest.approx(a_off, rel=1e-12) and a_none == pytest.approx(on_none)
    full, _ = routed_stash_correction(*args, 2, 0, clamp=True)
    assert np.all(np.asarray(full) == 0)


@pytest.mark.parametrize("rid,layout", [
    ("mbridge260401_deepseekv3_gb300_256_mxfp8", "Et*4|(t*4|)*14tmL"),
    ("mbridge260401_deepseekv3_b300_256_mxfp8", "Et*8|(t*8|)*6t*5mL"),
])
def test_deepseek_rows_run_the_recipes_pipeline_layout(rid, layout):
    """The config's pp_layout (or Bridge's layout_map for its pp, vp) on the model's own 61
    layers: the row that did not divide (pp2 vp8) now resolves, and no layer is invented."""
    c = case_from_entry(_row(rid))
    assert c.job is not None, c.skipped
    assert c.job.plan.layout == layout and c.job.model.num_layers == 61
    assert sum(c.job.layout.layers_per_stage) == 61
    assert any(a.startswith(f"pipeline layout {layout}") for a in c.assumptions)
    assert not any("every stage as the busiest" in a for a in c.assumptions)


def test_qwen3_235b_h100_runs_without_tp_overlap_as_its_recipe_sets():
    """qwen3_llm_pretrain.py L167: CommOverlapConfig(tp_comm_overlap=False) on H100 (tp2 sp),
    over the stack's default (on with tp and sp); said once, with the file."""
    c = case_from_entry(_row("mbridge260401_qwen3235ba22b_h100_256_fp8"))
    assert c.job.plan.tp == 2 and c.job.plan.sp and c.job.plan.tp_comm_overlap is False
    said = [a for a in c.assumptions if a.startswith("tp_comm_overlap=")]
    assert len(said) == 1 and "L167" in said[0]
