"""The defects the session-21 review listed, each fixed and checked: bad input refused through
the CLI (exit 2, one line naming field, value and rule, no traceback) — DeepSeek-V4's rank and
head fields' sanity limits, ``compress_ratios`` of the wrong length named as written, the
``fp8_attention`` refusal naming the field the user set, the exports that cannot build a model
refused before the search; and the readings that had two sources: group-limited routing read
once for DeepSeek and Nemotron-H, the hybrid counts read from ``hybrid_counts``, a stack's
data-parallel size from ``Plan.model_parallel``, the checkpointed layer input (full
recomputation) with DeepSeek-V4's hyper-connection streams."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simulator.cli.main import main
from strategies.hf_config import model_from_hf
from strategies.memory.recompute_saved import (checkpoint_input_bytes, layer_activation_bytes,
                                               op_saved_bytes)
from strategies.memory.stash_arrays import layer_act_arrays
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.stacks.plan_defaults import stack_fills
from strategies.framework import get_profile

HF = Path(__file__).resolve().parent / "data" / "hf"
V4 = "deepseek-v4-flash"


def _v4_file(tmp_path: Path, **edit) -> str:
    """A model file (YAML) of DeepSeek-V4 Flash's fields with ``edit`` applied."""
    from strategies.model.spec import DERIVED
    d = json.loads(json.dumps(model_preset(V4).report_dict()))
    for k in ("name", *DERIVED):
        d.pop(k, None)
    d.update(edit)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    return str(path)


def _refused(capsys, argv: list[str], *words: str) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


V4_PLAN = ["--cluster", "gb200-nvl72:32", "--dtype", "mxfp8", "--plan",
           "tp=1,pp=1,ep=64,mbs=1,gbs=2048"]


# ------------------------------------------------------------------ 1. DeepSeek-V4's fields
@pytest.mark.parametrize("field,limit", [("o_lora_rank", 1 << 20), ("index_head_dim", 1 << 20),
                                         ("index_n_heads", 1 << 16), ("o_groups", 1 << 16),
                                         ("index_topk", 1 << 24)])
def test_dsv4_fields_have_the_sanity_limit_of_their_kind(tmp_path, capsys, field, limit):
    _refused(capsys, ["estimate", "--model", _v4_file(tmp_path, **{field: 2 * limit}),
                      *V4_PLAN], f"{field}={2 * limit}", f"<= {limit:,} (a sanity limit)")


def test_compress_ratios_of_the_wrong_length_is_named_as_written(tmp_path, capsys):
    err = _refused(capsys, ["estimate", "--model", _v4_file(tmp_path, compress_ratios=[0, 4]),
                            *V4_PLAN], "compress_ratios=[0, 4]", "each of the 43 layers",
                   "it lists 2")
    assert "tuple" not in err


# ------------------------------------------------------------------ 2. fp8_attention's refusal
@pytest.mark.parametrize("extra,words", [
    ([], ["fp8_attention=True", "needs dtype mxfp8, not 'bf16'"]),
    (["--dtype", "mxfp8", "--framework", "torchtitan"], ["fp8_attention=True", "'torchtitan'"]),
])
def test_fp8_attention_refusal_names_the_field_the_user_set(capsys, extra, words):
    _refused(capsys, ["estimate", "--model", "qwen3-30b-a3b", "--cluster", "gb200-nvl72:4",
                      *extra, "--plan", "tp=1,pp=2,ep=8,mbs=1,gbs=256,fp8_attention=true"],
             *words)


# ------------------------------------------------------------------ 3. the stack's dp
def test_stack_fills_read_the_model_parallel_size():
    """NeMo shards the optimizer (zero=1) where the data-parallel size is above 1: the GPUs
    over ``Plan.model_parallel`` (tp·pp·cp) give it; GPUs it does not divide, unknown."""
    fw = get_profile("nemo")
    plan = Plan(tp=2, pp=2)
    assert plan.model_parallel == 4
    fills = {g: [f.field for f in stack_fills(fw, set(), plan, g)] for g in (4, 8, 6, None)}
    assert fills == {4: [], 8: ["zero"], 6: ["zero"], None: ["zero"]}


# ------------------------------------------------------------------ 4. one reader each
def test_hybrid_shares_are_the_pattern_counts():
    m = model_preset("nemotron-h-56b")
    c = m.hybrid_counts()
    assert m.attention_share == c["attention"] / m.num_layers
    assert m.mamba_share == c["mamba"] / m.num_layers
    assert (m.num_moe_layers, m.num_dense_layers) == (c["moe"], c["dense"])
    assert sum(c.values()) == m.num_layers == len(m.hybrid_pattern)


def _cfg(name: str) -> dict:
    return json.loads((HF / f"{name}.json").read_text())


