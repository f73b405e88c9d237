"""DeepSeek-V4 (``model_type`` deepseek_v4, ``strategies.model.dsv4``): the parameter counts
against the model card and an independent count of the checkpoint's tensors, the preset
against its config.json, the refused configs, the compressed-attention counts against brute
force, and context parallelism refused by name (the cost: tests/test_dsv4_cost.py)."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.cost.sparse_attention import (attended_keys, compressed_selected,
                                              compressed_visible, indexer_scores,
                                              sparse_flops_fwd_per_token)
from strategies.errors import SpecError
from strategies.hf_config import load_model_arg, model_from_hf
from strategies.model import model_from_mapping
from strategies.presets import model_preset

HF = Path(__file__).resolve().parent / "data" / "hf" / "deepseek_v4_flash.json"


def cfg() -> dict:
    return json.loads(HF.read_text())


def _count(shapes) -> int:
    return sum(math.prod(s) for s in shapes)


def _checkpoint_shapes(c: dict) -> tuple[list, list]:
    """The trainable tensors of DeepSeek-V4's main model and of its prediction modules, by
    module as Megatron-Core builds them (attention: ``wq_a``, ``q_norm``, ``wq_b``, ``wkv``,
    ``kv_norm``, ``wo_a``, ``wo_b``, ``attn_sink``; per ratio a compressor ``wkv``/``wgate``/
    ``ape``/``norm``, at 4 an indexer ``wq_b``/``weights_proj`` and its compressor; the
    hyper-connections' ``fn``/``base``/``scale`` around attention and MLP; experts, shared
    expert, gate and, outside the hash layers, its bias; the head's ``hc_head_*``)."""
    h, a, d, V = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["vocab_size"]
    q, ol, og = c["q_lora_rank"], c["o_lora_rank"], c["o_groups"]
    E, f, n = c["n_routed_experts"], c["moe_intermediate_size"], c["hc_mult"]
    hi, di = c["index_n_heads"], c["index_head_dim"]
    mix = n * n + 2 * n

    def comp(r, hd):
        co = 2 if r == 4 else 1
        return [(co * hd, h), (co * hd, h), (r, co * hd), (hd,)]

    def layer(i, r):
        out = [(h,), (h,), (q, h), (q,), (a * d, q), (d, h), (d,), (og, ol, a * d // og),
               (h, og * ol), (a,)]
        out += [(mix, n * h), (mix,), (3,)] * 2
        if r:
            out += comp(r, d)
        if r == 4:
            out += [(hi * di, q), (hi, h)] + comp(4, di)
        out += [(f, h), (f, h), (h, f)] * (E + c["n_shared_experts"]) + [(E, h)]
        if i >= c["num_hash_layers"]:
            out += [(E,)]
        return out
    L = c["num_hidden_layers"]
    main = [(V, h), (V, h), (h,), (n, n * h), (n,), (1,)]
    for i in range(L):
        main += layer(i, c["compress_ratios"][i])
    mtp = []
    for j in range(c["num_nextn_predict_layers"]):      # e_proj, h_proj, enorm, hnorm, norm
        mtp += [(h, h), (h, h), (h,), (h,), (h,), (n, n * h), (n,), (1,)]
        mtp += layer(L + j, c["compress_ratios"][L + j])
    return main, mtp


def test_counts_are_the_checkpoints_tensors():
    main, mtp = _checkpoint_shapes(cfg())
    m = model_from_hf(cfg(), "flash")
    assert m.num_params() == _count(main) == 284_332_240_471
    assert m.mtp_params() == _count(mtp)


def test_counts_round_to_the_model_card():
    """The card: "284B total parameters, 13B activated" (DeepSeek leaves the embedding out of
    the activated count, as for V3)."""
    m = model_preset("deepseek-v4-flash")
    assert round(m.num_params() / 1e9) == 284
    assert round(m.active_params(embedding=False) / 1e9) == 13
    assert m.active_params(embedding=False) == 13_270_101_591
    idle = 43 * 250 * 3 * 4096 * 2048
    assert m.num_params() - m.active_params(embedding=False) == idle + 129280 * 4096


def test_the_preset_is_its_config():
    m = load_model_arg(str(HF))
    p = model_preset("deepseek-v4-flash")
    assert replace(m, name=p.name, seq_length=p.seq_length) == p
    assert p.attention_kind_counts() == {"sliding_attention": 2,
                                         "compressed_sparse_attention": 21,
                                         "heavily_compressed_attention": 20}
    assert p.layer_counts() == {"dense": 0, "moe": 43}


def test_native_layer_types_read_as_compress_ratios():
    c = cfg()
    names = {0: "sliding_attention", 4: "compressed_sparse_attention",
             128: "heavily_compressed_attention"}
    lt = [names[r] for r in c.pop("compress_ratios")[:43]]
    hashed = c.pop("num_hash_layers")
    c.update(layer_types=lt, compress_rates={"compressed_sparse_attention": 4,
                                             "heavily_compressed_attention": 128},
             mlp_layer_types=["hash_moe"] * hashed + ["moe"] * (43 - hashed))
    assert model_from_hf(c, "x") == model_from_hf(cfg(), "x")


def test_a_report_reads_back():
    p = model_preset("deepseek-v4-flash")
    d = json.loads(json.dumps(p.report_dict()))
    d.pop("name")
    assert model_from_mapping(d, name=p.name) == p


@pytest.mark.parametrize("edit,field", [
    (lambda c: c.update(attention_bias=True), "attention_bias"),
    (lambda c: c.update(num_key_value_heads=2), "num_key_value_heads"),
    (lambda c: c["compress_ratios"].__setitem__(5, 16), "compress_ratios"),
    (lambda c: c["compress_ratios"].__setitem__(43, 4), "compress_ratios"),
    (lambda c: c.update(compress_ratios=[0] * 40), "compress_ratios"),
    (lambda c: c.update(dspark_markov_rank=256), "dspark_markov_rank"),
    (lambda c: c.update(o_groups=7), "o_groups"),
    (lambda c: c.update(first_k_dense_replace=1), "first_k_dense_replace"),
    (lambda c: c.update(topk_method="greedy"), "topk_method"),
    (lambda c: c.update(num_hash_layers=44), "num_hash_layers"),
    (lambda c: (c.pop("num_hash_layers"), c.update(mlp_layer_types=["moe", "hash_moe"] +
                                                   ["moe"] * 41)), "mlp_layer_types"),
    (lambda c: c.pop("index_topk"), "index_topk"),
    (lambda c: c.pop("o_lora_rank"), "o_lora_rank"),
])
def test_bad_configs_name_the_field(edit, field):
    c = cfg()
    edit(c)
    with pytest.raises(SpecError) as e:
        model_from_hf(c, "x")
    assert e.value.field == field


def test_dsv4_fields_need_compress_ratios():
    with pytest.raises(SpecError) as e:
        replace(model_preset("deepseek-v3"), o_lora_rank=1024)
    assert e.value.field == "o_lora_rank"


# ------------------------------------------------------------ compressed attention counts
@pytest.mark.parametrize("s", [1, 3, 4, 5, 127, 128, 129, 511, 2048, 2049, 4096, 5000])
@pytest.mark.parametrize("r,k", [(4, 512), (128, 512), (4, 3), (2, 1)])
def test_compressed_counts_are_the_brute_force_sums(s, r, k):
    assert compressed_visible(s, r) == sum((j + 1) // r for j in range(s))
    assert compressed_selected(s, r, k) == sum(min(k, (j + 1) // r) for j in range(s))


@pytest.mark.parametrize("ratio", [0, 4, 128])
@pytest.mark.parametrize("s", [100, 4096, 6000])
def test_attended_keys_per_query_are_the_window_and_the_compressed(ratio, s):
    m = model_preset("deepseek-v4-flash")
    want = 0
    for i in range(s):
        c = (i + 1) // ratio if ratio else 0
        want += min(i + 1, 128) + (min(512, c) if ratio == 4 else c)
    assert attended_keys(m, ratio, s) == want
    if ratio == 4:
        assert indexer_scores(m, s) == sum((i + 1) // 4 for i in range(s))


def test_sparse_flops_closed_form():
    m = model_preset("deepseek-v4-flash")
    s, a, d, h = 4096, 64, 512, 4096
    f = sparse_flops_fwd_per_token(m, 4)
    keys = (128 * 129 // 2 + (s - 128) * 128) + (4 * 512 * 511 // 2 + (s - 2048 + 1) * 512)
    assert abs(f["core"] - 4 * a * d * keys / s) <= 1e-12 * f["core"]
    scored = 4 * 1024 * 1023 // 2 + 1024
    assert abs(f["indexer"] - (2 * 64 * 128 * scored / s + 2 * 1024 * 64 * 128 + 2 * h * 64)) \
        <= 1e-12 * f["indexer"]
    assert f["compressor"] == 4 * h * 2 * d + 4 * h * 2 * 128
    assert sparse_flops_fwd_per_token(m, 0)["compressor"] == 0


def test_context_parallelism_is_refused_by_name():
    from strategies.job import make_job
    from strategies.plan import Plan
    from topologies.cluster import parse_cluster_arg
    with pytest.raises(SpecError) as e:
        make_job(model_preset("deepseek-v4-flash"), parse_cluster_arg("gb200-nvl72:32"),
                 Plan(tp=1, pp=1, cp=2, ep=64), global_batch=2048)
    assert e.value.field == "cp"
