"""ModelSpec from a HuggingFace ``config.json`` (gpt2, llama, mistral, mixtral, qwen2, gpt_neox)."""
from __future__ import annotations

import os
from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.model import ModelSpec, model_from_mapping
from topologies.yaml_io import load_mapping_file

HF_TYPES = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "gpt_neox")


def _get(cfg: Mapping[str, Any], key: str, default: Any = ...) -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if default is ...:
        raise SpecError(key, None, f"is required in a {cfg.get('model_type')} config.json")
    return default


def model_from_hf(cfg: Mapping[str, Any], name: str = "hf") -> ModelSpec:
    """Map a HuggingFace config mapping onto a ModelSpec."""
    if not isinstance(cfg, Mapping):
        raise SpecError("config.json", type(cfg).__name__, "must hold a JSON object")
    mt = cfg.get("model_type")
    if mt not in HF_TYPES:
        raise SpecError("model_type", mt, f"must be one of {', '.join(HF_TYPES)}")
    if mt == "gpt2":
        h = _get(cfg, "n_embd")
        inner = cfg.get("n_inner")
        return ModelSpec(name, _get(cfg, "n_layer"), h, _get(cfg, "n_head"),
                         inner if inner is not None else 4 * h, _get(cfg, "vocab_size"),
                         _get(cfg, "n_positions"), activation="gelu", tie_word_embeddings=True,
                         position_embedding="learned", max_position_embeddings=_get(cfg, "n_positions"),
                         bias=True)
    if mt == "gpt_neox":
        h = _get(cfg, "hidden_size")
        return ModelSpec(name, _get(cfg, "num_hidden_layers"), h, _get(cfg, "num_attention_heads"),
                         _get(cfg, "intermediate_size", 4 * h), _get(cfg, "vocab_size"),
                         min(_get(cfg, "max_position_embeddings", 2048), 8192), activation="gelu",
                         tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                         position_embedding="rope",
                         max_position_embeddings=_get(cfg, "max_position_embeddings", 2048), bias=True)
    heads = _get(cfg, "num_attention_heads")
    maxpos = _get(cfg, "max_position_embeddings", 4096)
    experts = _get(cfg, "num_local_experts", 1) if mt == "mixtral" else 1
    return ModelSpec(
        name, _get(cfg, "num_hidden_layers"), _get(cfg, "hidden_size"), heads,
        _get(cfg, "intermediate_size"), _get(cfg, "vocab_size"), min(maxpos, 8192),
        num_query_groups=_get(cfg, "num_key_value_heads", heads), activation="swiglu",
        num_experts=experts, moe_router_topk=_get(cfg, "num_experts_per_tok", 2) if experts > 1 else 1,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        position_embedding="rope", max_position_embeddings=maxpos,
        bias=bool(cfg.get("attention_bias", False)), norm="rmsnorm",
        qkv_bias=mt == "qwen2")


def load_model_arg(text: str) -> ModelSpec:
    """A preset name, a HuggingFace ``config.json`` path, or a YAML/JSON file of ModelSpec fields."""
    from strategies.presets import model_preset
    text = str(text).strip()
    if not text.endswith((".json", ".yaml", ".yml")) and not os.path.sep in text:
        return model_preset(text)
    data = load_mapping_file(text, "model")
    stem = os.path.splitext(os.path.basename(text))[0]
    if isinstance(data, Mapping) and "model_type" in data:
        name = stem if stem != "config" else str(data.get("_name_or_path") or data["model_type"])
        try:
            return model_from_hf(data, name=name)
        except TypeError as e:
            raise SpecError("config.json", text, f"has a value of the wrong type ({e})") from None
    if isinstance(data, Mapping) and "name" in data:
        data = dict(data)
        stem = str(data.pop("name"))
    return model_from_mapping(data, name=stem)
