"""The typed readers of a HuggingFace ``config.json`` and its refusals: an integer or boolean
field by name, the refusal of a field that changes the cost but that the model type does not
read, of a field whose transformers default is not what an absent field reads here, and a
``ModelSpec`` rule reported on the key the user wrote (``in_config_terms``)."""
from __future__ import annotations

import re
from typing import Any, Mapping

from strategies.errors import SpecError
from topologies.limits import check_bool, check_int

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


def get_int(cfg: Mapping[str, Any], key: str, default: Any = ..., lo: int = 1) -> int:
    """An integer field of the config (a bool, a float or a string is refused by name)."""
    v = _get(cfg, key, default)
    return v if v is None else check_int(key, v, lo, _MAX_INT)


#: The ``topk_method`` values that pick a token's experts within groups (DeepSeek-V2's
#: ``group_limited_greedy``, V3's ``noaux_tc``: modeling_deepseek.py ``MoEGate``); transformers'
#: ``DeepseekV3TopkRouter``, which ``NemotronHTopkRouter`` is, always routes so.
GROUP_TOPK_METHODS = ("group_limited_greedy", "noaux_tc")


def group_routing(cfg: Mapping[str, Any], topk_method: str | None) -> dict[str, int | None]:
    """``moe_router_num_groups`` / ``moe_router_group_topk`` of a router with ``topk_method``:
    group-limited routing (a token's experts from at most ``topk_group`` of ``n_group`` expert
    groups; DeepSeek-V3 maps a group to a node) where the method routes within groups
    (``GROUP_TOPK_METHODS``) and ``n_group`` > 1, else None for both."""
    groups = get_int(cfg, "n_group", 1)
    limited = topk_method in GROUP_TOPK_METHODS and groups > 1
    return {"moe_router_num_groups": groups if limited else None,
            "moe_router_group_topk": get_int(cfg, "topk_group") if limited else None}


def get_bool(cfg: Mapping[str, Any], key: str) -> bool:
    """A boolean field of the config (absent or null: False; anything but a bool refused)."""
    v = cfg.get(key, False)
    return False if v is None else check_bool(key, v)



def open_number(key: str, v: Any, lo: float, hi: float) -> float:
    """A float field in the open interval ``(lo, hi)`` (a bool or a string is refused by
    name)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v < hi:
        raise SpecError(key, v, f"must be a number in ({lo:g}, {hi:g})")
    return float(v)

def _neutral(v: Any) -> bool:
    return v is None or v is False or v == 0 or v == [] or v == {}


def refuse_unread(cfg: Mapping[str, Any], mt: str, read: set[str]) -> None:
    """Refuse a field that changes the cost but that ``mt`` does not read."""
    for k, v in sorted(((str(k), v) for k, v in cfg.items()), key=lambda kv: kv[0]):
        if k in read or k in _NEUTRAL:
            continue
        if (k in _COST_FIELDS and not _neutral(v)) or \
                (k not in _COST_FIELDS and _STRUCTURAL.search(k) and not _neutral(v)):
            raise SpecError(k, v, f"changes the model's cost but is not modelled for "
                            f"model_type={mt} (supported fields: docs/models.md)")


#: Fields of a model type whose transformers default (its ``configuration_<type>.py`` at
#: transformers 4.57-5.x) is not what an absent field reads here: an absent one is refused, not
#: guessed. ``(transformers' default, whether null is read as transformers reads it)``.
_ABSENT_DIFFERS: dict[str, dict[str, tuple[Any, bool]]] = {
    "deepseek_v3": {"n_shared_experts": (1, False), "first_k_dense_replace": (3, False),
                    "q_lora_rank": (1536, True)},
    "qwen3_moe": {"num_key_value_heads": (4, False)},
    # transformers 008e5743: MistralConfig kv 8, window 4096; MixtralConfig kv 8, 8 experts
    # (absent here: every head, no window, a dense model); Qwen3Config kv 32, head_dim 128;
    # Qwen2MoeConfig kv 16, a shared expert of 5632
    "mistral": {"num_key_value_heads": (8, True), "sliding_window": (4096, True)},
    "mixtral": {"num_key_value_heads": (8, True), "num_local_experts": (8, False)},
    "qwen3": {"num_key_value_heads": (32, True), "head_dim": (128, False)},
    "qwen2_moe": {"num_key_value_heads": (16, True),
                  "shared_expert_intermediate_size": (5632, False)},
    "gpt_oss": {"head_dim": (64, True), "num_key_value_heads": (8, True),
                "layer_types": ("sliding/full alternating", False)},
    "llama4_text": {"intermediate_size_mlp": (16384, False), "num_key_value_heads": (8, True),
                    "head_dim": (128, True)},
}


def check_stated(cfg: Mapping[str, Any], mt: str) -> None:
    """Refuse a field of ``_ABSENT_DIFFERS`` that ``cfg`` leaves out (or nulls where null is
    not read as transformers reads it)."""
    for key, (default, null_ok) in _ABSENT_DIFFERS.get(mt, {}).items():
        if key not in cfg or (cfg[key] is None and not null_ok):
            raise SpecError(key, cfg.get(key), f"is required in a {mt} config.json: "
                            f"transformers' default ({default}) is not what a missing field "
                            "reads here, so write its value")


#: ModelSpec fields the config.json gives under another name (the first key present is the
#: one named): a rule the model breaks is reported on the key the user wrote.
_HF_KEYS: dict[str, tuple[str, ...]] = {
    "moe_router_num_groups": ("n_group",),
    "moe_router_group_topk": ("topk_group",),
    "moe_router_topk": ("num_experts_per_tok", "experts_per_token"),
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "first_k_dense_replace": ("first_k_dense_replace", "interleave_moe_layer_step",
                              "mlp_only_layers", "decoder_sparse_step", "moe_layer_freq"),
    "num_shared_experts": ("n_shared_experts",),
    "moe_ffn_hidden_size": ("moe_intermediate_size",),
    "num_query_groups": ("num_key_value_heads",),
    "num_layers": ("num_hidden_layers",),
    "hybrid_pattern": ("hybrid_override_pattern", "layers_block_type"),
    "mtp_hybrid_pattern": ("mtp_hybrid_override_pattern", "mtp_layers_block_type"),
    "mamba_num_groups": ("n_groups",),
    "mamba_state_dim": ("ssm_state_size",),
    "mamba_conv_kernel": ("conv_kernel",),
    "mamba_chunk_size": ("chunk_size",),
    "kv_channels": ("head_dim", "attention_head_dim"),
    "hc_streams": ("hc_mult",),
}


def config_key(field: str) -> str:
    """The config.json key that sets ``ModelSpec`` field ``field``: the first of its
    ``_HF_KEYS`` names, or the field's own name where the config spells it so."""
    return _HF_KEYS.get(field, (field,))[0]


def in_config_terms(e: SpecError, cfg: Mapping[str, Any]) -> SpecError:
    """``e`` renamed to the config.json key that set the field (the model's own name kept in
    the rule), or ``e`` itself when the config names the field as the model does."""
    key = next((k for k in _HF_KEYS.get(e.field, ()) if k in cfg), None)
    if key is None or key == e.field:
        return e
    return SpecError(key, cfg[key], f"{e.rule} (the model's {e.field}={e.value})")
