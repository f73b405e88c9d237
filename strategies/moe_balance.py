"""How unevenly a mixture-of-experts layer's routed tokens fall on the expert-parallel ranks:
the hottest rank's load over the mean (the plan's ``moe_imbalance``, ``ι``), by routing regime.

Two parts, each from its source (docs/calibration.md §5.73, ``experiments/moe_imbalance.py``):

- **Sampling**: a micro-batch routes a finite number of tokens, so even a router balanced in
  expectation gives each rank a random load, and the hottest of ``ep`` ranks carries more
  than the mean. Under Megatron-Core's ``moe_router_force_load_balancing`` (the benchmarks'
  switch: ``RandomSTE`` replaces the router's logits by ``torch.randn`` values, different on
  each rank, before the top-k, ``megatron/core/transformer/moe/router.py`` and
  ``moe_utils.py``) a token's ``k`` experts are a uniform ``k``-subset of the ``E`` (of the
  chosen groups' experts under group-limited routing, whose groups are then a uniform
  ``M``-subset), independently per token. A rank holding ``E/ep`` experts receives
  ``X`` copies of a token (hypergeometric; ``rank_copy_moments``) and over the expert
  group's ``N`` tokens its load is a sum of ``N`` independent copies of ``X``: normal by the
  central limit theorem (``N`` is ``10^4``-``10^6``) with variance ``N·var X``, the ``ep``
  loads summing to ``N·k`` (correlation ``-1/(ep-1)``). The expected maximum of such loads is
  ``mean + sqrt(N·var X)·e_ep/sqrt(1 - 1/ep)`` with ``e_n`` the expected maximum of ``n``
  independent standard normals (``expected_max_normal``): ``forced_imbalance``.
- **The trained router's skew**: a router trained with an auxiliary loss or balanced without
  one keeps some experts hotter than others over the whole data. Wang et al. 2024
  (arXiv:2408.15664, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts",
  Table 2) measure ``MaxVio_global`` = (the most loaded expert's tokens − the mean) / the
  mean over the validation set: 0.04 with loss-free balancing (1B and 3B DeepSeekMoE models,
  64 routed experts, top-6) and 0.72 / 0.52 with an auxiliary loss (α = 0.001). Per rank,
  assuming the hottest expert's excess lands on a rank whose other ``E/ep - 1`` experts carry
  the mean, the excess is ``MaxVio·ep/E`` (``rank_skew``).

The default (``default_imbalance``, a plan that names no ``moe_imbalance``) is a trained,
loss-free balanced router (DeepSeek-V3's, Megatron-Core's ``moe_router_enable_expert_bias``):
sampling plus the loss-free skew, added (to first order; the sum bounds the hottest rank's
expected load from above). A run that force-balances states ``forced_imbalance`` (the
reference reader does, ``strategies.reference.cases``); one with an auxiliary loss states its
own (``experiments/moe_imbalance.py`` prints ``1 + sampling + 0.52..0.72·ep/E``).
Vectorised over the plan fields.
"""
from __future__ import annotations

from functools import lru_cache
from math import comb, erf, sqrt
from typing import Any

import numpy as np

from strategies.model import ModelSpec

Num = Any  # float or np.ndarray

#: ``MaxVio_global`` of loss-free balancing (Wang et al. 2024, arXiv:2408.15664, Table 2:
#: 0.04 for both the 1B and the 3B model; the most loaded expert over the validation set).
LOSS_FREE_MAXVIO_GLOBAL = 0.04
#: ``MaxVio_global`` with the auxiliary balance loss (α = 0.001) in the same Table 2:
#: 1B model 0.72, 3B model 0.52 (not the default; ``experiments/moe_imbalance.py``).
AUX_LOSS_MAXVIO_GLOBAL = {"1B": 0.72, "3B": 0.52}

# the standard normal's CDF on [0, 12] (Simpson's rule below; Φ(−x) = 1 − Φ(x)):
# deterministic, no SciPy
_GRID_H = 1e-3
_GRID = np.arange(0, 12001) * _GRID_H
_PHI = np.array([0.5 * (1.0 + erf(x / sqrt(2.0))) for x in _GRID])


def _simpson(y: np.ndarray) -> float:
    """Simpson's rule over ``_GRID`` (an odd number of points)."""
    return float(_GRID_H / 3.0 * (y[0] + y[-1] + 4.0 * y[1:-1:2].sum() + 2.0 * y[2:-1:2].sum()))


@lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """``E[max]`` of ``n`` independent standard normals,
    ``∫_0^∞ (1 − Φ^n) − ∫_{−∞}^0 Φ^n``, by Simpson's rule on ``[0, 12]`` (step 1e-3; 0 for
    ``n = 1``, ``1/√π`` for 2, ``3/(2√π)`` for 3)."""
    if n < 1:
        raise ValueError(f"n={n}: needs at least one normal")
    return _simpson(1.0 - _PHI ** n) - _simpson((1.0 - _PHI) ** n)


