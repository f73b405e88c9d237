"""Hybrid Mamba-2 models (``model_type: nemotron_h``): the presets' parameter counts against
the model cards and against an independent count of the checkpoint's tensors, the layer
pattern's kinds and views, and refused configs naming the field."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.errors import SpecError
from strategies.hf_config import load_model_arg, model_from_hf
from strategies.model import ModelSpec
from strategies.presets import model_preset

NANO = Path(__file__).resolve().parent / "data" / "hf" / "nemotron3_nano_30b_a3b.json"


def nano() -> dict:
    return json.loads(NANO.read_text())


def _printed(x: float, card: float, dec: int) -> bool:
    q = 10.0 ** dec
    return round(card / 1e9 * q) == round(x / 1e9 * q)


# Model cards: Nemotron 3 Nano 30B-A3B "31.6B total parameters, 3.2B active (3.6B including
# embeddings)" (huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16); Nemotron-H
# "8B" and "56B" (arXiv 2504.03624, huggingface.co/nvidia/Nemotron-H-8B-Base-8K and
# -56B-Base-8K). A dense hybrid's active count is its total.
@pytest.mark.parametrize("name,total,active,emb,dec", [
    ("nemotron3-nano-30b-a3b", 31.6e9, 3.2e9, False, 1),
    ("nemotron3-nano-30b-a3b", 31.6e9, 3.6e9, True, 1),
    ("nemotron-h-8b", 8e9, 8e9, True, 0), ("nemotron-h-56b", 56e9, 56e9, True, 0)])
def test_hybrid_presets_round_to_the_model_card(name, total, active, emb, dec):
    m = model_preset(name)
    assert _printed(m.num_params(), total, dec)
    assert _printed(m.active_params(embedding=emb), active, dec)


def _nano_tensors(c: dict) -> int:
    """The checkpoint's tensors as HF's NemotronH modeling names them, counted here apart from
    ``ParamCounts``: per layer one ``norm``; a Mamba mixer's in_proj, conv1d (weight and
    bias), dt_bias, A_log, D, norm and out_proj; an attention's q, k, v, o; an MoE's
    experts' up/down, the gate and its e_score_correction_bias, the shared expert's up/down."""
    h, H, P = c["hidden_size"], c["mamba_num_heads"], c["mamba_head_dim"]
    G, N, K = c["n_groups"], c["ssm_state_size"], c["conv_kernel"]
    di, conv = H * P, H * P + 2 * G * N
    mamba = h * (2 * di + 2 * G * N + H) + conv * K + conv + 3 * H + di + di * h
    a, g, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    attn = h * a * d + 2 * h * g * d + a * d * h
    E, F, Fs = c["n_routed_experts"], c["moe_intermediate_size"], \
        c["moe_shared_expert_intermediate_size"]
    moe = E * 2 * h * F + E * h + E + 2 * h * Fs
    block = {"M": mamba, "*": attn, "E": moe}
    n = sum(h + block[ch] for ch in c["hybrid_override_pattern"])
    return n + 2 * c["vocab_size"] * h + h


def test_nano_config_counts_every_checkpoint_tensor():
    assert model_from_hf(nano()).num_params() == _nano_tensors(nano())


def test_nano_config_is_the_preset():
    m = load_model_arg(str(NANO))
    p = model_preset("nemotron3-nano-30b-a3b")
    assert replace(m, name=p.name, max_position_embeddings=None) == p


def test_hybrid_pattern_kinds_and_views():
    m = model_preset("nemotron-h-8b")
    assert m.layer_kinds()[:9] == ("mamba", "dense", "mamba", "dense", "mamba", "dense",
                                   "mamba", "attention", "dense")
    assert m.layer_counts() == {"mamba": 24, "attention": 4, "dense": 24, "moe": 0}
    assert m.layer_shares() == {"dense": 24 / 52}          # the MLP-bearing kinds only
    assert m.mixer_shares() == {"attention": 4 / 52, "mamba": 24 / 52}
    v = m.of_kind("mamba")
    assert v.layer_counts() == {"mamba": 52, "attention": 0, "dense": 0, "moe": 0}
    assert v.layer_shares() == {} and v.layer_params() == v.layer_params("mamba")
    assert m.layer_params("mamba") == m.hidden_size + m.mamba_params()
    assert m.layer_params("attention") == m.hidden_size + m.attention_params()
    # in_proj 4096 -> 2*8192 + 2*8*128 + 128; conv over 8192 + 2048 channels, width 4
    assert m.mamba_in_proj_width == 18560 and m.mamba_conv_dim == 10240
    n = model_preset("nemotron3-nano-30b-a3b")
    assert n.num_moe_layers == 23 and n.is_moe_layer(1) and not n.is_moe_layer(0)
    assert model_preset("llama3-8b").mixer_shares() == {"attention": 1.0}
    with pytest.raises(SpecError):
        model_preset("llama3-8b").of_kind("mamba")


def test_mamba_fields_need_a_pattern():
    with pytest.raises(SpecError) as e:
        ModelSpec("m", 4, 256, 8, 1024, 1000, mamba_num_heads=8)
    assert e.value.field == "mamba_num_heads"
