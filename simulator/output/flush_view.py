"""A step of several pipeline flushes as the trace and the timeline show it.

``simulate`` runs one flush of a job with ``flushes = k > 1`` and composes the step
(``strategies.flushes``: ``T(k) = k·(T_1 − t_opt) + t_opt``); its ``records`` and series are
that one flush's. ``all_flushes`` lays out the step the composition prices: flush ``j``
(0-based) is the simulated flush shifted by ``j·P``, ``P = T_1 − t_opt`` (the flush period:
one flush less the critical rank's optimizer, ``metrics["breakdown_s"]["optimizer"]``), with
its ``optimizer`` records only in the last flush; micro-batch ``i`` of flush ``j`` becomes
``j·m + i`` (``m`` micro-batches per flush). The span of the records is then
``(k − 1)·P + T_1 = T(k)``, the reported step time. The activation-memory and link series
repeat the same way. ``metrics["flush_period_s"]`` states ``P``; ``metrics["flushes"]``
stays ``k``.

It is a picture of the composition, not a second simulation: each flush is the same
flush, and a rank whose optimizer is shorter than the critical rank's shows the next flush
starting when the critical rank's would.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.result import Record, SimResult
# the breakdown parts, and so the record kinds, that run once per optimizer step
from strategies.flushes import ONCE_PER_STEP


def flush_period_s(result: SimResult) -> float:
    """Seconds between the starts of two flushes: one flush's step less its optimizer.

    Reads the composed metrics (``step_time_s = k·P + t_opt``)."""
    k = int(result.metrics.get("flushes", 1))
    once = sum(float(result.metrics.get("breakdown_s", {}).get(p, 0.0)) for p in ONCE_PER_STEP)
    return (float(result.step_time_s) - once) / k


def _series(series: list[tuple[float, Any]], k: int, period: float) -> list[tuple[float, Any]]:
    return [(t + j * period, v) for j in range(k) for t, v in series]


def all_flushes(result: SimResult) -> SimResult:
    """``result`` with the records and series of all its flushes (module docstring); a
    result of one flush, or one already laid out (``flush_period_s`` set), is returned as
    it is."""
    k = int(result.metrics.get("flushes", 1))
    if k <= 1 or "flush_period_s" in result.metrics:
        return result
    period = flush_period_s(result)
    m = 1 + max([r.microbatch for r in result.records] + [-1])
    records: list[Record] = []
    for j in range(k):
        shift = j * period
        last = j == k - 1
        records += [r._replace(start=r.start + shift, end=r.end + shift,
                               microbatch=r.microbatch + j * m if r.microbatch >= 0 else -1)
                    for r in result.records if last or r.kind not in ONCE_PER_STEP]
    metrics = dict(result.metrics, flush_period_s=period)
    if "activation_memory" in metrics:
        metrics["activation_memory"] = {rank: _series(s, k, period)
                                        for rank, s in metrics["activation_memory"].items()}
    if metrics.get("link_series"):
        metrics["link_series"] = {
            link: dict(s, utilisation=_series(s["utilisation"], k, period))
            for link, s in metrics["link_series"].items()}
    return replace(result, records=records, metrics=metrics)
