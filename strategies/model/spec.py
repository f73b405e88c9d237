"""``ModelSpec``: the fields of a decoder-only transformer and its derived shapes (head sizes,
MLA, gating, expert widths); its layer kinds (``strategies.model.layers``) and parameter
counts (``strategies.model.params``) are mixed in, its rules checked when it is made
(``strategies.model.checks``). ``yarn_attention_factor`` gives its ``rope_attention_factor``
from a YaRN ``rope_scaling``. The field vocabulary: the package docstring.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from strategies.model.checks import check_positive, check_spec
from strategies.model.dsv4 import SparseAttentionShapes
from strategies.model.hybrid import HybridShapes
from strategies.model.latent import LatentMtp
from strategies.model.layers import LayerKinds
from strategies.model.params import ParamCounts


def yarn_attention_factor(factor: float, mscale: float | None = None,
                          mscale_all_dim: float | None = None) -> float:
    """YaRN's attention factor, the scale on RoPE's cos and sin: ``0.1·mscale·ln(factor) + 1``
    (1 for ``factor <= 1``), over the same with ``mscale_all_dim`` when both are given
    (HuggingFace ``_compute_yarn_parameters``; Megatron-Core
    ``yarn_rotary_pos_embedding._yarn_get_concentration_factor``). gpt-oss (factor 32, no
    mscale): 1 + 0.1 ln 32 = 1.3466."""
    def ms(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    if mscale is None or mscale_all_dim is None or not mscale or not mscale_all_dim:
        return ms(1.0)
    return ms(mscale) / ms(mscale_all_dim)


@dataclass(frozen=True)
class ModelSpec(LayerKinds, ParamCounts, HybridShapes, LatentMtp, SparseAttentionShapes):
    """A decoder-only transformer. ``seq_length`` is the default training length (tokens).

    ``ffn_hidden_size`` is the MLP width of the dense layers, ``moe_ffn_hidden_size`` that of
    one routed expert. Layer ``i`` (0-based) is an MoE layer when the model has experts,
    ``i >= first_k_dense_replace`` and ``(i + 1) % moe_layer_freq == 0`` (HF Qwen2-MoE/Llama-4
    convention). ``kv_lora_rank`` set means multi-head latent attention (MLA). A window
    (``sliding_window`` tokens, ``window_kind`` sliding or chunked) applies to every layer
    when ``global_attention_every`` is 0, else to all but every ``global_attention_every``-th.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int = 2048
    num_query_groups: int | None = None
    activation: str = "gelu"
    num_experts: int = 1
    moe_router_topk: int = 1
    moe_ffn_hidden_size: int | None = None
    tie_word_embeddings: bool = False
    position_embedding: str = "learned"
    max_position_embeddings: int | None = None
    bias: bool = False
    norm: str = "layernorm"
    qkv_bias: bool = False
    kv_channels: int | None = None            # head dim when not hidden/heads (Qwen3, gpt-oss)
    qk_norm: bool = False                     # per-head RMSNorm on q and k (Qwen3)
    q_lora_rank: int | None = None            # MLA query compression (None: full-rank q)
    kv_lora_rank: int | None = None           # MLA key/value compression (set: MLA)
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int | None = None   # per shared expert (default moe ffn)
    shared_expert_gate: bool = False          # Qwen2-MoE: sigmoid gate h -> 1
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    num_nextn_predict_layers: int = 0         # DeepSeek-V3 multi-token-prediction modules
    router_bias: bool = False                 # a bias per expert on the router (gpt-oss, DSv3)
    moe_router_num_groups: int | None = None  # DeepSeek's group-limited routing: expert groups
    moe_router_group_topk: int | None = None  # ... of which a token reaches at most this many
    sliding_window: int | None = None
    window_kind: str = "sliding"
    global_attention_every: int = 0
    attention_sinks: bool = False             # gpt-oss: one learned logit per head
    #: gated activation's inputs clamped to +-limit (gpt-oss ``swiglu_limit`` 7.0); None: none
    activation_clamp: float | None = None
    #: factor on RoPE's cos and sin (YaRN's attention factor, ``rope_scaling``; gpt-oss
    #: 1 + 0.1 ln 32); 1: plain RoPE
    rope_attention_factor: float = 1.0
    #: trained with dropout (Megatron's ``hidden_dropout``/``attention_dropout`` > 0): its
    #: 1-byte masks are saved for the backward. False for the models trained without it
    #: (Llama, Mistral, Qwen, DeepSeek, gpt-oss: ``attention_dropout`` 0.0 and no residual
    #: dropout), whose ``F.dropout(x, p=0)`` returns ``x`` itself and keeps no mask (PyTorch
    #: ``aten/src/ATen/native/Dropout.cpp``, ``_dropout_impl``: ``if (p == 0 || !train ...)
    #: return input``). docs/memory.md, docs/calibration.md §5.19.
    dropout: bool = True
    #: a LayerNorm on the word embeddings' output (BLOOM's ``word_embeddings_layernorm``;
    #: Megatron-DeepSpeed ``--embed-layernorm``, ``VocabParallelEmbedding.norm``): its 16-bit
    #: input is saved for the backward on the first stage (``stage_ends.embedding_bytes``;
    #: its ``2h`` parameters and its time are neglected). docs/calibration.md §5.129.
    embedding_norm: bool = False
    #: a hybrid model's layers, one character each (Megatron-Core's ``hybrid_layer_pattern``,
    #: HF ``hybrid_override_pattern``): ``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE
    #: (``strategies.model.hybrid``); None: a transformer (attention and MLP in every layer)
    hybrid_pattern: str | None = None
    mamba_num_heads: int | None = None        # Mamba-2 heads H (d_inner = H * head dim)
    mamba_head_dim: int | None = None         # P
    mamba_state_dim: int | None = None        # N (HF ``ssm_state_size``)
    mamba_num_groups: int | None = None       # G, B and C groups (HF ``n_groups``)
    mamba_conv_kernel: int | None = None      # K, the causal conv1d's width
    mamba_chunk_size: int | None = None       # Q, the SSD scan's chunk length
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False             # biases on in_proj/out_proj (HF ``use_bias``)
    #: latent MoE (Nemotron 3 Super/Ultra; Megatron-Core ``moe_latent_size``): the routed
    #: experts read and write this width, a duplicated ``h -> L`` projection before the
    #: dispatch and ``L -> h`` after the combine (``strategies.model.latent``); None: ``h``
    moe_latent_size: int | None = None
    #: a hybrid model's multi-token-prediction block, one character per layer (Megatron-Core's
    #: ``hybrid_layer_pattern`` part after ``/``, HF ``mtp_hybrid_override_pattern``: ``*E``
    #: in Nemotron 3); None: DeepSeek-V3's module of one transformer layer
    mtp_hybrid_pattern: str | None = None
    #: depths each multi-token-prediction module runs per step (Megatron-Core
    #: ``mtp_use_repeated_layer``: one physical block run at each of ``mtp_num_layers``
    #: depths); its FLOPs, time and activations count each depth, its parameters once
    mtp_repeats: int = 1
    #: DeepSeek-V4 (``strategies.model.dsv4``): one ``compress_ratios`` value per layer (0
    #: sliding window only, 4 compressed sparse, 128 heavily compressed attention); None:
    #: none. Set, the attention is DeepSeek-V4's: ``q_lora_rank``, one key/value head of
    #: ``kv_channels``, the window in every layer, the grouped low-rank output projection.
    compress_ratios: tuple[int, ...] | None = None
    o_lora_rank: int | None = None            # rank of each output group (``wo_a``)
    o_groups: int | None = None               # output projection groups
    index_n_heads: int | None = None          # the indexer of ratio-4 layers: its heads,
    index_head_dim: int | None = None         # ... their size
    index_topk: int | None = None             # ... and the compressed entries it selects
    #: residual streams of hyper-connections (HF ``hc_mult``); 1: a plain residual
    hc_streams: int = 1
    #: Sinkhorn iterations of each token's stream mixing (HF ``hc_sinkhorn_iters``;
    #: Megatron-Core's ``mhc_sinkhorn_iterations`` default 20)
    hc_sinkhorn_iters: int = 20
    #: first MoE layers routed by a token-id table (HF ``num_hash_layers``)
    num_hash_layers: int = 0

    def __post_init__(self) -> None:
        check_spec(self)

    # Derived shapes --------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Head size of q and k (MLA: the no-rope plus the rope part)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def v_dim(self) -> int:
        """Head size of v (MLA: ``v_head_dim``; else ``head_dim``)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def expert_hidden(self) -> int:
        """Width a routed expert reads and writes and a dispatch moves: ``moe_latent_size``
        (latent MoE), else ``hidden_size``."""
        return self.moe_latent_size or self.hidden_size

    @property
    def shared_ffn(self) -> int:
        """MLP width of one shared expert."""
        return self.shared_expert_ffn_hidden_size or self.expert_ffn

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def report_dict(self) -> dict[str, Any]:
        """Every field plus the derived counts reports give: ``params_total`` (main model),
        ``params_active`` (embedding counted) and ``params_mtp`` (multi-token prediction).
        ``model_from_mapping`` takes it back, checking the counts."""
        return {**self.to_dict(), **{k: f(self) for k, f in DERIVED.items()}}

    def with_seq_length(self, seq: int) -> "ModelSpec":
        from dataclasses import replace
        check_positive("seq_length", seq)
        return replace(self, seq_length=seq)


FIELDS = tuple(ModelSpec.__dataclass_fields__)
# Keys a report adds to the fields (``report_dict``): read back, they must agree.
DERIVED = {"params_total": ModelSpec.num_params, "params_active": ModelSpec.active_params,
           "params_mtp": ModelSpec.mtp_params}

