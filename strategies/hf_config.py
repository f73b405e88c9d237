"""ModelSpec from a HuggingFace ``config.json``.

Every field that changes FLOPs, bytes or memory is read; a field that would change them but
is not modelled (or is inconsistent with the rest) is refused by name rather than ignored.
The supported ``model_type`` values are ``HF_TYPES``; docs/models.md maps each field.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.model import ModelSpec, model_from_mapping, yarn_attention_factor
from topologies.limits import check_bool, check_int, check_name
from topologies.yaml_io import load_mapping_file

HF_TYPES = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "gpt_neox", "qwen2_moe", "qwen3",
            "qwen3_moe", "deepseek_v2", "deepseek_v3", "llama4", "llama4_text", "gpt_oss",
            "nemotron_h")
_MAX_INT = 1 << 40   # the ModelSpec fields carry their own, tighter limits

# Fields that change the cost in some supported model type. A config of another type that
# sets one of them to anything but its neutral value (null, false, 0, [], 1 for a frequency)
# is refused: its type's modelling code would not read it.
_COST_FIELDS = {
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
    "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
    "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
    "interleave_moe_layer_step", "mlp_only_layers", "moe_layers", "num_nextn_predict_layers",
    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "intermediate_size_mlp", "attention_chunk_size", "no_rope_layers", "layer_types",
    "sliding_window", "use_sliding_window", "head_dim", "attention_bias", "mlp_bias",
}
# Unknown keys whose names say they shape the network are refused too (a typo or a newer
# architecture knob must not be dropped silently); other unknown keys are metadata.
_STRUCTURAL = re.compile(r"expert|lora|nextn|window|chunk|moe|shared|dense|sparse|latent|"
                         r"head_dim|num_.*layers|intermediate|kv_|_rank|mamba|ssm|conv_|hybrid",
                         re.ASCII)
_NEUTRAL = {  # known keys that change neither FLOPs, bytes nor memory of training
    "max_window_layers", "output_router_logits", "router_aux_loss_coef", "norm_topk_prob",
    "topk_method", "scoring_func", "routed_scaling_factor",
    "aux_loss_alpha", "seq_aux", "ep_size", "router_jitter_noise",
    "initial_context_length", "hidden_act", "use_qk_norm", "attn_temperature_tuning",
}


def _get(cfg: Mapping[str, Any], key: str, default: Any = ...) -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if default is ...:
        raise SpecError(key, None, f"is required in a {cfg.get('model_type')} config.json")
    return default


def _int(cfg: Mapping[str, Any], key: str, default: Any = ..., lo: int = 1) -> int:
    """An integer field of the config (a bool, a float or a string is refused by name)."""
    v = _get(cfg, key, default)
    return v if v is None else check_int(key, v, lo, _MAX_INT)


def _bool(cfg: Mapping[str, Any], key: str) -> bool:
    v = cfg.get(key, False)
    return False if v is None else check_bool(key, v)


def _neutral(v: Any) -> bool:
    return v is None or v is False or v == 0 or v == [] or v == {}


def _refuse_unread(cfg: Mapping[str, Any], mt: str, read: set[str]) -> None:
    """Refuse a field that changes the cost but that ``mt`` does not read."""
    for k, v in sorted(((str(k), v) for k, v in cfg.items()), key=lambda kv: kv[0]):
        if k in read or k in _NEUTRAL:
            continue
        if (k in _COST_FIELDS and not _neutral(v)) or \
                (k not in _COST_FIELDS and _STRUCTURAL.search(k) and not _neutral(v)):
            raise SpecError(k, v, f"changes the model's cost but is not modelled for "
                            f"model_type={mt} (supported fields: docs/models.md)")


def _kv_channels(cfg: Mapping[str, Any], hidden: int, heads: int) -> int | None:
    """``head_dim`` when it differs from hidden/heads (Qwen3, gpt-oss, Mistral NeMo)."""
    hd = _int(cfg, "head_dim", None)
    return None if hd is None or hd * heads == hidden else hd


def _windows(cfg: Mapping[str, Any], layers: int, kinds: dict[str, str] | None = None
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
    return dict(sliding_window=_int(cfg, key), window_kind=used.pop(),
                global_attention_every=every)


def _moe_freq(cfg: Mapping[str, Any], key: str) -> int:
    freq = _int(cfg, key, 1)
    mlp_only = cfg.get("mlp_only_layers")
    if mlp_only:
        raise SpecError("mlp_only_layers", mlp_only, "dense layers listed by index are not "
                        "modelled (first_k_dense_replace / a frequency are)")
    return freq


def _common(cfg: Mapping[str, Any]) -> dict[str, Any]:
    heads, hidden = _int(cfg, "num_attention_heads"), _int(cfg, "hidden_size")
    maxpos = _int(cfg, "max_position_embeddings", 4096)
    return dict(num_layers=_int(cfg, "num_hidden_layers"), hidden_size=hidden,
                num_attention_heads=heads, vocab_size=_int(cfg, "vocab_size"),
                seq_length=min(maxpos, 8192), max_position_embeddings=maxpos,
                num_query_groups=_int(cfg, "num_key_value_heads", heads),
                kv_channels=_kv_channels(cfg, hidden, heads), activation="swiglu",
                tie_word_embeddings=_bool(cfg, "tie_word_embeddings"),
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


def _attention_bias(cfg: Mapping[str, Any], mt: str) -> bool:
    """Llama-style ``attention_bias`` and ``mlp_bias``: both or neither (ModelSpec's ``bias``)."""
    a, m = _bool(cfg, "attention_bias"), _bool(cfg, "mlp_bias")
    if a != m:
        raise SpecError("attention_bias", a, f"with mlp_bias={m}: biases on attention alone "
                        f"(or on the MLP alone) are not modelled for model_type={mt}")
    return a


_READ_COMMON = {"model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                "vocab_size", "max_position_embeddings", "num_key_value_heads", "head_dim",
                "tie_word_embeddings", "intermediate_size", "attention_bias", "mlp_bias"}


def _llama_like(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe."""
    read = set(_READ_COMMON)
    args = _common(cfg)
    args["ffn_hidden_size"] = _int(cfg, "intermediate_size")
    args["bias"] = _attention_bias(cfg, mt)
    args["qkv_bias"] = mt in ("qwen2", "qwen2_moe")
    args["qk_norm"] = mt in ("qwen3", "qwen3_moe")
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        read |= {"use_sliding_window", "sliding_window"}
        if _bool(cfg, "use_sliding_window"):
            raise SpecError("use_sliding_window", True, "Qwen's sliding window on the layers "
                            "past max_window_layers is not modelled")
    if mt == "mistral":
        read.add("sliding_window")
        if cfg.get("sliding_window") is not None:
            args["sliding_window"] = _int(cfg, "sliding_window")
    read.add("layer_types")
    if mt != "mistral":
        args.update(_windows(cfg, args["num_layers"]))
    if mt == "mixtral":
        read |= {"num_local_experts", "num_experts_per_tok", "sliding_window"}
        if cfg.get("sliding_window") is not None:
            args["sliding_window"] = _int(cfg, "sliding_window")
        experts = _int(cfg, "num_local_experts", 1)
        args.update(num_experts=experts,
                    moe_router_topk=_int(cfg, "num_experts_per_tok", 2) if experts > 1 else 1)
    if mt in ("qwen2_moe", "qwen3_moe"):
        read |= {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "decoder_sparse_step", "mlp_only_layers"}
        args.update(num_experts=_int(cfg, "num_experts"),
                    moe_router_topk=_int(cfg, "num_experts_per_tok"),
                    moe_ffn_hidden_size=_int(cfg, "moe_intermediate_size"),
                    moe_layer_freq=_moe_freq(cfg, "decoder_sparse_step"))
    if mt == "qwen2_moe":
        read.add("shared_expert_intermediate_size")
        shared = _int(cfg, "shared_expert_intermediate_size", 0, lo=0)
        if shared:
            args.update(num_shared_experts=1, shared_expert_ffn_hidden_size=shared,
                        shared_expert_gate=True)
    _refuse_unread(cfg, mt, read)
    return args


#: DeepSeek's ``topk_method`` values (modeling_deepseek.py MoEGate: V2's ``greedy`` and
#: ``group_limited_greedy``, V3's ``noaux_tc``).
DEEPSEEK_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _deepseek(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """deepseek_v2 / deepseek_v3: MLA, shared experts, dense first layers, MTP (v3)."""
    read = _READ_COMMON | {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                           "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
                           "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                           "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers",
                           "n_group", "topk_group"}
    args = _common(cfg)
    args.pop("kv_channels")
    args["num_query_groups"] = None      # MLA: every head has its own K and V (no GQA)
    if _bool(cfg, "attention_bias"):
        raise SpecError("attention_bias", True, "biases on multi-head latent attention are "
                        "not modelled")
    if _int(cfg, "moe_layer_freq", 1) != 1:
        raise SpecError("moe_layer_freq", cfg["moe_layer_freq"], "DeepSeek's MoE layer "
                        "frequency other than 1 is not modelled")
    topk_method = cfg.get("topk_method")
    if topk_method is not None and topk_method not in DEEPSEEK_TOPK_METHODS:
        raise SpecError("topk_method", topk_method, f"must be one of "
                        f"{', '.join(DEEPSEEK_TOPK_METHODS)} (DeepSeek's routers)")
    # group-limited routing (V2's group_limited_greedy, V3's noaux_tc): a token's experts come
    # from at most topk_group of n_group groups (DeepSeek-V3 maps a group to a node)
    groups = _int(cfg, "n_group", 1)
    limited = topk_method in ("group_limited_greedy", "noaux_tc") and groups > 1
    args.update(ffn_hidden_size=_int(cfg, "intermediate_size"),
                num_experts=_int(cfg, "n_routed_experts"),
                moe_router_topk=_int(cfg, "num_experts_per_tok"),
                moe_ffn_hidden_size=_int(cfg, "moe_intermediate_size"),
                num_shared_experts=_int(cfg, "n_shared_experts", 0, lo=0),
                first_k_dense_replace=_int(cfg, "first_k_dense_replace", 0, lo=0),
                q_lora_rank=_int(cfg, "q_lora_rank", None),
                kv_lora_rank=_int(cfg, "kv_lora_rank"),
                qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
                qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
                v_head_dim=_int(cfg, "v_head_dim"),
                num_nextn_predict_layers=_int(cfg, "num_nextn_predict_layers", 0, lo=0),
                # DeepSeek-V3's auxiliary-loss-free balancing adds a bias per expert
                router_bias=topk_method == "noaux_tc",
                moe_router_num_groups=groups if limited else None,
                moe_router_group_topk=_int(cfg, "topk_group") if limited else None)
    _refuse_unread(cfg, mt, read)
    return args


def _llama4(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """Llama 4's text model: routed experts and one shared expert of ``intermediate_size``
    on every ``interleave_moe_layer_step``-th layer, dense layers of ``intermediate_size_mlp``,
    chunked local attention on all layers but every ``no_rope_layer_interval``-th."""
    read = _READ_COMMON | {"num_local_experts", "num_experts_per_tok", "intermediate_size_mlp",
                           "interleave_moe_layer_step", "moe_layers", "attention_chunk_size",
                           "no_rope_layers", "no_rope_layer_interval", "layer_types"}
    args = _common(cfg)
    args["bias"] = _attention_bias(cfg, mt)
    L = args["num_layers"]
    step = _int(cfg, "interleave_moe_layer_step", 1)
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None and moe_layers != list(range(step - 1, L, step)):
        raise SpecError("moe_layers", moe_layers, f"only every interleave_moe_layer_step="
                        f"{step}-th layer as MoE is modelled")
    expert = _int(cfg, "intermediate_size")
    args.update(ffn_hidden_size=_int(cfg, "intermediate_size_mlp", expert),
                num_experts=_int(cfg, "num_local_experts"),
                moe_router_topk=_int(cfg, "num_experts_per_tok"),
                moe_ffn_hidden_size=expert, num_shared_experts=1, moe_layer_freq=step)
    chunk = _int(cfg, "attention_chunk_size", None)
    if cfg.get("layer_types") is not None:
        args.update(_windows(cfg, L, {"chunked_attention": "chunked"}))
    elif chunk is not None:
        nope = cfg.get("no_rope_layers") or []
        every = _int(cfg, "no_rope_layer_interval", 4)
        if nope and nope != [int((i + 1) % every != 0) for i in range(L)]:
            raise SpecError("no_rope_layers", nope, f"only every no_rope_layer_interval="
                            f"{every}-th layer global is modelled")
        args.update(sliding_window=chunk, window_kind="chunked", global_attention_every=every)
    _refuse_unread(cfg, mt, read)
    return args


def _gpt_oss(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """gpt-oss: GQA with biases and attention sinks, alternating sliding/full layers, experts
    with biases and a router with a bias."""
    read = _READ_COMMON | {"num_local_experts", "num_experts_per_tok", "experts_per_token",
                           "sliding_window", "layer_types", "swiglu_limit", "rope_scaling"}
    args = _common(cfg)
    args.update(_gpt_oss_variants(cfg))
    k = _int(cfg, "num_experts_per_tok", None) or _int(cfg, "experts_per_token")
    if "experts_per_token" in cfg and _int(cfg, "experts_per_token") != k:
        raise SpecError("experts_per_token", cfg["experts_per_token"],
                        f"disagrees with num_experts_per_tok={k}")
    args.update(ffn_hidden_size=_int(cfg, "intermediate_size"),
                moe_ffn_hidden_size=_int(cfg, "intermediate_size"),
                num_experts=_int(cfg, "num_local_experts"), moe_router_topk=k,
                bias=True, router_bias=True, attention_sinks=True,
                **_windows(cfg, args["num_layers"]))
    if "sliding_window" not in args and cfg.get("sliding_window") is not None:
        args["sliding_window"] = _int(cfg, "sliding_window")
    _refuse_unread(cfg, mt, read)
    return args


def _nemotron_h(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """nemotron_h: the hybrid Mamba-2 / attention / MoE models (``strategies.hf_nemotron_h``)."""
    from strategies.hf_nemotron_h import NEUTRAL, READ, nemotron_h_args
    args = nemotron_h_args(cfg, _common(cfg), _int, _bool)
    _refuse_unread(cfg, mt, _READ_COMMON | READ | NEUTRAL)
    return args


def _number(key: str, v: Any, lo: float, hi: float) -> float:
    """A float field in ``(lo, hi)`` (a bool or a string is refused by name)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v < hi:
        raise SpecError(key, v, f"must be a number in ({lo:g}, {hi:g})")
    return float(v)


def _gpt_oss_variants(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """gpt-oss's clamped activation (``swiglu_limit``: ``activation_clamp``) and YaRN RoPE
    (``rope_scaling`` of ``rope_type`` yarn: ``rope_attention_factor``, its
    ``attention_factor`` or ``model.yarn_attention_factor`` of its ``factor``, ``mscale``
    and ``mscale_all_dim``); absent: neither."""
    out: dict[str, Any] = {}
    if cfg.get("swiglu_limit") is not None:
        out["activation_clamp"] = _number("swiglu_limit", cfg["swiglu_limit"], 0.0, 1e6)
    rs = cfg.get("rope_scaling")
    if rs is None:
        return out
    if not isinstance(rs, Mapping):
        raise SpecError("rope_scaling", type(rs).__name__, "must hold a JSON object or null")
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "yarn":
        raise SpecError("rope_scaling.rope_type", kind, "must be 'yarn' for model_type=gpt_oss")
    if rs.get("attention_factor") is not None:
        out["rope_attention_factor"] = _number("rope_scaling.attention_factor",
                                               rs["attention_factor"], 0.0, 1e3)
        return out
    factor = _number("rope_scaling.factor", rs.get("factor", 1.0), 0.0, 1e6)
    ms = [None if rs.get(k) is None else _number(f"rope_scaling.{k}", rs[k], -1e3, 1e3)
          for k in ("mscale", "mscale_all_dim")]
    out["rope_attention_factor"] = yarn_attention_factor(factor, *ms)
    return out


#: Fields of a model type whose transformers default (its ``configuration_<type>.py`` at
#: transformers 4.57-5.x) is not what an absent field reads here: an absent one is refused, not
#: guessed. ``(transformers' default, whether null is read as transformers reads it)``.
_ABSENT_DIFFERS: dict[str, dict[str, tuple[Any, bool]]] = {
    "deepseek_v3": {"n_shared_experts": (1, False), "first_k_dense_replace": (3, False),
                    "q_lora_rank": (1536, True)},
    "qwen3_moe": {"num_key_value_heads": (4, False)},
    "gpt_oss": {"head_dim": (64, True), "num_key_value_heads": (8, True),
                "layer_types": ("sliding/full alternating", False)},
    "llama4_text": {"intermediate_size_mlp": (16384, False), "num_key_value_heads": (8, True),
                    "head_dim": (128, True)},
}


def _check_stated(cfg: Mapping[str, Any], mt: str) -> None:
    """Refuse a field of ``_ABSENT_DIFFERS`` that ``cfg`` leaves out (or nulls where null is
    not read as transformers reads it)."""
    for key, (default, null_ok) in _ABSENT_DIFFERS.get(mt, {}).items():
        if key not in cfg or (cfg[key] is None and not null_ok):
            raise SpecError(key, cfg.get(key), f"is required in a {mt} config.json: "
                            f"transformers' default ({default}) is not what a missing field "
                            "reads here, so write its value")


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
        heads = _int(cfg, "num_attention_heads")
        maxpos = _int(cfg, "max_position_embeddings", 2048)
        return ModelSpec(name, _int(cfg, "num_hidden_layers"), h, heads,
                         _int(cfg, "intermediate_size", 4 * h), _int(cfg, "vocab_size"),
                         min(maxpos, 8192), activation="gelu",
                         tie_word_embeddings=_bool(cfg, "tie_word_embeddings"),
                         position_embedding="rope", max_position_embeddings=maxpos, bias=True,
                         kv_channels=_kv_channels(cfg, h, heads))
    if mt in ("deepseek_v2", "deepseek_v3"):
        args = _deepseek(cfg, mt)
    elif mt in ("llama4", "llama4_text"):
        args = _llama4(cfg, mt)
    elif mt == "gpt_oss":
        args = _gpt_oss(cfg, mt)
    elif mt == "nemotron_h":
        args = _nemotron_h(cfg, mt)
    else:
        args = _llama_like(cfg, mt)
    _check_stated(cfg, "llama4_text" if mt == "llama4" else mt)   # after the type's own checks
    try:
        return ModelSpec(name=name, **args)
    except SpecError as e:
        raise _in_config_terms(e, cfg) from None


#: ModelSpec fields the config.json gives under another name (the first key present is the
#: one named): a rule the model breaks is reported on the key the user wrote.
_HF_KEYS: dict[str, tuple[str, ...]] = {
    "moe_router_num_groups": ("n_group",),
    "moe_router_group_topk": ("topk_group",),
    "moe_router_topk": ("num_experts_per_tok", "experts_per_token"),
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "first_k_dense_replace": ("first_k_dense_replace", "interleave_moe_layer_step",
                              "decoder_sparse_step", "moe_layer_freq"),
    "num_shared_experts": ("n_shared_experts",),
    "moe_ffn_hidden_size": ("moe_intermediate_size",),
    "num_query_groups": ("num_key_value_heads",),
    "num_layers": ("num_hidden_layers",),
    "hybrid_pattern": ("hybrid_override_pattern", "layers_block_type"),
    "mamba_num_groups": ("n_groups",),
    "mamba_state_dim": ("ssm_state_size",),
}


def _in_config_terms(e: SpecError, cfg: Mapping[str, Any]) -> SpecError:
    """``e`` renamed to the config.json key that set the field (the model's own name kept in
    the rule), or ``e`` itself when the config names the field as the model does."""
    key = next((k for k in _HF_KEYS.get(e.field, ()) if k in cfg), None)
    if key is None or key == e.field:
        return e
    return SpecError(key, cfg[key], f"{e.rule} (the model's {e.field}={e.value})")


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
            stem = data.get("_name_or_path") or data["model_type"]
        return model_from_hf(data, name=stem)
    if "name" in data:
        data = dict(data)
        stem = check_name("name", data.pop("name"))
    return model_from_mapping(data, name=stem)
