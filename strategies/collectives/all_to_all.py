"""All-to-all: every member sends ``S/n`` bytes to every other member at once, after one
latency of the slowest pair. Alone on the wire, with each member's ``(n-1)`` flows sharing
its port of ``B`` bytes/s, it takes ``(n-1)/n · S/B + lat`` (``S``: the bytes each member
sends in total, its own share included).

>>> p, = phases("alltoall", (0, 1, 2), 3.0)
>>> p.flows, p.nbytes, p.steps
(((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)), 1.0, 1)
>>> float(time(3.0, 3, 1.0, 0.5))
2.5
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from strategies.collectives.phase import Num, Phase, steps


def phases(kind: str, group: Sequence[int], nbytes: float, node_of=None) -> list[Phase]:
    """The one phase of an all-to-all over ``group`` (``nbytes`` sent per member)."""
    g = tuple(group)
    if len(g) < 2:
        return []
    flows = tuple((a, b) for a in g for b in g if a != b)
    return [Phase(flows, nbytes / len(g), steps("alltoall", len(g)))]


def time(nbytes: Num, n: Num, bw: Num, lat: Num) -> Num:
    """Seconds of an all-to-all alone on its links (``nbytes`` sent per member over ``n``
    members, port ``bw`` bytes/s, ``lat`` s); 0 when ``n < 2``. Vectorised."""
    return np.where(n > 1, (n - 1) / n * nbytes / bw + lat, 0.0)[()]
