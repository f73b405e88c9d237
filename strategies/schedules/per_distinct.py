"""A schedule's scalar figures over the search's arrays: the distinct ``(stage, pp, m, vpp)``
rows of broadcast arrays (``strategies.distinct_rows``), a figure computed once per distinct row
(``per_distinct``; a stash frontier, ``frontier_per_distinct``) and a schedule's order figures
memoised (``order_figure``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from strategies.distinct_rows import distinct_rows

if TYPE_CHECKING:
    from strategies.schedules.base import Schedule


def per_distinct(fn: Callable[..., int], stage: Any, pp: Any, m: Any, vpp: Any
                 ) -> np.ndarray:
    """``fn(stage, pp, m, vpp)`` over broadcast arrays, called once per distinct tuple."""
    keys, inv, shape = distinct_rows(stage, pp, m, vpp)
    if not keys:
        return np.zeros(shape)
    vals = np.array([fn(*k) for k in keys], dtype=float)
    return vals[inv].reshape(shape)


def frontier_per_distinct(fn: Callable[..., tuple[tuple[int, int], ...]], stage: Any, pp: Any,
                          m: Any, vpp: Any) -> tuple[np.ndarray, np.ndarray]:
    """``fn(stage, pp, m, vpp)``, a ``(stashed, pending W)`` frontier, over broadcast arrays,
    called once per distinct tuple: ``(stashed, pending)``, each of shape ``(K,) + broadcast
    shape``, a row's frontier padded with its first pair to the longest ``K``."""
    keys, inv, shape = distinct_rows(stage, pp, m, vpp)
    if not keys:
        return np.zeros((1,) + shape), np.zeros((1,) + shape)
    fronts = [fn(*k) for k in keys]
    depth = max((len(f) for f in fronts), default=1)
    table = np.array([list(f) + [f[0]] * (depth - len(f)) for f in fronts],
                     dtype=float).reshape(len(fronts), depth, 2)
    rows = table[inv]                                   # (N, K, 2)
    n = np.moveaxis(rows[..., 0], 1, 0).reshape((depth,) + shape)
    w = np.moveaxis(rows[..., 1], 1, 0).reshape((depth,) + shape)
    return n, w


#: figures of a schedule's order by ``(class, name, figure, stage, pp, m, vpp)``: an order is
#: a pure function of those, and the search's memory model asks for the same few hundred
#: of them once per pass (``search.fitting.least_recompute`` makes several); bounded, cleared when full
_ORDER_FIGURES: dict[tuple, float] = {}
_ORDER_FIGURES_MAX = 1 << 18


def order_figure(sched: "Schedule", figure: str) -> Callable[[int, int, int, int], float]:
    """``sched.<figure>(stage, pp, m, vpp)`` (a count, share or ``stash_frontier`` read from
    the order), memoised."""
    method = getattr(sched, figure)
    head = (type(sched), sched.name, figure)

    def fn(stage: int, pp: int, m: int, vpp: int) -> int:
        key = head + (stage, pp, m, vpp)
        got = _ORDER_FIGURES.get(key)
        if got is None:
            if len(_ORDER_FIGURES) >= _ORDER_FIGURES_MAX:
                _ORDER_FIGURES.clear()
            got = _ORDER_FIGURES[key] = method(stage, pp, m, vpp)
        return got
    return fn
