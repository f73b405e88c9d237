"""Hybrid Mamba-2 / attention models (NVIDIA Nemotron-H, Nemotron 3): the layer pattern and the
Mamba-2 mixer's shapes and parameters (the ``HybridShapes`` mixin of ``ModelSpec``).

Megatron-Core's hybrid model (``megatron/core/models/hybrid``, ``megatron/core/ssm/
mamba_block.py``) builds one layer per character of ``hybrid_layer_pattern`` (HF
``hybrid_override_pattern``): ``M`` a Mamba-2 mixer, ``*`` a self-attention block, ``-`` an
MLP, ``E`` a mixture of experts; each layer is its own pre-norm and residual, and the
pipeline split counts these layers. The kinds here: ``mamba``, ``attention``, ``dense`` (an
MLP-only layer) and ``moe`` (an MoE-only layer); ``dense`` and ``moe`` keep the names of the
MLP kinds of a transformer, whose MLP they are without the attention.

The mixer (Megatron-Core ``megatron/core/ssm/mamba_mixer.py`` at d98e8a64, ``MambaMixer.
__init__``): ``d_inner = mamba_num_heads * mamba_head_dim`` (l.246-248); ``in_proj`` one
column-parallel linear ``h -> 2·d_inner + 2·G·N + H`` (z, x, B, C, dt; l.281-285); a depthwise
causal conv1d of width ``K`` over ``conv_dim = d_inner + 2·G·N`` channels with a bias
(l.321-337); ``dt_bias``, ``A_log`` and ``D`` one per head (l.378-421, ``D_has_hdim`` False);
the gated RMSNorm's weight over ``d_inner`` (l.422-433); ``out_proj`` row-parallel
``d_inner -> h`` (l.437-450). Tensor parallelism splits heads and groups: ``H % tp`` and
``G % tp`` must be 0, and ``H % G`` (l.259-274).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from strategies.errors import SpecError

if TYPE_CHECKING:
    from strategies.model.spec import ModelSpec

#: One character of the pattern -> the layer kind it builds.
PATTERN_KINDS = {"M": "mamba", "*": "attention", "-": "dense", "E": "moe"}
#: The character of each kind (``of_kind`` views repeat it).
KIND_CHARS = {k: c for c, k in PATTERN_KINDS.items()}
MAMBA_FIELDS = ("mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups",
                "mamba_conv_kernel", "mamba_chunk_size")


class HybridShapes:
    """``ModelSpec``'s hybrid pattern and Mamba-2 mixer shapes (element counts)."""

    @property
    def is_hybrid(self) -> bool:
        return self.hybrid_pattern is not None

    @property
    def source_pattern(self) -> str | None:
        """The pattern of the model a kind's view (``of_kind``) was made from, which counts
        layers by number (``quant_scope.quantised_layers``); ``hybrid_pattern`` otherwise."""
        return self.__dict__.get("_source_pattern") or self.hybrid_pattern

    def hybrid_counts(self) -> dict[str, int]:
        """Layers of each hybrid kind (``mamba``, ``attention``, ``dense``, ``moe``)."""
        p = self.hybrid_pattern or ""
        return {k: p.count(c) for c, k in PATTERN_KINDS.items()}

    @property
    def attention_share(self) -> float:
        """Attention blocks per layer of the mean layer: 1 for a transformer, a hybrid model's
        share of ``*`` layers (a cost term of the attention block is multiplied by it)."""
        if not self.is_hybrid:
            return 1.0
        return self.hybrid_counts()["attention"] / self.num_layers

    @property
    def mamba_share(self) -> float:
        """Mamba-2 mixers per layer of the mean layer (0 for a transformer)."""
        if not self.is_hybrid:
            return 0.0
        return self.hybrid_counts()["mamba"] / self.num_layers

    @property
    def mlp_share(self) -> float:
        """MLP blocks (dense or MoE) per layer of the mean layer: 1 for a transformer."""
        if not self.is_hybrid:
            return 1.0
        return sum(self.layer_shares().values())

    @property
    def blocks_per_layer(self) -> int:
        """Pre-norms and residual adds per layer: 2 in a transformer layer (attention, MLP),
        1 in a hybrid model's (one block each)."""
        return 1 if self.is_hybrid else 2

    @property
    def mamba_d_inner(self) -> int:
        """``d_inner = mamba_num_heads * mamba_head_dim`` (the mixer's inner width)."""
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the depthwise conv1d: x, B and C, ``d_inner + 2·G·N``."""
        return self.mamba_d_inner + 2 * self.mamba_num_groups * self.mamba_state_dim

    @property
    def mamba_in_proj_width(self) -> int:
        """Outputs of ``in_proj``: z, x, B, C, dt, ``2·d_inner + 2·G·N + H``."""
        return self.mamba_conv_dim + self.mamba_d_inner + self.mamba_num_heads

    def mamba_linears(self) -> tuple[tuple[str, int, int, str], ...]:
        """The mixer's two linears as ``ParamCounts.attention_linears`` gives attention's:
        ``(name, in, out, split)``, ``in_proj`` column-parallel, ``out_proj`` row-parallel."""
        h = self.hidden_size
        return (("in_proj", h, self.mamba_in_proj_width, "col"),
                ("out_proj", self.mamba_d_inner, h, "row"))

    def mamba_params(self) -> int:
        """Parameters of one Mamba-2 mixer (its layer's pre-norm counted by the layer): the two
        linears (and their biases with ``mamba_proj_bias``), the conv1d's ``conv_dim·K``
        weights and ``conv_dim`` biases (``mamba_conv_bias``), ``dt_bias``, ``A_log`` and
        ``D`` (one per head) and the gated norm's ``d_inner`` weights."""
        n = sum(i * o for _, i, o, _ in self.mamba_linears())
        if self.mamba_proj_bias:
            n += self.mamba_in_proj_width + self.hidden_size
        c = self.mamba_conv_dim
        n += c * self.mamba_conv_kernel + (c if self.mamba_conv_bias else 0)
        return n + 3 * self.mamba_num_heads + self.mamba_d_inner


def check_pattern(field: str, p: object) -> str:
    """``p`` if it is a hybrid pattern: a non-empty string of ``PATTERN_KINDS`` characters
    (upper case, as Megatron-Core's); else ``SpecError`` naming ``field``, the whole value and
    the rule (with its first unknown character). The one check of the main pattern, the MTP
    block's and the config.json readers'."""
    if not isinstance(p, str) or not p:
        raise SpecError(field, p, "must be a non-empty string of M, *, -, E")
    bad = sorted(set(p) - set(PATTERN_KINDS))
    if bad:
        raise SpecError(field, p, f"has unknown layer character {bad[0]!r}; allowed: M (Mamba-2),"
                        " * (attention), - (MLP), E (MoE) (Megatron-Core's hybrid pattern; a "
                        "pipeline split '|' or an MTP part '/' is not read here)")
    return p


def check_hybrid(spec: "ModelSpec") -> None:
    """The rules of a hybrid model (``SpecError`` naming field, value and rule): a pattern of
    ``M * - E`` one character per layer; the Mamba fields set where it has an ``M`` (heads
    a multiple of groups); experts exactly where it has an ``E``; none of the transformer
    layouts the pattern replaces (dense first layers, an MoE frequency, windows, MLA); its
    multi-token prediction: ``latent.check_latent_mtp``."""
    from topologies.limits import check_bool, check_int
    p = check_pattern("hybrid_pattern", spec.hybrid_pattern)
    if len(p) != spec.num_layers:
        raise SpecError("hybrid_pattern", p, f"must have one character per layer "
                        f"(num_layers={spec.num_layers}, pattern has {len(p)})")
    if "M" in p:
        for f in MAMBA_FIELDS:
            v = getattr(spec, f)
            if v is None:
                raise SpecError(f, None, "is required by a pattern with Mamba layers (M)")
            check_int(f, v, 1, 1 << 20)
        if spec.mamba_num_heads % spec.mamba_num_groups:
            raise SpecError("mamba_num_groups", spec.mamba_num_groups, f"must divide "
                            f"mamba_num_heads={spec.mamba_num_heads} (mamba_mixer.py l.274)")
    for f in ("mamba_conv_bias", "mamba_proj_bias"):
        check_bool(f, getattr(spec, f))
    if ("E" in p) != spec.is_moe:
        raise SpecError("num_experts", spec.num_experts, "must be > 1 exactly when the hybrid "
                        "pattern has MoE layers (E)")
    for f, bad_v in (("first_k_dense_replace", spec.first_k_dense_replace),
                     ("moe_layer_freq", spec.moe_layer_freq != 1),
                     ("sliding_window", spec.sliding_window),
                     ("kv_lora_rank", spec.kv_lora_rank)):
        if bad_v:
            raise SpecError(f, getattr(spec, f), "is not modelled with a hybrid pattern (the "
                            "pattern places every layer)")
