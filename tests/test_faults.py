"""Stragglers and degraded links (issue 16, item 2): the spec, the estimate, the simulation."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from simulator.studies.whatif_variants import parse_vary, variants
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.schedules.analysis import simulate_free_comm
from topologies.cluster import cluster_from_mapping, cluster_preset
from topologies.faults import Faults, faults_from_mapping
from topologies.graph import build_graph

MODEL = model_preset("gpt-1.7b")     # 24 layers


def _job(nodes=1, stragglers=(), degrade=(), **plan):
    cl = cluster_preset("dgx-a100", nodes).with_faults(Faults.from_texts(stragglers, degrade))
    return make_job(MODEL, cl, Plan(**plan))


# ------------------------------------------------------------------ the spec

def test_parse_and_round_trip():
    f = Faults.from_texts(["5=1.5", "2=3"], ["nic:9=2", "node:1=4", "0-nvswitch:0=2"])
    assert f.stragglers == ((2, 3.0), (5, 1.5))
    assert f.straggler_factor(5) == 1.5 and f.straggler_factor(0) == 1.0
    cl = cluster_preset("dgx-h100", 2).with_faults(f)
    assert cluster_from_mapping(cl.to_dict()).faults == f
    assert faults_from_mapping({"stragglers": ["2=3", "5=1.5"],
                                "degrade": {"nic:9": 2, "node:1": 4, "0-nvswitch:0": 2}}) == f
    assert not Faults.from_texts(["3=1"], []).merged(Faults())   # factor 1 is healthy


@pytest.mark.parametrize("stragglers,degrade,words", [
    (["8=1.5"], [], ["straggler=8", "no such GPU"]),
    (["3=0.5"], [], ["3=0.5", ">= 1"]),
    (["3=0"], [], ["3=0", "> 0"]),
    (["3=nan"], [], ["nan"]),
    ([], ["nic:8=2"], ["nic:8", "no such GPU"]),
    ([], ["nic:0=2"], ["single-node", "no NICs"]),
    ([], ["node:1=2"], ["node:1", "no such node"]),
    ([], ["0-nvswitch:1=2"], ["0-nvswitch:1", "no such link"]),
    ([], ["wire=2"], ["wire", "nic:G, node:N or A-B"]),
])
def test_bad_faults_are_refused(stragglers, degrade, words):
    with pytest.raises(SpecError) as e:
        cl = cluster_preset("dgx-a100", 1).with_faults(Faults.from_texts(stragglers, degrade))
        build_graph(cl)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("flag,value,words", [
    ("--straggler", "99=1.5", ["straggler=99", "no such GPU"]),
    ("--straggler", "3=0.9", [">= 1"]),
    ("--degrade", "node:7=2", ["node:7", "no such node"]),
    ("--degrade", "nic:3=-1", ["nic:3", "> 0"]),
])
def test_cli_exit_2(capsys, flag, value, words):
    argv = ["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan", "tp=2,gbs=16",
            flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(w in err for w in words), err


def test_yaml_faults_section(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("preset: dgx-a100\nnodes: 2\nfaults:\n"
                                     "  stragglers: {3: 2}\n  degrade: {\"nic:9\": 4}\n")
    assert main(["estimate", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "c.yaml"),
                 "--plan", "tp=2,gbs=16"]) == 0
    assert "GPU 3 computes x2 slower" in capsys.readouterr().out
    (tmp_path / "d.yaml").write_text("preset: dgx-a100\nfaults:\n  stragglers: {30: 2}\n")
    assert main(["estimate", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "d.yaml"),
                 "--plan", "tp=2,gbs=16"]) == 2
    assert "no such GPU" in capsys.readouterr().err


def test_graph_divides_the_bandwidth():
    cl = cluster_preset("dgx-h100", 2).with_faults(Faults.from_texts([], ["nic:9=4", "node:0=2"]))
    g = build_graph(cl)
    healthy = cl.inter_node_bandwidth
    assert g.edges[9, ("nic", 1, 1)]["bandwidth"] == healthy / 4
    assert g.edges[("nic", 1, 1), 9]["bandwidth"] == healthy / 4
    assert g.edges[8, ("nic", 1, 0)]["bandwidth"] == healthy
    assert g.edges[3, ("nvswitch", 0)]["bandwidth"] == cl.intra_node_bandwidth / 2
    assert g.edges[("nic", 0, 3), ("leaf", 3, 0)]["bandwidth"] == healthy / 2


# ------------------------------------------------------------------ pure data parallel

@pytest.mark.parametrize("f", [1.2, 1.5, 2.0])
def test_data_parallel_straggler_scales_the_compute(f):
    """One slow replica sets the step: it grows by (f - 1) x that rank's compute seconds, less
    the gradient reduction its longer backward now hides (a bucket launched inside the last
    layer's backward, §5.192, overlaps more of a slower attention backward): never more than
    (f - 1) x compute, never less than that minus the healthy step's exposed communication,
    and exactly (f - 1) x compute minus the exposed seconds the slower rank hid."""
    base, slow = _job(gbs=64), _job(stragglers=[f"3={f}"], gbs=64)
    compute = sum(op.seconds for op in compile_job(base, [3])[3].streams["compute"])
    r0, r1 = simulate(base), simulate(slow)
    grow, x0 = r1.step_time_s - r0.step_time_s, r0.metrics["exposed_comm_s"]
    assert (f - 1) * compute - x0 - 1e-12 <= grow <= (f - 1) * compute + 1e-12
    assert grow == pytest.approx((f - 1) * compute - (x0 - r1.metrics["exposed_comm_s"]),
                                 rel=1e-9)
    assert r1.metrics["critical_rank"] == 3
    # the estimate: its whole compute path (micro-batches and optimizer) scales by f
    e0, e1 = estimate(base), estimate(slow)
    b = e0.breakdown_s
    assert e1.step_time_s - e0.step_time_s == pytest.approx(
        (f - 1) * (b["compute"] + b["recompute"] + b["optimizer"]), rel=1e-9)
    assert e1.step_time_s == pytest.approx(r1.step_time_s, rel=0.05)


# ------------------------------------------------------------------ pipelines

def _balanced(job):
    return replace(stage_costs(job), embedding_fwd=0.0, embedding_bwd=0.0, head_fwd=0.0,
                   head_bwd=0.0, optimizer_by_stage=(0.0,) * job.plan.pp,
                   passes_by_stage=(0.0,) * job.plan.pp)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_pipeline_straggler_matches_the_stage_time_closed_form(schedule, stage):
    """Free communication, balanced stages, one stage slowed by f (GPU ``stage*dp*tp``)."""
    pp, dp, f, gbs = 4, 2, 1.5, 64
    base = _job(pp=pp, dp=dp, gbs=gbs, schedule=schedule)
    job = _job(pp=pp, dp=dp, gbs=gbs, schedule=schedule, stragglers=[f"{stage * dp}={f}"])
    costs = _balanced(base)
    res = simulate(job, free_comm=True, costs=costs)
    m, L = job.num_microbatches, MODEL.num_layers // pp
    t_f, t_b = L * costs.layer_fwd, L * (costs.layer_bwd + costs.layer_recompute)
    slow = [f if s == stage else 1.0 for s in range(pp)]
    assert res.step_time_s == pytest.approx(
        simulate_free_comm(schedule, pp, m, 1, t_f, t_b, slowdown=slow), rel=1e-9)
    # stage-time closed form: the slowest stage sets the steady state
    t = t_f + t_b
    flow = sum(slow) * t + (m - 1) * f * t
    if schedule == "gpipe":
        assert res.step_time_s == pytest.approx(flow, rel=1e-9)
    else:
        # 1F1B, in the regime where the slow stage is the bottleneck from its first backward
        # on (here f·t_f < t_f + t_b): its warm-up hides (pp - 1 - s) of its forwards, so the
        # flow-shop form (the estimate's) is an upper bound within a few per cent
        assert res.step_time_s == pytest.approx(flow - (pp - 1 - stage) * f * t_f, rel=1e-9)
        assert flow * 0.97 < res.step_time_s <= flow * (1 + 1e-12)


def test_pipeline_estimate_follows_the_slow_stage():
    base = _job(pp=4, dp=2, gbs=32)
    last = _job(pp=4, dp=2, gbs=32, stragglers=["6=1.5"])     # stage 3, with the LM head
    mid = _job(pp=4, dp=2, gbs=32, stragglers=["2=1.5"])      # stage 1
    both = _job(pp=4, dp=2, gbs=32, stragglers=["2=1.5", "3=1.2"])   # stage 1, twice
    e = [estimate(j).step_time_s for j in (base, mid, last, both)]
    assert e[0] < e[1] < e[2]
    assert e[3] == pytest.approx(e[1], rel=1e-12)           # the stage's worst GPU counts
    for j, est in ((mid, e[1]), (last, e[2])):
        assert est == pytest.approx(simulate(j).step_time_s, rel=0.06)


# ------------------------------------------------------------------ degraded links

def test_degraded_link_shows_in_the_link_utilisation():
    plan = dict(dp=16, gbs=32)
    base, bad = _job(nodes=2, **plan), _job(nodes=2, degrade=["nic:0=4"], **plan)
    r0, r1 = simulate(base), simulate(bad)
    assert r1.step_time_s > r0.step_time_s
    rows = r1.metrics["degraded_links"]
    assert {r["link"] for r in rows} == {"0->('nic', 0, 0)", "('nic', 0, 0)->0"}
    up = next(r for r in rows if r["link"] == "0->('nic', 0, 0)")
    assert up["factor"] == 4.0 and up["bytes"] > 0
    # the same bytes through a quarter of the bandwidth: the link is busier than when healthy
    healthy = r0.metrics["link_utilisation"]
    assert r0.metrics["degraded_links"] == []
    bw = build_graph(base.cluster).edges[0, ("nic", 0, 0)]["bandwidth"]
    before = up["bytes"] / (bw * r0.step_time_s)
    assert 0 < before < up["utilisation"] <= 1.0
    assert up["utilisation"] > 2 * before
    assert healthy and estimate(bad).step_time_s > estimate(base).step_time_s


def test_whatif_straggler_axis():
    vs = variants(MODEL, cluster_preset("dgx-a100", 1), 64, parse_vary(["straggler=1,1.2,1.5"]))
    assert [v.cluster.faults.straggler_factor(0) for v in vs] == [1.0, 1.2, 1.5]
    assert not vs[0].cluster.faults
    with pytest.raises(SpecError, match="straggler"):
        parse_vary(["straggler=0.5"])


@pytest.mark.slow
def test_search_and_simulate_json_carry_the_faults(capsys):
    # --max-mbs 1: 44 plans to simulate, not 168 (a straggler's search simulates them all)
    base = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16",
            "--fix", "pp=1,tp=2", "--max-mbs", "1", "--json"]
    assert main(["search", *base]) == 0
    healthy = json.loads(capsys.readouterr().out)
    assert main(["search", *base, "--straggler", "3=2"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert healthy["inputs"]["faults"] == {}
    assert slow["inputs"]["faults"] == {"stragglers": {"3": 2.0}}
    best = lambda r: r["plans"][0]["step_time_s"]  # noqa: E731
    assert best(slow) > best(healthy)
    assert main(["simulate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan",
                 "dp=16,gbs=32", "--degrade", "nic:0=4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["degraded_links"]) == 2 and out["folded"] is False


def test_the_healthy_bound_still_bounds_a_faulty_simulation():
    """The search is exact on a faulty cluster because faults only slow a step down: the
    lower bound (computed as for the healthy cluster) never beats the faulty simulation."""
    import numpy as np

    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.search.space import SpaceOptions, enumerate_space
    cl = cluster_preset("dgx-a100", 2).with_faults(
        Faults.from_texts(["5=1.5", "12=1.2"], ["nic:3=4", "8-nvswitch:1=2"]))
    sp = enumerate_space(MODEL, cl, 32, SpaceOptions(max_mbs=2, max_vpp=2,
                                                     memory_limit_bytes=float("inf")))
    bounds = step_time_lower_bound(MODEL, cl, "bf16", sp.cols)
    idx = np.random.default_rng(3).choice(sp.size, size=min(8, sp.size), replace=False)
    for i in idx.tolist():
        t = simulate(make_job(MODEL, cl, sp.plan(i))).step_time_s
        assert bounds[i] <= t, (sp.key(i), bounds[i], t)


# ------------------------------------------------------------------ sensitivity study

def test_sensitivity_tries_one_gpu_per_symmetry_class(capsys):
    from simulator.studies.sensitivity import sensitivity
    job = _job(nodes=2, tp=2, pp=2, gbs=32)
    rep = sensitivity(job, 1.5, 4.0)
    rows = rep["rows"]
    assert len(rows) == 3 * rep["classes"]          # straggler, NVLink, NIC per class
    stragglers = [r for r in rows if r["kind"] == "straggler"]
    assert sum(r["stands_for"] for r in stragglers) == 16
    assert rows == sorted(rows, key=lambda r: (-r["slowdown"], r["fault"]))
    worst = rows[0]
    assert worst["kind"] == "straggler" and worst["slowdown"] > 0
    # the symmetry is exact: another GPU of the worst one's class costs the same
    from simulator.fold import fold_spec
    twin = next(g for g in fold_spec(job).rank_map()[worst["gpu"]] if g != worst["gpu"])
    again = simulate(_job(nodes=2, tp=2, pp=2, gbs=32, stragglers=[f"{twin}=1.5"]))
    assert again.step_time_s == pytest.approx(worst["step_time_s"], rel=1e-9)
    assert main(["sensitivity", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan",
                 "tp=2,pp=2,gbs=32", "--link-factor", "0"]) == 2
    assert "--link-factor" in capsys.readouterr().err


def test_stage_time_closed_form_over_random_slow_stages():
    """Several slow stages at once, free communication: GPipe's makespan is the stage-time
    closed form Σ_s t_s + (m − 1)·max_s t_s exactly, 1F1B's is at most that form."""
    import random
    rng = random.Random(5)
    for _ in range(300):
        p, m = rng.randint(2, 8), rng.randint(1, 32)
        t_f, t_b = rng.uniform(0.2, 2.0), rng.uniform(0.2, 4.0)
        slow = [rng.choice([1.0, 1.0, rng.uniform(1.0, 4.0)]) for _ in range(p)]
        ts = [x * (t_f + t_b) for x in slow]
        flow = sum(ts) + (m - 1) * max(ts)
        assert simulate_free_comm("gpipe", p, m, 1, t_f, t_b, slowdown=slow) == \
            pytest.approx(flow, rel=1e-9)
        assert simulate_free_comm("1f1b", p, m, 1, t_f, t_b, slowdown=slow) <= flow * (1 + 1e-12)
