"""``model_type: nemotron_h`` (NVIDIA Nemotron-H, Nemotron Nano 2, Nemotron 3): a HuggingFace
``NemotronHConfig`` onto ``ModelSpec`` fields (``strategies.model.hybrid``).

Read as transformers' ``NemotronHConfig`` and the model cards' config.json spell them:
``hybrid_override_pattern`` (or ``layers_block_type``, the newer list spelling), the Mamba-2
mixer (``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``,
``conv_kernel``, ``chunk_size``, ``use_conv_bias``, ``mamba_proj_bias``/``use_bias``,
``mamba_hidden_act`` silu), the attention (GQA, ``head_dim``/``attention_head_dim``, no
position embedding: Megatron-Bridge ``nemotron_h_bridge.py`` sets
``position_embedding_type="none"``), the MLP (``intermediate_size``, ``mlp_hidden_act``
relu2: squared ReLU, not gated) and Nemotron 3's experts (``n_routed_experts``,
``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts`` with
``moe_shared_expert_intermediate_size``, the ``e_score_correction_bias`` router bias, group
routing ``n_group``/``topk_group``). ``expand`` is read and not used: the mixer's width is
``mamba_num_heads * mamba_head_dim`` (HF ``NemotronHMamba2Mixer``; Megatron-Core
``mamba_mixer.py`` l.246-248). Nemotron 3 Super's and Ultra's latent MoE
(``moe_latent_size``) and the hybrid multi-token prediction (``num_nextn_predict_layers``
modules of the layers ``mtp_hybrid_override_pattern`` or ``mtp_layers_block_type`` lists;
``strategies.model.latent``). Refused by name: windows, another activation, an MTP count
without its block's layers (or the reverse).
"""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import READ_COMMON, common_fields
from strategies.hf_config.reading import (config_key, get_bool, get_int, group_routing,
                                          refuse_unread)
from strategies.model.hybrid import MAMBA_FIELDS, check_pattern

