"""One simulation per distinct plan key in a search (``simulator.search.results_file.Cached``):
a reference plan that is also a candidate the search needs, started early on a pool or
backfilled, is simulated once, and the report is the same as simulating it twice."""
from __future__ import annotations

import collections
import json

import pytest

import simulator.search.executors as executors
import simulator.search.run as run
from simulator.search.results_file import Cached, ResultsLog
from simulator.search.run import SearchConfig, run_search
from strategies.presets import model_preset
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions
from topologies.cluster import cluster_preset

MODEL, CLUSTER = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1)
OPTIONS = SpaceOptions(max_mbs=2, max_vpp=2)
#: the search's fastest plan (a candidate it needs) and a plan of its space it does not need
BEST = "tp=1,pp=1,dp=8,cp=1,ep=1,mbs=2,gbs=32,schedule=1f1b,vpp=1,recompute=none,sp=false,zero=1"
OTHER = "tp=2,pp=1,dp=4,cp=1,ep=1,mbs=1,gbs=32,schedule=1f1b,vpp=1,recompute=full,sp=false,zero=0"


def _config(**kw) -> SearchConfig:
    from strategies.plan import parse_plan
    refs = [("best", parse_plan(BEST)), ("other", parse_plan(OTHER))]
    return SearchConfig(model=MODEL, cluster=CLUSTER, gbs=32, k=2, options=OPTIONS,
                        references=refs, **kw)


def _strip(rep: dict) -> dict:
    return {k: v for k, v in rep.items() if k not in ("wall_s", "execution")}


def test_a_reference_plan_the_search_needs_is_simulated_once(monkeypatch) -> None:
    """In one process (``InProcess`` calls ``executors.evaluate``): every simulated plan
    once, the reference rows' figures those of the search's rows of the same plan."""
    calls: collections.Counter = collections.Counter()
    evaluate = executors.evaluate

    def counted(model, cluster, dtype, framework, system, exact, plan):
        calls[plan_key(plan)] += 1
        return evaluate(model, cluster, dtype, framework, system, exact, plan)
    monkeypatch.setattr(executors, "evaluate", counted)
    rep = run_search(_config(workers=1))
    assert rep["plans"][0]["key"] == BEST            # the reference is a needed candidate
    assert {BEST, OTHER} <= set(calls)
    assert max(calls.values()) == 1, calls           # was 2 for BEST
    assert rep["execution"]["simulations_run"] == sum(calls.values())
    ref = {r["key"]: r for r in rep["references"]}
    for k in ("step_time_s", "breakdown_s", "events", "bubble_fraction"):
        assert ref[BEST][k] == rep["plans"][0][k]
    assert ref[BEST]["vs_best"] == 0.0


def test_a_pool_simulates_each_plan_once_and_reports_the_same(monkeypatch) -> None:
    """Two workers (the reference plans start before the scoring): no plan reaches the pool
    twice (counted where the pool is handed each plan), and the report is the one process's
    (the ``execution`` block and wall time aside)."""
    sent: collections.Counter = collections.Counter()
    make = run.make_executor

    def counting(backend, workers, ctx, plan_of, ray_address=None):
        def plan(i):
            p = plan_of(i)
            sent[plan_key(p)] += 1
            return p
        return make(backend, workers, ctx, plan, ray_address)
    monkeypatch.setattr(run, "make_executor", counting)
    pool = run_search(_config(workers=2))
    assert BEST in sent and max(sent.values()) == 1, sent
    assert pool["execution"]["simulations_run"] == sum(sent.values())
    assert _strip(pool) == _strip(run_search(_config(workers=1)))


def test_the_results_file_holds_each_plan_once(tmp_path) -> None:
    path = tmp_path / "results.jsonl"
    rep = run_search(_config(workers=1, results=str(path)))
    keys = [json.loads(ln)["key"] for ln in path.read_text().splitlines()]
    assert BEST in keys and len(keys) == len(set(keys)) == rep["execution"]["simulations_run"]
    again = run_search(_config(workers=1, results=str(path), resume=True))
    # BEST's line serves both its row and the reference
    assert again["execution"] == {**rep["execution"], "simulations_run": 0,
                                  "reused_from_results": len(keys) + 1}
    assert _strip(again) == _strip(rep)


class _Fake:
    """One worker: ``submit`` queues, ``wait`` finishes the oldest (result: its index)."""

    capacity = 1

    def __init__(self) -> None:
        self.todo: list[int] = []
        self.submitted: list[int] = []
        self.results: dict[int, dict] = {}

    def submit(self, i: int) -> None:
        self.todo.append(i)
        self.submitted.append(i)

    def wait(self):
        i = self.todo.pop(0)
        self.results[i] = {"step_time_s": float(i)}
        return [(i, float(i))]

    def close(self, abort: bool = False) -> None:
        pass


@pytest.mark.parametrize("with_log", [False, True])
def test_cached_runs_one_simulation_per_key(tmp_path, with_log: bool) -> None:
    """Indices 1, 2 and 3 share a key: 2 waits for 1's simulation (in flight), 3 is served
    from memory once it is done; the results file gets one line for the key."""
    log = ResultsLog(str(tmp_path / "r.jsonl"), "ctx", False) if with_log else None
    inner = _Fake()
    ex = Cached(inner, {1: "a", 2: "a", 3: "a", 4: "b"}.__getitem__, log)
    ex.submit(1)
    ex.submit(2)
    ex.submit(4)
    assert inner.submitted == [1, 4]
    assert ex.wait() == [(1, 1.0), (2, 1.0)]
    assert ex.results[2] is ex.results[1]
    ex.submit(3)
    assert ex.wait() == [(3, 1.0)]                  # served at once, before 4 finishes
    assert ex.wait() == [(4, 4.0)]
    assert inner.submitted == [1, 4]
    assert (ex.simulated, ex.shared, ex.reused) == (2, 2, 0)
    ex.close()
    if with_log:
        lines = (tmp_path / "r.jsonl").read_text().splitlines()
        assert [json.loads(ln)["key"] for ln in lines] == ["a", "b"]
