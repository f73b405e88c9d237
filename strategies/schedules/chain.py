"""The span of a split-backward pipeline whose micro-batches are too few to reach its steady
state: the chain of forwards and input gradients through every stage sets it."""
from __future__ import annotations

from typing import Any

import numpy as np


def chain_span(m: Any, t_max: Any, t_sum: Any, w_share: Any = 0.0) -> Any:
    """Seconds of ``m`` micro-batches' forwards and input gradients ``B`` chained through the
    stages, then the last weight gradient ``W``: ``(t_sum + (m-1)·t_max)·(1 - w_share) +
    w_share·t_max`` (``t`` a rank's seconds per micro-batch, all its chunks; ``w_share`` its
    ``W`` part), ``(p + m - 1)(T_F + T_B) + T_W`` for balanced ranks. The makespan of ZB-H1
    for ``m <= p`` and of ZB-H2 for ``m <= 2p - 1`` with free communication, balanced ranks
    and ``T_W <= T_F``, ``T_W <= T_B`` (``tests/test_few_microbatches.py``).

    >>> float(chain_span(2, 4.0, 16.0, 0.25))    # p = 4, T_F = T_B = 1.5, T_W = 1
    16.0
    """
    w = np.asarray(w_share, dtype=float)
    return (t_sum + (np.asarray(m, dtype=float) - 1) * t_max) * (1 - w) + w * t_max
