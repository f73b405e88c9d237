"""``model_type`` llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe: the Llama
layout, Qwen's QKV bias / QK norm, Mistral's window, Mixtral's and Qwen's experts."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import (READ_COMMON, ROPE_KEYS, attention_bias, common_fields,
                                         rope_attention, windows)
from strategies.hf_config.reading import get_bool, get_int, refuse_unread


def _dense_layers(cfg: Mapping[str, Any], layers: int) -> int:
    """``first_k_dense_replace`` of Qwen-MoE's ``mlp_only_layers``: a layer listed there has a
    dense MLP whatever ``decoder_sparse_step`` says (transformers ``Qwen3MoeDecoderLayer``:
    ``layer_idx not in config.mlp_only_layers and (layer_idx + 1) % decoder_sparse_step ==
    0``), so the leading run ``[0, k)`` is exactly ``first_k_dense_replace = k`` (in any order);
    any other pattern is refused (absent, null or empty: 0)."""
    v = cfg.get("mlp_only_layers")
    if v is None or v == []:
        return 0
    if not isinstance(v, list) or not all(type(i) is int for i in v):
        raise SpecError("mlp_only_layers", v, "must be a list of layer indices")
    if sorted(set(v)) != list(range(len(set(v)))) or len(set(v)) >= layers:
        raise SpecError("mlp_only_layers", v, f"only the leading layers [0, ..., k-1] with "
                        f"k < num_hidden_layers={layers} are modelled as dense (read as "
                        "first_k_dense_replace=k); dense layers elsewhere are not")
    return len(set(v))


def _qkv_bias(cfg: Mapping[str, Any], mt: str) -> bool:
    """Qwen2's bias on q, k and v alone: always on ``qwen2``/``qwen2_moe`` unless the config
    says ``qkv_bias: false`` (transformers 5's ``Qwen2MoeConfig`` writes the key, default
    true); another type with ``qkv_bias`` true is refused."""
    if cfg.get("qkv_bias") is None:
        return mt in ("qwen2", "qwen2_moe")
    v = get_bool(cfg, "qkv_bias")
    if v and mt not in ("qwen2", "qwen2_moe"):
        raise SpecError("qkv_bias", True, f"a bias on q, k and v alone is modelled for "
                        f"model_type qwen2 and qwen2_moe, not {mt}")
    return v


def read_llama_like(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe."""
    read = set(READ_COMMON)
    args = common_fields(cfg)
    args["ffn_hidden_size"] = get_int(cfg, "intermediate_size")
    args["bias"] = attention_bias(cfg, mt)
    args["qkv_bias"] = _qkv_bias(cfg, mt)
    read |= {"qkv_bias", *ROPE_KEYS}
    args.update(rope_attention(cfg, mt))
    args["qk_norm"] = mt in ("qwen3", "qwen3_moe")
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        read |= {"use_sliding_window", "sliding_window"}
        if get_bool(cfg, "use_sliding_window"):
            raise SpecError("use_sliding_window", True, "Qwen's sliding window on the layers "
                            "past max_window_layers is not modelled")
    if mt == "mistral":
        read.add("sliding_window")
        if cfg.get("sliding_window") is not None:
            args["sliding_window"] = get_int(cfg, "sliding_window")
    read.add("layer_types")
    if mt != "mistral":
        args.update(windows(cfg, args["num_layers"]))
    if mt == "mixtral":
        read |= {"num_local_experts", "num_experts_per_tok", "sliding_window"}
        if cfg.get("sliding_window") is not None:
            args["sliding_window"] = get_int(cfg, "sliding_window")
        experts = get_int(cfg, "num_local_experts", 1)
        args.update(num_experts=experts,
                    moe_router_topk=get_int(cfg, "num_experts_per_tok", 2) if experts > 1 else 1)
    if mt in ("qwen2_moe", "qwen3_moe"):
        read |= {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "decoder_sparse_step", "mlp_only_layers"}
        args.update(num_experts=get_int(cfg, "num_experts"),
                    moe_router_topk=get_int(cfg, "num_experts_per_tok"),
                    moe_ffn_hidden_size=get_int(cfg, "moe_intermediate_size"),
                    moe_layer_freq=get_int(cfg, "decoder_sparse_step", 1),
                    first_k_dense_replace=_dense_layers(cfg, args["num_layers"]))
    if mt == "qwen2_moe":
        read.add("shared_expert_intermediate_size")
        shared = get_int(cfg, "shared_expert_intermediate_size", 0, lo=0)
        if shared:
            args.update(num_shared_experts=1, shared_expert_ffn_hidden_size=shared,
                        shared_expert_gate=True)
    refuse_unread(cfg, mt, read)
    return args
