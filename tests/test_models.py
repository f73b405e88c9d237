"""Frontier models (issue 14, items 1-2): parameter counts per preset against the model cards,
the real-shaped config.json files under tests/data/hf/ against the presets and against an
independent count of their checkpoints' tensors, layer kinds, and refused configs."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.errors import SpecError
from strategies.hf_config import HF_TYPES, load_model_arg, model_from_hf
from strategies.model import ModelSpec
from strategies.presets import model_preset

HF_DIR = Path(__file__).resolve().parent / "data" / "hf"


def hf(name: str) -> dict:
    return json.loads((HF_DIR / f"{name}.json").read_text())


# (preset, total, active, embedding counted in "active" by the card, card decimals)
# Model cards: DeepSeek-V3 "671B total, 37B activated"; Qwen3-30B-A3B "30.5B, 3.3B activated";
# Qwen3-235B-A22B "235B, 22B activated"; Mixtral 8x22B "141B, 39B active"; gpt-oss-120b
# "116.83B total, 5.13B active" (OpenAI's table leaves the embedding out of the active count,
# DeepSeek too; Mistral and Qwen count it).
CARDS = [("deepseek-v3", 671e9, 37e9, False, 0), ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 1),
         ("qwen3-235b-a22b", 235e9, 22e9, True, 0), ("mixtral-8x22b", 141e9, 39e9, True, 0),
         ("gpt-oss-120b", 116.83e9, 5.13e9, False, 2)]


def _printed(x: float, card: float, dec: int) -> bool:
    """``card`` is ``x`` (parameters) printed in billions to ``dec`` decimals, rounded or cut
    (Qwen3-30B-A3B's 3.353B active is printed "3.3B")."""
    q = 10.0 ** dec
    return round(card / 1e9 * q) in (round(x / 1e9 * q), int(x / 1e9 * q))


@pytest.mark.parametrize("name,total,active,emb,dec", CARDS, ids=[c[0] for c in CARDS])
def test_preset_counts_round_to_the_model_card(name, total, active, emb, dec):
    m = model_preset(name)
    assert _printed(m.num_params(), total, dec)
    assert _printed(m.active_params(embedding=emb), active, dec)


def test_deepseek_v3_main_model_and_mtp_module():
    """params_total counts the main model (671B); the MTP module holds 11.61B of its own and
    shares the embedding and output head, which the checkpoint stores again in its layer 61:
    main + MTP + the two copies = 684.49B, the card's "685B" (and its "14B" = 685 - 671)."""
    m = model_preset("deepseek-v3")
    copies = 2 * m.vocab_size * m.hidden_size
    assert m.num_nextn_predict_layers == 1
    assert m.mtp_params() == 3 * 7168 + 2 * 7168 ** 2 + m.layer_params("moe")
    assert abs(m.num_params() + m.mtp_params() + copies - 685e9) < 0.6e9
    assert abs(m.mtp_params() + copies - 14e9) < 0.6e9
    assert m.layer_counts() == {"dense": 3, "moe": 58}
    assert m.layer_kinds()[:4] == ("dense", "dense", "dense", "moe")


# ------------------------------------------------------------ an independent tensor count
def _shapes_deepseek(c: dict) -> list[tuple[int, ...]]:
    """The tensors of a DeepSeek-V2/V3 checkpoint, by module, as HF's modeling code builds them."""
    h, a, V = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    attn = [(h,), (h,)]                                          # input / post-attention norms
    if c["q_lora_rank"]:
        attn += [(c["q_lora_rank"], h), (c["q_lora_rank"],), (a * qk, c["q_lora_rank"])]
    else:
        attn += [(a * qk, h)]
    attn += [(c["kv_lora_rank"] + c["qk_rope_head_dim"], h), (c["kv_lora_rank"],),
             (a * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]),
             (h, a * c["v_head_dim"])]

    def mlp(f):
        return [(f, h), (f, h), (h, f)]
    moe = mlp(c["moe_intermediate_size"]) * (c["n_routed_experts"] + c["n_shared_experts"])
    moe += [(c["n_routed_experts"], h)]
    if c.get("topk_method") == "noaux_tc":
        moe += [(c["n_routed_experts"],)]                        # e_score_correction_bias
    out = [(V, h), (h,), (V, h)]
    for i in range(c["num_hidden_layers"]):
        out += attn + (mlp(c["intermediate_size"]) if i < c["first_k_dense_replace"] else moe)
    return out