@lru_cache(maxsize=None)
def rank_copy_moments(E: int, k: int, ranks: int, G: int | None = None,
                      M: int | None = None) -> tuple[float, float]:
    """Mean and variance of the copies ``X`` of one token that one of ``ranks`` ranks (each
    ``E/ranks`` consecutive experts) receives when its ``k`` experts are drawn uniformly
    (forced balancing's random logits). Without group-limited routing ``X`` is
    hypergeometric (``k`` of ``E``, ``E/ranks`` marked). With ``G`` groups of ``E/G``, ``M``
    of them drawn uniformly and the ``k`` among their experts: a rank inside a group
    (``ranks % G == 0``) gets copies only when its group is drawn (``M/G``), then
    hypergeometric in the ``M·E/G`` experts; a rank of ``w = G/ranks`` whole groups gets
    ``j`` drawn groups with the hypergeometric chance ``C(w,j)C(G-w,M-j)/C(G,M)``, then the
    ``k`` among ``M·E/G`` experts with ``j·E/G`` marked."""
    c = E // ranks

    def hyper(pool: int, marked: int) -> tuple[float, float]:
        """(E[X], E[X²]) of the marked experts among ``k`` drawn from ``pool``."""
        p = marked / pool
        mean = k * p
        var = k * p * (1 - p) * (pool - k) / (pool - 1) if pool > 1 else 0.0
        return mean, var + mean * mean

    if G and M and M < G and E % G == 0 and (ranks % G == 0 or G % ranks == 0):
        g = E // G
        pool = M * g
        if ranks % G == 0:
            m1, m2 = hyper(pool, c)
            mean, second = M / G * m1, M / G * m2
        else:
            w = G // ranks
            mean = second = 0.0
            for j in range(0, min(w, M) + 1):
                pj = comb(w, j) * comb(G - w, M - j) / comb(G, M)
                m1, m2 = hyper(pool, j * g)
                mean, second = mean + pj * m1, second + pj * m2
    else:
        mean, second = hyper(E, c)
    return mean, max(0.0, second - mean * mean)


def _per_ep(ep: Num, f) -> np.ndarray:
    """``f(ep)`` for each distinct expert-parallel size of ``ep`` (an array of them)."""
    ep = np.asarray(ep)
    out = np.empty(ep.shape, dtype=float)
    for e in np.unique(ep):
        out[ep == e] = f(int(e))
    return out


def forced_imbalance(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                     etp: Num | None = None) -> Num:
    """Expected load of the hottest of ``ep`` expert-parallel ranks over the mean when tokens
    are routed uniformly at random (Megatron-Core's ``moe_router_force_load_balancing``):
    ``1 + e_ep·sqrt(N·var X)/(sqrt(1 − 1/ep)·N·E[X])`` with ``N = (b·s/c)·ep·etp/t`` tokens
    in the expert group's micro-batch (``token_counts.expert_tokens``: each rank's mean is
    ``N·k/ep``) and ``X`` a token's copies to one rank (``rank_copy_moments``). 1 where
    ``ep = 1`` or the model is dense. Vectorised."""
    etp = tp if etp is None else etp
    if not m.is_moe:
        return (1.0 + 0.0 * np.asarray(ep, dtype=float))[()]
    E, k = m.num_experts, m.moe_router_topk
    G, M = m.moe_router_num_groups, m.moe_router_group_topk

    def ratio(e: int) -> float:
        """``e_e·sd(X)/(sqrt(1 − 1/e)·E[X])``, the excess at one token (over ``sqrt N``)."""
        if e <= 1:
            return 0.0
        mean, var = rank_copy_moments(E, k, e, G, M)
        return expected_max_normal(e) * sqrt(var) / (sqrt(1.0 - 1.0 / e) * mean)

    N = np.asarray(b, dtype=float) * m.seq_length / np.asarray(cp, dtype=float) \
        * np.asarray(ep, dtype=float) * np.asarray(etp, dtype=float) / np.asarray(tp, dtype=float)
    return (1.0 + _per_ep(ep, ratio) / np.sqrt(N))[()]


def rank_skew(m: ModelSpec, ep: Num, maxvio: float = LOSS_FREE_MAXVIO_GLOBAL) -> Num:
    """A trained router's lasting excess on the hottest rank over the mean: the hottest
    expert's ``maxvio`` (``MaxVio_global``) shared with ``E/ep − 1`` experts at the mean,
    ``maxvio·ep/E`` (0 with one rank or a dense model). Vectorised."""
    ep = np.asarray(ep, dtype=float)
    if not m.is_moe:
        return (0.0 * ep)[()]
    return np.where(ep > 1, maxvio * ep / m.num_experts, 0.0)[()]


def default_imbalance(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                      etp: Num | None = None) -> Num:
    """The imbalance of a plan that names none: a trained router balanced without an
    auxiliary loss, ``forced_imbalance`` (sampling) plus ``rank_skew`` at
    ``LOSS_FREE_MAXVIO_GLOBAL``. Vectorised."""
    return (np.asarray(forced_imbalance(m, b, tp, cp, ep, etp))
            + np.asarray(rank_skew(m, ep)))[()]
