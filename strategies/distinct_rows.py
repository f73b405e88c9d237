"""The distinct rows of broadcast integer arrays (``distinct_rows``): the search's figures that
depend on a few integer plan columns are computed once per distinct row and broadcast back
(``strategies.schedules.per_distinct``, ``strategies.cost.attention_grid``)."""
from __future__ import annotations

from typing import Any

import numpy as np


def distinct_rows(*columns: Any) -> tuple[list[tuple[int, ...]], np.ndarray, tuple[int, ...]]:
    """``(keys, inverse, shape)``: the distinct rows of the broadcast integer ``columns``
    (e.g. a schedule's ``(stage, pp, m, vpp)``, an attention kernel's ``(groups, tiles,
    cp)``), each row's index among them and the broadcast shape."""
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in columns))
    shape = arrays[0].shape
    cols = [a.ravel().astype(np.int64) for a in arrays]
    if not len(cols[0]):
        return [], np.zeros(0, dtype=np.int64), shape
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
    return [tuple(map(int, k)) for k in uniq], np.ravel(inv), shape
