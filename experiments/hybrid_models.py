"""The hybrid Mamba-2 models of ``strategies/reference/data/hybrid_2026.json`` (written by
``experiments/transcribe_hybrid.py``): each model's HuggingFace ``config.json`` fields
(``model_type: nemotron_h``), read from NVIDIA's own files that state the architecture the
measured runs built, each field with its source.

No ``config.json`` of these checkpoints is in the mirrors; the values are the ones NVIDIA's
training code passes to Megatron-Core for the same checkpoint, written under the HF names
Megatron-Bridge's converter maps them to (``src/megatron/bridge/models/nemotronh/
nemotron_h_bridge.py`` CONFIG_MAPPING, L253-267 at 4ab94dfad: ``mamba_head_dim``,
``mamba_num_heads``, ``chunk_size`` <- ``mamba_chunk_size``, ``n_groups`` <-
``mamba_num_groups``, ``ssm_state_size`` <- ``mamba_state_dim``, ``hybrid_override_pattern``
<- ``hybrid_layer_pattern``; the base mapping's ``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads`` <- ``num_query_groups``,
``intermediate_size`` <- ``ffn_hidden_size``, ``moe_intermediate_size`` <-
``moe_ffn_hidden_size``, ``n_routed_experts`` <- ``num_moe_experts``, ``num_experts_per_tok``
<- ``moe_router_topk``, ``routed_scaling_factor`` <- ``moe_router_topk_scaling_factor``).

Megatron-Core's defaults where a script passes nothing (NVIDIA/Megatron-LM d98e8a64dd,
``megatron/core/transformer/transformer_config.py`` L1262 ``mamba_head_dim`` 64, L1265
``mamba_num_groups`` 8, L1268-1270 ``mamba_num_heads`` None = hidden x expand / head dim;
``megatron/core/ssm/mamba_mixer.py`` L179 ``d_conv=4``, L181 ``expand=2``, L194
``chunk_size=128``). ``expand`` is recorded as the HF configs carry it, but a mixer whose
``mamba_num_heads`` is given is ``mamba_num_heads x mamba_head_dim`` wide (mamba_mixer.py
L246-248), not ``expand x hidden``: Nemotron 3 Nano's 64 x 64 = 4096, not 2 x 2688. Pure
data.
"""
from __future__ import annotations

import copy
from typing import Any

#: NVIDIA/Megatron-LM at d98e8a64dd, examples/post_training/modelopt/conf/nvidia/ (the
#: arguments Megatron-LM builds each published HF checkpoint with)
MLM = "NVIDIA/Megatron-LM@d98e8a64dd examples/post_training/modelopt/conf/nvidia/"
#: NVIDIA-NeMo/Megatron-Bridge at the commit of the 26.08 table
BRIDGE_AT = "NVIDIA-NeMo/Megatron-Bridge@4ab94dfad"

_MAMBA_DEFAULTS = {"conv_kernel": 4, "chunk_size": 128, "expand": 2, "mamba_head_dim": 64,
                   "n_groups": 8}
_COMMON = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
           "head_dim": 128, "mlp_hidden_act": "relu2", "use_bias": False,
           "tie_word_embeddings": False, "vocab_size": 131072}

#: Nemotron-H 56B: Megatron-LM Nemotron-H-56B-Base-8K.sh L15 (pattern), L16 (state 256),
#: L19 (untied), L20 (no bias), L23 (squared ReLU), L24-29 (hidden 8192, 64 heads, 8 query
#: groups, ffn 32768, kv channels 128), L34-35 (seq 8192); mamba heads 8192 x 2 / 64 = 256
#: (the Megatron-Core default, L1268-1270). The same as NVIDIA/NeMo ssm.py
#: NemotronHConfig56B (L1032-1043) and NemotronHConfigBase (vocab_size 131072 L985,
#: mamba_num_groups 8, mamba_head_dim 64, num_query_groups 8), the code the dgxc 25.05
#: rows ran (container nemo:25.04.nemotron-h)
P56 = ("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
       "-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")
NEMOTRON_H_56B = {**_COMMON, **_MAMBA_DEFAULTS, "hidden_size": 8192, "num_hidden_layers": 118,
                  "hybrid_override_pattern": P56, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "intermediate_size": 32768,
                  "mamba_num_heads": 256, "ssm_state_size": 256,
                  "max_position_embeddings": 8192}
