"""Everything the simulator computes is shown (issue 17, item 2): link utilisation and
activation memory over time in the ``simulate`` JSON, as Perfetto counter tracks and as
timeline panels, agreeing with ``SimResult.metrics`` and with the closed forms behind them."""
from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.metrics import step_integral, step_peak
from simulator.network.cluster_net import LINK_KINDS, edge_efficiency
from simulator.output.chrome_trace import link_counter_name, memory_counter_name, to_chrome_trace
from simulator.output.metrics_json import activation_memory_json, link_utilisation_json
from simulator.output.timeline import DETAILS, _colour, check_detail, draw_timeline
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import GIB

PLANS = {
    "1f1b-2nodes": ("gpt-1.7b", 2, Plan(tp=2, pp=2, dp=4, gbs=32)),
    "interleaved": ("gpt-1.7b", 2, Plan(tp=2, pp=4, dp=2, gbs=32, schedule="interleaved",
                                        vpp=3)),
    "gpipe-full-rc": ("gpt-1.7b", 2, Plan(tp=2, pp=4, dp=2, gbs=32, schedule="gpipe",
                                          recompute="full")),
    "dp-across-nodes": ("gpt-1.7b", 4, Plan(tp=4, dp=8, gbs=32, zero=1)),
    # tensor parallelism alone on its links: collectives timed in closed form
    "closed-form-tp": ("gpt-1.7b", 2, Plan(tp=8, dp=2, gbs=16)),
}


def _job(name: str):
    model, nodes, plan = PLANS[name]
    return make_job(model_preset(model), cluster_preset("dgx-a100", nodes), plan)


@pytest.fixture(scope="module", params=sorted(PLANS))
def run(request):
    job = _job(request.param)
    return job, simulate(job, link_series=True)


def test_recording_changes_nothing(run):
    job, res = run
    plain = simulate(job)
    assert plain.step_time_s == res.step_time_s and plain.records == res.records
    assert plain.metrics["link_utilisation"] == res.metrics["link_utilisation"]
    assert "link_series" not in plain.metrics


def test_link_series_integrate_to_the_link_bytes(run):
    """Each kept link's utilisation × line rate, integrated over the run, is the bytes it
    carried (``utilisation`` is those bytes over line rate × step: parameter all-gathers
    may run past the step's end, overlapping the next forward); its peak never exceeds the
    achievable share (the capacity the flows are given: line rate × NCCL efficiency)."""
    job, res = run
    m = res.metrics
    step, end = res.step_time_s, m["engine_end_s"]
    assert m["link_series"], "no link carried bytes"
    by_name = {r["link"]: r for r in m["link_utilisation"]}
    for row in link_utilisation_json(res)["busiest"]:
        s = m["link_series"][row["link"]]["utilisation"]
        assert row["series"] == [[t, u] for t, u in s]
        assert step_integral(s, end) == pytest.approx(row["utilisation"] * step, rel=1e-12)
        assert s[-1] == (s[-1][0], 0.0) and s[-1][0] <= end
        assert row["utilisation"] == by_name[row["link"]]["utilisation"]
    kinds = {v["kind"] for v in m["link_series"].values()}
    assert kinds <= set(LINK_KINDS)
    for name, v in m["link_series"].items():
        peak, at = step_peak(v["utilisation"])
        eff = 0.8 if v["kind"] == "nvlink" else 0.9
        assert 0 < peak <= eff * (1 + 1e-9), (name, peak)
        assert 0 <= at <= end
        assert all(u >= 0 for _, u in v["utilisation"])


def test_link_classes_summarise_the_links(run):
    _, res = run
    m = res.metrics
    step = res.step_time_s
    for kind, c in m["link_classes"].items():
        rows = c["busiest"]
        assert rows and c["links"] >= len(rows)
        assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
        assert c["peak_utilisation"] == max(r["peak_utilisation"] for r in rows)
        for r in rows:
            s = m["link_series"][r["link"]]
            assert s["kind"] == kind
            assert (r["peak_utilisation"], r["peak_at_s"]) == step_peak(s["utilisation"])
        assert 0 < c["mean_utilisation"] <= c["peak_utilisation"]
        assert c["bytes"] >= sum(r["bytes"] for r in rows)
        assert c["mean_utilisation"] * step > 0


def test_links_that_carry_traffic_on_two_nodes():
    job = _job("dp-across-nodes")
    res = simulate(job, link_series=True)
    assert {"nvlink", "nic", "fabric"} <= set(res.metrics["link_classes"])


