"""ModelSpec from a HuggingFace ``config.json`` (gpt2, llama, mistral, mixtral, qwen2, gpt_neox)."""
from __future__ import annotations

import os
from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.model import ModelSpec, model_from_mapping
from topologies.limits import check_bool, check_int, check_name
from topologies.yaml_io import load_mapping_file

HF_TYPES = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "gpt_neox")
_MAX_INT = 1 << 40   # the ModelSpec fields carry their own, tighter limits


def _get(cfg: Mapping[str, Any], key: str, default: Any = ...) -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if default is ...:
        raise SpecError(key, None, f"is required in a {cfg.get('model_type')} config.json")
    return default


def _int(cfg: Mapping[str, Any], key: str, default: Any = ...) -> int:
    """An integer field of the config (a bool, a float or a string is refused by name)."""
    return check_int(key, _get(cfg, key, default), 1, _MAX_INT)


def _bool(cfg: Mapping[str, Any], key: str) -> bool:
    v = cfg.get(key, False)
    return False if v is None else check_bool(key, v)


def _check_head_dim(cfg: Mapping[str, Any], mt: str) -> None:
    """A ``head_dim`` other than hidden/heads (Mistral NeMo: 5120/32 = 160, head_dim 128)
    changes every attention shape, which ModelSpec does not model: refuse it, never guess."""
    hd = cfg.get("head_dim")
    if hd is None:
        return
    h, a = ("n_embd", "n_head") if mt == "gpt2" else ("hidden_size", "num_attention_heads")
    hidden, heads = _int(cfg, h), _int(cfg, a)
    if check_int("head_dim", hd, 1, _MAX_INT) * heads != hidden:
        raise SpecError("head_dim", hd, f"differs from {h}/{a} = {hidden}/{heads}; a head size "
                        "other than hidden/heads is not modelled")


def model_from_hf(cfg: Mapping[str, Any], name: str = "hf") -> ModelSpec:
    """Map a HuggingFace config mapping onto a ModelSpec."""
    if not isinstance(cfg, Mapping):
        raise SpecError("config.json", type(cfg).__name__, "must hold a JSON object")
    mt = cfg.get("model_type")
    if mt not in HF_TYPES:
        raise SpecError("model_type", mt, f"must be one of {', '.join(HF_TYPES)}")
    name = check_name("name", name)
    _check_head_dim(cfg, mt)
    if mt == "gpt2":
        h = _int(cfg, "n_embd")
        inner = cfg.get("n_inner")
        npos = _int(cfg, "n_positions")
        return ModelSpec(name, _int(cfg, "n_layer"), h, _int(cfg, "n_head"),
                         _int(cfg, "n_inner") if inner is not None else 4 * h,
                         _int(cfg, "vocab_size"), npos, activation="gelu",
                         tie_word_embeddings=True, position_embedding="learned",
                         max_position_embeddings=npos, bias=True)
    if mt == "gpt_neox":
        h = _int(cfg, "hidden_size")
        maxpos = _int(cfg, "max_position_embeddings", 2048)
        return ModelSpec(name, _int(cfg, "num_hidden_layers"), h, _int(cfg, "num_attention_heads"),
                         _int(cfg, "intermediate_size", 4 * h), _int(cfg, "vocab_size"),
                         min(maxpos, 8192), activation="gelu",
                         tie_word_embeddings=_bool(cfg, "tie_word_embeddings"),
                         position_embedding="rope", max_position_embeddings=maxpos, bias=True)
    heads = _int(cfg, "num_attention_heads")
    maxpos = _int(cfg, "max_position_embeddings", 4096)
    experts = _int(cfg, "num_local_experts", 1) if mt == "mixtral" else 1
    return ModelSpec(
        name, _int(cfg, "num_hidden_layers"), _int(cfg, "hidden_size"), heads,
        _int(cfg, "intermediate_size"), _int(cfg, "vocab_size"), min(maxpos, 8192),
        num_query_groups=_int(cfg, "num_key_value_heads", heads), activation="swiglu",
        num_experts=experts,
        moe_router_topk=_int(cfg, "num_experts_per_tok", 2) if experts > 1 else 1,
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings"),
        position_embedding="rope", max_position_embeddings=maxpos,
        bias=_bool(cfg, "attention_bias"), norm="rmsnorm",
        qkv_bias=mt == "qwen2")


def load_model_arg(text: str) -> ModelSpec:
    """A preset name, a HuggingFace ``config.json`` path (or a directory holding one), or a
    YAML/JSON file of ModelSpec fields."""
    from strategies.presets import model_preset
    text = str(text).strip()
    if os.path.isdir(text) and os.path.isfile(os.path.join(text, "config.json")):
        text = os.path.join(text, "config.json")
    if not text.lower().endswith((".json", ".yaml", ".yml")) and os.path.sep not in text:
        return model_preset(text)
    data = load_mapping_file(text, "model")
    stem = os.path.splitext(os.path.basename(text))[0]
    if isinstance(data, Mapping) and "model_type" in data:
        if stem == "config":
            stem = data.get("_name_or_path") or data["model_type"]
        return model_from_hf(data, name=stem)
    if isinstance(data, Mapping) and "name" in data:
        data = dict(data)
        stem = check_name("name", data.pop("name"))
    return model_from_mapping(data, name=stem)