SRC_56B = (f"{MLM}Nemotron-H-56B-Base-8K.sh L15-35 (HF nvidia/Nemotron-H-56B-Base-8K); NVIDIA/"
           "NeMo ssm.py NemotronHConfig56B L1032-1043, NemotronHConfigBase L985 (vocab "
           "131072); Megatron-Core defaults for the Mamba fields the script leaves out")

#: Nemotron 3 Nano 30B-A3B: Megatron-Bridge recipes/nemotronh/h100/nemotron_3_nano.py
#: L78-100 (the HybridModelProvider the perf recipes build, perf_recipes/nemotronh/common.py
#: L26) and Megatron-LM NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.sh L22-47 (128 experts, top-6,
#: scaling 2.5, shared 3712, sigmoid router, mamba 64 x 64, pattern, hidden 2688, 32 heads,
#: 2 query groups, ffn 1856, kv channels 128)
PNANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
NANO = {**_COMMON, **_MAMBA_DEFAULTS, "hidden_size": 2688, "num_hidden_layers": 52,
        "hybrid_override_pattern": PNANO, "num_attention_heads": 32, "num_key_value_heads": 2,
        "intermediate_size": 1856, "mamba_num_heads": 64, "ssm_state_size": 128,
        "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
        "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712,
        "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "max_position_embeddings": 8192}
SRC_NANO = (f"{BRIDGE_AT} src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_nano.py "
            "L78-100 (the provider the perf recipes build, HF nvidia/NVIDIA-Nemotron-3-Nano-"
            f"30B-A3B-BF16); {MLM}NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.sh L22-47; vocab 131072 "
            "as Megatron-Bridge's Nemotron 3 Nano 4B recipe (h100/nemotron_3_nano_4b.py L51)")

#: Nemotron 3.5 Lightning 30B-A3B: the perf recipe builds Nano's provider and adds one MTP
#: block "*E" run at two depths (perf_recipes/nemotronh/gb200/nemotronh.py L492-500 at
#: 4ab94dfad: nemotron_3_nano_pretrain_8gpu_gb200_fp8mx_config(), mtp_num_layers 2,
#: mtp_hybrid_override_pattern "*E", mtp_use_repeated_layer True)
LIGHTNING = {**NANO, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}
SRC_LIGHTNING = (f"{BRIDGE_AT} perf_recipes/nemotronh/gb200/nemotronh.py L492-500: Nano's "
                 "architecture (" + SRC_NANO.split(" (")[0] + ") plus one repeated MTP block "
                 "'*E'; the Lightning checkpoint's own config.json (nvidia/NVIDIA-Nemotron-3.5-"
                 "Lightning-30B-A3B-BF16 @ b3caaabe) is not read here")

#: Nemotron 3 Super 120B-A12B: Megatron-LM NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh L20-53
#: (512 experts, top-22, scaling 5.0, shared 5376, latent 1024, mamba 128 x 64, pattern,
#: hidden 4096, 32 heads, 2 query groups, expert ffn 2688, kv channels 128); one MTP block
#: "*E" (Megatron-Bridge recipes/nemotronh/h100/nemotron_3_super.py L96-98: "HF config has
#: num_nextn_predict_layers=1 for the shared block"; Megatron-LM tests/functional_tests/
#: test_cases/nemotron/nemotron3_super_release_gb200/model_config.yaml L65 pattern ".../*E/*E")
PSUPER = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*"
          "EMEMEMEME")
#: what Super's and Ultra's sources state alike: 512 experts routed top-22 with scaling 5.0,
#: one shared expert, 2 query groups, one MTP block of attention and MoE
_LATENT_MOE = {**_COMMON, **_MAMBA_DEFAULTS, "num_key_value_heads": 2, "ssm_state_size": 128,
               "n_routed_experts": 512, "num_experts_per_tok": 22, "n_shared_experts": 1,
               "routed_scaling_factor": 5.0, "n_group": 1, "topk_group": 1,
               "norm_topk_prob": True, "num_nextn_predict_layers": 1,
               "mtp_hybrid_override_pattern": "*E", "max_position_embeddings": 8192}
SUPER = {**_LATENT_MOE, "hidden_size": 4096, "num_hidden_layers": 88,
         "hybrid_override_pattern": PSUPER, "num_attention_heads": 32,
         "intermediate_size": 2688, "mamba_num_heads": 128, "moe_intermediate_size": 2688,
         "moe_latent_size": 1024, "moe_shared_expert_intermediate_size": 5376}
