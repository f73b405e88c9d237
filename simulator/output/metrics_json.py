"""What the simulator computes beyond the step time, as JSON: link utilisation and
activation memory over time (``simulate --json``'s ``link_utilisation`` and
``activation_memory``). Bytes, seconds, utilisation as a fraction of a link's line rate.
"""
from __future__ import annotations

from typing import Any

from simulator.metrics import step_peak
from simulator.output.flush_view import all_flushes
from simulator.result import SimResult


def link_utilisation_json(result: SimResult) -> dict[str, Any]:
    """``busiest``: the top links by bytes (``link``, ``kind``, ``bytes``, ``utilisation`` over
    the step, and with link series ``peak_utilisation``, ``peak_at_s``, ``series`` as
    ``[[t, fraction], …]`` steps, over every pipeline flush, ``flush_view``); ``by_kind``: per
    link class (``metrics.link_classes``)."""
    m = all_flushes(result).metrics
    series = m.get("link_series", {})
    rows = []
    for row in m["link_utilisation"]:
        row = dict(row)
        s = series.get(row["link"])
        if s is not None:
            row["peak_utilisation"], row["peak_at_s"] = step_peak(s["utilisation"])
            row["series"] = [[t, u] for t, u in s["utilisation"]]
        rows.append(row)
    return {"busiest": rows, "by_kind": m.get("link_classes", {})}


def activation_memory_json(result: SimResult, job) -> list[dict[str, Any]]:
    """Per simulated rank: ``rank``, ``stage``, ``ranks_represented``, ``stash_peak_bytes``
    and ``peak_at_s`` (the stashed activations' peak and when it is first reached),
    ``transient_bytes`` (held one micro-batch at a time on top), ``peak_bytes`` (their sum,
    which is ``memory_by_stage``'s activations for the stage) and ``series`` (``[[t, bytes],
    …]`` of the stash, steps, over every pipeline flush, ``flush_view``)."""
    from strategies.memory.activations import transient_activation_bytes
    result = all_flushes(result)
    stage_of = {r.rank: r.stage for r in result.records}
    out = []
    for rank, series in sorted(result.metrics["activation_memory"].items()):
        stage = stage_of.get(rank, 0)
        peak, at = step_peak(series)
        transient = transient_activation_bytes(job, stage)
        out.append({"rank": rank, "stage": stage,
                    "ranks_represented": len(result.rank_map.get(rank, [rank])),
                    "stash_peak_bytes": peak, "peak_at_s": at, "transient_bytes": transient,
                    "peak_bytes": peak + transient, "series": [[t, b] for t, b in series]})
    return out
