"""``model_type`` deepseek_v4: per-layer compressed sparse attention with a sliding window, one
key/value head, the grouped low-rank output projection, hyper-connections, hash-routed first
MoE layers, routed and shared experts with the clamped SwiGLU, and multi-token prediction
(``strategies.model.dsv4``). The keys as DeepSeek's checkpoints write them
(``compress_ratios``, ``num_hash_layers``) or as transformers' native config does
(``layer_types`` with ``compress_rates``, ``mlp_layer_types``), read as Megatron-Bridge reads
them (``models/deepseek/deepseek_v4_bridge.py`` at 067f987d, ``_dsv4_compress_ratios``,
``_dsv4_num_hash_layers``, ``provider_bridge``).
"""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import READ_COMMON, common_fields
from strategies.hf_config.reading import get_bool, get_int, open_number, refuse_unread
from strategies.model.dsv4 import RATIO_KINDS

#: DeepSeek-V4's router scores (``scoring_func``) and top-k methods (``topk_method``).
DSV4_SCORES = ("sqrtsoftplus", "sigmoid", "softmax")

#: Keys read here beyond ``READ_COMMON``. ``hc_sinkhorn_iters``: the Sinkhorn normalisation of
#: each token's ``n x n`` residual mixing, priced by its HBM traffic
#: (``dsv4_cost.sinkhorn_bytes_per_token``); ``hc_eps`` changes no cost;
#: ``rope_theta``/``compress_rope_theta``/``rope_scaling`` change no cost (Megatron-Core's
#: DSv4 attention forces YaRN's attention factor to 1: ``deepseek_v4_hybrid_attention.py``
#: l.364-366); ``expert_dtype`` and ``quantization_config`` are the checkpoint's storage,
#: not the training precision (the plan's).
_READ = READ_COMMON | {
    "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "q_lora_rank", "o_lora_rank", "o_groups", "qk_rope_head_dim", "sliding_window",
    "compress_ratios", "layer_types", "compress_rates", "index_n_heads", "index_head_dim",
    "index_topk", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "num_hash_layers",
    "mlp_layer_types", "num_nextn_predict_layers", "swiglu_limit", "scoring_func",
    "topk_method", "rope_scaling", "rope_theta", "compress_rope_theta", "expert_dtype",
    "quantization_config", "first_k_dense_replace", "moe_layer_freq"}

#: Keys whose other values are not modelled: (key, the value modelled, why).
_FIXED = (("attention_bias", False, "biases on its attention are not modelled"),
          ("num_key_value_heads", 1, "one key/value head"),
          ("first_k_dense_replace", 0, "every layer MoE"),
          ("moe_layer_freq", 1, "every layer MoE"))