SRC_SUPER = (f"{MLM}NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh L20-53 (HF nvidia/NVIDIA-"
             "Nemotron-3-Super-120B-A12B-BF16); MTP block from Megatron-Bridge recipes/"
             "nemotronh/h100/nemotron_3_super.py L96-98 and Megatron-LM tests/functional_tests/"
             "test_cases/nemotron/nemotron3_super_release_gb200/model_config.yaml L65; vocab "
             "131072 as the Nano tokenizer the Super recipes use (h100/nemotron_3_super.py L59)")

#: Nemotron 3 Ultra 550B-A55B: Megatron-LM NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh L20-51
#: (latent 2048, 512 experts, top-22, shared 10240, scaling 5.0, mamba 256 x 64, pattern,
#: 108 layers, hidden 8192, 64 heads, 2 query groups, expert ffn 5120, kv channels 128); one
#: MTP block of attention and MoE (NVIDIA-NeMo/Automodel@cb9765441
#: examples/llm_benchmark/nemotron/nemotron_ultra_v3_te_deepep.yaml L17-18, L72-74: "one
#: physical MTP layer", "Ultra's mtp_layers_block_type = ["attention", "moe"]")
PULTRA = ("MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*"
          "EMEMEM*EMEMEMEM*EMEMEMEME")
ULTRA = {**_LATENT_MOE, "hidden_size": 8192, "num_hidden_layers": 108,
         "hybrid_override_pattern": PULTRA, "num_attention_heads": 64,
         "intermediate_size": 5120, "mamba_num_heads": 256, "moe_intermediate_size": 5120,
         "moe_latent_size": 2048, "moe_shared_expert_intermediate_size": 10240}
SRC_ULTRA = (f"{MLM}NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh L20-51 (HF nvidia/NVIDIA-"
             "Nemotron-3-Ultra-550B-A55B-BF16); the MTP block (one physical layer of "
             "attention and MoE) from NVIDIA-NeMo/Automodel@cb9765441 examples/llm_benchmark/"
             "nemotron/nemotron_ultra_v3_te_deepep.yaml L17-18, L72-74; vocab 131072 as the "
             "other Nemotron 3 configs (not stated for Ultra by the files read)")

#: name -> (model mapping without seq_len, the citation of its hf_config)
MODELS: dict[str, tuple[dict[str, Any], str]] = {
    "nemotron-h-56b": ({"name": "Nemotron-H 56B", "params_b": 56, "hf_config": NEMOTRON_H_56B},
                       SRC_56B),
    "nemotron-3-nano": ({"name": "Nemotron 3 Nano 30B-A3B", "params_b": 31.6,
                         "active_params_b": 3.2, "hf_config": NANO}, SRC_NANO),
    "nemotron-3.5-lightning": ({"name": "Nemotron 3.5 Lightning 30B-A3B", "params_b": 30,
                                "active_params_b": 3, "hf_config": LIGHTNING}, SRC_LIGHTNING),
    "nemotron-3-super": ({"name": "Nemotron 3 Super 120B-A12B", "params_b": 120,
                          "active_params_b": 12, "hf_config": SUPER}, SRC_SUPER),
    "nemotron-3-ultra": ({"name": "Nemotron 3 Ultra 550B-A55B", "params_b": 550,
                          "active_params_b": 55, "hf_config": ULTRA}, SRC_ULTRA),
}


def model_entry(key: str, seq: int) -> tuple[dict[str, Any], str]:
    """The ``model`` mapping of an entry (a deep copy, with the row's sequence length and
    the flat fields the schema carries beside ``hf_config``) and the config's citation."""
    base, src = MODELS[key]
    mo = copy.deepcopy(base)
    hf = mo["hf_config"]
    mo.update(layers=hf["num_hidden_layers"], hidden=hf["hidden_size"],
              heads=hf["num_attention_heads"], kv_heads=hf["num_key_value_heads"],
              vocab=hf["vocab_size"], seq_len=seq)
    return mo, src


def check_pattern(hf: dict[str, Any]) -> None:
    """The layer pattern's length is the layer count (ValueError naming the model if not)."""
    if len(hf["hybrid_override_pattern"]) != hf["num_hidden_layers"]:
        raise ValueError(f"hybrid_override_pattern has {len(hf['hybrid_override_pattern'])} "
                         f"layers, num_hidden_layers is {hf['num_hidden_layers']}")
