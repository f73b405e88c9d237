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
    first, inv = distinct_int_rows(np.stack(cols, axis=1))
    return [tuple(map(int, k)) for k in np.stack(cols, axis=1)[first]], inv, shape


def distinct_int_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the distinct rows of the int64 array ``rows`` (``(n, k)``,
    ``n >= 1``), as ``np.unique(axis=0)`` orders them: the index of each one's first row,
    and each row's index among them."""
    # one int64 key per row (mixed radix over the columns' ranges): a 1-D unique is several
    # times faster than ``np.unique(axis=0)`` on the search's hundreds of thousands of rows
    lo = rows.min(axis=0).tolist()
    radix = [int(h) - l + 1 for h, l in zip(rows.max(axis=0).tolist(), lo)]
    if float(np.prod(radix, dtype=float)) < 2.0 ** 62:
        key = np.zeros(len(rows), dtype=np.int64)
        for j, (l, r) in enumerate(zip(lo, radix)):
            key = key * r + (rows[:, j] - l)
        first, inv = np.unique(key, return_index=True, return_inverse=True)[1:]
    else:
        first, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)[1:]
    return first, np.ravel(inv)
