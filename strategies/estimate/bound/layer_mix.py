"""A model's dense and MoE layers for the lower bound (``LayerMix``): a chunk costs at least
its cheapest layers and at most its dearest."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from strategies.cost.stage import StageCostArrays
from strategies.cost.stage.layers import tp_collectives_per_layer
from strategies.model import ModelSpec


@dataclass(frozen=True, eq=False)
class LayerMix:
    """The layers of a model with dense and MoE layers (``num_dense``, ``num_moe``), for the
    bound: the stage-cost record's per-layer figures are the mean layer's, which a chunk
    holding more of the cheaper kind beats (an uneven layout, or the even split with the
    dense layers on rank 0). A chunk of ``n`` layers costs at least its ``n`` cheapest
    layers' (``fill``: the cheaper kind first, at most as many as the model has, field by
    field) and at most its ``n`` dearest (``dearest=True``, for the windows the bound
    subtracts). ``of`` gives None for a model of one kind (the mean layer is exact);
    ``ep``: the plans' expert-parallel degrees, ``shared``: the model's shared experts."""

    num_dense: int
    num_moe: int
    ep: np.ndarray
    shared: int

    @classmethod
    def of(cls, m: ModelSpec, ep: ArrayLike) -> "LayerMix | None":
        c = m.layer_counts()
        if not (c.get("dense", 0) and c.get("moe", 0)):
            return None
        return cls(c["dense"], c["moe"], np.asarray(ep), m.num_shared_experts)

    def records(self, r: StageCostArrays, dearest: bool) -> list[StageCostArrays]:
        """``r`` with one dense layer's, then one MoE layer's figures (``r.by_kind``): TP
        collectives per layer 2, in a MoE layer under EP without shared experts 1
        (``cost.stage``); recomputed ones none (``dearest``: 2)."""
        out = []
        for kind in ("dense", "moe"):
            k = r.by_kind[kind]
            n_tp = tp_collectives_per_layer(1.0 if kind == "moe" else 0.0, self.ep,
                                            self.shared) + 0.0 * r.tp_per_layer_fwd
            out.append(replace(r, **{f: getattr(k, f) for f in (
                "layer_fwd", "layer_bwd", "layer_recompute", "layer_wgrad", "attn_fwd",
                "attn_bwd", "ep_bytes")}, tp_per_layer_fwd=n_tp, tp_per_layer_bwd=n_tp,
                tp_per_layer_recompute=n_tp if dearest else 0.0 * n_tp))
        return out

    def fill(self, n: ArrayLike, dense: ArrayLike, moe: ArrayLike,
             dearest: bool = False) -> np.ndarray:
        """Sum over ``n`` layers of a per-layer figure worth ``dense``/``moe`` a layer: the
        cheaper kind first (``dearest``: the dearer), each up to its count in the model."""
        n = np.asarray(n, dtype=float)
        first_dense = (dense >= moe) if dearest else (dense <= moe)
        lead_n = np.where(first_dense, self.num_dense, self.num_moe)
        lead, rest = np.where(first_dense, dense, moe), np.where(first_dense, moe, dense)
        return np.minimum(n, lead_n) * lead + np.maximum(0.0, n - lead_n) * rest

