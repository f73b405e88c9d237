"""The search's affine extension (issue 17, item 1): every figure the search reports, derived
from two short runs, equals the full simulation (simulator/extend.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.extend import (SAVING, affine, base, can_extend,
                              extended_step_time, how, period, simulate_figures,
                              with_microbatches)
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

CASES = [
    ("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=64"),
    ("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=80,schedule=interleaved,vpp=3"),
    ("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=160,schedule=interleaved,vpp=2,microbatch_group_size=8"),
    ("gpt-1.7b", 2, "tp=1,pp=8,dp=2,gbs=128,zero=1"),
    ("gpt-1.7b", 2, "tp=1,pp=4,dp=4,gbs=128,zero=1,recompute=full"),
    ("gpt-1.7b", 2, "tp=2,pp=2,dp=4,gbs=64,recompute=selective"),
    ("llama3-8b", 4, "tp=4,pp=2,dp=4,gbs=256,schedule=interleaved,vpp=4,sp=true"),
    ("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=96,schedule=deepspeed-1f1b"),
    ("gpt-1.7b", 2, "tp=1,pp=8,dp=2,gbs=192,schedule=deepspeed-1f1b"),
]
REL = 1e-11      # of the step time: rounding of the extension (measured <= 4e-13)


def _job(model: str, nodes: int, plan: str):
    return make_job(model_preset(model), cluster_preset("dgx-a100", nodes), parse_plan(plan))


@pytest.mark.parametrize("case", CASES, ids=[c[2] for c in CASES])
def test_extension_equals_full_simulation_for_every_figure(case):
    job = _job(*case)
    assert can_extend(job)
    ext, full = simulate_figures(job), simulate_figures(job, exact=True)
    assert ext["method"].startswith("extended from") and full["method"] == "full"
    assert set(ext) == set(full)
    step = full["step_time_s"]
    for k in ("step_time_s", "exposed_comm_s", "overlapped_comm_s", "bubble_fraction"):
        assert ext[k] == pytest.approx(full[k], rel=REL, abs=REL * step), k
    assert set(ext["breakdown_s"]) == set(full["breakdown_s"])
    for k, v in full["breakdown_s"].items():
        assert ext["breakdown_s"][k] == pytest.approx(v, abs=REL * step), k
    # the engine's event count merges ends that fall at one instant (simulator.engine.core);
    # with Megatron-Core's overlapped pipeline calls (docs/calibration.md §5.68) the
    # interleaved pp 4 v 3 plan's count is affine to 2 of 16,850 events (which ends share an
    # instant is not traced); every time and figure above stays exact
    assert abs(ext["events"] - full["events"]) <= 2e-4 * full["events"]
    assert sum(ext["breakdown_s"].values()) == pytest.approx(ext["step_time_s"], rel=1e-12)


def test_the_short_runs_are_what_the_method_says():
    job = _job("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=80,schedule=interleaved,vpp=3")
    m, g = job.num_microbatches, period(job)
    assert (m, g, base(job), base(job, figures=False)) == (40, 4, 2, 1)
    assert how(job) == "extended from m=8 and m=12 (of 40)"
    assert how(job, figures=False) == "extended from m=4 and m=8 (of 40)"
    for k in (2, 3):
        short = with_microbatches(job, k * g)
        assert short.num_microbatches == k * g and short.plan.dp == job.plan.dp
    one = _job("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=64")
    assert how(one) == "extended from m=4 and m=8 (of 32)"


def test_the_interleaved_breakdown_needs_the_later_base():
    """Why interleaved's ``figures_affine_from`` is 2: from g and 2g the step time is exact but its
    split is not (the m = g run has no steady state)."""
    job = _job("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=64,schedule=interleaved,vpp=3")
    m, g = job.num_microbatches, period(job)
    a, b = (simulate(with_microbatches(job, k * g)) for k in (1, 2))
    full = simulate(job)
    assert affine(a.step_time_s, b.step_time_s, m, g) == pytest.approx(full.step_time_s,
                                                                        rel=1e-12)
    split = affine(a.metrics["exposed_comm_s"], b.metrics["exposed_comm_s"], m, g)
    assert abs(split - full.metrics["exposed_comm_s"]) > 1e-6 * full.step_time_s
    from strategies.schedules import get_schedule, schedule_names
    assert {n: get_schedule(n).figures_affine_from for n in schedule_names()
            if get_schedule(n).figures_affine_from is not None} == \
        {"1f1b": 1, "interleaved": 2, "deepspeed-1f1b": 1}


@pytest.mark.parametrize("plan,why", [
    ("tp=2,pp=4,dp=2,gbs=64,schedule=gpipe", "no steady state"),
    ("tp=8,dp=2,gbs=64", "no pipeline"),
    ("tp=2,pp=4,dp=2,gbs=40", "m < SAVING * 3g"),
    ("tp=2,pp=4,dp=2,gbs=36", "m not a multiple of g"),
    ("tp=2,pp=4,dp=2,gbs=72,schedule=interleaved,vpp=3", "m < SAVING * 5g"),
])
def test_what_is_simulated_in_full(plan, why):
    job = _job("gpt-1.7b", 2, plan)
    assert not can_extend(job), why
    fig = simulate_figures(job)
    assert fig["method"] == "full"
    assert fig["step_time_s"] == simulate(job).step_time_s


def test_affine_is_exact_on_lines_and_takes_arrays():
    for b in (1, 2):
        for m, g in ((12, 4), (96, 8)):
            y = lambda n: 3.5 + 0.25 * n
            assert affine(y(b * g), y((b + 1) * g), m, g, b) == pytest.approx(y(m), rel=1e-15)
    arr = affine(np.array([1.0, 2.0]), np.array([2.0, 4.0]), 12, 4)
    assert arr.tolist() == [3.0, 6.0]              # y(4), y(8) -> y(12) on y = n/4, n/2
    assert SAVING == 2


def test_validate_extends_the_step_time_the_same_way():
    job = _job("gpt-1.7b", 2, "tp=2,pp=4,dp=2,gbs=64,schedule=interleaved,vpp=3")
    step, method = extended_step_time(job)
    assert method == how(job, figures=False)
    assert step == pytest.approx(simulate(job).step_time_s, rel=1e-12)


def test_a_search_reports_the_same_figures_extended_or_exact(capsys):
    """The search's JSON with the extension equals ``--exact`` for every figure it reports."""
    argv = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--global-batch",
            "128", "--fix", "pp=4", "--max-mbs", "1", "--top", "4", "--workers", "1",
            "--json", "--reference", "none"]
    assert main(argv) == 0
    ext = json.loads(capsys.readouterr().out)
    assert main(argv + ["--exact"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert ext["evaluated"]["extended"] > 0 and full["evaluated"]["extended"] == 0
    assert [p["key"] for p in ext["plans"]] == [p["key"] for p in full["plans"]]
    assert ext["recommended"]["key"] == full["recommended"]["key"]
    for a, b in zip(ext["plans"] + [ext["recommended"]], full["plans"] + [full["recommended"]]):
        step = b["step_time_s"]
        for k in ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "exposed_comm_s",
                  "overlapped_comm_s"):
            assert a[k] == pytest.approx(b[k], rel=REL, abs=REL * step), k
        for k, v in b["breakdown_s"].items():
            assert a["breakdown_s"][k] == pytest.approx(v, abs=REL * step), k
        # the event count is engine bookkeeping, not physics: equal-time events coalesce
        # differently in the short runs of an uneven layout (1F1B 6/4 on gpt-1.7b: 631, 793,
        # 953, 1113 events at m = 4, 8, 12, 16 with one entry per op; 320, 410, 498, 586 with
        # entries shared by replicas and compute runs, issue 17: the m = 4 run 2 entries off
        # the line either way, 10 entries at m = 32, 1.1 % of the smaller count), so its
        # extension is near, not exact
        assert a["events"] == pytest.approx(b["events"], rel=0.02)


def test_interleaved_uneven_layouts_are_simulated_in_full():
    """An interleaved pipeline whose ranks hold unequal layer counts drifts for many periods
    before it settles, so two short runs do not give its step (here 1.2 % short): it is
    simulated in full; so is the heavier last stage (which here does not drift); the even
    split is still extended. (At tp 2, dp 4 the same layout drifted 1.3 % until the attention
    grid of §5.130 changed the stages' balance; at tp 1, dp 8 it drifts.)"""
    import simulator.extend as ext
    plan = "tp=1,pp=2,dp=8,gbs=256,schedule=interleaved,vpp=2,first_stage_layers=14," \
        "last_stage_layers=10"
    job = _job("gpt-1.7b", 2, plan)
    assert ext.uneven_chunks(job) and not can_extend(job)
    fig = simulate_figures(job)
    assert fig["method"] == "full" and fig["step_time_s"] == simulate(job).step_time_s
    m, g, b = job.num_microbatches, period(job), base(job)
    short = [simulate(with_microbatches(job, k * g)).step_time_s for k in (b, b + 1)]
    assert affine(*short, m, g, b) < (1 - 1e-3) * fig["step_time_s"]     # why: 2.1605 vs 2.1874
    assert not can_extend(_job("gpt-1.7b", 2, "tp=2,pp=2,dp=4,gbs=256,schedule=interleaved,"
                                              "vpp=2,first_stage_layers=10,last_stage_layers=14"))
    assert not ext.uneven_chunks(_job("gpt-1.7b", 2, "tp=2,pp=2,dp=4,gbs=256,"
                                      "schedule=interleaved,vpp=2"))
