"""Pausing Python's cyclic garbage collector while a simulation allocates.

A simulation allocates millions of small objects that stay alive until it ends (ops, SimPy
events, one ``Record`` per op). Each allocation counts towards the collector's thresholds,
and every so often a full collection walks all live container objects: on the unfolded
GPT-3 175B / 1,024-GPU step (about 1 M records) that was a fifth to a quarter of the run's CPU
time while it freed almost nothing (a few hundred cycles); ``experiments/profile_simulate.py
--keep-gc`` measures it. During a run almost nothing becomes
cyclic garbage (a few SimPy conditions), so the collector is paused for the run and restored
after it. Restoring it does not let the next collection walk what the run allocated: everything
that survived the pause is moved straight to the oldest generation (``gc.freeze`` then
``gc.unfreeze``), where it is walked only by a full collection, as if it had survived the young
ones. Those walked the whole result once (about 0.5 s of CPU on the unfolded 175B step, issue
17) and freed nothing: the engine and the network break their own reference cycles when a
run ends (``simulator.engine.core.run``, ``FlowNetwork.close``), so what a run leaves behind is
freed by reference counting as soon as the caller drops it. Results do not depend on it (the collector never changes
values), only the time.

The search's parent pauses it too while it enumerates the space (``simulator.search.run``):
``enumerate_space`` allocates hundreds of thousands of small objects (its schedules' stash
walks among them) and leaves almost no cycles; on the README's search the collector ran 414
times there (2 full collections) and the search's parent left 152 unreachable objects by its
first simulation (490 with the pause: freed by the next full collection);
``python experiments/profile_search_gc.py``. This module imports nothing of the simulator, so
the parent does not import the engine to use it.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block; restore its previous state
    (enabled or not) on the way out, also on an exception, with what the block allocated
    promoted to the oldest generation (see the module docstring). Nests: only the outermost
    block promotes and re-enables."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()         # every tracked object into the permanent generation ...
            gc.unfreeze()       # ... and back into the oldest one: no young collection walks it
            gc.enable()