def test_activation_peaks_equal_memory_by_stage(run):
    """The peak of each rank's series plus the transient equals ``memory_by_stage``'s
    activations of its stage, to floating-point precision."""
    job, res = run
    stages = memory_by_stage(job)
    rows = activation_memory_json(res, job)
    assert {r["rank"] for r in rows} == set(res.simulated_ranks)
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-12)
        series = res.metrics["activation_memory"][r["rank"]]
        assert (r["stash_peak_bytes"], r["peak_at_s"]) == step_peak(series)
        assert r["series"][0] == [0.0, 0.0]           # empty at the start and at the end
        assert r["series"][-1][1] == pytest.approx(0.0, abs=1e-12 * r["stash_peak_bytes"])
        assert r["ranks_represented"] == len(res.rank_map.get(r["rank"], [r["rank"]]))


def test_trace_counter_tracks_agree_with_the_json(run):
    job, res = run
    trace = to_chrome_trace(res, job.cluster.gpus_per_node)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    by_name: dict[str, list] = {}
    for e in counters:
        by_name.setdefault(e["name"], []).append(e)
    for r in activation_memory_json(res, job):
        evs = by_name.pop(memory_counter_name(r["rank"]))
        assert {e["pid"] for e in evs} == {r["rank"] // job.cluster.gpus_per_node}
        assert max(e["args"]["GiB"] for e in evs) == r["stash_peak_bytes"] / GIB
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts) and len(ts) == len(set(ts))
    nodes = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    for row in link_utilisation_json(res)["busiest"]:
        evs = by_name.pop(link_counter_name(row["link"], row["kind"]))
        assert max(e["args"]["%"] for e in evs) == pytest.approx(100 * row["peak_utilisation"],
                                                                 rel=1e-12)
        assert {e["pid"] for e in evs}.isdisjoint(nodes)
    assert all(n.endswith("utilisation (%)") for n in by_name)   # the per-class extras
    names = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert any(e["args"]["name"].startswith("links") for e in names)


def test_trace_without_series_has_memory_counters_only():
    job = _job("1f1b-2nodes")
    trace = to_chrome_trace(simulate(job), job.cluster.gpus_per_node)
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert names and all(n.startswith("activation memory") for n in names)


def test_simulate_json_shows_links_and_memory(tmp_path, capsys):
    rc = main(["simulate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan",
               "tp=2,pp=2,gbs=32", "--json", "--trace", str(tmp_path / "t.json")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    lu, am = out["link_utilisation"], out["activation_memory"]
    assert set(lu) == {"busiest", "by_kind"} and len(lu["busiest"]) == 10
    for row in lu["busiest"]:
        assert set(row) >= {"link", "kind", "bytes", "utilisation", "peak_utilisation",
                            "peak_at_s", "series"}
    assert set(lu["by_kind"]) <= set(LINK_KINDS)
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                   Plan(tp=2, pp=2, gbs=32))
    stages = memory_by_stage(job)
    assert [r["peak_bytes"] for r in am] == pytest.approx(
        [stages[r["stage"]].activations for r in am], rel=1e-12)
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e["ph"] == "C" and e["name"].startswith("nvlink") for e in trace["traceEvents"])


def test_timeline_detail_panels(tmp_path):
    job = _job("interleaved")
    res = simulate(job, link_series=True)
    path = tmp_path / "t.svg"
    draw_timeline(res, path, detail=["memory", "links", "comm"])
    svg = path.read_text()
    for text in ("activation", "utilisation", "rank 0 (s0)", "pp-comm"):
        assert text in svg, text
    plain = tmp_path / "p.svg"
    draw_timeline(res, plain)
    assert "utilisation" not in plain.read_text()
    with pytest.raises(ValueError, match="valid: memory, links, comm"):
        check_detail(["memory", "bogus"])
    assert check_detail([" Memory", "links"]) == ("memory", "links")
    with pytest.raises(ValueError, match="given twice"):
        check_detail([" Memory", "memory", "links"])
    assert set(DETAILS) == {"memory", "links", "comm"}


@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 7, 12, 24])
def test_chunk_colours_stay_distinct(chunks):
    for kind in ("forward", "backward", "unknown-kind"):
        assert len({_colour(kind, c, chunks) for c in range(chunks)}) == chunks


def test_link_class_efficiencies_are_the_cost_models():
    assert edge_efficiency(0, ("nvswitch", 0)) == 0.8
    assert edge_efficiency(("nic", 0, 0), ("leaf", 0, 0)) == 0.9


def test_contention_free_runs_show_bytes_without_series(capsys):
    rc = main(["simulate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan",
               "tp=2,pp=2,gbs=32", "--json", "--network", "contention-free"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    lu = out["link_utilisation"]
    assert lu["by_kind"] == {} and lu["busiest"]
    assert all("series" not in r and r["bytes"] > 0 for r in lu["busiest"])
    assert out["activation_memory"]
