"""``ModelSpec``: the shape of a decoder-only transformer, from presets, HF configs or YAML.

Vocabulary follows Megatron-LM / HuggingFace: ``num_layers``, ``hidden_size``,
``num_attention_heads``, ``num_query_groups`` (KV heads), ``ffn_hidden_size``, ``vocab_size``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from strategies.errors import SpecError
from topologies.limits import (MAX_EXPERTS, MAX_FFN, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ,
                               MAX_VOCAB, check_bool, check_int, check_name)

ACTIVATIONS = ("gelu", "swiglu", "squared_relu", "relu")
NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. ``seq_length`` is the default training length (tokens)."""

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

    def __post_init__(self) -> None:
        check_name("name", self.name)
        for f in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                  "vocab_size", "seq_length", "num_experts", "moe_router_topk"):
            _pos_int(f, getattr(self, f))
        for f in ("tie_word_embeddings", "bias", "qkv_bias"):
            check_bool(f, getattr(self, f))
        if self.max_position_embeddings is not None:
            _pos_int("max_position_embeddings", self.max_position_embeddings)
            if self.position_embedding == "learned" and self.seq_length > self.max_position_embeddings:
                raise SpecError("seq_length", self.seq_length, "must be <= max_position_embeddings="
                                f"{self.max_position_embeddings} (learned position embeddings)")
        if self.num_query_groups is not None:
            _pos_int("num_query_groups", self.num_query_groups)
            if self.num_attention_heads % self.num_query_groups:
                raise SpecError("num_query_groups", self.num_query_groups,
                                f"must divide num_attention_heads={self.num_attention_heads}")
        if self.moe_ffn_hidden_size is not None:
            _pos_int("moe_ffn_hidden_size", self.moe_ffn_hidden_size)
        if self.hidden_size % self.num_attention_heads:
            raise SpecError("hidden_size", self.hidden_size,
                            f"must be divisible by num_attention_heads={self.num_attention_heads}")
        if self.activation not in ACTIVATIONS:
            raise SpecError("activation", self.activation, f"must be one of {', '.join(ACTIVATIONS)}")
        if self.moe_router_topk > self.num_experts:
            raise SpecError("moe_router_topk", self.moe_router_topk,
                            f"must be <= num_experts={self.num_experts}")
        if self.norm not in NORMS:
            raise SpecError("norm", self.norm, f"must be one of {', '.join(NORMS)}")
        if self.position_embedding not in ("learned", "rope", "alibi", "none"):
            raise SpecError("position_embedding", self.position_embedding,
                            "must be one of learned, rope, alibi, none")

    # Derived shapes --------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    def attention_params(self) -> int:
        h, d = self.hidden_size, self.head_dim
        return h * h * 2 + 2 * h * self.kv_heads * d  # Q, O + K, V (biases ignored)

    def mlp_params_per_expert(self) -> int:
        return (3 if self.gated else 2) * self.hidden_size * self.expert_ffn

    def layer_params(self) -> int:
        """Parameters of one transformer layer: attention, MLP (all experts), norms, router."""
        mlp = self.mlp_params_per_expert() * self.num_experts
        router = self.hidden_size * self.num_experts if self.is_moe else 0
        b = (4 * self.hidden_size + self.num_experts * (self.expert_ffn * (2 if self.gated else 1)
             + self.hidden_size)) if self.bias else 0
        if self.qkv_bias and not self.bias:   # Qwen2: biases on Q, K, V only
            b = self.hidden_size + 2 * self.kv_heads * self.head_dim
        return self.attention_params() + mlp + router + 2 * self.norm_params() + b

    def norm_params(self) -> int:
        """Parameters of one norm: weight and bias (LayerNorm) or weight only (RMSNorm)."""
        return (2 if self.norm == "layernorm" else 1) * self.hidden_size

    def embedding_params(self) -> int:
        pos = self.seq_length * self.hidden_size if self.position_embedding == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def num_params(self) -> int:
        """Total parameters (with all experts), final norm included."""
        return (self.num_layers * self.layer_params() + self.embedding_params()
                + self.lm_head_params() + self.norm_params())

    def active_params(self) -> int:
        """Parameters a token touches (top-k experts only)."""
        inactive = (self.num_experts - self.moe_router_topk) * self.mlp_params_per_expert()
        return self.num_params() - self.num_layers * inactive

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_seq_length(self, seq: int) -> "ModelSpec":
        from dataclasses import replace
        _pos_int("seq_length", seq)
        return replace(self, seq_length=seq)


# Sanity limits per field (topologies.limits); the shapes of every model built so far are
# orders of magnitude inside them.
_LIMITS = {"num_layers": MAX_LAYERS, "hidden_size": MAX_HIDDEN, "num_attention_heads": MAX_HEADS,
           "num_query_groups": MAX_HEADS, "ffn_hidden_size": MAX_FFN, "moe_ffn_hidden_size": MAX_FFN,
           "vocab_size": MAX_VOCAB, "seq_length": MAX_SEQ, "max_position_embeddings": 1 << 40,
           "num_experts": MAX_EXPERTS, "moe_router_topk": MAX_EXPERTS}


def _pos_int(name: str, v: Any) -> None:
    check_int(name, v, 1, _LIMITS.get(name))


FIELDS = tuple(ModelSpec.__dataclass_fields__)


def model_from_mapping(d: dict[str, Any], name: str = "custom") -> ModelSpec:
    """A ModelSpec from a mapping of its own field names (YAML); unknown keys refused."""
    if not isinstance(d, dict):
        raise SpecError("model", type(d).__name__, "a model file must hold a mapping")
    unknown = sorted(str(k) for k in set(d) - set(FIELDS))
    if unknown:
        raise SpecError("model", unknown[0], f"unknown key; allowed: {', '.join(FIELDS)}")
    args = {"name": name, **d}
    for req in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if req not in args:
            raise SpecError(req, None, "is required in a model file")
    if "ffn_hidden_size" not in args:
        h = args["hidden_size"]
        args["ffn_hidden_size"] = 4 * h if isinstance(h, int) and not isinstance(h, bool) else h
    try:
        return ModelSpec(**args)
    except TypeError as e:
        raise SpecError("model", d, str(e)) from None
