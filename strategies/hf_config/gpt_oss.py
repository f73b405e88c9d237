"""``model_type`` gpt_oss: GQA with biases and attention sinks, alternating sliding/full
layers, experts with biases, the clamped SwiGLU and YaRN RoPE."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import (READ_COMMON, ROPE_KEYS, common_fields,
                                         rope_attention, windows)
from strategies.hf_config.reading import get_int, open_number, refuse_unread
from strategies.model import yarn_attention_factor
from topologies.limits import check_bool


def read_gpt_oss(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """gpt-oss: GQA with biases and attention sinks, alternating sliding/full layers, experts
    with biases and a router with a bias."""
    read = READ_COMMON | {"num_local_experts", "num_experts_per_tok", "experts_per_token",
                          "sliding_window", "layer_types", "swiglu_limit", *ROPE_KEYS}
    args = common_fields(cfg)
    args.update(_gpt_oss_variants(cfg))
    # its attention has biases (transformers GptOssConfig: attention_bias True, 02b8f42b):
    # read as bias=True below; a config that says otherwise is not that model
    if cfg.get("attention_bias") is not None and not check_bool("attention_bias",
                                                                  cfg["attention_bias"]):
        raise SpecError("attention_bias", False, "model_type=gpt_oss is read with biases on "
                        "its attention and experts (GptOssConfig's default, true); without "
                        "them it is not modelled")
    k = get_int(cfg, "num_experts_per_tok", None) or get_int(cfg, "experts_per_token")
    if "experts_per_token" in cfg and get_int(cfg, "experts_per_token") != k:
        raise SpecError("experts_per_token", cfg["experts_per_token"],
                        f"disagrees with num_experts_per_tok={k}")
    args.update(ffn_hidden_size=get_int(cfg, "intermediate_size"),
                moe_ffn_hidden_size=get_int(cfg, "intermediate_size"),
                num_experts=get_int(cfg, "num_local_experts"), moe_router_topk=k,
                bias=True, router_bias=True, attention_sinks=True,
                **windows(cfg, args["num_layers"]))
    if "sliding_window" not in args and cfg.get("sliding_window") is not None:
        args["sliding_window"] = get_int(cfg, "sliding_window")
    refuse_unread(cfg, mt, read)
    return args


#: transformers' ``GptOssConfig`` defaults (02b8f42b ``configuration_gpt_oss.py``:
#: ``swiglu_limit: float = 7.0``; ``rope_parameters`` None becomes YaRN with factor 32, as
#: transformers 4's ``rope_scaling`` default): what a config without the keys runs
SWIGLU_LIMIT_DEFAULT = 7.0
YARN_FACTOR_DEFAULT = 32.0


def _gpt_oss_variants(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """gpt-oss's clamped activation (``swiglu_limit``: ``activation_clamp``) and YaRN RoPE
    (``rope_scaling``, or transformers 5's ``rope_parameters``, of ``rope_type`` yarn:
    ``common.rope_attention``). A key absent reads as transformers' default (a clamp of 7.0,
    YaRN factor 32: ``SWIGLU_LIMIT_DEFAULT``, ``YARN_FACTOR_DEFAULT``); null states none (no
    clamp, as Megatron-Core's ``activation_func_clamp_value`` None; plain RoPE)."""
    out: dict[str, Any] = {}
    limit = cfg.get("swiglu_limit", SWIGLU_LIMIT_DEFAULT)
    if limit is not None:
        out["activation_clamp"] = open_number("swiglu_limit", limit, 0.0, 1e6)
    if any(k in cfg for k in ROPE_KEYS):
        out.update(rope_attention(cfg, "gpt_oss", yarn_only=True))
    else:
        out["rope_attention_factor"] = yarn_attention_factor(YARN_FACTOR_DEFAULT)
    return out