def _shapes_llama_like(c: dict) -> list[tuple[int, ...]]:
    """Mixtral, Qwen2-MoE, Qwen3(-MoE), gpt-oss, Llama 4 text: the tensors of the checkpoint."""
    mt = c["model_type"]
    if mt == "llama4":
        c = c["text_config"]
    h, a, V, L = c["hidden_size"], c["num_attention_heads"], c["vocab_size"], c["num_hidden_layers"]
    g, d = c["num_key_value_heads"], c.get("head_dim") or h // a
    bias = mt == "gpt_oss"
    attn = [(h,), (h,), (a * d, h), (g * d, h), (g * d, h), (h, a * d)]
    if bias:
        attn += [(a * d,), (g * d,), (g * d,), (h,), (a,)]          # q, k, v, o biases; sinks
    if mt in ("qwen2_moe",):
        attn += [(a * d,), (g * d,), (g * d,)]
    if mt in ("qwen3", "qwen3_moe"):
        attn += [(d,), (d,)]                                         # q_norm, k_norm
    E = c.get("num_local_experts") or c.get("num_experts") or 0
    f = c.get("moe_intermediate_size") or c["intermediate_size"]
    if mt == "gpt_oss":                 # fused gate_up with biases, down with bias, router bias
        moe = [(E, h, 2 * f), (E, 2 * f), (E, f, h), (E, h), (E, h), (E,)]
    elif E:
        moe = [(E, 3 * f * h), (E, h)]
        if mt == "qwen2_moe":
            s = c["shared_expert_intermediate_size"]
            moe += [(3 * s, h), (1, h)]
        if mt == "llama4":
            moe += [(3 * f, h)]
    out = [(V, h), (h,), (V, h)]
    for _ in range(L):
        out += attn + (moe if E else [(3 * c["intermediate_size"], h)])
    return out


def _count(shapes) -> int:
    n = 0
    for s in shapes:
        p = 1
        for x in s:
            p *= x
        n += p
    return n


FILES = {"deepseek_v3": "deepseek-v3", "deepseek_v2": None, "deepseek_v2_lite": None, "qwen3_30b_a3b": "qwen3-30b-a3b",
         "qwen3_235b_a22b": "qwen3-235b-a22b", "qwen3_8b": None, "qwen2_57b_a14b": None,
         "mixtral_8x22b": "mixtral-8x22b", "gpt_oss_120b": "gpt-oss-120b", "llama4_scout": None}


@pytest.mark.parametrize("name", sorted(FILES))
def test_hf_config_counts_every_checkpoint_tensor(name):
    cfg = hf(name)
    shapes = (_shapes_deepseek if cfg["model_type"].startswith("deepseek") else
              _shapes_llama_like)(cfg)
    assert model_from_hf(cfg, name).num_params() == _count(shapes)


@pytest.mark.parametrize("name", [k for k, v in sorted(FILES.items()) if v])
def test_hf_config_is_the_preset(name):
    """The preset and its config.json give the same model (seq_length aside: a preset holds
    the pre-training length, a config the context window)."""
    m = load_model_arg(str(HF_DIR / f"{name}.json"))
    p = model_preset(FILES[name])
    assert replace(m, name=p.name, seq_length=p.seq_length, max_position_embeddings=None) == p


# Other cards: DeepSeek-V2-Lite "15.7B total, 2.4B activated" (2.45B without the embedding);
# DeepSeek-V2 "236B total, 21B activated";
# Qwen3-8B "8.2B, 6.95B non-embedding"; Qwen2-57B-A14B "57B, 14B activated"; Llama 4 Scout
# "17B active" (its "109B total" adds the vision encoder, not modelled: text 107.77B).
@pytest.mark.parametrize("name,total,active,emb,tol", [
    ("deepseek_v2_lite", 15.7e9, 2.4e9, False, 0.06e9), ("deepseek_v2", 236e9, 21e9, False, 0.5e9),
    ("qwen2_57b_a14b", 57e9, 14e9, True, 0.5e9),
    ("llama4_scout", 107.77e9, 17e9, True, 0.5e9)])
