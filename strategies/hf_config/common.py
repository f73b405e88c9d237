"""The fields the Llama-derived model types share (layers, widths, heads, GQA, ``head_dim``,
tied embedding, dropout, biases), their ``layer_types`` windows and their RoPE scaling."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.reading import get_bool, get_int, open_number
from strategies.model import yarn_attention_factor

#: The keys ``common_fields`` (with ``intermediate_size`` and the biases) reads.
READ_COMMON = {"model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
               "vocab_size", "max_position_embeddings", "num_key_value_heads", "head_dim",
               "tie_word_embeddings", "intermediate_size", "attention_bias", "mlp_bias"}


def kv_channels(cfg: Mapping[str, Any], hidden: int, heads: int) -> int | None:
    """``head_dim`` when it differs from hidden/heads (Qwen3, gpt-oss, Mistral NeMo)."""
    hd = get_int(cfg, "head_dim", None)
    return None if hd is None or hd * heads == hidden else hd


def windows(cfg: Mapping[str, Any], layers: int, kinds: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """``sliding_window``/``window_kind``/``global_attention_every`` from ``layer_types`` (a
    pattern of ``k-1`` windowed layers then one full layer, or all windowed) and the window
    size (``kinds``: layer type -> window kind)."""
    kinds = kinds or {"sliding_attention": "sliding"}
    lt = cfg.get("layer_types")
    if lt is None:
        return {}
    if not isinstance(lt, list) or len(lt) != layers:
        raise SpecError("layer_types", lt, f"must list one type per layer ({layers})")
    allowed = ("full_attention", *kinds)
    for t in lt:
        if t not in allowed:
            raise SpecError("layer_types", t, f"must be one of {', '.join(allowed)}")
    windowed = [t != "full_attention" for t in lt]
    if not any(windowed):
        return {}
    used = {kinds[t] for t in lt if t != "full_attention"}
    if len(used) > 1:
        raise SpecError("layer_types", sorted(used), "one window kind per model is modelled")
    every = 0 if all(windowed) else windowed.index(False) + 1
    if any(windowed[i] != (every == 0 or (i + 1) % every != 0) for i in range(layers)):
        raise SpecError("layer_types", lt, "only every k-th layer full (k-1 windowed layers, "
                        "then one full) is modelled")
    key = "attention_chunk_size" if used == {"chunked"} else "sliding_window"
    return dict(sliding_window=get_int(cfg, key), window_kind=used.pop(),
                global_attention_every=every)


def common_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ModelSpec`` arguments every Llama-derived type reads alike."""
    heads, hidden = get_int(cfg, "num_attention_heads"), get_int(cfg, "hidden_size")
    maxpos = get_int(cfg, "max_position_embeddings", 4096)
    return dict(num_layers=get_int(cfg, "num_hidden_layers"), hidden_size=hidden,
                num_attention_heads=heads, vocab_size=get_int(cfg, "vocab_size"),
                seq_length=min(maxpos, 8192), max_position_embeddings=maxpos,
                num_query_groups=get_int(cfg, "num_key_value_heads", heads),
                kv_channels=kv_channels(cfg, hidden, heads), activation="swiglu",
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings"),
                position_embedding="rope", norm="rmsnorm", dropout=_dropout(cfg))


def _dropout(cfg: Mapping[str, Any]) -> bool:
    """Whether the model trains with dropout: these model types' only dropout is
    ``attention_dropout`` (0.0 in their configs and HF's defaults; no residual dropout), so
    an absent or zero field means no dropout masks (``ModelSpec.dropout``)."""
    v = cfg.get("attention_dropout", 0.0)
    if v is None:
        return False
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
        raise SpecError("attention_dropout", v, "must be a probability in [0, 1)")
    return v > 0


def attention_bias(cfg: Mapping[str, Any], mt: str) -> bool:
    """Llama-style ``attention_bias`` and ``mlp_bias``: both or neither (ModelSpec's ``bias``)."""
    a, m = get_bool(cfg, "attention_bias"), get_bool(cfg, "mlp_bias")
    if a != m:
        raise SpecError("attention_bias", a, f"with mlp_bias={m}: biases on attention alone "
                        f"(or on the MLP alone) are not modelled for model_type={mt}")
    return a


#: The RoPE scalings that leave cos and sin unscaled (transformers ``modeling_rope_utils``:
#: default, linear, dynamic NTK and llama3 return an attention factor of 1); ``yarn`` scales
#: them (``yarn_attention_factor``).
UNSCALED_ROPE = ("default", "linear", "dynamic", "llama3")
#: The keys of the RoPE scaling: transformers 4 ``rope_scaling``, transformers 5
#: ``rope_parameters`` (the same mapping with ``rope_theta`` folded in).
ROPE_KEYS = ("rope_scaling", "rope_parameters")


def rope_attention(cfg: Mapping[str, Any], mt: str, yarn_only: bool = False) -> dict[str, Any]:
    """``rope_attention_factor`` of the config's RoPE scaling (``rope_scaling`` or
    ``rope_parameters``; both given must agree): YaRN's ``attention_factor``, else
    ``yarn_attention_factor`` of its ``factor``, ``mscale`` and ``mscale_all_dim``; nothing
    (1) for an unscaled kind or none. ``yarn_only``: any other kind is refused (gpt-oss)."""
    given = [(k, cfg[k]) for k in ROPE_KEYS if cfg.get(k) is not None]
    if not given:
        return {}
    for k, v in given:
        if not isinstance(v, Mapping):
            raise SpecError(k, type(v).__name__, "must hold a JSON object or null")
    out = [_rope_factor(k, v, mt, yarn_only) for k, v in given]
    if len(out) == 2 and out[0] != out[1]:
        raise SpecError("rope_parameters", dict(given[1][1]), f"disagrees with rope_scaling="
                        f"{dict(given[0][1])} (their attention factors {out[0]} and {out[1]})")
    return {} if out[0] == 1.0 else {"rope_attention_factor": out[0]}


def _rope_factor(key: str, rs: Mapping[str, Any], mt: str, yarn_only: bool) -> float:
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "yarn":
        if yarn_only:
            raise SpecError(f"{key}.rope_type", kind, f"must be 'yarn' for model_type={mt}")
        if kind not in UNSCALED_ROPE:
            raise SpecError(f"{key}.rope_type", kind, f"must be one of yarn, "
                            f"{', '.join(UNSCALED_ROPE)} for model_type={mt} (another "
                            "scaling's factor on cos and sin is not modelled)")
        return 1.0
    if rs.get("attention_factor") is not None:
        return open_number(f"{key}.attention_factor", rs["attention_factor"], 0.0, 1e3)
    factor = open_number(f"{key}.factor", rs.get("factor", 1.0), 0.0, 1e6)
    ms = [None if rs.get(k) is None else open_number(f"{key}.{k}", rs[k], -1e3, 1e3)
          for k in ("mscale", "mscale_all_dim")]
    return yarn_attention_factor(factor, *ms)