#: ``layers_block_type`` names -> pattern characters (transformers' NemotronHConfig).
_BLOCK_CHARS = {"mamba": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
#: Mamba fields whose transformers default is not a fact about the checkpoint: stated or refused
#: (``(config.json key, ModelSpec field)``, the keys as ``reading.config_key`` names them).
_MAMBA_REQUIRED = tuple((config_key(f), f) for f in MAMBA_FIELDS)
READ = {"hybrid_override_pattern", "layers_block_type", "mamba_num_heads", "mamba_head_dim",
        "ssm_state_size", "n_groups", "conv_kernel", "chunk_size", "expand", "use_conv_bias",
        "mamba_proj_bias", "use_bias", "mlp_hidden_act", "mamba_hidden_act", "attention_head_dim",
        "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
        "moe_shared_expert_intermediate_size", "n_group", "topk_group", "moe_latent_size",
        "num_nextn_predict_layers", "mtp_hybrid_override_pattern", "mtp_layers_block_type",
        "sliding_window", "attention_dropout", "hidden_dropout"}
#: Known keys that change neither FLOPs, bytes nor memory of training (initialisation,
#: numerics of the scan's dt, norms' epsilon, inference caches).
NEUTRAL = {"time_step_min", "time_step_max", "time_step_floor", "time_step_limit",
           "time_step_rank", "rescale_prenorm_residual", "residual_in_fp32", "norm_eps",
           "layer_norm_epsilon", "rope_theta", "partial_rotary_factor", "use_mamba_kernels",
           "mamba_ssm_cache_dtype", "num_logits_to_keep", "initializer_range",
           "routed_scaling_factor", "norm_topk_prob", "use_cache"}


def _spelled(cfg: Mapping[str, Any], pattern_key: str, blocks_key: str) -> Any:
    """The pattern ``cfg[pattern_key]`` or the one its list spelling ``cfg[blocks_key]``
    gives (``_BLOCK_CHARS``), refused by name where the list is bad or they disagree."""
    p = cfg.get(pattern_key)
    blocks = cfg.get(blocks_key)
    if blocks is not None:
        if not isinstance(blocks, list) or any(b not in _BLOCK_CHARS for b in blocks):
            raise SpecError(blocks_key, blocks, "must list one of "
                            f"{', '.join(_BLOCK_CHARS)} per layer")
        q = "".join(_BLOCK_CHARS[b] for b in blocks)
        if p is not None and p != q:
            raise SpecError(pattern_key, p, f"disagrees with {blocks_key} ({q})")
        p = q
    return p


def _pattern(cfg: Mapping[str, Any]) -> str:
    """The main pattern (``_spelled``), refused by name where absent or not a pattern
    (``hybrid.check_pattern``: before its ``M`` and ``E`` decide which fields are read)."""
    p = _spelled(cfg, "hybrid_override_pattern", "layers_block_type")
    if p is None:
        raise SpecError("hybrid_override_pattern", p, "is required in a nemotron_h config.json "
                        "(one of M, *, -, E per layer)")
    return check_pattern("hybrid_override_pattern", p)


def read_nemotron_h(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """nemotron_h: the hybrid Mamba-2 / attention / MoE models."""
    args = nemotron_h_args(cfg, common_fields(cfg))
    refuse_unread(cfg, mt, READ_COMMON | READ | NEUTRAL)
    return args


def nemotron_h_args(cfg: Mapping[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """``ModelSpec`` arguments of a nemotron_h config: ``common`` (``common.common_fields``'s
    shared fields) with the pattern, the mixer, the MLP and the experts."""
    p = _pattern(cfg)
    layers = common["num_layers"]
    if len(p) != layers:
        raise SpecError("hybrid_override_pattern", p, f"must have one character per layer "
                        f"(num_hidden_layers={layers}, pattern has {len(p)})")
    for key, want in (("mlp_hidden_act", "relu2"), ("mamba_hidden_act", "silu")):
        v = cfg.get(key, want)
        if v != want:
            raise SpecError(key, v, f"must be {want!r}: the only activation modelled for "
                            "model_type=nemotron_h")
    if cfg.get("sliding_window"):
        raise SpecError("sliding_window", cfg["sliding_window"], "is not modelled for "
                        "model_type=nemotron_h (windows are not)")
    hidden, heads = common["hidden_size"], common["num_attention_heads"]
    hd = get_int(cfg, "head_dim", None) or get_int(cfg, "attention_head_dim", None)
    args = dict(common, hybrid_pattern=p, activation="squared_relu", position_embedding="none",
                kv_channels=None if hd is None or hd * heads == hidden else hd,
                ffn_hidden_size=get_int(cfg, "intermediate_size"),
                dropout=common["dropout"] or bool(cfg.get("hidden_dropout")))
    bias = get_bool(cfg, "use_bias")
    if get_bool(cfg, "attention_bias") or get_bool(cfg, "mlp_bias"):
        raise SpecError("attention_bias" if get_bool(cfg, "attention_bias") else "mlp_bias",
                        True, "biases on a nemotron_h model's attention or MLP are not modelled")
    if "M" in p:
        for key, field in _MAMBA_REQUIRED:
            if cfg.get(key) is None:
                raise SpecError(key, None, "is required in a nemotron_h config.json with Mamba "
                                "layers (transformers' default is not the checkpoint's)")
            args[field] = get_int(cfg, key)
        args["mamba_conv_bias"] = get_bool({"use_conv_bias": cfg.get("use_conv_bias", True)},
                                           "use_conv_bias")
        args["mamba_proj_bias"] = get_bool(cfg, "mamba_proj_bias") or bias
        get_int(cfg, "expand", None)        # stated by the cards, not what sizes the mixer
    if "E" in p:
        shared = get_int(cfg, "n_shared_experts", 0, lo=0)
        args.update(num_experts=get_int(cfg, "n_routed_experts"),
                    moe_router_topk=get_int(cfg, "num_experts_per_tok"),
                    moe_ffn_hidden_size=get_int(cfg, "moe_intermediate_size"),
                    num_shared_experts=shared, router_bias=True,
                    shared_expert_ffn_hidden_size=(
                        get_int(cfg, "moe_shared_expert_intermediate_size") if shared else None),
                    # NemotronHTopkRouter is DeepseekV3TopkRouter: noaux_tc's groups
                    **group_routing(cfg, "noaux_tc"))
        latent = get_int(cfg, "moe_latent_size", None)
        if latent is not None:
            args["moe_latent_size"] = latent
    elif cfg.get("n_routed_experts") or cfg.get("moe_latent_size"):
        key = "n_routed_experts" if cfg.get("n_routed_experts") else "moe_latent_size"
        raise SpecError(key, cfg[key], "needs MoE layers (E) in hybrid_override_pattern")
    args.update(_mtp(cfg))
    return args


def _mtp(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The multi-token-prediction fields of a nemotron_h config: ``num_nextn_predict_layers``
    modules of the block ``mtp_hybrid_override_pattern`` (or ``mtp_layers_block_type``)
    lists; {} where it states neither. Either without the other is refused by name."""
    n = get_int(cfg, "num_nextn_predict_layers", 0, lo=0)
    p = _spelled(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
    if not n and not p:
        return {}
    if not n:
        raise SpecError("num_nextn_predict_layers", cfg.get("num_nextn_predict_layers"),
                        f"must be >= 1 where the MTP block is given ({p!r})")
    if not p:
        raise SpecError("mtp_hybrid_override_pattern", p, f"is required with "
                        f"num_nextn_predict_layers={n} (the MTP block's layers, e.g. '*E')")
    return {"num_nextn_predict_layers": n, "mtp_hybrid_pattern": p}
