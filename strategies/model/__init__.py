"""``ModelSpec``: the shape of a decoder-only transformer, from presets, HF configs or YAML.

Vocabulary follows Megatron-LM / HuggingFace: ``num_layers``, ``hidden_size``,
``num_attention_heads``, ``num_query_groups`` (KV heads), ``ffn_hidden_size``, ``vocab_size``.
Frontier mixtures of experts add multi-head latent attention (``kv_lora_rank`` and the head
dims of DeepSeek-V2/V3), shared experts, dense first layers (``first_k_dense_replace``),
MoE layers every ``moe_layer_freq`` layers, multi-token-prediction modules
(``num_nextn_predict_layers``) and windowed attention. docs/models.md gives every count.

The package: ``spec`` (the dataclass, its fields and derived shapes), ``checks`` (the rules
checked when one is made), ``layers`` (layer kinds: dense, MoE, windowed), ``params``
(parameter counts), ``hybrid`` (Mamba-2 hybrids), ``latent`` (latent MoE, a hybrid model's
MTP block) and ``mapping`` (a model from a mapping of its fields). Imports point one
way: ``checks`` <- ``layers``, ``params`` <- ``spec`` <- ``mapping``.
"""
from strategies.model.mapping import model_from_mapping
from strategies.model.spec import ModelSpec, yarn_attention_factor

__all__ = ["ModelSpec", "model_from_mapping", "yarn_attention_factor"]
