"""``bubble_fraction`` means one thing in ``estimate`` and ``simulate``: the busiest (bottleneck)
stage's bubble over the step (``strategies.estimate.terms.stages.bubble_share``). The
estimate's is its breakdown's ``bubble`` over its step, bit for bit; the simulation's is the
least of ``bubble_fraction_by_stage``, on the stage that computes the longest; the most idle
stage's is ``max_stage_bubble_fraction``. On a pipeline whose end stages carry the embedding
and the LM head the two views differ by tens of points (the middle stages wait for the end
ones), and the two paths' ``bubble_fraction`` agree within 1 % of the step, the bar the
project's analytic-vs-simulated step tests use (``rel=0.01``)."""
from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.extend import simulate_figures
from simulator.simulate import simulate, to_json
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.cluster.arg import parse_cluster_arg

#: end stages heavier (embedding on rank 0, LM head on the last, or a 4/8/8/4 split whose
#: middle stages are the heavier), under the schedules whose closed forms differ
PLANS = ["tp=2,pp=4,gbs=32", "tp=1,pp=8,gbs=64", "tp=2,pp=4,gbs=32,layers_per_stage=4/8/8/4",
         "tp=2,pp=4,gbs=32,schedule=interleaved,vpp=2", "tp=2,pp=4,gbs=32,schedule=zb-h1",
         "tp=2,pp=4,gbs=32,schedule=gpipe", "tp=2,pp=4,gbs=32,schedule=dualpipev"]


def _job(plan: str, nodes: int = 1):
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", nodes), parse_plan(plan))


@pytest.mark.parametrize("plan", PLANS)
def test_estimate_and_simulation_report_the_busiest_stages_bubble(plan):
    job = _job(plan)
    e, res = estimate(job), simulate(job)
    m = res.metrics
    # the estimate: its breakdown's bubble over its step, exactly
    assert e.bubble_fraction == e.breakdown_s["bubble"] / e.step_time_s
    # the simulation: the stage that computes the longest (least idle), the least bubble
    idle = m["idle_fraction_by_stage"]
    busiest = min(range(len(idle)), key=idle.__getitem__)
    assert m["bubble_fraction"] == m["bubble_fraction_by_stage"][busiest]
    assert m["bubble_fraction"] == min(m["bubble_fraction_by_stage"])
    assert m["max_stage_bubble_fraction"] == max(m["bubble_fraction_by_stage"])
    # the imbalance is there: the most idle stage waits far longer than the busiest ...
    assert m["max_stage_bubble_fraction"] - m["bubble_fraction"] > 0.15
    # ... and the two paths' figure agree within 1 % of the step
    assert e.bubble_fraction == pytest.approx(m["bubble_fraction"], abs=0.01)
    out = to_json(res, job)
    assert out["bubble_fraction"] == m["bubble_fraction"]
    assert out["max_stage_bubble_fraction"] == m["max_stage_bubble_fraction"]
    assert out["bubble_fraction_by_stage"] == m["bubble_fraction_by_stage"]


def test_a_critical_rank_off_the_busiest_stage_keeps_its_own_breakdown():
    """1F1B: rank 0 ends the step (the last backward runs down to it), the LM head's stage is
    the busiest. ``breakdown_s`` stays the critical rank's (it sums to the step there); its
    bubble is the stage-0 entry of ``bubble_fraction_by_stage``, not ``bubble_fraction``."""
    job = _job(PLANS[0])
    m = simulate(job).metrics
    assert m["critical_rank"] == 0
    assert m["breakdown_s"]["bubble"] / m["step_time_s"] == m["bubble_fraction_by_stage"][0]
    assert m["bubble_fraction"] == m["bubble_fraction_by_stage"][-1] < m["bubble_fraction_by_stage"][0]


def test_flushed_and_mixed_keep_the_one_rule():
    """Two flushes (``strategies.flushes``) and a mixed cluster (``mixed.synchronised_runs``)
    rebuild the step: the estimate's figure is still its breakdown's bubble over its step
    (two flushes: 12.5 %, where the least busy stage's view gave 32.0 %), and the flushed
    simulation keeps both stage views, in agreement with the estimate."""
    job = _job("tp=2,pp=4,gbs=32,flushes=2")
    e, m = estimate(job), simulate(job).metrics
    assert e.bubble_fraction == e.breakdown_s["bubble"] / e.step_time_s
    assert m["flushes"] == 2
    assert m["bubble_fraction"] == min(m["bubble_fraction_by_stage"])
    assert m["max_stage_bubble_fraction"] == max(m["bubble_fraction_by_stage"])
    assert e.bubble_fraction == pytest.approx(m["bubble_fraction"], abs=0.01)
    mixed = make_job(model_preset("gpt-1.7b"), parse_cluster_arg("dgx-h100:1+dgx-a100:1"),
                     parse_plan("tp=2,pp=2,gbs=32"))
    e = estimate(mixed)
    assert e.bubble_fraction == e.breakdown_s["bubble"] / e.step_time_s > 0


def test_search_figures_report_the_same_bubble():
    """A search row's figures (``extend.simulate_figures``, in full here) carry the
    simulation's ``bubble_fraction``."""
    job = _job(PLANS[0])
    assert simulate_figures(job, exact=True)["bubble_fraction"] == \
        simulate(job).metrics["bubble_fraction"]


def test_both_cli_lines_name_the_busiest_stage(capsys):
    args = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--plan", "tp=2,pp=4,gbs=32"]
    assert main(["estimate", *args]) == 0
    est = capsys.readouterr().out
    assert main(["simulate", *args]) == 0
    sim = capsys.readouterr().out
    line_e = next(x for x in est.splitlines() if x.startswith("bubble"))
    line_s = next(x for x in sim.splitlines() if x.startswith("bubble"))
    assert line_e.endswith("% of the step (busiest stage)")
    assert "(busiest stage; most idle stage " in line_s
    assert main(["simulate", *args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert f"{100 * d['bubble_fraction']:.1f} %" in line_s
    assert f"{100 * d['max_stage_bubble_fraction']:.1f} %)" in line_s
