"""ModelSpec from a HuggingFace ``config.json``.

Every field that changes FLOPs, bytes or memory is read; a field that would change them but
is not modelled (or is inconsistent with the rest) is refused by name rather than ignored.
The supported ``model_type`` values are ``HF_TYPES``; docs/models.md maps each field. One
module reads each family (``_READERS``); ``reading`` holds the typed readers and the
refusals, ``common`` the fields the Llama-derived types share.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from strategies.errors import SpecError
from strategies.hf_config.deepseek import read_deepseek
from strategies.hf_config.deepseek_v4 import read_deepseek_v4
from strategies.hf_config.gpt import gpt2_model, gpt_neox_model
from strategies.hf_config.gpt_oss import read_gpt_oss
from strategies.hf_config.llama4 import read_llama4
from strategies.hf_config.llama_like import read_llama_like
from strategies.hf_config.nemotron_h import read_nemotron_h
from strategies.hf_config.reading import check_stated, in_config_terms
from strategies.model import ModelSpec, model_from_mapping
from topologies.limits import check_name
from topologies.yaml_io import load_mapping_file

HF_TYPES = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "gpt_neox", "qwen2_moe", "qwen3",
            "qwen3_moe", "deepseek_v2", "deepseek_v3", "llama4", "llama4_text", "gpt_oss",
            "nemotron_h", "deepseek_v4")

#: model_type -> the whole ModelSpec (the GPT types: no shared fields, no renamed keys).
_MODELS: dict[str, Callable[[Mapping[str, Any], str], ModelSpec]] = {
    "gpt2": gpt2_model, "gpt_neox": gpt_neox_model}
#: model_type -> its family's reader of ``ModelSpec`` arguments (``(cfg, model_type)``).
_READERS: dict[str, Callable[[Mapping[str, Any], str], dict[str, Any]]] = {
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"),
                    read_llama_like),
    "deepseek_v2": read_deepseek, "deepseek_v3": read_deepseek,
    "llama4": read_llama4, "llama4_text": read_llama4,
    "gpt_oss": read_gpt_oss, "nemotron_h": read_nemotron_h, "deepseek_v4": read_deepseek_v4,
}


def model_from_hf(cfg: Mapping[str, Any], name: str = "hf") -> ModelSpec:
    """Map a HuggingFace config mapping onto a ModelSpec."""
    if not isinstance(cfg, Mapping):
        raise SpecError("config.json", type(cfg).__name__, "must hold a JSON object")
    mt = cfg.get("model_type")
    if mt not in HF_TYPES:
        raise SpecError("model_type", mt, f"must be one of {', '.join(HF_TYPES)}")
    name = check_name("name", name)
    if mt == "llama4" and "text_config" in cfg:      # the multimodal wrapper: its text model
        text = cfg["text_config"]
        if not isinstance(text, Mapping):
            raise SpecError("text_config", type(text).__name__, "must hold a JSON object")
        cfg, mt = {**text, "model_type": "llama4_text"}, "llama4_text"
    if mt in _MODELS:
        return _MODELS[mt](cfg, name)
    args = _READERS[mt](cfg, mt)
    check_stated(cfg, "llama4_text" if mt == "llama4" else mt)   # after the type's own checks
    try:
        return ModelSpec(name=name, **args)
    except SpecError as e:
        raise in_config_terms(e, cfg) from None


def load_model_arg(text: str) -> ModelSpec:
    """A preset name, a HuggingFace ``config.json`` path (or a directory holding one), or a
    YAML/JSON file of ModelSpec fields."""
    from strategies.presets import model_preset
    text = str(text).strip()
    if os.path.isdir(text) and os.path.isfile(os.path.join(text, "config.json")):
        text = os.path.join(text, "config.json")
    if not text.lower().endswith((".json", ".yaml", ".yml")) and os.path.sep not in text:
        return model_preset(text)
    data = load_mapping_file(text, "model", "model")     # a mapping, or a SpecError
    stem = os.path.splitext(os.path.basename(text))[0]
    if "model_type" in data:
        if stem == "config":
            named = data.get("_name_or_path")
            stem = check_name("_name_or_path", named) if named else data["model_type"]
        return model_from_hf(data, name=stem)
    hf_keys = sorted(k for k in ("num_hidden_layers", "n_layer", "architectures") if k in data)
    if hf_keys:         # a HuggingFace config without its type, not a file of ModelSpec fields
        raise SpecError("model_type", None, f"is required in a HuggingFace config.json (it "
                        f"has {', '.join(hf_keys)}; a model file of paraplan's own fields "
                        "says num_layers)")
    if "name" in data:
        data = dict(data)
        stem = check_name("name", data.pop("name"))
    return model_from_mapping(data, name=stem)