def test_deepseek_v3_without_topk_method_routes_as_transformers_does():
    """transformers' DeepseekV3Config has no ``topk_method``: its router always routes within
    ``n_group`` groups with the expert bias (noaux_tc); V2 without one routes greedily."""
    c = _cfg("deepseek_v3")
    with_key = model_from_hf(c, "x")
    c.pop("topk_method")
    without = model_from_hf(c, "x")
    assert without == with_key
    assert (without.moe_router_num_groups, without.moe_router_group_topk) == (8, 4)
    assert without.router_bias
    v2 = _cfg("deepseek_v2")
    assert model_from_hf(v2, "x").moe_router_num_groups == 8     # group_limited_greedy
    v2.pop("topk_method")
    m = model_from_hf(v2, "x")
    assert (m.moe_router_num_groups, m.moe_router_group_topk, m.router_bias) == (None, None,
                                                                                False)


@pytest.mark.parametrize("groups,topk,want", [(1, 1, (None, None)), (8, 4, (8, 4))])
def test_nemotron_h_groups_read_as_deepseek_v3s(groups, topk, want):
    c = _cfg("nemotron3_nano_30b_a3b")
    c.update(n_group=groups, topk_group=topk)
    m = model_from_hf(c, "x")
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == want
    d = _cfg("deepseek_v3")
    d.update(n_group=groups, topk_group=topk)
    v3 = model_from_hf(d, "x")
    assert (v3.moe_router_num_groups, v3.moe_router_group_topk) == want


def test_nemotron_h_group_count_without_topk_group_is_refused():
    c = _cfg("nemotron3_nano_30b_a3b")
    c.update(n_group=8)
    c.pop("topk_group")
    with pytest.raises(ValueError, match="topk_group"):
        model_from_hf(c, "x")


# ------------------------------------------------------------------ 5. the checkpointed input
@pytest.mark.parametrize("tp,sp,cp", [(1, False, 1), (4, True, 2), (4, False, 1)])
def test_full_recompute_keeps_the_hyper_connection_streams(tp, sp, cp):
    import numpy as np
    v4 = model_preset(V4)
    n, s, b, h = v4.hc_streams, v4.seq_length, 2, v4.hidden_size
    assert n == 4
    want = 2 * s * b * h * n / (tp if sp else 1) / cp
    assert layer_activation_bytes(v4, s, b, tp, sp, cp, recompute="full") == want
    arr, _ = layer_act_arrays(v4, np.array([b]), np.array([tp]), np.array([cp]),
                              np.array([sp]), np.array([2]), np.array([True]))
    assert arr[0] == want
    one = replace(model_preset("deepseek-v3"))        # one stream: the plain residual
    assert checkpoint_input_bytes(one, s, b, tp, sp, cp) == \
        2 * s * b * one.hidden_size / (tp if sp else 1) / cp
    # recompute=op keeps the same input beside what its policy saves
    assert op_saved_bytes(v4, s, b, tp, sp, cp) - op_saved_bytes(
        replace(v4, hc_streams=1), s, b, tp, sp, cp) == pytest.approx(want * (n - 1) / n,
                                                                      rel=1e-12)


# ------------------------------------------------------------------ 6. exports refused early
def test_megatron_export_of_deepseek_v4_is_refused_before_the_search(capsys, monkeypatch):
    import simulator.cli.search as search_cli

    def no_search(cfg):
        raise AssertionError("the search ran")
    monkeypatch.setattr(search_cli, "run_search", no_search)
    _refused(capsys, ["search", "--model", V4, "--cluster", "gb200-nvl72:32", "--dtype",
                      "mxfp8", "--global-batch", "2048", "--export", "megatron"],
             "--export='megatron'", "cannot express this model", "DeepSeek-V4")


@pytest.mark.parametrize("command,plan", [("estimate", ["--plan", "tp=8,mbs=1,gbs=64"]),
                                          ("simulate", ["--plan", "tp=8,mbs=1,gbs=64"]),
                                          ("search", ["--global-batch", "64"])])
def test_maxtext_export_of_a_hybrid_model_is_refused(capsys, monkeypatch, command, plan):
    import simulator.cli.estimate as estimate_cli
    import simulator.cli.search as search_cli

    def no_work(*a, **k):
        raise AssertionError("the estimate or search ran")
    monkeypatch.setattr(search_cli, "run_search", no_work)
    monkeypatch.setattr(estimate_cli, "estimate", no_work)
    _refused(capsys, [command, "--model", "nemotron-h-56b", "--cluster", "dgx-h100:8", *plan,
                      "--export", "maxtext"], "--export='maxtext'", "nemotron-h-56b",
             "hybrid model")