def test_other_configs_against_their_cards(name, total, active, emb, tol):
    m = model_from_hf(hf(name), name)
    assert abs(m.num_params() - total) <= max(tol, 0.05e9)
    assert abs(m.active_params(embedding=emb) - active) <= tol


def test_qwen3_8b_non_embedding_count():
    m = model_from_hf(hf("qwen3_8b"))
    assert abs(m.num_params() - m.embedding_params() - m.lm_head_params() - 6.95e9) < 0.005e9
    assert m.qk_norm and m.kv_channels is None and m.head_dim == 128


def test_layer_kinds_and_windows():
    g = model_preset("gpt-oss-120b")
    assert [g.is_windowed_layer(i) for i in range(4)] == [True, False, True, False]
    assert g.num_windowed_layers == 18
    s = model_from_hf(hf("llama4_scout"))
    assert (s.window_kind, s.sliding_window, s.num_windowed_layers) == ("chunked", 8192, 36)
    assert s.num_shared_experts == 1 and s.expert_ffn == 8192 and s.ffn_hidden_size == 16384
    # Llama 4 Maverick-style interleaving: every other layer MoE, the others dense
    c = hf("llama4_scout")
    c["text_config"] = {**c["text_config"], "interleave_moe_layer_step": 2, "moe_layers": None}
    m = model_from_hf(c)
    assert m.layer_kinds()[:4] == ("dense", "moe", "dense", "moe") and m.num_moe_layers == 24
    q = model_from_hf(hf("qwen2_57b_a14b"))
    assert q.shared_expert_gate and q.shared_ffn == 20480 and q.qkv_bias


def test_group_limited_routing_from_the_configs():
    """DeepSeek-V3 routes a token to experts of at most 4 of 8 groups (nodes); V2 to 3 of 8
    (group_limited_greedy); V2-Lite's plain greedy top-k has no groups."""
    got = {n: (model_from_hf(hf(n)).moe_router_num_groups, model_from_hf(hf(n)).moe_router_group_topk)
           for n in ("deepseek_v3", "deepseek_v2", "deepseek_v2_lite")}
    assert got == {"deepseek_v3": (8, 4), "deepseek_v2": (8, 3), "deepseek_v2_lite": (None, None)}
    assert model_preset("deepseek-v3").moe_router_num_groups == 8


def test_mla_shapes_and_compressed_kv_cache():
    """DeepSeek-V3's KV cache is 70.272 KB per token (DeepSeek, "Insights into DeepSeek-V3",
    Table 1): 61 layers of (512 latent + 64 rope key) bf16 elements."""
    m = model_preset("deepseek-v3")
    assert m.is_mla and m.head_dim == 192 and m.v_dim == 128
    assert m.kv_cache_width() * 2 * m.num_layers == 70_272
    names = [n for n, *_ in m.attention_linears()]
    assert names == ["q_down", "q_up", "kv_down", "kv_up", "proj"]
    splits = {n: s for n, _, _, s in m.attention_linears()}
    assert splits["q_down"] == splits["kv_down"] == "rep" and splits["proj"] == "row"


# ---------------------------------------------------------------------- refused input
@pytest.mark.parametrize("edit,field", [
    (lambda c: c.pop("v_head_dim"), "v_head_dim"),                          # MoE field missing
    (lambda c: c.pop("n_routed_experts"), "n_routed_experts"),
    (lambda c: c.update(moe_layer_freq=2), "moe_layer_freq"),
    (lambda c: c.update(attention_bias=True), "attention_bias"),
    (lambda c: c.update(num_experts_per_tok=300), "num_experts_per_tok"),
    (lambda c: c.update(first_k_dense_replace=61), "first_k_dense_replace"),
    (lambda c: c.update(n_routed_experts=2.5), "n_routed_experts"),
    (lambda c: c.update(num_expert_groups_extra=4), "num_expert_groups_extra"),  # unknown, structural
    (lambda c: c.update(topk_group=9), "topk_group"),             # 9 of 8 groups
    (lambda c: c.update(n_group=3), "n_group"),                # 256 % 3
])
def test_bad_deepseek_configs_name_the_field(edit, field):
    """The field named is the config.json key the user wrote (the model's own name is in the
    rule: ``strategies.hf_config.reading.in_config_terms``)."""
    c = hf("deepseek_v3")
    edit(c)
    with pytest.raises(SpecError) as e:
        model_from_hf(c)
    assert e.value.field == field


