"""Latent MoE and a hybrid model's multi-token-prediction block (the ``LatentMtp`` mixin of
``ModelSpec``), Nemotron 3 Super and Ultra.

Latent MoE (Megatron-Core ``megatron/core/transformer/moe/moe_layer.py`` at d98e8a64,
``MoELayer.__init__`` L265-300, ``preprocess`` L489-490, ``postprocess`` L591-592): with
``moe_latent_size`` L set, the router reads the hidden state ``h`` (``route`` before
``preprocess``), ``fc1_latent_proj`` (``TELinear h -> L``, ``parallel_mode="duplicated"``:
whole on every tensor-parallel rank, no bias unless ``add_bias_linear``) projects it down
before the dispatch, the token dispatcher moves ``L``-wide tokens
(``token_dispatcher.py`` L1535 ``hidden_dim = moe_latent_size or hidden_size``), the routed
experts' fc1 reads ``L`` and their fc2 writes ``L`` (``experts.py`` L219, L241-243;
``mlp.py`` L215-243 for the sequential experts), and ``fc2_latent_proj`` (``L -> h``,
duplicated) projects the combined output back up before the shared experts' output, computed
on the full ``h``, is added. Routed-expert parameters ``(2 or 3)·L·F_e``; the projections
``2·h·L`` per MoE layer, replicated over tensor parallelism (``tp_replicated_params``).

The hybrid MTP (Megatron-Core ``megatron/core/models/hybrid/hybrid_layer_allocation.py``
``parse_hybrid_pattern``: ``"<main>/<mtp>/<mtp>..."``, one MTP pattern per depth;
``hybrid_model.py`` L219-230 places the block on the last pipeline stage,
``multi_token_prediction.py``'s ``MultiTokenPredictionLayer``: ``enorm``, ``hnorm``, the
``2h -> h`` ``eh_proj``, the pattern's layers, ``final_layernorm``, the shared output
layer): one module of ``mtp_hybrid_pattern``'s layers, each its own pre-norm and residual;
``mtp_use_repeated_layer`` runs one physical block at each of ``mtp_num_layers`` depths
(``mtp_repeats``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from strategies.errors import SpecError
from strategies.model.hybrid import KIND_CHARS, PATTERN_KINDS, check_pattern

if TYPE_CHECKING:
    from strategies.model.spec import ModelSpec


class LatentMtp:
    """``ModelSpec``'s latent-MoE projections and multi-token-prediction block (elements)."""

    def latent_proj_params(self) -> int:
        """Parameters of one MoE layer's two latent projections, ``2·h·L`` (and their biases,
        ``L + h``, with ``bias``); 0 without ``moe_latent_size``."""
        L = self.moe_latent_size
        if not L:
            return 0
        return 2 * self.hidden_size * L + ((L + self.hidden_size) if self.bias else 0)

    def mtp_block_kinds(self) -> tuple[str, ...]:
        """The layer kinds of one multi-token-prediction module, in order: a hybrid model's
        ``mtp_hybrid_pattern`` (``hybrid.PATTERN_KINDS``), else DeepSeek-V3's one transformer
        layer, ``moe`` when the model has experts, else ``dense``."""
        if self.mtp_hybrid_pattern:
            return tuple(PATTERN_KINDS[c] for c in self.mtp_hybrid_pattern)
        return ("moe" if self.is_moe else "dense",)

    def mtp_layer_counts(self) -> dict[str, int]:
        """Layers of each kind one multi-token-prediction module runs per micro-batch: its
        block's kinds times ``mtp_repeats`` (what it stashes and computes)."""
        out: dict[str, int] = {}
        for k in self.mtp_block_kinds():
            out[k] = out.get(k, 0) + self.mtp_repeats
        return out

    @property
    def mtp_stash_layers(self) -> int:
        """Layers one multi-token-prediction module stashes per micro-batch: its block's
        layers times ``mtp_repeats`` (1 for DeepSeek-V3's module)."""
        return sum(self.mtp_layer_counts().values())

    def mtp_attention_layers(self) -> int:
        """Attention blocks of one multi-token-prediction module's block (not repeated): 1 in
        a transformer's, the ``*`` of ``mtp_hybrid_pattern`` in a hybrid model's."""
        if not self.is_hybrid:
            return 1
        return (self.mtp_hybrid_pattern or "").count(KIND_CHARS["attention"])


def check_latent_mtp(spec: "ModelSpec") -> None:
    """``SpecError`` (field, value, rule): ``moe_latent_size`` positive and only with experts;
    ``mtp_hybrid_pattern`` only on a hybrid model with ``num_nextn_predict_layers`` set, of
    the pattern's characters; ``mtp_repeats`` at least 1."""
    from topologies.limits import MAX_HIDDEN, MAX_LAYERS, check_int
    if spec.moe_latent_size is not None:
        check_int("moe_latent_size", spec.moe_latent_size, 1, MAX_HIDDEN)
        if not spec.is_moe:
            raise SpecError("moe_latent_size", spec.moe_latent_size, "needs routed experts "
                            "(num_experts > 1): the latent projections wrap the MoE layer")
    check_int("mtp_repeats", spec.mtp_repeats, 1, MAX_LAYERS)
    p = spec.mtp_hybrid_pattern
    if p is None:
        if spec.is_hybrid and spec.num_nextn_predict_layers:
            raise SpecError("num_nextn_predict_layers", spec.num_nextn_predict_layers,
                            "needs mtp_hybrid_pattern on a hybrid model (the MTP block's "
                            "layers: HF mtp_hybrid_override_pattern)")
        return
    if not spec.is_hybrid:
        raise SpecError("mtp_hybrid_pattern", p, "needs a hybrid model (hybrid_pattern)")
    check_pattern("mtp_hybrid_pattern", p)
    if not spec.num_nextn_predict_layers:
        raise SpecError("mtp_hybrid_pattern", p, "needs num_nextn_predict_layers >= 1 (the "
                        "multi-token-prediction modules it describes)")
    if "E" in p and not spec.is_moe:
        raise SpecError("mtp_hybrid_pattern", p, "has an MoE layer (E) but the model has no "
                        "experts")
    if "M" in p and spec.mamba_num_heads is None:
        raise SpecError("mtp_hybrid_pattern", p, "has a Mamba layer (M) but the model has no "
                        "Mamba fields")
