"""Model presets. Shapes from the papers and model cards named beside each entry."""
from __future__ import annotations

from strategies.errors import SpecError
from strategies.model import ModelSpec, yarn_attention_factor


def _gpt(name: str, l: int, h: int, a: int, v: int = 51200, s: int = 2048, ffn: int | None = None,
         act: str = "gelu", pos: str = "learned", kv: int | None = None,
         bias: bool = True, dropout: bool = True, emb_norm: bool = False) -> ModelSpec:
    return ModelSpec(name, l, h, a, ffn or 4 * h, v, s, kv, act, tie_word_embeddings=True,
                     position_embedding=pos, bias=bias, dropout=dropout,
                     embedding_norm=emb_norm)


def _llama(name: str, l: int, h: int, a: int, kv: int, ffn: int, v: int, s: int,
           tie: bool = False, experts: int = 1, topk: int = 1, qkv_bias: bool = False) -> ModelSpec:
    return ModelSpec(name, l, h, a, ffn, v, s, kv, "swiglu", experts, topk,
                     tie_word_embeddings=tie, position_embedding="rope", norm="rmsnorm",
                     qkv_bias=qkv_bias, dropout=False)


def _moe(name: str, l: int, h: int, a: int, kv: int | None, ffn: int, v: int, s: int, experts: int,
         topk: int, moe_ffn: int, **kw) -> ModelSpec:
    return ModelSpec(name, l, h, a, ffn, v, s, kv, "swiglu", experts, topk, moe_ffn,
                     position_embedding="rope", norm="rmsnorm", dropout=False, **kw)


def _hybrid(name: str, pattern: str, h: int, a: int, kv: int, ffn: int, **kw) -> ModelSpec:
    """A Nemotron-H family model (vocab 131072, 8K tokens, RMSNorm, squared ReLU, no position
    embedding, untied output; Mamba-2 head 64, 8 groups, conv 4 with a bias, chunk 128)."""
    return ModelSpec(name, len(pattern), h, a, ffn, 131072, 8192, kv, "squared_relu",
                     position_embedding="none", norm="rmsnorm", dropout=False,
                     hybrid_pattern=pattern, mamba_head_dim=64, mamba_num_groups=8,
                     mamba_conv_kernel=4, mamba_chunk_size=128, **kw)