@pytest.mark.parametrize("name,edit,field", [
    ("qwen3_30b_a3b", lambda c: c.update(use_sliding_window=True), "use_sliding_window"),
    ("qwen3_30b_a3b", lambda c: c.update(mlp_only_layers=[0, 2]), "mlp_only_layers"),
    ("qwen3_30b_a3b", lambda c: c.update(q_lora_rank=512), "q_lora_rank"),
    ("qwen3_30b_a3b", lambda c: c.pop("moe_intermediate_size"), "moe_intermediate_size"),
    ("gpt_oss_120b", lambda c: c.update(layer_types=["full_attention"] + ["sliding_attention"] * 35),
     "layer_types"),
    ("gpt_oss_120b", lambda c: c.update(experts_per_token=2), "experts_per_token"),
    ("mixtral_8x22b", lambda c: c.update(n_shared_experts=2), "n_shared_experts"),
    ("mixtral_8x22b", lambda c: c.update(attention_bias=True), "attention_bias"),
    ("nemotron3_nano_30b_a3b", lambda c: c.pop("ssm_state_size"), "ssm_state_size"),
    ("nemotron3_nano_30b_a3b", lambda c: c.pop("chunk_size"), "chunk_size"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(
        hybrid_override_pattern="MEX" + c["hybrid_override_pattern"][3:]),
     "hybrid_override_pattern"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(hybrid_override_pattern="ME"),
     "hybrid_override_pattern"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(mlp_hidden_act="silu"), "mlp_hidden_act"),
    # latent MoE and the hybrid MTP are read (tests/test_latent_moe.py): a bad latent size,
    # an MTP count without its block's layers and the reverse are refused by name
    ("nemotron3_nano_30b_a3b", lambda c: c.update(moe_latent_size=0), "moe_latent_size"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(num_nextn_predict_layers=1),
     "mtp_hybrid_override_pattern"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(mtp_hybrid_override_pattern="*E"),
     "num_nextn_predict_layers"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(num_nextn_predict_layers=1,
                                                  mtp_hybrid_override_pattern="*X"),
     "mtp_hybrid_override_pattern"),      # the key the config wrote (reading._HF_KEYS)
    ("nemotron3_nano_30b_a3b", lambda c: c.update(mamba_inner_widening=2),   # unknown, structural
     "mamba_inner_widening"),
    ("nemotron3_nano_30b_a3b", lambda c: c.update(n_groups=7), "n_groups"),      # 64 heads % 7
    ("nemotron3_nano_30b_a3b", lambda c: c.update(layers_block_type=["mamba"] * 52),
     "hybrid_override_pattern"),
])
def test_bad_configs_name_the_field(name, edit, field):
    c = hf(name)
    edit(c)
    with pytest.raises(SpecError) as e:
        model_from_hf(c)
    assert e.value.field == field


def test_unsupported_model_type_names_the_supported_ones():
    with pytest.raises(SpecError) as e:
        model_from_hf({**hf("qwen3_8b"), "model_type": "qwen4"})
    assert all(t in str(e.value) for t in HF_TYPES)


@pytest.mark.parametrize("mt", HF_TYPES)
def test_every_supported_model_type_has_a_reader(mt):
    """``model_from_hf`` picks each type's reader from a table: an empty config of every type
    in HF_TYPES is refused on a missing field by name, not on its type (nor a KeyError)."""
    with pytest.raises(SpecError) as e:
        model_from_hf({"model_type": mt})
    assert e.value.field != "model_type"


