"""The trace, timeline and JSON series of a step of several pipeline flushes show all of
them (``simulator.output.flush_view``, docs/calibration.md §5.46)."""
from __future__ import annotations

import pytest

from simulator.output.chrome_trace import to_chrome_trace
from simulator.output.flush_view import all_flushes, flush_period_s
from simulator.output.metrics_json import activation_memory_json
from simulator.simulate import simulate
from tests.test_simulate import _job


def _span_us(trace: dict) -> tuple[float, float]:
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    return min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)


@pytest.mark.parametrize("sched,pp,vpp,gbs,k", [
    ("1f1b", 2, 1, 32, 2), ("1f1b", 4, 1, 32, 4), ("interleaved", 2, 2, 32, 2)])
def test_trace_spans_the_reported_step(sched, pp, vpp, gbs, k):
    """k flushes, each the simulated flush shifted by P = T_1 − t_opt, the optimizer in the
    last only: the events span the composed step time ``k·P + t_opt``; every flush's
    forwards are there with their own micro-batch numbers, the optimizer once per rank."""
    job = _job(tp=2, pp=pp, vpp=vpp, schedule=sched, gbs=gbs, flushes=k)
    res = simulate(job)
    one = simulate(_job(tp=2, pp=pp, vpp=vpp, schedule=sched, gbs=gbs // k))
    trace = to_chrome_trace(res)
    start, end = _span_us(trace)
    assert start == pytest.approx(0.0, abs=1e-3)
    assert end == pytest.approx(res.step_time_s * 1e6, abs=2e-3)     # ns-rounded times
    info = trace["otherData"]["metrics"]
    assert info["flushes"] == k
    assert info["flush_period_s"] == pytest.approx(
        one.step_time_s - one.metrics["breakdown_s"]["optimizer"], rel=1e-12)
    full = all_flushes(res)
    fwd = [r for r in full.records if r.kind == "forward"]
    assert len(fwd) == k * sum(r.kind == "forward" for r in res.records)
    m = job.num_microbatches // k
    assert {r.microbatch for r in fwd} == set(range(k * m))
    opt = [r for r in full.records if r.kind == "optimizer"]
    assert len(opt) == sum(r.kind == "optimizer" for r in res.records)
    assert min(r.start for r in opt) >= (k - 1) * flush_period_s(res)
    assert all_flushes(full) is full                 # laid out once
    # the JSON's activation series cover every flush: the stash returns to k peaks
    mem = activation_memory_json(res, job)
    assert max(t for row in mem for t, _ in row["series"]) > (k - 1) * flush_period_s(res)


def test_one_flush_is_left_as_it_is():
    res = simulate(_job(tp=2, pp=2, gbs=16))
    assert all_flushes(res) is res
    assert "flush_period_s" not in to_chrome_trace(res)["otherData"]["metrics"]


def test_timeline_draws_every_flush(tmp_path):
    """``draw_timeline`` lays the flushes out too (with the memory panel, which reads the
    series)."""
    pytest.importorskip("matplotlib")
    from simulator.output.timeline import draw_timeline
    res = simulate(_job(tp=2, pp=2, gbs=32, flushes=2))
    path = tmp_path / "t.svg"
    draw_timeline(res, path, detail=("memory",))
    assert path.stat().st_size > 0
    assert res.metrics.get("flush_period_s") is None      # the result itself is not changed
