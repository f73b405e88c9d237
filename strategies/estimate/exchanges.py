"""Plans that name different context-parallel K/V exchanges (``PlanArrays.cp_comm``) priced
together: the stage costs price one exchange per call (``stacks.variants.arrays_stack``), so
the array estimate and the lower bound split such plans by exchange (``exchange_rows``), price
each group by the one path (``take``: the group's rows of every per-plan array), and put the
figures back in the plans' order (``merged``). The search's space carries several exchanges
where it explores ``cp_comm`` (docs/search.md). Units: those of the priced figures."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable

import numpy as np

from strategies.plan_arrays import PlanArrays


@dataclass(frozen=True)
class ExchangeCosts:
    """The stage-cost records of plans priced by exchange: ``(rows, record)`` per group, in
    ``exchange_rows`` order (``estimate_arrays(...)["stage_costs"]`` of such plans; the lower
    bound reads each group's)."""

    groups: tuple[tuple[np.ndarray, Any], ...]


def exchange_rows(P: PlanArrays) -> list[np.ndarray] | None:
    """The plans' rows by exchange code, codes ascending; None where one exchange (or none)
    prices them all (the common case: one call, nothing split)."""
    codes = np.asarray(P.cp_comm)
    if codes.ndim == 0 or codes.size == 0 or int(codes.min()) == int(codes.max()):
        return None
    return [np.flatnonzero(codes == c) for c in np.unique(codes).tolist()]


def take(x: Any, rows: np.ndarray, n: int) -> Any:
    """``x`` at ``rows`` where it is a per-plan array of ``n`` entries (a ``PlanArrays``: each
    such field; a mapping: each such value), else ``x`` unchanged (a scalar broadcast)."""
    if isinstance(x, PlanArrays):
        return replace(x, **{f.name: take(getattr(x, f.name), rows, n) for f in fields(x)})
    if isinstance(x, dict):
        return {k: take(v, rows, n) for k, v in x.items()}
    if isinstance(x, np.ndarray) and x.shape[:1] == (n,):
        return x[rows]
    return x


def merged(parts: list[dict[str, Any]], groups: list[np.ndarray], n: int) -> dict[str, Any]:
    """The groups' result dicts as one over the ``n`` plans: each per-plan array put back at
    its group's rows; ``stage_costs`` as ``ExchangeCosts``; other values (shared by every
    group) from the first group."""
    out: dict[str, Any] = {}
    for k, v in parts[0].items():
        if k == "stage_costs":
            out[k] = ExchangeCosts(tuple((g, p[k]) for g, p in zip(groups, parts)))
        elif isinstance(v, np.ndarray) and v.shape[:1] == (len(groups[0]),):
            col = np.empty((n,) + v.shape[1:], dtype=np.result_type(*(p[k] for p in parts)))
            for g, p in zip(groups, parts):
                col[g] = p[k]
            out[k] = col
        else:
            out[k] = v
    return out


def by_exchange(P: PlanArrays, price: Callable[..., Any], *per_plan: Any) -> Any:
    """``price(P, *per_plan)`` where one exchange prices all of ``P``; else ``price`` of each
    exchange's rows (``take`` of ``P`` and of each ``per_plan`` argument: mappings of
    per-plan arrays, per-plan arrays, ``ExchangeCosts``) put back in order: a dict of figures
    (``merged``) or one array of them."""
    groups = exchange_rows(P)
    if groups is None:
        return price(P, *per_plan)
    n = len(P)
    parts = []
    for i, g in enumerate(groups):
        args = [x.groups[i][1] if isinstance(x, ExchangeCosts) else take(x, g, n)
                for x in per_plan]
        parts.append(price(take(P, g, n), *args))
    if isinstance(parts[0], dict):
        return merged(parts, groups, n)
    out = np.empty(n, dtype=np.result_type(*parts))
    for g, p in zip(groups, parts):
        out[g] = p
    return out
