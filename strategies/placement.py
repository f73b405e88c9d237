"""Rank placement: which global rank (GPU) holds which (tp, cp, dp, pp) coordinate.

The ``order`` string lists the dimensions innermost (fastest-varying) first, as Megatron-LM's
``RankGenerator`` does. The default ``"tp-cp-dp-pp"`` is Megatron's: tensor-parallel peers are
consecutive ranks (so they share a node's NVLink), then context parallelism, then data
parallelism, and pipeline stages outermost::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

Any permutation of ``tp``, ``cp``, ``dp``, ``pp`` may be given (e.g. ``"tp-dp-cp-pp"``).
Global rank ``r`` sits on node ``r // gpus_per_node`` (see :mod:`topologies.graph`).

Expert parallelism (``ep``) does not add a dimension: like Megatron (expert tensor parallel
size = tp), the ``cp * dp`` ranks that share tp and pp coordinates are flattened into one
index ``e`` (cp and dp in their ``order``; with the default ``e = cp_rank + cp * dp_rank``)
and cut into consecutive blocks of ``ep``: each block is one expert all-to-all group. With
``cp = 1`` these are consecutive blocks of ``ep`` data-parallel ranks.

Every function needs ``plan.dp`` (set by :func:`strategies.job.make_job`).

>>> from strategies.plan import Plan
>>> p = Plan(tp=2, pp=4, dp=2)
>>> groups(p, "tp")[:2], groups(p, "dp")[:2], groups(p, "pp")[0]
([[0, 1], [2, 3]], [[0, 2], [1, 3]], [0, 4, 8, 12])
>>> rank_of(p, 1, 0, 1, 3), coords_of(p, 15)
(15, {'tp': 1, 'cp': 0, 'dp': 1, 'pp': 3})
"""
from __future__ import annotations

import numpy as np

from strategies.errors import SpecError
from strategies.plan import Plan

DIMS = ("tp", "cp", "dp", "pp")
GROUP_DIMS = ("tp", "cp", "dp", "pp", "ep")
DEFAULT_ORDER = "tp-cp-dp-pp"


def parse_order(order: str) -> tuple[str, ...]:
    """``"tp-cp-dp-pp"`` -> ``("tp", "cp", "dp", "pp")``; each of the four exactly once."""
    parts = tuple(p.strip().lower() for p in str(order).split("-"))
    if sorted(parts) != sorted(DIMS):
        raise SpecError("order", order, "must name tp, cp, dp and pp once each, innermost "
                        "first, joined by '-' (e.g. tp-cp-dp-pp)")
    return parts


def sizes(plan: Plan) -> dict[str, int]:
    """``{"tp": .., "cp": .., "dp": .., "pp": ..}``; refuses a plan whose dp is unresolved."""
    if plan.dp is None:
        raise SpecError("dp", None, "placement needs a resolved data-parallel size "
                        "(build the plan with strategies.job.make_job or give dp=)")
    return {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}


def world_size(plan: Plan) -> int:
    """Number of ranks: ``tp * cp * dp * pp``."""
    s = sizes(plan)
    return s["tp"] * s["cp"] * s["dp"] * s["pp"]


def rank_of(plan: Plan, tp_rank: int, cp_rank: int, dp_rank: int, pp_rank: int,
            order: str = DEFAULT_ORDER) -> int:
    """Global rank of a coordinate (mixed radix, first dimension of ``order`` innermost)."""
    size = sizes(plan)
    coords = {"tp": tp_rank, "cp": cp_rank, "dp": dp_rank, "pp": pp_rank}
    rank, stride = 0, 1
    for d in parse_order(order):
        c = coords[d]
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < size[d]:
            raise SpecError(f"{d}_rank", c, f"must be an integer in 0..{size[d] - 1} ({d}={size[d]})")
        rank += c * stride
        stride *= size[d]
    return rank


def coords_of(plan: Plan, rank: int, order: str = DEFAULT_ORDER) -> dict[str, int]:
    """``{"tp", "cp", "dp", "pp"}`` coordinates of global ``rank`` (inverse of :func:`rank_of`)."""
    size, n = sizes(plan), world_size(plan)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
        raise SpecError("rank", rank, f"must be an integer in 0..{n - 1}")
    out = {}
    for d in parse_order(order):
        rank, out[d] = divmod(rank, size[d])
    return {d: out[d] for d in DIMS}


def _grid(plan: Plan, order: str) -> tuple[np.ndarray, list[str]]:
    """Ranks as an array whose axes are the dimensions outermost first (C order)."""
    dims = list(reversed(parse_order(order)))
    size = sizes(plan)
    return np.arange(world_size(plan)).reshape([size[d] for d in dims]), dims


def groups(plan: Plan, dim: str, order: str = DEFAULT_ORDER) -> list[list[int]]:
    """The communication groups of ``dim`` (tp, cp, dp, pp or ep): lists of global ranks,
    each ordered by rank in that dimension, the groups ordered by their first rank. They
    partition all ranks."""
    if dim not in GROUP_DIMS:
        raise SpecError("dim", dim, f"must be one of {', '.join(GROUP_DIMS)}")
    grid, dims = _grid(plan, order)
    if dim == "ep":
        return _ep_groups(plan, grid, dims)
    rows = np.moveaxis(grid, dims.index(dim), -1).reshape(-1, grid.shape[dims.index(dim)])
    return sorted(rows.tolist())


def _ep_groups(plan: Plan, grid: np.ndarray, dims: list[str]) -> list[list[int]]:
    edp = plan.cp * plan.dp
    if edp % plan.ep:
        raise SpecError("ep", plan.ep, f"must divide dp*cp={plan.dp}*{plan.cp}={edp} (expert "
                        "groups are cut from the data- and context-parallel ranks)")
    inner = [dims.index(d) for d in dims if d in ("cp", "dp")]  # outer of the two first
    arr = np.moveaxis(grid, inner, [-2, -1]).reshape(-1, plan.ep)
    return sorted(arr.tolist())


def tp_crosses_node(plan: Plan, gpus_per_node: int, order: str = DEFAULT_ORDER) -> bool:
    """True if some tensor-parallel group spans GPUs of more than one node (node of rank r
    is ``r // gpus_per_node``). With the default order that is when tp > gpus_per_node or
    tp does not divide gpus_per_node."""
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise SpecError("gpus_per_node", gpus_per_node, "must be an integer >= 1")
    nodes = np.asarray(groups(plan, "tp", order)) // gpus_per_node
    return bool((nodes != nodes[:, :1]).any())
