"""The one uneven pipeline layout the search proposes per ``(pp, vpp)``: the one Megatron users
write (docs/layout.md, docs/search.md §1).

* **Slots** (NeMo's Llama 3.1 405B recipe, Megatron's ``--account-for-embedding/loss-in-
  pipeline-split``): where ``(num_layers + 2)`` divides over ``pp·vpp`` chunks, the embedding
  and the loss each take one layer slot.
* **First/last-stage layers** (Megatron's ``--decoder-first/last-pipeline-num-layers``):
  otherwise the end ranks' layer counts ``f``, ``l`` and the middle ranks' ``k`` (each a
  multiple of ``vpp``: every chunk of a rank holds the same count, Megatron's rule;
  ``f + l + (pp-2)·k = num_layers``) that minimise the busiest rank's time per micro-batch,
  ``max(f·t + e_first, k·t, l·t + e_last)``, ``t`` one layer's forward and backward and
  ``e_first``/``e_last`` the embedding's and the LM head's (and multi-token prediction's)
  from the stage-cost record (``strategies.cost.stage``). An exhaustive walk over ``k`` and
  ``f`` (at most ``(num_layers/vpp)²`` pairs): the closed-form choice.

A candidate is proposed where the even split is refused (``num_layers`` not divisible by
``pp·vpp``) and the candidate is no worse than rounding the even split up
(busiest rank at most ``vpp·ceil(num_layers/(pp·vpp))·t + max(e_first, e_last)``), or where
the even split exists and the candidate's busiest rank is strictly faster. Units: seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from strategies.cost.stage import stage_cost_arrays
from strategies.cost.system import SystemConfig
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.schedules import DEFAULT_SCHEDULE, schedule_code
from topologies.cluster import Cluster


@dataclass(frozen=True)
class Candidate:
    """An uneven layout as plan fields: ``first``/``last`` (``first/last_stage_layers``, 0:
    not given) or ``account`` (the embedding and the loss as slots)."""

    first: int = 0
    last: int = 0
    account: bool = False


@dataclass(frozen=True)
class LayerCosts:
    """Seconds per micro-batch: one (mean) layer's forward + backward ``t``, the embedding's
    ``e_first`` and the LM head's, loss's and MTP modules' ``e_last``."""

    t: float
    e_first: float
    e_last: float


def layer_costs(model: ModelSpec, cluster: Cluster, dtype: str = "bf16",
                framework: FrameworkProfile | None = None,
                system: SystemConfig | None = None) -> LayerCosts:
    """``LayerCosts`` from the stage-cost record of a reference plan (one GPU per stage,
    micro-batch 1, no recomputation): the ratio of the ends' work to a layer's, which the
    layout choice reads, is what matters and depends on the plan only through the GEMM
    shapes."""
    P = PlanArrays(tp=1, pp=2, dp=1, cp=1, ep=1, mbs=1, gbs=1, vpp=1,
                   schedule=schedule_code(DEFAULT_SCHEDULE), recompute=0, sp=False, zero=0,
                   flash_attn=True, overlap_grad_reduce=True, overlap_param_gather=True,
                   tp_comm_overlap=False)
    sc = stage_cost_arrays(model, cluster, dtype, P, framework, system)
    t = float(sc.layer_fwd + sc.layer_bwd)
    e_last = float(sc.head_fwd + sc.head_bwd)
    mtp = sc.by_kind.get("mtp")
    if mtp is not None:
        e_last += model.num_nextn_predict_layers * float(mtp.layer_fwd + mtp.layer_bwd)
    return LayerCosts(t, float(sc.embedding_fwd + sc.embedding_bwd), e_last)


def busiest(first: int, mid: int, last: int, pp: int, c: LayerCosts) -> float:
    """Seconds per micro-batch of the busiest rank with these layer counts."""
    ends = max(first * c.t + c.e_first, last * c.t + c.e_last)
    return max(ends, mid * c.t) if pp > 2 else ends


def first_last(num_layers: int, pp: int, vpp: int, c: LayerCosts) -> tuple[int, int, int] | None:
    """``(f, k, l)`` minimising ``busiest`` (ties: the larger ``k``, then the larger ``f``),
    each ``>= vpp`` and a multiple of ``vpp``; None where none adds up."""
    best: tuple[float, int, int, int] | None = None
    mids = range(vpp, num_layers + 1, vpp) if pp > 2 else [0]
    for k in mids:
        rest = num_layers - (pp - 2) * k
        for f in range(vpp, rest - vpp + 1, vpp):
            la = rest - f
            if la % vpp:
                continue
            key = (busiest(f, k, la, pp, c), -k, -f)
            if best is None or key < best[:3]:
                best = key + (la,)
    return None if best is None else (-best[2], -best[1], best[3])


def candidate_layout(num_layers: int, pp: int, vpp: int, c: LayerCosts) -> Candidate | None:
    """The layout proposed for ``(pp, vpp)`` (module docstring), or None."""
    if pp < 2:
        return None
    n = pp * vpp
    even_ok = num_layers % n == 0
    if not even_ok:
        k = (num_layers + 2) // n
        if (num_layers + 2) % n == 0 and k >= 2:
            return Candidate(account=True)
        fkl = first_last(num_layers, pp, vpp, c)
        if fkl is None:
            return None
        cap = vpp * math.ceil(num_layers / n) * c.t + max(c.e_first, c.e_last)
        f, k, la = fkl
        return Candidate(first=f, last=la) if busiest(f, k, la, pp, c) <= cap else None
    fkl = first_last(num_layers, pp, vpp, c)
    even = num_layers // pp
    if fkl is None:
        return None
    f, k, la = fkl
    if busiest(f, k, la, pp, c) < busiest(even, even, even, pp, c) and (f, la) != (even, even):
        return Candidate(first=f, last=la)
    return None


def slot_vpps(num_layers: int, max_vpp: int | None) -> list[int]:
    """Chunk counts ``v >= 2`` that divide ``num_layers + 2`` but not ``num_layers``: only a
    slot layout fills them (the interleaved schedules' axis holds the divisors of
    ``num_layers``)."""
    return [v for v in range(2, num_layers + 3) if (num_layers + 2) % v == 0
            and num_layers % v and (max_vpp is None or v <= max_vpp)]


def candidate_columns(num_layers: int, pp: np.ndarray, vpp: np.ndarray, c: LayerCosts
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(has, first, last, account)`` per row of ``pp``/``vpp`` arrays (``candidate_layout``
    of each distinct pair)."""
    has = np.zeros(pp.shape, bool)
    first = np.zeros(pp.shape, np.int64)
    last = np.zeros(pp.shape, np.int64)
    acc = np.zeros(pp.shape, bool)
    if not len(pp):
        return has, first, last, acc
    pairs, inv = np.unique(np.stack([pp, vpp], axis=1), axis=0, return_inverse=True)
    inv = inv.ravel()
    for j, (p, v) in enumerate(pairs.tolist()):
        cand = candidate_layout(num_layers, int(p), int(v), c)
        if cand is None:
            continue
        on = inv == j
        has[on] = True
        first[on], last[on], acc[on] = cand.first, cand.last, cand.account
    return has, first, last, acc
