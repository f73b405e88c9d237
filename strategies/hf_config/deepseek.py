"""``model_type`` deepseek_v2 / deepseek_v3: multi-head latent attention, routed and shared
experts, dense first layers, group-limited routing, the multi-token prediction (v3) and YaRN
RoPE (``rope_scaling``: ``common.rope_attention``)."""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.hf_config.common import READ_COMMON, ROPE_KEYS, common_fields, rope_attention
from strategies.hf_config.reading import get_bool, get_int, group_routing, refuse_unread

#: DeepSeek's ``topk_method`` values (modeling_deepseek.py MoEGate: V2's ``greedy`` and
#: ``group_limited_greedy``, V3's ``noaux_tc``).
DEEPSEEK_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
#: The method an absent ``topk_method`` reads as: transformers' ``DeepseekV3Config`` has no
#: such key and its ``DeepseekV3TopkRouter`` always routes as ``noaux_tc`` (the expert bias,
#: ``n_group``/``topk_group``); a deepseek_v2 config without it routes greedily.
_DEFAULT_TOPK_METHOD = {"deepseek_v3": "noaux_tc"}


def read_deepseek(cfg: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """deepseek_v2 / deepseek_v3: MLA, shared experts, dense first layers, MTP (v3)."""
    read = READ_COMMON | {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
                          "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                          "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers",
                          "n_group", "topk_group", *ROPE_KEYS}
    args = common_fields(cfg)
    args.pop("kv_channels")
    args["num_query_groups"] = None      # MLA: every head has its own K and V (no GQA)
    if get_bool(cfg, "attention_bias"):
        raise SpecError("attention_bias", True, "biases on multi-head latent attention are "
                        "not modelled")
    if get_int(cfg, "moe_layer_freq", 1) != 1:
        raise SpecError("moe_layer_freq", cfg["moe_layer_freq"], "DeepSeek's MoE layer "
                        "frequency other than 1 is not modelled")
    topk_method = cfg.get("topk_method", _DEFAULT_TOPK_METHOD.get(mt))
    if topk_method is not None and topk_method not in DEEPSEEK_TOPK_METHODS:
        raise SpecError("topk_method", topk_method, f"must be one of "
                        f"{', '.join(DEEPSEEK_TOPK_METHODS)} (DeepSeek's routers)")
    args.update(ffn_hidden_size=get_int(cfg, "intermediate_size"),
                num_experts=get_int(cfg, "n_routed_experts"),
                moe_router_topk=get_int(cfg, "num_experts_per_tok"),
                moe_ffn_hidden_size=get_int(cfg, "moe_intermediate_size"),
                num_shared_experts=get_int(cfg, "n_shared_experts", 0, lo=0),
                first_k_dense_replace=get_int(cfg, "first_k_dense_replace", 0, lo=0),
                q_lora_rank=get_int(cfg, "q_lora_rank", None),
                kv_lora_rank=get_int(cfg, "kv_lora_rank"),
                qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim"),
                qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim"),
                v_head_dim=get_int(cfg, "v_head_dim"),
                num_nextn_predict_layers=get_int(cfg, "num_nextn_predict_layers", 0, lo=0),
                # DeepSeek-V3's auxiliary-loss-free balancing adds a bias per expert
                router_bias=topk_method == "noaux_tc",
                **group_routing(cfg, topk_method))
    # YaRN's factor on the rope part's cos and sin, ms(mscale)/ms(mscale_all_dim) (HF
    # ``_compute_yarn_parameters``; Megatron-Core ``_yarn_get_concentration_factor``, which
    # MLA passes to ``apply_rotary_pos_emb``): 1 in V2 (0.707/0.707) and V3 (1/1); the
    # softmax scale's ms(mscale_all_dim)^2 costs nothing (the kernel's ``softmax_scale``)
    args.update(rope_attention(cfg, mt))
    refuse_unread(cfg, mt, read)
    return args
