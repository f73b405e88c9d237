"""Pausing Python's cyclic garbage collector while a simulation allocates.

A simulation allocates millions of small objects that stay alive until it ends (ops, SimPy
events, one ``Record`` per op). Each allocation counts towards the collector's thresholds,
and every so often a full collection walks all live container objects: on the unfolded
GPT-3 175B / 1,024-GPU step (about 1 M records) that was a fifth to a quarter of the run's CPU
time while it freed almost nothing (a few hundred cycles); ``experiments/profile_simulate.py
--keep-gc`` measures it. During a run almost nothing becomes
cyclic garbage (a few SimPy conditions), so the collector is paused for the run and restored
after it; the first collection after that frees those and the finished engine (its streams
refer to it), and is counted in the run's time. Results do not depend on it (the collector never changes
values), only the time.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block; restore its previous state
    (enabled or not) on the way out, also on an exception. Nests."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
