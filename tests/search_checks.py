"""Checks shared by the search tests: the pruned search finds what the exhaustive one finds."""
from __future__ import annotations


def assert_pruned_equals_exhaustive(cfg: dict) -> tuple[dict, dict]:
    """Run the search on ``cfg`` (``SearchConfig``'s fields) pruned and exhaustive: the
    exhaustive one simulates every feasible plan, the pruned one fewer, and both return the
    same plans in the same order with the same step times and the same recommendation.
    Returns ``(pruned, full)`` for further checks."""
    from simulator.search.run import SearchConfig, run_search
    pruned = run_search(SearchConfig(**cfg))
    full = run_search(SearchConfig(exhaustive=True, **cfg))
    assert full["evaluated"]["simulated"] == full["space"]["feasible"]
    assert pruned["evaluated"]["simulated"] < full["evaluated"]["simulated"]
    assert [p["key"] for p in pruned["plans"]] == [p["key"] for p in full["plans"]]
    assert [p["step_time_s"] for p in pruned["plans"]] == \
        [p["step_time_s"] for p in full["plans"]]
    assert pruned["recommended"]["key"] == full["recommended"]["key"]
    return pruned, full
