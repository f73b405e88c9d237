"""``ModelSpec``: the shape of a decoder-only transformer, from presets, HF configs or YAML.

Vocabulary follows Megatron-LM / HuggingFace: ``num_layers``, ``hidden_size``,
``num_attention_heads``, ``num_query_groups`` (KV heads), ``ffn_hidden_size``, ``vocab_size``.
Frontier mixtures of experts add multi-head latent attention (``kv_lora_rank`` and the head
dims of DeepSeek-V2/V3), shared experts, dense first layers (``first_k_dense_replace``),
MoE layers every ``moe_layer_freq`` layers, multi-token-prediction modules
(``num_nextn_predict_layers``) and windowed attention. docs/models.md gives every count.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

from strategies.errors import SpecError
from topologies.limits import (MAX_EXPERTS, MAX_FFN, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ,
                               MAX_VOCAB, check_bool, check_int, check_name)

ACTIVATIONS = ("gelu", "swiglu", "squared_relu", "relu")
NORMS = ("layernorm", "rmsnorm")
WINDOW_KINDS = ("sliding", "chunked")
LAYER_KINDS = ("dense", "moe")
_MLA_DIMS = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


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
class ModelSpec:
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

    def __post_init__(self) -> None:
        check_name("name", self.name)
        for f in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                  "vocab_size", "seq_length", "num_experts", "moe_router_topk", "moe_layer_freq"):
            _pos_int(f, getattr(self, f))
        for f in ("num_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers",
                  "global_attention_every"):
            check_int(f, getattr(self, f), 0, _LIMITS.get(f))
        for f in ("tie_word_embeddings", "bias", "qkv_bias", "qk_norm", "shared_expert_gate",
                  "router_bias", "attention_sinks", "dropout", "embedding_norm"):
            check_bool(f, getattr(self, f))
        for f in ("max_position_embeddings", "kv_channels", "q_lora_rank", "kv_lora_rank",
                  *_MLA_DIMS, "shared_expert_ffn_hidden_size", "moe_ffn_hidden_size",
                  "sliding_window", "moe_router_num_groups", "moe_router_group_topk"):
            if getattr(self, f) is not None:
                _pos_int(f, getattr(self, f))
        if self.max_position_embeddings is not None:
            if self.position_embedding == "learned" and self.seq_length > self.max_position_embeddings:
                raise SpecError("seq_length", self.seq_length, "must be <= max_position_embeddings="
                                f"{self.max_position_embeddings} (learned position embeddings)")
        if self.num_query_groups is not None:
            _pos_int("num_query_groups", self.num_query_groups)
            if self.num_attention_heads % self.num_query_groups:
                raise SpecError("num_query_groups", self.num_query_groups,
                                f"must divide num_attention_heads={self.num_attention_heads}")
        self._check_attention()
        self._check_moe()
        if self.activation not in ACTIVATIONS:
            raise SpecError("activation", self.activation, f"must be one of {', '.join(ACTIVATIONS)}")
        if self.norm not in NORMS:
            raise SpecError("norm", self.norm, f"must be one of {', '.join(NORMS)}")
        if self.position_embedding not in ("learned", "rope", "alibi", "none"):
            raise SpecError("position_embedding", self.position_embedding,
                            "must be one of learned, rope, alibi, none")
        if self.window_kind not in WINDOW_KINDS:
            raise SpecError("window_kind", self.window_kind, f"must be one of {', '.join(WINDOW_KINDS)}")
        self._check_variants()

    def _check_variants(self) -> None:
        c = self.activation_clamp
        if c is not None:
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < 1e6:
                raise SpecError("activation_clamp", c, "must be a number in (0, 1e6) or null")
            if not self.gated:
                raise SpecError("activation_clamp", c, "needs a gated activation (swiglu): the "
                                f"clamp bounds its two halves, activation={self.activation!r}")
        f = self.rope_attention_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1e3:
            raise SpecError("rope_attention_factor", f, "must be a number in (0, 1000)")
        if f != 1.0 and self.position_embedding != "rope":
            raise SpecError("rope_attention_factor", f, "needs position_embedding='rope', "
                            f"not {self.position_embedding!r}")

    def _check_attention(self) -> None:
        if self.is_mla:
            for f in _MLA_DIMS:
                if getattr(self, f) is None:
                    raise SpecError(f, None, "is required with kv_lora_rank (multi-head latent "
                                    "attention)")
            for f, bad in (("kv_channels", self.kv_channels is not None),
                           ("num_query_groups", self.num_query_groups not in (None, self.num_attention_heads)),
                           ("bias", self.bias), ("qkv_bias", self.qkv_bias)):
                if bad:
                    raise SpecError(f, getattr(self, f), "must be unset with kv_lora_rank "
                                    "(multi-head latent attention has no GQA, head size or biases "
                                    "of its own)")
        else:
            for f in ("q_lora_rank", *_MLA_DIMS):
                if getattr(self, f) is not None:
                    raise SpecError(f, getattr(self, f), "needs kv_lora_rank (multi-head latent "
                                    "attention)")
            if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
                raise SpecError("hidden_size", self.hidden_size,
                                f"must be divisible by num_attention_heads={self.num_attention_heads}"
                                " (or give kv_channels, the head size)")

    def _check_moe(self) -> None:
        if self.moe_router_topk > self.num_experts:
            raise SpecError("moe_router_topk", self.moe_router_topk,
                            f"must be <= num_experts={self.num_experts}")
        if not self.is_moe:
            for f, v in (("num_shared_experts", self.num_shared_experts),
                         ("first_k_dense_replace", self.first_k_dense_replace),
                         ("shared_expert_gate", self.shared_expert_gate),
                         ("router_bias", self.router_bias),
                         ("moe_router_num_groups", self.moe_router_num_groups)):
                if v:
                    raise SpecError(f, v, "needs an MoE model (num_experts > 1)")
            return
        if self.num_moe_layers == 0:
            raise SpecError("first_k_dense_replace", self.first_k_dense_replace,
                            f"leaves no MoE layer among num_layers={self.num_layers} with "
                            f"moe_layer_freq={self.moe_layer_freq}")
        if self.shared_expert_gate and not self.num_shared_experts:
            raise SpecError("shared_expert_gate", True, "needs num_shared_experts >= 1")
        g, gk = self.moe_router_num_groups, self.moe_router_group_topk
        if (g is None) != (gk is None):
            raise SpecError("moe_router_group_topk" if g else "moe_router_num_groups", None,
                            "group-limited routing needs both moe_router_num_groups and "
                            "moe_router_group_topk")
        if g is not None:
            if self.num_experts % g:
                raise SpecError("moe_router_num_groups", g,
                                f"must divide num_experts={self.num_experts}")
            if gk > g or self.moe_router_topk > gk * (self.num_experts // g):
                raise SpecError("moe_router_group_topk", gk, f"must be <= moe_router_num_groups="
                                f"{g} and leave room for moe_router_topk={self.moe_router_topk} "
                                f"experts ({self.num_experts // g} per group)")

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
    def shared_ffn(self) -> int:
        """MLP width of one shared expert."""
        return self.shared_expert_ffn_hidden_size or self.expert_ffn

    # Layer kinds -----------------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) routes its tokens to experts."""
        return (self.is_moe and i >= self.first_k_dense_replace
                and (i + 1) % self.moe_layer_freq == 0)

    def layer_kinds(self) -> tuple[str, ...]:
        """``"dense"`` or ``"moe"`` for each layer, first to last."""
        return tuple("moe" if self.is_moe_layer(i) else "dense" for i in range(self.num_layers))

    def of_kind(self, kind: str) -> "ModelSpec":
        """This model with every layer of ``kind`` (``dense`` or ``moe``): the cost model's
        mean layer of the view is one layer of that kind (a layout sums its chunks' layers by
        kind, ``strategies.cost.stage``). The model itself when all its layers are of that
        kind. A view for costing only: a dense view of an MoE model keeps its experts'
        fields and has no MoE layer, which ``__post_init__`` would refuse."""
        _check_kind(kind)
        counts = self.layer_counts()
        if counts.get(kind, 0) == self.num_layers:
            return self
        if kind == "moe" and not self.is_moe:
            raise SpecError("kind", kind, f"{self.name} has no experts")
        view = copy.copy(self)
        object.__setattr__(view, "moe_layer_freq", 1)
        object.__setattr__(view, "first_k_dense_replace",
                           self.num_layers if kind == "dense" else 0)
        return view

    @property
    def num_moe_layers(self) -> int:
        """Layers ``i`` with ``i >= first_k_dense_replace`` and ``moe_layer_freq | i + 1``."""
        if not self.is_moe:
            return 0
        f, k = self.moe_layer_freq, min(self.first_k_dense_replace, self.num_layers)
        return self.num_layers // f - k // f

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def layer_counts(self) -> dict[str, int]:
        """How many layers of each kind: ``{"dense": n, "moe": n}``."""
        return {"dense": self.num_dense_layers, "moe": self.num_moe_layers}

    def layer_shares(self, kind: str | None = None) -> dict[str, float]:
        """How many layers of each kind one "layer" of the cost model stands for: ``{kind: 1}``
        for one ``kind``, else each kind's share of the layers (the mean layer, which summed
        over ``num_layers`` gives the model's exact total)."""
        if kind is not None:
            _check_kind(kind)
            return {kind: 1.0}
        return {k: n / self.num_layers for k, n in self.layer_counts().items() if n}

    def mean_mlp_width(self) -> float:
        """``mlp_width`` of the mean layer (dense and MoE layers weighted by count)."""
        return sum(w * self.mlp_width(k) for k, w in self.layer_shares().items())

    def mean_expert_copies(self) -> float:
        """Copies of each token the mean layer's MLP input makes: top-k in MoE layers, 1 in
        dense layers (weighted by count)."""
        return sum(w * (self.moe_router_topk if k == "moe" else 1)
                   for k, w in self.layer_shares().items())

    def is_windowed_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) attends within ``sliding_window`` tokens only."""
        if self.sliding_window is None:
            return False
        k = self.global_attention_every
        return k == 0 or (i + 1) % k != 0

    @property
    def num_windowed_layers(self) -> int:
        if self.sliding_window is None:
            return 0
        k = self.global_attention_every
        return self.num_layers - (self.num_layers // k if k else 0)

    # Attention -------------------------------------------------------------------------------
    def attention_linears(self) -> tuple[tuple[str, int, int, str], ...]:
        """The weight matrices of one attention block: ``(name, in, out, split)``, ``split``
        being how tensor parallelism cuts it: ``"col"`` (out split), ``"row"`` (in split) or
        ``"rep"`` (replicated: MLA's down projections, as Megatron-Core runs them)."""
        h, a = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            g, d = self.kv_heads, self.head_dim
            return (("qkv", h, (a + 2 * g) * d, "col"), ("proj", a * d, h, "row"))
        dqk, rope = self.head_dim, self.qk_rope_head_dim
        q = ((("q_down", h, self.q_lora_rank, "rep"), ("q_up", self.q_lora_rank, a * dqk, "col"))
             if self.q_lora_rank else (("q", h, a * dqk, "col"),))
        return q + (("kv_down", h, self.kv_lora_rank + rope, "rep"),
                    ("kv_up", self.kv_lora_rank, a * (self.qk_nope_head_dim + self.v_dim), "col"),
                    ("proj", a * self.v_dim, h, "row"))

    def attention_params(self) -> int:
        """Parameters of one attention block: its weights, biases, MLA's latent norms, Qwen3's
        q/k norms and gpt-oss's sinks (the block's input norm is counted by the layer)."""
        n = sum(i * o for _, i, o, _ in self.attention_linears())
        a, g, d = self.num_attention_heads, self.kv_heads, self.head_dim
        if self.bias:
            n += (a + 2 * g) * d + self.hidden_size
        elif self.qkv_bias:                   # Qwen2: biases on Q, K, V only
            n += (a + 2 * g) * d
        if self.is_mla:
            n += (self.q_lora_rank or 0) + self.kv_lora_rank
        if self.qk_norm:
            n += 2 * d
        if self.attention_sinks:
            n += a
        return n

    def tp_replicated_params(self) -> int:
        """Attention parameters every tensor-parallel rank holds whole: MLA's down projections
        and the norms of their latents (0 without MLA)."""
        if not self.is_mla:
            return 0
        rep = sum(i * o for _, i, o, s in self.attention_linears() if s == "rep")
        return rep + (self.q_lora_rank or 0) + self.kv_lora_rank

    def kv_cache_width(self) -> int:
        """Elements per token per layer a decoder caches: ``2·g·d`` (K and V), or for MLA the
        compressed latent and the shared rope key, ``kv_lora_rank + qk_rope_head_dim``."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    # MLP -------------------------------------------------------------------------------------
    def _mlp_weights(self, ffn: int) -> int:
        return (3 if self.gated else 2) * self.hidden_size * ffn

    def _mlp_bias(self, ffn: int) -> int:
        return ffn * (2 if self.gated else 1) + self.hidden_size if self.bias else 0

    def mlp_params_per_expert(self) -> int:
        """Weights of one routed expert (biases: ``expert_params``)."""
        return self._mlp_weights(self.expert_ffn)

    def expert_params(self) -> int:
        """One routed expert with its biases."""
        return self.mlp_params_per_expert() + self._mlp_bias(self.expert_ffn)

    def dense_mlp_params(self) -> int:
        """The MLP of a dense layer (``ffn_hidden_size``), biases included."""
        return self._mlp_weights(self.ffn_hidden_size) + self._mlp_bias(self.ffn_hidden_size)

    def shared_expert_params(self) -> int:
        """The shared experts of one MoE layer, and Qwen2-MoE's gate on them."""
        per = self._mlp_weights(self.shared_ffn) + self._mlp_bias(self.shared_ffn)
        return self.num_shared_experts * per + (self.hidden_size if self.shared_expert_gate else 0)

    def router_params(self) -> int:
        """The router of one MoE layer: ``h·E`` weights and, with ``router_bias``, ``E``."""
        return self.num_experts * (self.hidden_size + (1 if self.router_bias else 0))

    def routed_expert_params(self) -> int:
        """All routed experts of one MoE layer: what expert parallelism shards."""
        return self.num_experts * self.expert_params()

    def mlp_params(self, kind: str) -> int:
        """The MLP of one layer of ``kind``: a dense MLP, or experts, shared experts, router."""
        _check_kind(kind)
        if kind == "dense":
            return self.dense_mlp_params()
        return self.routed_expert_params() + self.shared_expert_params() + self.router_params()

    def mlp_width(self, kind: str) -> int:
        """MLP intermediate width one token passes through in a layer of ``kind``: ``F``
        dense; ``topk·F_expert + shared·F_shared`` MoE."""
        _check_kind(kind)
        if kind == "dense":
            return self.ffn_hidden_size
        return self.moe_router_topk * self.expert_ffn + self.num_shared_experts * self.shared_ffn

    # Layers and the whole model --------------------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of one norm: weight and bias (LayerNorm) or weight only (RMSNorm)."""
        return (2 if self.norm == "layernorm" else 1) * self.hidden_size

    def layer_params(self, kind: str | None = None) -> float:
        """Parameters of one layer of ``kind`` (two norms, attention, MLP); ``None``: the mean
        layer, ``(sum over layers)/num_layers`` (the exact layer when all are alike)."""
        if kind is None:
            total = self.layers_params()
            return total // self.num_layers if total % self.num_layers == 0 else \
                total / self.num_layers
        return 2 * self.norm_params() + self.attention_params() + self.mlp_params(kind)

    def layers_params(self) -> int:
        """Parameters of all ``num_layers`` transformer layers."""
        return sum(n * (2 * self.norm_params() + self.attention_params() + self.mlp_params(k))
                   for k, n in self.layer_counts().items() if n)

    def expert_params_per_layer(self) -> float:
        """Routed-expert parameters of the mean layer (``routed_expert_params`` times the share
        of MoE layers): the part of ``layer_params()`` that expert parallelism shards."""
        if not self.is_moe:
            return 0
        total = self.num_moe_layers * self.routed_expert_params()
        return total // self.num_layers if total % self.num_layers == 0 else \
            total / self.num_layers

    def embedding_params(self) -> int:
        pos = self.seq_length * self.hidden_size if self.position_embedding == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def num_params(self) -> int:
        """Total parameters of the main model (all experts, final norm; the multi-token-
        prediction modules are not counted: ``mtp_params``)."""
        return (self.layers_params() + self.embedding_params() + self.lm_head_params()
                + self.norm_params())

    def active_layer_params(self, kind: str) -> int:
        """Parameters one token touches in a layer of ``kind`` (its top-k experts only)."""
        p = self.layer_params(kind)
        if kind == "moe":
            p -= (self.num_experts - self.moe_router_topk) * self.expert_params()
        return p

    def active_params(self, embedding: bool = True) -> int:
        """Parameters a token touches: top-k experts only, the embedding table counted unless
        ``embedding`` is False (Mistral and Qwen count it in their "active" figures; DeepSeek
        and OpenAI leave the lookup table out). Multi-token prediction not counted."""
        layers = sum(n * self.active_layer_params(k) for k, n in self.layer_counts().items() if n)
        emb = self.embedding_params() if embedding else 0
        return layers + emb + self.lm_head_params() + self.norm_params()

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (DeepSeek-V3 §2.2): each holds two
        input norms, the ``2h x h`` projection, one transformer layer (MoE when the model is)
        and its output norm; the embedding and output head are shared with the main model."""
        kind = "moe" if self.is_moe else "dense"
        per = 3 * self.norm_params() + 2 * self.hidden_size ** 2 + self.layer_params(kind)
        return self.num_nextn_predict_layers * per

    def mtp_active_params(self) -> int:
        """Parameters one token touches in the multi-token-prediction modules."""
        kind = "moe" if self.is_moe else "dense"
        per = 3 * self.norm_params() + 2 * self.hidden_size ** 2 + self.active_layer_params(kind)
        return self.num_nextn_predict_layers * per

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def report_dict(self) -> dict[str, Any]:
        """Every field plus the derived counts reports give: ``params_total`` (main model),
        ``params_active`` (embedding counted) and ``params_mtp`` (multi-token prediction).
        ``model_from_mapping`` takes it back, checking the counts."""
        return {**self.to_dict(), **{k: f(self) for k, f in DERIVED.items()}}

    def with_seq_length(self, seq: int) -> "ModelSpec":
        from dataclasses import replace
        _pos_int("seq_length", seq)
        return replace(self, seq_length=seq)


def _check_kind(kind: str) -> None:
    if kind not in LAYER_KINDS:
        raise SpecError("layer kind", kind, f"must be one of {', '.join(LAYER_KINDS)}")


# Sanity limits per field (topologies.limits); the shapes of every model built so far are
# orders of magnitude inside them.
_LIMITS = {"num_layers": MAX_LAYERS, "hidden_size": MAX_HIDDEN, "num_attention_heads": MAX_HEADS,
           "num_query_groups": MAX_HEADS, "ffn_hidden_size": MAX_FFN, "moe_ffn_hidden_size": MAX_FFN,
           "shared_expert_ffn_hidden_size": MAX_FFN, "vocab_size": MAX_VOCAB,
           "seq_length": MAX_SEQ, "max_position_embeddings": 1 << 40, "sliding_window": MAX_SEQ,
           "num_experts": MAX_EXPERTS, "moe_router_topk": MAX_EXPERTS,
           "num_shared_experts": MAX_EXPERTS, "kv_channels": MAX_HIDDEN, "q_lora_rank": MAX_HIDDEN,
           "kv_lora_rank": MAX_HIDDEN, "qk_rope_head_dim": MAX_HIDDEN,
           "qk_nope_head_dim": MAX_HIDDEN, "v_head_dim": MAX_HIDDEN,
           "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS,
           "num_nextn_predict_layers": MAX_LAYERS, "global_attention_every": MAX_LAYERS,
           "moe_router_num_groups": MAX_EXPERTS, "moe_router_group_topk": MAX_EXPERTS}


def _pos_int(name: str, v: Any) -> None:
    check_int(name, v, 1, _LIMITS.get(name))


FIELDS = tuple(ModelSpec.__dataclass_fields__)
# Keys a report adds to the fields (``report_dict``): read back, they must agree.
DERIVED = {"params_total": ModelSpec.num_params, "params_active": ModelSpec.active_params,
           "params_mtp": ModelSpec.mtp_params}


def model_from_mapping(d: dict[str, Any], name: str = "custom") -> ModelSpec:
    """A ModelSpec from a mapping of its own field names (YAML); unknown keys refused."""
    if not isinstance(d, dict):
        raise SpecError("model", type(d).__name__, "a model file must hold a mapping")
    unknown = sorted(str(k) for k in set(d) - set(FIELDS) - set(DERIVED))
    if unknown:
        raise SpecError("model", unknown[0], f"unknown key; allowed: {', '.join(FIELDS)}")
    derived = {k: d[k] for k in DERIVED if k in d}
    args = {"name": name, **{k: v for k, v in d.items() if k not in DERIVED}}
    for req in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if req not in args:
            raise SpecError(req, None, "is required in a model file")
    if "ffn_hidden_size" not in args:
        h = args["hidden_size"]
        args["ffn_hidden_size"] = 4 * h if isinstance(h, int) and not isinstance(h, bool) else h
    try:
        m = ModelSpec(**args)
    except TypeError as e:
        raise SpecError("model", d, str(e)) from None
    for k, v in derived.items():
        if v != DERIVED[k](m):
            raise SpecError(k, v, f"disagrees with the model's fields ({DERIVED[k](m)}); a "
                            "derived count is checked, not set")
    return m
