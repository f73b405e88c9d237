"""``model_type`` llama4 / llama4_text: Llama 4's text model (interleaved MoE layers with a
shared expert, chunked local attention)."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import (READ_COMMON, ROPE_KEYS, attention_bias, common_fields,
                                         rope_attention, windows)
from strategies.hf_config.reading import get_int, refuse_unread


def read_llama4(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """Llama 4's text model: routed experts and one shared expert of ``intermediate_size``
    on every ``interleave_moe_layer_step``-th layer, dense layers of ``intermediate_size_mlp``,
    chunked local attention on all layers but every ``no_rope_layer_interval``-th."""
    read = READ_COMMON | {"num_local_experts", "num_experts_per_tok", "intermediate_size_mlp",
                          "interleave_moe_layer_step", "moe_layers", "attention_chunk_size",
                          "no_rope_layers", "no_rope_layer_interval", "layer_types", *ROPE_KEYS}
    args = common_fields(cfg)
    args["bias"] = attention_bias(cfg, mt)
    if rope_attention(cfg, mt):     # Llama 4's own: llama3 (1); YaRN would scale cos and sin
        key = next(k for k in ROPE_KEYS if cfg.get(k) is not None)
        raise SpecError(f"{key}.rope_type", "yarn", "a YaRN attention factor on Llama 4's "
                        "RoPE layers (every 4th has none) is not modelled: llama3, default, "
                        "linear or dynamic")
    L = args["num_layers"]
    step = get_int(cfg, "interleave_moe_layer_step", 1)
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None and moe_layers != list(range(step - 1, L, step)):
        raise SpecError("moe_layers", moe_layers, f"only every interleave_moe_layer_step="
                        f"{step}-th layer as MoE is modelled")
    expert = get_int(cfg, "intermediate_size")
    args.update(ffn_hidden_size=get_int(cfg, "intermediate_size_mlp", expert),
                num_experts=get_int(cfg, "num_local_experts"),
                moe_router_topk=get_int(cfg, "num_experts_per_tok"),
                moe_ffn_hidden_size=expert, num_shared_experts=1, moe_layer_freq=step)
    chunk = get_int(cfg, "attention_chunk_size", None)
    if cfg.get("layer_types") is not None:
        args.update(windows(cfg, L, {"chunked_attention": "chunked"}))
    elif chunk is not None:
        nope = cfg.get("no_rope_layers") or []
        every = get_int(cfg, "no_rope_layer_interval", 4)
        if nope and nope != [int((i + 1) % every != 0) for i in range(L)]:
            raise SpecError("no_rope_layers", nope, f"only every no_rope_layer_interval="
                            f"{every}-th layer global is modelled")
        args.update(sliding_window=chunk, window_kind="chunked", global_attention_every=every)
    refuse_unread(cfg, mt, read)
    return args
