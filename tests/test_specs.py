"""Specs: presets load, HF configs of each model type give the published parameter counts,
docs/formulas.md §1 holds exactly, and every validation rule raises its own error."""
from __future__ import annotations

import json

import pytest

from strategies.errors import SpecError
from strategies.hf_config import load_model_arg, model_from_hf
from strategies.job import make_job
from strategies.model import ModelSpec
from strategies.plan import Plan, parse_plan
from strategies.presets import MODEL_PRESETS, model_preset
from topologies.cluster import cluster_preset, parse_cluster_arg
from topologies.cluster.preset_table import preset_names, preset_unit_gpus
from topologies.gpus import GPUS

# Parameter counts the model builders publish (HF model cards / safetensors totals).
HF_CONFIGS = {
    "gpt2": (dict(model_type="gpt2", n_layer=12, n_embd=768, n_head=12, n_inner=None,
                  vocab_size=50257, n_positions=1024), 124_439_808),
    "llama-2-7b": (dict(model_type="llama", num_hidden_layers=32, hidden_size=4096,
                        num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008,
                        vocab_size=32000, max_position_embeddings=4096,
                        tie_word_embeddings=False), 6_738_415_616),
    "mistral-7b": (dict(model_type="mistral", num_hidden_layers=32, hidden_size=4096,
                        num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                        vocab_size=32000, max_position_embeddings=32768,
                        sliding_window=None), 7_241_732_096),   # v0.3: no window
    "mixtral-8x7b": (dict(model_type="mixtral", num_hidden_layers=32, hidden_size=4096,
                          num_attention_heads=32, num_key_value_heads=8,
                          intermediate_size=14336, vocab_size=32000,
                          max_position_embeddings=32768, num_local_experts=8,
                          num_experts_per_tok=2), 46_702_792_704),
    "qwen2-7b": (dict(model_type="qwen2", num_hidden_layers=28, hidden_size=3584,
                      num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944,
                      vocab_size=152064, max_position_embeddings=32768,
                      tie_word_embeddings=False), 7_615_616_512),
    "pythia-160m": (dict(model_type="gpt_neox", num_hidden_layers=12, hidden_size=768,
                         num_attention_heads=12, intermediate_size=3072, vocab_size=50304,
                         max_position_embeddings=2048, tie_word_embeddings=False), 162_322_944),
}

PRESET_PARAMS = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320,
                 "llama2-70b": 68_976_648_192, "llama3-8b": 8_030_261_248,
                 "llama3-70b": 70_553_706_496, "llama3.1-405b": 405_853_388_800,
                 "mistral-7b": 7_241_732_096, "mixtral-8x7b": 46_702_792_704,
                 "mixtral-8x22b": 140_630_071_296, "qwen2-7b": 7_615_616_512,
                 "qwen2-72b": 72_706_203_648}


@pytest.mark.parametrize("name", sorted(MODEL_PRESETS))
def test_every_model_preset_loads(name):
    m = model_preset(name)
    assert m.num_params() > 0 and m.hidden_size % m.num_attention_heads == 0


@pytest.mark.parametrize("name,want", sorted(PRESET_PARAMS.items()))
def test_preset_parameter_counts_match_the_model_cards(name, want):
    assert model_preset(name).num_params() == want


@pytest.mark.parametrize("key", sorted(HF_CONFIGS))
def test_hf_config_of_each_type(tmp_path, key):
    cfg, want = HF_CONFIGS[key]
    assert model_from_hf(cfg, key).num_params() == want
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_model_arg(str(path)).num_params() == want


def test_hf_mixtral_active_params():
    m = model_from_hf(HF_CONFIGS["mixtral-8x7b"][0])
    assert m.active_params() == 12_879_925_248      # Mistral AI: "12.9B active"


@pytest.mark.parametrize("l,h,want", [(128, 25600, 1008.04e9), (96, 12288, 174.62e9)])
def test_formulas_1_parameter_count(l, h, want):
    """docs/formulas.md §1, P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)), exact for the GPT family."""
    V, s = 51200, 2048
    m = ModelSpec("gpt", l, h, 128 if h == 25600 else 96, 4 * h, V, s, bias=True,
                  tie_word_embeddings=True)
    closed = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    # The closed form leaves out the final LayerNorm (2h parameters).
    assert m.num_params() - 2 * h == pytest.approx(closed, rel=1e-15)
    assert m.num_params() == pytest.approx(want, rel=5e-5)   # the table rounds


@pytest.mark.parametrize("name", preset_names())
def test_every_cluster_preset_builds(name):
    cl = cluster_preset(name, 2)   # PRESET:2 is two nodes, or two trays of a rack preset
    assert cl.num_gpus == 2 * preset_unit_gpus(name)
    assert parse_cluster_arg(f"{name}:2") == cl


def test_cluster_presets_as_cli_md_says():
    a, h = parse_cluster_arg("dgx-a100:1"), parse_cluster_arg("dgx-h100:1")
    assert (a.gpus_per_node, a.gpu.name, a.intra_node_bandwidth) == (8, "A100-SXM4-80GB", 300e9)
    assert (a.nics_per_node, a.inter_node_bandwidth) == (8, 200e9 / 8)
    assert (h.gpus_per_node, h.gpu.name, h.intra_node_bandwidth) == (8, "H100-SXM5-80GB", 450e9)
    assert (h.nics_per_node, h.inter_node_bandwidth) == (8, 400e9 / 8)