@pytest.mark.parametrize("kw,field", [
    (dict(kv_lora_rank=512), "qk_rope_head_dim"),
    (dict(qk_rope_head_dim=64), "qk_rope_head_dim"),
    (dict(num_shared_experts=1), "num_shared_experts"),
    (dict(num_experts=8, moe_router_topk=2, first_k_dense_replace=4), "first_k_dense_replace"),
    (dict(window_kind="local"), "window_kind"),
    (dict(num_nextn_predict_layers=-1), "num_nextn_predict_layers"),
    (dict(hidden_size=250), "hidden_size"),
    (dict(num_experts=8, moe_router_topk=2, moe_router_num_groups=4), "moe_router_group_topk"),
    (dict(num_experts=8, moe_router_topk=4, moe_router_num_groups=4, moe_router_group_topk=1),
     "moe_router_group_topk"),                       # 1 group of 2 experts cannot hold top-4
    (dict(moe_router_num_groups=2, moe_router_group_topk=1), "moe_router_num_groups"),  # dense
])
def test_model_spec_rules(kw, field):
    base = dict(name="m", num_layers=4, hidden_size=256, num_attention_heads=8,
                ffn_hidden_size=1024, vocab_size=1000)
    with pytest.raises(SpecError) as e:
        ModelSpec(**{**base, **kw})
    assert e.value.field == field


def test_hgx_h800_is_deepseek_v3s_node():
    """H800: H100 SXM's die with NVLink cut to 400 GB/s both ways (200 per direction); one
    400 Gb/s InfiniBand NIC per GPU (DeepSeek-V3 report §3.2: IB 50 GB/s per GPU)."""
    from topologies.cluster import parse_cluster_arg
    from topologies.gpus import get_gpu
    c = parse_cluster_arg("hgx-h800:256")
    assert c.num_gpus == 2048 and c.gpu.name == "H800-SXM5-80GB"
    assert c.intra_node_bandwidth == 200e9 and c.nics_per_node == 8
    assert c.inter_node_bandwidth == 50e9
    h100 = get_gpu("H100")
    assert c.gpu.peak_flops == h100.peak_flops and c.gpu.hbm_bandwidth == h100.hbm_bandwidth


@pytest.mark.parametrize("cmd", [
    ["estimate", "--plan", "tp=2,pp=2,ep=4,gbs=64"],
    ["compare", "--plan", "tp=2,pp=2,ep=4,gbs=64"],
])
def test_reports_carry_the_parameter_counts(tmp_path, capsys, cmd):
    """``inputs.model.params_total``/``params_active`` in the JSON report, and the model the
    report resolved can be given back as an input (its counts are checked, not set)."""
    from simulator.cli.main import main
    m = model_preset("qwen3-30b-a3b")
    rc = main([cmd[0], "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:2", *cmd[1:], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    mo = out["inputs"]["model"]
    assert (mo["params_total"], mo["params_active"], mo["params_mtp"]) == \
        (m.num_params(), m.active_params(), 0)
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in mo.items() if k != "name"}))
    assert replace(load_model_arg(str(path)), name=m.name) == m
    path.write_text(json.dumps({**mo, "params_total": 1}))
    with pytest.raises(SpecError, match="params_total=1"):
        load_model_arg(str(path))


def test_megatron_launch_arguments_carry_the_architecture():
    """The Megatron-LM command of a plan builds the same model: MLA, shared experts, dense
    first layers, MTP, the expert bias (DeepSeek-V3); head size and q/k norms (Qwen3)."""
    from strategies.job import make_job
    from strategies.launch import megatron_args
    from strategies.plan import parse_plan
    from topologies.cluster import parse_cluster_arg
    job = make_job(model_preset("deepseek-v3"), parse_cluster_arg("hgx-h800:256"),
                   parse_plan("pp=1,ep=64,gbs=16384"))
    text, _ = megatron_args(job)
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512",
                 "--qk-head-dim 128", "--qk-pos-emb-head-dim 64", "--v-head-dim 128",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq '([0]*3+[1]*58)'",
                 "--mtp-num-layers 1", "--moe-router-enable-expert-bias", "--num-experts 256",
                 "--moe-router-num-groups 8", "--moe-router-group-topk 4"):
        assert flag in text, flag
    job = make_job(model_preset("qwen3-30b-a3b"), parse_cluster_arg("dgx-h100:1"),
                   parse_plan("ep=8,gbs=64"))
    text, notes = megatron_args(job)
    assert "--kv-channels 128" in text and "--qk-layernorm" in text and not notes
    assert "--moe-layer-freq" not in text and "--multi-latent-attention" not in text
