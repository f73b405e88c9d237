"""``model_type`` gpt2 and gpt_neox: GELU MLPs with biases, GPT-2's learned positions and
tied embedding, GPT-NeoX's RoPE."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.hf_config.common import kv_channels
from strategies.hf_config.reading import get_bool, get_int
from strategies.model import ModelSpec


def gpt2_model(cfg: Mapping[str, Any], name: str) -> ModelSpec:
    """GPT-2 (``n_embd``, ``n_layer``, ``n_head``, ``n_inner`` or 4 x ``n_embd``,
    ``n_positions``)."""
    h = get_int(cfg, "n_embd")
    inner = cfg.get("n_inner")
    npos = get_int(cfg, "n_positions")
    return ModelSpec(name, get_int(cfg, "n_layer"), h, get_int(cfg, "n_head"),
                     get_int(cfg, "n_inner") if inner is not None else 4 * h,
                     get_int(cfg, "vocab_size"), npos, activation="gelu",
                     tie_word_embeddings=True, position_embedding="learned",
                     max_position_embeddings=npos, bias=True)


def gpt_neox_model(cfg: Mapping[str, Any], name: str) -> ModelSpec:
    """GPT-NeoX (Llama's field names, ``intermediate_size`` or 4 x ``hidden_size``)."""
    h = get_int(cfg, "hidden_size")
    heads = get_int(cfg, "num_attention_heads")
    maxpos = get_int(cfg, "max_position_embeddings", 2048)
    return ModelSpec(name, get_int(cfg, "num_hidden_layers"), h, heads,
                     get_int(cfg, "intermediate_size", 4 * h), get_int(cfg, "vocab_size"),
                     min(maxpos, 8192), activation="gelu",
                     tie_word_embeddings=get_bool(cfg, "tie_word_embeddings"),
                     position_embedding="rope", max_position_embeddings=maxpos, bias=True,
                     kv_channels=kv_channels(cfg, h, heads))