def test_gpu_catalog_covers_the_issue():
    for name in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-PCIe-80GB",
                 "H200", "B200", "MI300X"):
        assert any(g == name or g.startswith(name) for g in GPUS), name


# ---------------------------------------------------------------- validation rules

def job(model="gpt3-175b", cluster="dgx-a100:8", plan="tp=8,pp=8", gbs=64, **kw):
    return make_job(model_preset(model), parse_cluster_arg(cluster), parse_plan(plan),
                    global_batch=gbs, **kw)


@pytest.mark.parametrize("make,field", [
    (lambda: job(plan="tp=5,pp=8"), "tp*pp*cp"),                         # world size
    (lambda: job(cluster="dgx-a100:5", plan="tp=5,pp=8"), "tp"),         # heads % tp
    (lambda: job("llama3-8b", "dgx-h100:2", "tp=16"), "tp"),             # kv heads % tp
    (lambda: job(plan="tp=8,pp=4,dp=4"), "dp"),                           # dp disagrees
    (lambda: job(plan="tp=8,pp=8,mbs=3"), "gbs"),                         # gbs % (mbs*dp)
    (lambda: job(cluster="dgx-a100:10", plan="tp=8,pp=10"), "num_layers"),   # layers % pp
    (lambda: job(plan="tp=8,pp=8,schedule=interleaved,vpp=5"), "num_layers"),  # % pp*vpp
    (lambda: job(plan="tp=8,pp=8,schedule=interleaved,vpp=2", gbs=12), "num_microbatches"),
    (lambda: job(plan="tp=8,pp=8,schedule=interleaved,vpp=2", gbs=4), "num_microbatches"),
    (lambda: job(plan="tp=8,pp=8", gbs=None), "gbs"),
    (lambda: job(plan="tp=8,pp=8", dtype="fp8"), "dtype"),                 # A100 has no fp8
    (lambda: job(plan="tp=8,pp=8", dtype="int4"), "dtype"),
    (lambda: job(cluster="dgx-a100:4", plan="tp=8,pp=2,cp=3"), "tp*pp*cp"),
    (lambda: job("gpt3-175b", "dgx-a100:8", "tp=8,pp=8,ep=2"), "ep"),    # dense model
    (lambda: job("mixtral-8x7b", "dgx-h100:2", "tp=2,ep=3"), "ep"),      # experts % ep
    (lambda: make_job(model_preset("llama3-8b").with_seq_length(100),
                      parse_cluster_arg("dgx-h100:1"), parse_plan("tp=8,sp=true"),
                      global_batch=8), "sp"),                               # seq % tp with SP
])
def test_job_rules_raise_naming_the_field(make, field):
    with pytest.raises(SpecError) as e:
        make()
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}=")


@pytest.mark.parametrize("text,field", [
    ("tp=0", "tp"), ("tp=-2", "tp"), ("tp=two", "tp"), ("mbs=1.5", "mbs"),
    ("schedule=zb", "schedule"), ("recompute=some", "recompute"), ("zero=4", "zero"),
    ("sp=maybe", "sp"), ("schedule=interleaved,vpp=1,pp=4", "vpp"),
    ("schedule=1f1b,vpp=2,pp=4", "vpp"), ("schedule=interleaved,vpp=2,pp=1", "schedule"),
    ("zero=3,pp=2", "zero"), ("tp", "plan"), ("tp=2,tp=4", "plan"), ("colour=red", "plan"),
])
def test_plan_rules_raise_naming_the_field(text, field):
    with pytest.raises(SpecError) as e:
        parse_plan(text)
    assert e.value.field == field


@pytest.mark.parametrize("kw,field", [
    (dict(num_layers=0), "num_layers"), (dict(hidden_size=1000), "hidden_size"),
    (dict(num_query_groups=5), "num_query_groups"), (dict(activation="tanh"), "activation"),
    (dict(num_experts=2, moe_router_topk=3), "moe_router_topk"), (dict(norm="batch"), "norm"),
    (dict(position_embedding="sinus"), "position_embedding"),
])
def test_model_rules_raise_naming_the_field(kw, field):
    base = dict(name="m", num_layers=4, hidden_size=1024, num_attention_heads=16,
                ffn_hidden_size=4096, vocab_size=1000)
    with pytest.raises(SpecError) as e:
        ModelSpec(**{**base, **kw})
    assert e.value.field == field


def test_unknown_presets_name_themselves():
    with pytest.raises(SpecError, match="model='gpt-9'"):
        model_preset("gpt-9")
    with pytest.raises(SpecError, match="cluster='dgx-z100'"):
        parse_cluster_arg("dgx-z100:4")


def test_plan_long_megatron_names():
    p = parse_plan("tensor_model_parallel_size=4,pipeline_model_parallel_size=2,sequence_parallel=true")
    assert (p.tp, p.pp, p.sp) == (4, 2, True)
    assert parse_plan("schedule=interleaved:3,pp=4").vpp == 3
    assert Plan(tp=2).short().startswith("tp2")
