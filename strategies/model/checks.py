"""The rules a ``ModelSpec`` is checked against when it is made (``check_spec``): every size a
positive integer within its sanity limit (``topologies.limits``), the attention fields
consistent (multi-head latent attention or grouped-query), the mixture-of-experts fields
consistent, the activation, norm, position embedding and window kind known. ``SpecError``
names the field, the value and the rule.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strategies.errors import SpecError
from topologies.limits import (MAX_EXPERTS, MAX_FFN, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ,
                               MAX_VOCAB, check_bool, check_int, check_name)

if TYPE_CHECKING:
    from strategies.model.spec import ModelSpec

ACTIVATIONS = ("gelu", "swiglu", "squared_relu", "relu")
NORMS = ("layernorm", "rmsnorm")
WINDOW_KINDS = ("sliding", "chunked")
LAYER_KINDS = ("dense", "moe", "mamba", "attention")   # the last two: hybrid models
_MLA_DIMS = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")

# Sanity limits per field (topologies.limits); the shapes of every model built so far are
# orders of magnitude inside them.
_LIMITS = {"num_layers": MAX_LAYERS, "hidden_size": MAX_HIDDEN, "num_attention_heads": MAX_HEADS,
           "num_query_groups": MAX_HEADS, "ffn_hidden_size": MAX_FFN, "moe_ffn_hidden_size": MAX_FFN,
           "shared_expert_ffn_hidden_size": MAX_FFN, "vocab_size": MAX_VOCAB,
           "seq_length": MAX_SEQ, "max_position_embeddings": 1 << 40, "sliding_window": MAX_SEQ,
           "num_experts": MAX_EXPERTS, "moe_router_topk": MAX_EXPERTS,
           "num_shared_experts": MAX_EXPERTS, "kv_channels": MAX_HIDDEN, "q_lora_rank": MAX_HIDDEN,
           "kv_lora_rank": MAX_HIDDEN, "qk_rope_head_dim": MAX_HIDDEN,
           "qk_nope_head_dim": MAX_HIDDEN, "v_head_dim": MAX_HIDDEN,
           "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS,
           "num_nextn_predict_layers": MAX_LAYERS, "global_attention_every": MAX_LAYERS,
           "moe_router_num_groups": MAX_EXPERTS, "moe_router_group_topk": MAX_EXPERTS,
           # DeepSeek-V4 (strategies.model.dsv4.DSV4_FIELDS): ranks and head widths as the
           # others, head and group counts as heads, the indexer's keys as a sequence
           "o_lora_rank": MAX_HIDDEN, "o_groups": MAX_HEADS, "index_n_heads": MAX_HEADS,
           "index_head_dim": MAX_HIDDEN, "index_topk": MAX_SEQ}


def check_spec(spec: "ModelSpec") -> None:
    """``SpecError`` (field, value, rule) for the first rule ``spec`` breaks (module
    docstring); what ``ModelSpec.__post_init__`` runs."""
    check_name("name", spec.name)
    for f in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
              "vocab_size", "seq_length", "num_experts", "moe_router_topk", "moe_layer_freq"):
        check_positive(f, getattr(spec, f))
    for f in ("num_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers",
              "global_attention_every"):
        check_int(f, getattr(spec, f), 0, _LIMITS.get(f))
    for f in ("tie_word_embeddings", "bias", "qkv_bias", "qk_norm", "shared_expert_gate",
              "router_bias", "attention_sinks", "dropout", "embedding_norm"):
        check_bool(f, getattr(spec, f))
    for f in ("max_position_embeddings", "kv_channels", "q_lora_rank", "kv_lora_rank",
              *_MLA_DIMS, "shared_expert_ffn_hidden_size", "moe_ffn_hidden_size",
              "sliding_window", "moe_router_num_groups", "moe_router_group_topk"):
        if getattr(spec, f) is not None:
            check_positive(f, getattr(spec, f))
    if spec.max_position_embeddings is not None:
        if spec.position_embedding == "learned" and spec.seq_length > spec.max_position_embeddings:
            raise SpecError("seq_length", spec.seq_length, "must be <= max_position_embeddings="
                            f"{spec.max_position_embeddings} (learned position embeddings)")
    if spec.num_query_groups is not None:
        check_positive("num_query_groups", spec.num_query_groups)
        if spec.num_attention_heads % spec.num_query_groups:
            raise SpecError("num_query_groups", spec.num_query_groups,
                            f"must divide num_attention_heads={spec.num_attention_heads}")
    _check_attention(spec)
    _check_moe(spec)
    if spec.activation not in ACTIVATIONS:
        raise SpecError("activation", spec.activation, f"must be one of {', '.join(ACTIVATIONS)}")
    if spec.norm not in NORMS:
        raise SpecError("norm", spec.norm, f"must be one of {', '.join(NORMS)}")
    if spec.position_embedding not in ("learned", "rope", "alibi", "none"):
        raise SpecError("position_embedding", spec.position_embedding,
                        "must be one of learned, rope, alibi, none")
    if spec.window_kind not in WINDOW_KINDS:
        raise SpecError("window_kind", spec.window_kind, f"must be one of {', '.join(WINDOW_KINDS)}")
    _check_variants(spec)
    from strategies.model.dsv4 import check_dsv4
    check_dsv4(spec)
    if spec.is_hybrid:
        from strategies.model.hybrid import check_hybrid
        check_hybrid(spec)
    else:
        from strategies.model.hybrid import MAMBA_FIELDS
        for f in MAMBA_FIELDS:
            if getattr(spec, f) is not None:
                raise SpecError(f, getattr(spec, f), "needs hybrid_pattern (a Mamba layer)")
    from strategies.model.latent import check_latent_mtp
    check_latent_mtp(spec)

def _check_variants(spec: "ModelSpec") -> None:
    c = spec.activation_clamp
    if c is not None:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < 1e6:
            raise SpecError("activation_clamp", c, "must be a number in (0, 1e6) or null")
        if not spec.gated:
            raise SpecError("activation_clamp", c, "needs a gated activation (swiglu): the "
                            f"clamp bounds its two halves, activation={spec.activation!r}")
    f = spec.rope_attention_factor
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1e3:
        raise SpecError("rope_attention_factor", f, "must be a number in (0, 1000)")
    if f != 1.0 and spec.position_embedding != "rope":
        raise SpecError("rope_attention_factor", f, "needs position_embedding='rope', "
                        f"not {spec.position_embedding!r}")

def _check_attention(spec: "ModelSpec") -> None:
    if spec.is_mla:
        for f in _MLA_DIMS:
            if getattr(spec, f) is None:
                raise SpecError(f, None, "is required with kv_lora_rank (multi-head latent "
                                "attention)")
        for f, bad in (("kv_channels", spec.kv_channels is not None),
                       ("num_query_groups", spec.num_query_groups not in (None, spec.num_attention_heads)),
                       ("bias", spec.bias), ("qkv_bias", spec.qkv_bias)):
            if bad:
                raise SpecError(f, getattr(spec, f), "must be unset with kv_lora_rank "
                                "(multi-head latent attention has no GQA, head size or biases "
                                "of its own)")
    else:
        # DeepSeek-V4 (compress_ratios) keeps MLA's low-rank query without its latent KV
        lora_q = () if spec.compress_ratios is not None else ("q_lora_rank",)
        for f in (*lora_q, *_MLA_DIMS):
            if getattr(spec, f) is not None:
                raise SpecError(f, getattr(spec, f), "needs kv_lora_rank (multi-head latent "
                                "attention)")
        if spec.kv_channels is None and spec.hidden_size % spec.num_attention_heads:
            raise SpecError("hidden_size", spec.hidden_size,
                            f"must be divisible by num_attention_heads={spec.num_attention_heads}"
                            " (or give kv_channels, the head size)")

def _check_moe(spec: "ModelSpec") -> None:
    if spec.moe_router_topk > spec.num_experts:
        raise SpecError("moe_router_topk", spec.moe_router_topk,
                        f"must be <= num_experts={spec.num_experts}")
    if not spec.is_moe:
        for f, v in (("num_shared_experts", spec.num_shared_experts),
                     ("first_k_dense_replace", spec.first_k_dense_replace),
                     ("shared_expert_gate", spec.shared_expert_gate),
                     ("router_bias", spec.router_bias),
                     ("moe_router_num_groups", spec.moe_router_num_groups)):
            if v:
                raise SpecError(f, v, "needs an MoE model (num_experts > 1)")
        return
    if spec.num_moe_layers == 0:
        raise SpecError("first_k_dense_replace", spec.first_k_dense_replace,
                        f"leaves no MoE layer among num_layers={spec.num_layers} with "
                        f"moe_layer_freq={spec.moe_layer_freq}")
    if spec.shared_expert_gate and not spec.num_shared_experts:
        raise SpecError("shared_expert_gate", True, "needs num_shared_experts >= 1")
    g, gk = spec.moe_router_num_groups, spec.moe_router_group_topk
    if (g is None) != (gk is None):
        raise SpecError("moe_router_group_topk" if g else "moe_router_num_groups", None,
                        "group-limited routing needs both moe_router_num_groups and "
                        "moe_router_group_topk")
    if g is not None:
        if spec.num_experts % g:
            raise SpecError("moe_router_num_groups", g,
                            f"must divide num_experts={spec.num_experts}")
        if gk > g or spec.moe_router_topk > gk * (spec.num_experts // g):
            raise SpecError("moe_router_group_topk", gk, f"must be <= moe_router_num_groups="
                            f"{g} and leave room for moe_router_topk={spec.moe_router_topk} "
                            f"experts ({spec.num_experts // g} per group)")


def check_kind(kind: str) -> None:
    """``SpecError`` unless ``kind`` is a layer kind (``dense``, ``moe``; a hybrid model's
    ``mamba`` and ``attention`` too)."""
    if kind not in LAYER_KINDS:
        raise SpecError("layer kind", kind, f"must be one of {', '.join(LAYER_KINDS)}")


def check_positive(name: str, v: Any) -> None:
    """``SpecError`` unless field ``name``'s value ``v`` is an integer from 1 to its limit."""
    check_int(name, v, 1, _LIMITS.get(name))

