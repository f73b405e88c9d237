"""A schedule's scalar figures over the search's arrays: the distinct ``(stage, pp, m, vpp)``
rows of broadcast arrays (``distinct_rows``), a figure computed once per distinct row
(``per_distinct``) and a schedule's order figures memoised (``order_figure``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from strategies.schedules.base import Schedule


def distinct_rows(stage: Any, pp: Any, m: Any, vpp: Any
                  ) -> tuple[list[tuple[int, int, int, int]], np.ndarray, tuple[int, ...]]:
    """``(keys, inverse, shape)``: the distinct ``(stage, pp, m, vpp)`` rows of the broadcast
    arrays, each row's index among them and the broadcast shape."""
    s, p, mm, v = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (stage, pp, m, vpp)))
    cols = [a.ravel().astype(np.int64) for a in (s, p, mm, v)]
    if not len(cols[0]):
        return [], np.zeros(0, dtype=np.int64), s.shape
    # one int64 key per row (mixed radix over the columns' ranges): a 1-D unique is several
    # times faster than ``np.unique(axis=0)`` on the search's hundreds of thousands of rows
    lo = [int(c.min()) for c in cols]
    radix = [int(c.max()) - l + 1 for c, l in zip(cols, lo)]
    if float(np.prod(radix, dtype=float)) < 2.0 ** 62:
        key = np.zeros_like(cols[0])
        for c, l, r in zip(cols, lo, radix):
            key = key * r + (c - l)
        first, inv = np.unique(key, return_index=True, return_inverse=True)[1:]
        uniq = np.stack(cols, axis=1)[first]
    else:
        uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return [tuple(map(int, k)) for k in uniq], np.ravel(inv), s.shape


def per_distinct(fn: Callable[..., int], stage: Any, pp: Any, m: Any, vpp: Any
                 ) -> np.ndarray:
    """``fn(stage, pp, m, vpp)`` over broadcast arrays, called once per distinct tuple."""
    keys, inv, shape = distinct_rows(stage, pp, m, vpp)
    if not keys:
        return np.zeros(shape)
    vals = np.array([fn(*k) for k in keys], dtype=float)
    return vals[inv].reshape(shape)


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
