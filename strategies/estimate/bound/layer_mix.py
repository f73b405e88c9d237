"""A model's layer kinds for the lower bound (``LayerMix``: dense and MoE layers, a hybrid
model's four kinds): a chunk costs at least its cheapest layers and at most its dearest."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from strategies.cost.stage import StageCostArrays
from strategies.cost.stage.layers import tp_collectives_per_layer
from strategies.model import ModelSpec


@dataclass(frozen=True, eq=False)
class LayerMix:
    """The layers of a model of more than one kind (``kinds``, each ``counts`` layers): dense
    and MoE layers, or a hybrid model's Mamba-2, attention, MLP and MoE layers
    (``ModelSpec.cost_kinds``), for the bound: the stage-cost record's per-layer figures are
    the mean layer's, which a chunk holding more of the cheaper kind beats (an uneven layout,
    or the even split with the dense layers on rank 0). A chunk of ``n`` layers costs at
    least its ``n`` cheapest layers' (``fill``: the cheapest kind first, at most as many as
    the model has, field by field) and at most its ``n`` dearest (``dearest=True``, for the
    windows the bound subtracts). ``of`` gives None for a model of one kind (the mean layer
    is exact); ``ep``: the plans' expert-parallel degrees, ``shared``: the model's shared
    experts, ``blocks``: TP collective pairs of a layer (``ModelSpec.blocks_per_layer``)."""

    kinds: tuple[str, ...]
    counts: tuple[int, ...]
    ep: np.ndarray
    shared: int
    blocks: int = 2

    @classmethod
    def of(cls, m: ModelSpec, ep: ArrayLike) -> "LayerMix | None":
        c = m.layer_counts()
        kinds = tuple(k for k in m.cost_kinds() if c.get(k, 0))
        if len(kinds) < 2:
            return None
        return cls(kinds, tuple(c[k] for k in kinds), np.asarray(ep), m.num_shared_experts,
                   m.blocks_per_layer)

    def records(self, r: StageCostArrays, dearest: bool) -> list[StageCostArrays]:
        """``r`` with one layer's figures of each kind in turn (``r.by_kind``): TP
        collectives per layer 2 (a hybrid model's 1), in a MoE layer under EP without shared
        experts one fewer (``cost.stage``); recomputed ones none (``dearest``: those)."""
        out = []
        for kind in self.kinds:
            k = r.by_kind[kind]
            n_tp = tp_collectives_per_layer(1.0 if kind == "moe" else 0.0, self.ep,
                                            self.shared, self.blocks) + 0.0 * r.tp_per_layer_fwd
            out.append(replace(r, **{f: getattr(k, f) for f in (
                "layer_fwd", "layer_bwd", "layer_recompute", "layer_wgrad", "attn_fwd",
                "attn_bwd", "ep_bytes")}, tp_per_layer_fwd=n_tp, tp_per_layer_bwd=n_tp,
                tp_per_layer_recompute=n_tp if dearest else 0.0 * n_tp))
        return out

    def fill(self, n: ArrayLike, *per_kind: ArrayLike, dearest: bool = False) -> np.ndarray:
        """Sum over ``n`` layers of a per-layer figure worth ``per_kind[i]`` a layer of
        ``kinds[i]``: the cheapest kind first (``dearest``: the dearest), each up to its
        count in the model (ties: the earlier kind first)."""
        n = np.asarray(n, dtype=float)
        if len(per_kind) == 2:
            dense, moe = per_kind
            first_dense = (dense >= moe) if dearest else (dense <= moe)
            lead_n = np.where(first_dense, self.counts[0], self.counts[1])
            lead, rest = np.where(first_dense, dense, moe), np.where(first_dense, moe, dense)
            return np.minimum(n, lead_n) * lead + np.maximum(0.0, n - lead_n) * rest
        f = np.stack(np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in per_kind)))
        order = np.argsort(-f if dearest else f, axis=0, kind="stable")
        counts = np.asarray(self.counts, dtype=float)
        left, total = n + 0.0 * f[0], 0.0
        for j in range(len(per_kind)):
            idx = order[j]
            take = np.minimum(left, counts[idx])
            total = total + take * np.take_along_axis(f, idx[None], axis=0)[0]
            left = left - take
        # beyond the model's layers (never for a chunk of it): the last kind's figure
        return total + np.maximum(left, 0.0) * np.take_along_axis(f, order[-1][None], axis=0)[0]
