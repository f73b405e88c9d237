"""Interned ``Step`` objects for the orders that make millions of them.

The search's memory model and its span replays ask for every rank's order at thousands of
``(pp, m)`` (``--schedules all``: ZB-V, DualPipe(V)), each order a list of ``Step``s, and a
frozen dataclass's ``__init__`` costs about a microsecond. ``Step`` is immutable and
compared by value, so equal steps may be one object: ``step(kind, microbatch, chunk,
overlap)`` returns the one made first (bounded cache)."""
from __future__ import annotations

from functools import lru_cache

from strategies.schedules.step import Step

#: ``Step(kind, microbatch, chunk, overlap)``, positional arguments, one object per value
step = lru_cache(maxsize=1 << 16)(Step)
