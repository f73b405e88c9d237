"""Layer kinds of a ``ModelSpec`` (the ``LayerKinds`` mixin): which layers are dense and which
route to experts (``first_k_dense_replace``, ``moe_layer_freq``), how many of each, the mean
layer's shares, a one-kind view for costing (``of_kind``) and the windowed-attention layers.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from strategies.errors import SpecError
from strategies.model.checks import check_kind
from strategies.model.hybrid import KIND_CHARS, PATTERN_KINDS

if TYPE_CHECKING:
    from strategies.model.spec import ModelSpec


class LayerKinds:
    """``ModelSpec``'s methods on its layers' kinds (``dense``, ``moe``) and windows."""

    def cost_kinds(self) -> tuple[str, ...]:
        """The layer kinds a layout's content counts and the cost model prices one by one:
        ``dense``, ``moe``, and a hybrid model's ``mamba`` and ``attention``."""
        return ("dense", "moe", "mamba", "attention") if self.is_hybrid else ("dense", "moe")

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) routes its tokens to experts."""
        if self.is_hybrid:
            return self.hybrid_pattern[i] == "E"
        return (self.is_moe and i >= self.first_k_dense_replace
                and (i + 1) % self.moe_layer_freq == 0)

    def layer_kinds(self) -> tuple[str, ...]:
        """``"dense"`` or ``"moe"`` for each layer, first to last (a hybrid model's:
        ``hybrid.PATTERN_KINDS`` of its pattern's characters)."""
        if self.is_hybrid:
            return tuple(PATTERN_KINDS[c] for c in self.hybrid_pattern)
        return tuple("moe" if self.is_moe_layer(i) else "dense" for i in range(self.num_layers))

    def of_kind(self, kind: str) -> "ModelSpec":
        """This model with every layer of ``kind`` (``dense`` or ``moe``): the cost model's
        mean layer of the view is one layer of that kind (a layout sums its chunks' layers by
        kind, ``strategies.cost.stage``). The model itself when all its layers are of that
        kind. A view for costing only: a dense view of an MoE model keeps its experts'
        fields and has no MoE layer, which ``__post_init__`` would refuse. A hybrid model's
        view repeats the kind's pattern character over its ``num_layers``."""
        check_kind(kind)
        counts = self.layer_counts()
        if counts.get(kind, 0) == self.num_layers:
            return self
        if kind == "moe" and not self.is_moe:
            raise SpecError("kind", kind, f"{self.name} has no experts")
        if kind in ("mamba", "attention") and not self.is_hybrid:
            raise SpecError("kind", kind, f"{self.name} is not a hybrid model (hybrid_pattern)")
        view = copy.copy(self)
        if self.is_hybrid:
            object.__setattr__(view, "hybrid_pattern", KIND_CHARS[kind] * self.num_layers)
            # the model's own pattern, for what is counted by layer number (quant_scope)
            object.__setattr__(view, "_source_pattern", self.source_pattern)
            return view
        object.__setattr__(view, "moe_layer_freq", 1)
        object.__setattr__(view, "first_k_dense_replace",
                           self.num_layers if kind == "dense" else 0)
        return view

    @property
    def num_moe_layers(self) -> int:
        """Layers ``i`` with ``i >= first_k_dense_replace`` and ``moe_layer_freq | i + 1`` (a
        hybrid model's: its ``E`` layers)."""
        if self.is_hybrid:
            return self.hybrid_counts()["moe"]
        if not self.is_moe:
            return 0
        f, k = self.moe_layer_freq, min(self.first_k_dense_replace, self.num_layers)
        return self.num_layers // f - k // f

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP (a hybrid model's: its MLP-only ``-`` layers)."""
        if self.is_hybrid:
            return self.hybrid_counts()["dense"]
        return self.num_layers - self.num_moe_layers

    def layer_counts(self) -> dict[str, int]:
        """How many layers of each kind: ``{"dense": n, "moe": n}`` (a hybrid model's four
        kinds, ``HybridShapes.hybrid_counts``)."""
        if self.is_hybrid:
            return self.hybrid_counts()
        return {"dense": self.num_dense_layers, "moe": self.num_moe_layers}

    def layer_shares(self, kind: str | None = None) -> dict[str, float]:
        """How many layers of each kind one "layer" of the cost model stands for: ``{kind: 1}``
        for one ``kind``, else each kind's share of the layers (the mean layer, which summed
        over ``num_layers`` gives the model's exact total). These are the kinds of MLP the
        layer has: a hybrid model's ``mamba`` and ``attention`` layers have none and are not
        listed (``mixer_shares``), so its shares sum to less than 1."""
        if kind is not None:
            check_kind(kind)
            return {} if kind in ("mamba", "attention") else {kind: 1.0}
        return {k: n / self.num_layers for k, n in self.layer_counts().items()
                if n and k in ("dense", "moe")}

    def mixer_shares(self) -> dict[str, float]:
        """The mean layer's token mixers: ``{"attention": 1.0}`` for a transformer, a hybrid
        model's share of ``attention`` and ``mamba`` layers (absent when none)."""
        if not self.is_hybrid:
            return {"attention": 1.0}
        c = self.layer_counts()
        return {k: c[k] / self.num_layers for k in ("attention", "mamba") if c[k]}

    def mixer_linears(self) -> list[tuple[str, float, tuple[tuple[str, int, int, str], ...]]]:
        """The mean layer's token mixers and their linears, ``(mixer, share, linears)`` for
        each of ``mixer_shares`` in order: the attention's ``attention_linears``, a Mamba-2
        mixer's ``mamba_linears`` (each ``(name, in, out, split)``, elements). The one list
        the casts of both quantisation paths read (``quantise.layer_cast_elements``,
        ``rowwise_casts.layer_linears``)."""
        of = {"attention": self.attention_linears, "mamba": self.mamba_linears}
        return [(k, w, of[k]()) for k, w in self.mixer_shares().items()]

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