def read_deepseek_v4(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """deepseek_v4 (module docstring): the ``ModelSpec`` arguments."""
    args = common_fields(cfg)
    layers, heads = args["num_layers"], args["num_attention_heads"]
    for key, want, why in _FIXED:
        got = get_bool(cfg, key) if isinstance(want, bool) else get_int(cfg, key, want, lo=0)
        if got != want:
            raise SpecError(key, cfg[key], f"must be {want} for model_type=deepseek_v4 ({why})")
    head = get_int(cfg, "head_dim")
    rope = get_int(cfg, "qk_rope_head_dim", 0, lo=0)
    if rope >= head:
        raise SpecError("qk_rope_head_dim", rope, f"must be below head_dim={head}")
    score = cfg.get("scoring_func", "sqrtsoftplus")
    if score not in DSV4_SCORES:
        raise SpecError("scoring_func", score, f"must be one of {', '.join(DSV4_SCORES)}")
    if cfg.get("topk_method", "noaux_tc") != "noaux_tc":
        raise SpecError("topk_method", cfg["topk_method"], "must be noaux_tc for "
                        "model_type=deepseek_v4 (an expert bias per expert)")
    mtp = get_int(cfg, "num_nextn_predict_layers", 0, lo=0)
    moe = get_int(cfg, "moe_intermediate_size")
    args.update(
        num_query_groups=1, kv_channels=head, ffn_hidden_size=moe, moe_ffn_hidden_size=moe,
        num_experts=get_int(cfg, "n_routed_experts"),
        moe_router_topk=get_int(cfg, "num_experts_per_tok"),
        num_shared_experts=get_int(cfg, "n_shared_experts", 0, lo=0),
        q_lora_rank=get_int(cfg, "q_lora_rank"), o_lora_rank=get_int(cfg, "o_lora_rank"),
        o_groups=get_int(cfg, "o_groups"), sliding_window=get_int(cfg, "sliding_window"),
        compress_ratios=compress_ratios(cfg, layers, mtp),
        index_n_heads=get_int(cfg, "index_n_heads", None),
        index_head_dim=get_int(cfg, "index_head_dim", None),
        index_topk=get_int(cfg, "index_topk", None),
        hc_streams=get_int(cfg, "hc_mult", 1), num_hash_layers=num_hash_layers(cfg),
        hc_sinkhorn_iters=get_int(cfg, "hc_sinkhorn_iters", 20, lo=0),
        num_nextn_predict_layers=mtp, router_bias=True, attention_sinks=True)
    if cfg.get("swiglu_limit"):
        args["activation_clamp"] = open_number("swiglu_limit", cfg["swiglu_limit"], 0.0, 1e6)
    if heads * head % args["o_groups"]:
        raise SpecError("o_groups", args["o_groups"], f"must divide num_attention_heads·"
                        f"head_dim = {heads * head}")
    refuse_unread(cfg, mt, _READ)
    return args


def compress_ratios(cfg: Mapping[str, Any], layers: int, mtp: int) -> tuple[int, ...]:
    """One ratio per main layer from ``compress_ratios`` (its entries past the main layers,
    the prediction modules' and any padding, must be 0: a sliding-window layer) or from
    ``layer_types`` with ``compress_rates``."""
    cr = cfg.get("compress_ratios")
    if cr is None:
        lt, rates = cfg.get("layer_types"), cfg.get("compress_rates") or {}
        if not isinstance(lt, list) or not isinstance(rates, Mapping):
            raise SpecError("compress_ratios", None, "is required in a deepseek_v4 config.json "
                            "(or layer_types with compress_rates)")
        names = {k: r for r, k in RATIO_KINDS.items()}
        bad = next((t for t in lt if not isinstance(t, str) or t not in names), None)
        if bad is not None:
            raise SpecError("layer_types", bad, f"must be one of {', '.join(names)}")
        for t, r in rates.items():
            if names.get(str(t)) != r or isinstance(r, bool):
                raise SpecError(f"compress_rates.{t}", r, f"must be {names.get(t)} (the ratios "
                                "modelled: strategies.model.dsv4.RATIO_KINDS)")
        cr = [names[t] for t in lt]
    if not isinstance(cr, list) or len(cr) < layers:
        raise SpecError("compress_ratios", cr, f"must list a ratio for each of the {layers} "
                        "layers")
    for r in cr:
        if isinstance(r, bool) or not isinstance(r, int) or r not in RATIO_KINDS:
            raise SpecError("compress_ratios", r, f"must be one of {sorted(RATIO_KINDS)}")
    if any(cr[layers:]):
        raise SpecError("compress_ratios", cr[layers:], f"past the {layers} layers (the {mtp} "
                        "prediction modules) must be 0: a prediction module with compressed "
                        "attention is not modelled")
    return tuple(cr[:layers])


def num_hash_layers(cfg: Mapping[str, Any]) -> int:
    """``num_hash_layers``, or the leading ``hash_moe`` entries of ``mlp_layer_types`` (which
    must be a prefix, then ``moe``)."""
    if cfg.get("num_hash_layers") is not None:
        return get_int(cfg, "num_hash_layers", 0, lo=0)
    kinds = cfg.get("mlp_layer_types") or []
    if not isinstance(kinds, list):
        raise SpecError("mlp_layer_types", kinds, "must be a list of hash_moe then moe")
    n = next((i for i, k in enumerate(kinds) if k != "hash_moe"), len(kinds))
    bad = next((k for k in kinds[n:] if k != "moe"), None)
    if bad is not None:
        raise SpecError("mlp_layer_types", bad, "must be hash_moe layers first, then moe")
    return n
