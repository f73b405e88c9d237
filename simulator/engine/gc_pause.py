"""``paused_gc`` where the engine has always imported it from; it lives in ``simulator.gc_pause``
(a module the search's parent process imports without the engine)."""
from simulator.gc_pause import paused_gc  # noqa: F401
