"""The search with simulation: executors (in process, local pool, Ray), the resumable
results log, and the orchestration from plan space to report (``run``)."""
from simulator.search.run import SearchConfig, run_search

__all__ = ["SearchConfig", "run_search"]
