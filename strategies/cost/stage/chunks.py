"""The layers a model chunk holds, read from the one-job record (``StageCosts``): each
kind's per-layer record, or the mean layer under the even split, and their sum."""
from __future__ import annotations

from typing import Any

from strategies.cost.stage.record import StageCosts


def chunk_layers(c: StageCosts, stage: int, chunk: int, layers: int) -> list[tuple[int, Any]]:
    """``(count, per-layer costs)`` of the layers ``stage``'s ``chunk`` holds: each kind's
    record (``by_kind``; the mean layer ``c`` itself for a model of one kind), or ``layers``
    mean layers where ``chunk_kinds`` is empty (the even split). A chunk's time, bytes and
    parameters are ``sum(n * x.field for n, x in chunk_layers(...))``."""
    if not c.chunk_kinds:
        return [(layers, c)]
    return [(n, c.by_kind.get(k, c)) for k, n in c.chunk_kinds[stage][chunk]]


def chunk_sum(items: list[tuple[int, Any]], f) -> float:
    """``sum(n * f(x))`` over ``chunk_layers`` items (``f``: a per-layer figure)."""
    if len(items) == 1:                # the common case, without a generator (same sum)
        n, x = items[0]
        return 0 + n * f(x)
    return sum(n * f(x) for n, x in items)
