"""What the HF config.json sweep (``experiments/hf_config_sweep.py``) found, each a regression
test on the reader that owns it (``strategies/hf_config``):

* transformers 5 writes ``rope_scaling`` as ``rope_parameters``: gpt-oss's YaRN attention
  factor was read from the first alone, so the same model written back by transformers 5 lost
  its unfused RoPE on Megatron-Core (``rope_attention_factor`` 1.0 instead of 1.3466);
* a YaRN ``rope_scaling`` on a Llama-derived type (Qwen3's long-context recipe) was dropped
  without a word; it is read as gpt-oss's is (``common.rope_attention``), another scaling
  with a factor on cos and sin is refused by name;
* transformers 5's ``Qwen2MoeConfig`` writes ``qkv_bias`` (default true): ``true`` was refused
  as an unknown structural key and ``false`` read as true;
* fields whose transformers default is not what an absent one reads here (Mixtral's 8
  experts read as a dense model, Mistral's and Mixtral's 8 KV heads, Mistral's 4096-token
  window, Qwen3's head_dim 128 and 32 KV heads, Qwen2-MoE's 16 KV heads and shared expert of
  5632) are now required, as ``reading._ABSENT_DIFFERS`` already did for others.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from strategies.errors import SpecError
from strategies.hf_config import model_from_hf
from strategies.model import ModelSpec, yarn_attention_factor

DATA = Path(__file__).parent / "data" / "hf"


def _cfg(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _tf5(cfg: dict) -> dict:
    """``cfg`` as transformers 5 writes it: ``rope_scaling`` and ``rope_theta`` folded into
    ``rope_parameters``."""
    c = dict(cfg)
    rp = dict(c.pop("rope_scaling") or {"rope_type": "default"})
    rp["rope_theta"] = c.pop("rope_theta")
    return {**c, "rope_parameters": rp}


def test_gpt_oss_rope_parameters_read_as_rope_scaling():
    v4 = model_from_hf(_cfg("gpt_oss_120b.json"))
    v5 = model_from_hf(_tf5(_cfg("gpt_oss_120b.json")))
    assert v4.rope_attention_factor == 1 + 0.1 * math.log(32)
    assert v5 == v4


def test_rope_parameters_disagreeing_with_rope_scaling_refused():
    cfg = _cfg("gpt_oss_120b.json")
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 16.0}
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == "rope_parameters" and "disagrees with rope_scaling" in e.value.rule
    cfg["rope_parameters"] = dict(cfg["rope_scaling"], rope_theta=150000.0)   # agreeing
    assert model_from_hf(cfg).rope_attention_factor == 1 + 0.1 * math.log(32)


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_qwen3_yarn_read(key):
    cfg = _cfg("qwen3_8b.json")
    cfg[key] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    m = model_from_hf(cfg)
    assert m.rope_attention_factor == 1 + 0.1 * math.log(4) == yarn_attention_factor(4.0)
    plain = model_from_hf(_cfg("qwen3_8b.json"))
    assert plain.rope_attention_factor == 1.0
    assert m.num_params() == plain.num_params()


@pytest.mark.parametrize("rs", [{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192},
                                {"rope_type": "linear", "factor": 2.0},
                                {"type": "dynamic", "factor": 2.0},
                                {"rope_type": "default", "rope_theta": 1e6}])
def test_unscaled_rope_kinds_read_as_one(rs):
    cfg = dict(_cfg("qwen3_8b.json"), rope_scaling=rs)
    assert model_from_hf(cfg).rope_attention_factor == 1.0


def test_other_rope_kind_refused_by_name():
    cfg = dict(_cfg("qwen3_8b.json"), rope_scaling={"rope_type": "longrope", "factor": 16.0})
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == "rope_scaling.rope_type" and e.value.value == "longrope"
    assert "yarn" in e.value.rule


def test_qwen2_moe_qkv_bias_key():
    base = model_from_hf(_cfg("qwen2_57b_a14b.json"))
    on = model_from_hf(dict(_cfg("qwen2_57b_a14b.json"), qkv_bias=True))
    off = model_from_hf(dict(_cfg("qwen2_57b_a14b.json"), qkv_bias=False))
    assert base == on and base.qkv_bias and not off.qkv_bias
    # the bias is (a + 2g)·d per layer: 28 heads, 4 KV heads, d 128, 28 layers
    assert base.num_params() - off.num_params() == 28 * (28 + 2 * 4) * 128
    with pytest.raises(SpecError) as e:
        model_from_hf(dict(_cfg("qwen3_8b.json"), qkv_bias=True))
    assert e.value.field == "qkv_bias"


@pytest.mark.parametrize("name,key,default", [
    ("mixtral_8x22b.json", "num_local_experts", 8),
    ("mixtral_8x22b.json", "num_key_value_heads", 8),
    ("qwen3_8b.json", "head_dim", 128),
    ("qwen3_8b.json", "num_key_value_heads", 32),
    ("qwen2_57b_a14b.json", "shared_expert_intermediate_size", 5632),
    ("qwen2_57b_a14b.json", "num_key_value_heads", 16),
])
def test_absent_field_whose_transformers_default_differs_refused(name, key, default):
    cfg = _cfg(name)
    assert key in cfg and model_from_hf(cfg)
    cfg.pop(key)
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == key and f"transformers' default ({default})" in e.value.rule


def test_mistral_window_and_kv_heads_must_be_written():
    cfg = dict(model_type="mistral", num_hidden_layers=32, hidden_size=4096,
               num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
               vocab_size=32000, max_position_embeddings=32768)
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == "sliding_window"
    assert model_from_hf(dict(cfg, sliding_window=4096)).sliding_window == 4096   # v0.1
    assert model_from_hf(dict(cfg, sliding_window=None)).sliding_window is None    # v0.3
    no_kv = {k: v for k, v in cfg.items() if k != "num_key_value_heads"}
    with pytest.raises(SpecError) as e:
        model_from_hf(dict(no_kv, sliding_window=None))
    assert e.value.field == "num_key_value_heads"
    m = model_from_hf(dict(no_kv, sliding_window=None, num_key_value_heads=None))
    assert isinstance(m, ModelSpec) and m.kv_heads == 32     # null: every head, as transformers


def test_megatron_export_says_what_it_cannot_write():
    """``--export megatron`` writes plain RoPE and an unclamped SwiGLU: a model with a YaRN
    attention factor or a clamp gets a note naming each (it had none; the launch ran another
    model than the one priced)."""
    from strategies.job import make_job
    from strategies.launch import export
    from strategies.plan import parse_plan
    from topologies.cluster import cluster_preset
    cfg = dict(_cfg("qwen3_8b.json"), rope_scaling={"rope_type": "yarn", "factor": 4.0})
    for m, want in ((model_from_hf(cfg), ["YaRN RoPE (attention factor 1.1386"]),
                    (model_from_hf(_cfg("gpt_oss_120b.json")),
                     ["YaRN RoPE (attention factor 1.3466", "clamped SwiGLU (inputs within +-7"]),
                    (model_from_hf(_cfg("qwen3_8b.json")), [])):
        job = make_job(m, cluster_preset("dgx-h100", 1), parse_plan("tp=1,ep=1,gbs=8"),
                       framework="megatron-core")
        text, notes = export("megatron", job)
        assert "--position-embedding-type rope" in text
        for w in want:
            assert sum(w in n for n in notes) == 1, (w, notes)
        if not want:
            assert not any("YaRN" in n or "clamped" in n for n in notes)


def test_llama4_rope_kinds():
    """Llama 4's llama3 scaling reads as 1; a YaRN one (not modelled on its NoPE layout) is
    refused by name rather than dropped."""
    cfg = _cfg("llama4_scout.json")
    assert model_from_hf(cfg).rope_attention_factor == 1.0
    text = dict(cfg["text_config"], rope_scaling={"rope_type": "yarn", "factor": 8.0})
    with pytest.raises(SpecError) as e:
        model_from_hf(dict(cfg, text_config=text))
    assert e.value.field == "rope_scaling.rope_type" and "Llama 4" in e.value.rule