_ALL = [
    # Narayanan et al. 2021 Table 1 (vocab 51200, seq 2048)
    _gpt("gpt-1.7b", 24, 2304, 24), _gpt("gpt-3.6b", 30, 3072, 32),
    _gpt("gpt-7.5b", 36, 4096, 32), _gpt("gpt-18.4b", 40, 6144, 48),
    _gpt("gpt-39.1b", 48, 8192, 64), _gpt("gpt-76.1b", 60, 10240, 80),
    _gpt("gpt-145.6b", 80, 12288, 96), _gpt("gpt-310.1b", 96, 16384, 128),
    _gpt("gpt-529.6b", 105, 20480, 128), _gpt("gpt-1t", 128, 25600, 160),
    _gpt("gpt3-175b", 96, 12288, 96), _gpt("gpt-22b", 48, 6144, 64),  # Korthikanti 2022
    _gpt("gpt-530b", 105, 20480, 128),
    _gpt("bloom-176b", 70, 14336, 112, v=250880, pos="alibi", emb_norm=True),  # BigScience BLOOM
    # MosaicML MPT (ALiBi, vocab 50368 padded)
    _gpt("mpt-1b", 24, 2048, 16, v=50368, pos="alibi", bias=False), _gpt("mpt-3b", 32, 2560, 20, v=50368, pos="alibi", bias=False),
    _gpt("mpt-7b", 32, 4096, 32, v=50368, pos="alibi", bias=False), _gpt("mpt-13b", 40, 5120, 40, v=50368, pos="alibi", bias=False),
    _gpt("mpt-30b", 48, 7168, 56, v=50368, pos="alibi", bias=False), _gpt("mpt-70b", 80, 8192, 64, v=50368, pos="alibi", bias=False),
    # NVIDIA Nemotron-4 (squared ReLU, GQA 8, vocab 256000, seq 4096)
    # (Parmar et al. 2024, arXiv 2402.16819 §2: "no bias terms, dropout rate of zero"; the 340B
    # model has the 15B's architecture, arXiv 2406.11704)
    _gpt("nemotron4-15b", 32, 6144, 48, v=256000, s=4096, act="squared_relu", pos="rope", kv=8,
         bias=False, dropout=False),
    _gpt("nemotron4-340b", 96, 18432, 96, v=256000, s=4096, act="squared_relu", pos="rope", kv=8,
         bias=False, dropout=False),
    # Meta Llama 2 / 3 / 3.1 model cards
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    _llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    # Mistral AI
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 4096),
    _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, experts=8, topk=2),
    _llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 4096, experts=8, topk=2),
    # Qwen2
    _llama("qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 4096, qkv_bias=True),
    _llama("qwen2-72b", 80, 8192, 64, 8, 29568, 152064, 4096, qkv_bias=True),
    # Frontier mixtures of experts: the shapes of each model's own config.json (the files
    # under tests/data/hf/ hold those fields); seq_length is the pre-training length.
    # DeepSeek-V3 (arXiv 2412.19437 §4.2): MLA, 1 shared + 256 routed experts (top 8) in 8
    # groups of which a token reaches at most 4 (node-limited routing), the first 3 layers
    # dense, one multi-token-prediction module, pre-trained at 4K tokens
    _moe("deepseek-v3", 61, 7168, 128, None, 18432, 129280, 4096, 256, 8, 2048,
         q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
         v_head_dim=128, num_shared_experts=1, first_k_dense_replace=3,
         num_nextn_predict_layers=1, router_bias=True, moe_router_num_groups=8,
         moe_router_group_topk=4),
    # Qwen3 technical report (arXiv 2505.09388): head size 128, q/k norms, 128 experts (top 8),
    # no shared expert; stage-1 pre-training at 4,096 tokens
    _moe("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096, 128, 8, 1536,
         kv_channels=128, qk_norm=True),
    _moe("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, 128, 8, 768,
         kv_channels=128, qk_norm=True),
    # OpenAI gpt-oss-120b model card: head size 64, biases, attention sinks, 128-token sliding
    # window on every other layer, 128 experts (top 4) with biases; initial context 4,096;
    # its config.json: swiglu_limit 7.0, YaRN rope_scaling factor 32 (attention factor
    # 1 + 0.1 ln 32, model.yarn_attention_factor)
    _moe("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 4096, 128, 4, 2880,
         kv_channels=64, bias=True, router_bias=True, attention_sinks=True,
         sliding_window=128, global_attention_every=2, activation_clamp=7.0,
         rope_attention_factor=yarn_attention_factor(32.0)),
    # DeepSeek-V4-Flash (its config.json, tests/data/hf/deepseek_v4_flash.json; 284B total,
    # 13B activated on its model card): 43 layers, 2 sliding-window, then compressed sparse
    # (ratio 4) and heavily compressed (128) attention alternating, the last ratio 4; 64 heads
    # of 512 over one key/value head, 128-token window, query rank 1024, 8 output groups of
    # rank 1024, indexer 64 heads of 128 (top 512); 4 hyper-connection streams; 256 routed
    # experts (top 6) and 1 shared, the first 3 layers hash-routed, SwiGLU clamped at 10; one
    # prediction module; 4,096 tokens as Megatron-Bridge trains it (deepseek_v4_bridge.py
    # ``provider.seq_length``). Its cost: strategies.cost.dsv4_cost.
    _moe("deepseek-v4-flash", 43, 4096, 64, 1, 2048, 129280, 4096, 256, 6, 2048,
         kv_channels=512, q_lora_rank=1024, o_lora_rank=1024, o_groups=8,
         compress_ratios=(0, 0) + (4, 128) * 20 + (4,), sliding_window=128,
         index_n_heads=64, index_head_dim=128, index_topk=512, hc_streams=4,
         num_hash_layers=3, num_shared_experts=1, num_nextn_predict_layers=1,
         router_bias=True, attention_sinks=True, activation_clamp=10.0,
         max_position_embeddings=1048576),
]
_ALL += [  # hybrid Mamba-2 models (strategies.model.hybrid)
    # NVIDIA Nemotron-H (arXiv 2504.03624; Megatron-Bridge recipes/nemotronh/h100/nemotronh.py):
    # 8B 24 Mamba-2 + 4 attention + 24 MLP layers, 56B 54 + 10 + 54; squared-ReLU MLP, GQA 8,
    # no position embedding, Mamba-2 head 64, 8 groups, conv 4, chunk 128, vocab 131072, 8K
    _hybrid("nemotron-h-8b", "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 4096, 32,
            8, 21504, mamba_num_heads=128, mamba_state_dim=128),
    _hybrid("nemotron-h-56b", "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
            "-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 8192, 64, 8, 32768,
            mamba_num_heads=256, mamba_state_dim=256),
    # NVIDIA Nemotron 3 Nano 30B-A3B (its config.json, tests/data/hf/): 23 Mamba-2 + 23 MoE + 6
    # attention layers, 128 routed experts (top 6) and one shared expert of 3712, GQA 2
    _hybrid("nemotron3-nano-30b-a3b", "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
            2688, 32, 2, 1856, mamba_num_heads=64, mamba_state_dim=128, kv_channels=128,
            num_experts=128, moe_router_topk=6, moe_ffn_hidden_size=1856, num_shared_experts=1,
            shared_expert_ffn_hidden_size=3712, router_bias=True),
    # NVIDIA Nemotron 3 Super 120B-A12B and Ultra 550B-A55B: latent MoE (strategies.model.
    # latent), 512 routed experts (top 22) and one shared expert, GQA 2, kv channels 128,
    # Mamba-2 state 128; Megatron-LM d98e8a64 examples/post_training/modelopt/conf/nvidia/
    # NVIDIA-Nemotron-3-{Super-120B-A12B,Ultra-550B-A55B}-BF16.sh L20-53 / L20-51 (HF
    # nvidia/NVIDIA-Nemotron-3-*-BF16); one MTP block "*E" (Megatron-Bridge recipes/
    # nemotronh/h100/nemotron_3_super.py L96-98: "HF config has num_nextn_predict_layers=1
    # for the shared block"; Ultra's: NVIDIA-NeMo/Automodel cb9765441 examples/
    # llm_benchmark/nemotron/nemotron_ultra_v3_te_deepep.yaml L17-18, L72-74)
    _hybrid("nemotron3-super", "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
            "EMEMEMEMEM*EMEMEMEM*EMEMEMEME", 4096, 32, 2, 2688, mamba_num_heads=128,
            mamba_state_dim=128, num_experts=512, moe_router_topk=22,
            moe_ffn_hidden_size=2688, num_shared_experts=1, shared_expert_ffn_hidden_size=5376,
            router_bias=True, moe_latent_size=1024, num_nextn_predict_layers=1,
            mtp_hybrid_pattern="*E"),
    _hybrid("nemotron3-ultra", "MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*"
            "EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", 8192, 64, 2, 5120,
            mamba_num_heads=256, mamba_state_dim=128, num_experts=512,
            moe_router_topk=22, moe_ffn_hidden_size=5120, num_shared_experts=1,
            shared_expert_ffn_hidden_size=10240, router_bias=True, moe_latent_size=2048,
            num_nextn_predict_layers=1, mtp_hybrid_pattern="*E"),
]
MODEL_PRESETS: dict[str, ModelSpec] = {m.name: m for m in _ALL}
_ALIASES = {"llama3-405b": "llama3.1-405b", "gpt-175b": "gpt3-175b", "gpt3": "gpt3-175b"}


def model_preset(name: str) -> ModelSpec:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in MODEL_PRESETS:
        raise SpecError("model", name, "unknown preset (see `paraplan presets`), "
                        "and not a path to a config.json or .yaml file")
    return MODEL_PRESETS[key]
