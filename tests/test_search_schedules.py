"""``--schedules all``: the search enumerates the zero-bubble family and DualPipe(V) (with the
chunk counts they are planned with), a named stack keeps only what it runs, the bound stays
below the simulation on their plans and the pruned search equals the exhaustive one."""
from __future__ import annotations

import collections

import pytest

from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.presets import model_preset
from strategies.schedules import get_schedule, schedule_of_code, schedules
from strategies.search.axes import solved_per_job
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset
from tests.search_checks import assert_pruned_equals_exhaustive

NEW = ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev")
FIX = {"tp": 1, "recompute": "none", "zero": 1, "mbs": 1}


def _space(schedules: str, framework=None, fixed=FIX):
    return enumerate_space(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1), 32,
                           SpaceOptions(max_mbs=1, max_vpp=2, schedules=schedules,
                                        fixed=dict(fixed)), framework=framework)


def _names(sp) -> collections.Counter:
    return collections.Counter(schedule_of_code(int(c)).name for c in sp.cols["sched"])


def test_default_leaves_them_out_and_all_adds_them_with_their_chunks():
    default, every = _space("default"), _space("all")
    assert not set(_names(default)) & set(NEW)
    assert set(NEW) <= set(_names(every))
    # schedules whose order is solved per job (ZB-1p/ZB-2p's heuristic) stay out of "all"
    solved = {sc.name for sc in schedules() if solved_per_job(sc)}
    assert {"zb-1p", "zb-2p"} <= solved and not solved & set(NEW)
    assert not solved & set(_names(every))
    # the default space is the "all" space's restriction to the default schedules, row for row
    keep = [i for i in range(every.size) if schedule_of_code(int(every.cols["sched"][i])).name
            not in NEW]
    assert sorted(every.key(i) for i in keep) == sorted(default.key(i)
                                                        for i in range(default.size))
    for i in range(every.size):
        name = schedule_of_code(int(every.cols["sched"][i])).name
        if name in NEW:   # the chunks each is planned with: a V and DualPipeV 2, else 1
            assert int(every.cols["vpp"][i]) == (2 if name in ("zb-v", "dualpipev") else 1)
    # the counts still add up with the larger raw space
    assert every.raw == every.size + sum(every.pruned.values())
    assert every.raw > default.raw


def test_a_named_stack_keeps_only_the_schedules_it_runs():
    sp = _space("all", framework=get_profile("hai-llm"), fixed={"tp": 1, "recompute": "none", "mbs": 1})
    got = {n for n in _names(sp) if n != "1f1b"}      # pp = 1 plans are 1F1B for any stack
    assert got and got <= {"zb-h1", "dualpipe"}
    assert {"zb-h1", "dualpipe"} <= got
    assert sp.pruned["framework"] > 0


def test_unknown_schedule_set_is_refused_naming_the_field():
    with pytest.raises(SpecError) as e:
        _space("zb")
    assert "--schedules" in str(e.value) and "zb" in str(e.value)


@pytest.mark.slow
def test_bound_below_simulation_on_the_new_schedules():
    from simulator.simulate import simulate
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1)
    sp = _space("all")
    bounds = step_time_lower_bound(m, cl, "bf16", sp.arrays)
    seen = set()
    for i in range(sp.size):
        plan = sp.plan(i)
        if plan.schedule not in NEW or plan.pp < 2 or (plan.schedule, plan.pp) in seen:
            continue
        seen.add((plan.schedule, plan.pp))
        t = simulate(make_job(m, cl, plan)).step_time_s
        assert bounds[i] <= t, (sp.key(i), bounds[i], t)
        assert bounds[i] > 0.5 * t, (sp.key(i), bounds[i], t)
    assert {s for s, _ in seen} == set(NEW)


@pytest.mark.slow
def test_pruned_search_equals_exhaustive_with_every_schedule():
    cfg = dict(model=model_preset("gpt-1.7b"), cluster=cluster_preset("dgx-a100", 1), gbs=32,
               options=SpaceOptions(max_mbs=1, max_vpp=2, schedules="all", fixed=dict(FIX)),
               workers=1, k=5, references=())
    pruned, _ = assert_pruned_equals_exhaustive(cfg)
    assert pruned["inputs"]["schedules"] == "all"
    assert get_schedule  # the registry the space reads


def test_cli_refuses_an_unknown_schedule_set(capsys):
    from simulator.cli.main import main
    rc = main(["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--schedules", "zb"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--schedules" in err and "'zb'" in err and "all" in err and "Traceback" not in err


def test_cli_search_with_every_schedule_reports_the_set(capsys):
    import json

    from simulator.cli.main import main
    rc = main(["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch",
               "32", "--max-mbs", "1", "--max-vpp", "2", "--workers", "1", "--reference",
               "none", "--fix", "tp=1,pp=2,recompute=none,zero=1,schedule=zb-v", "--schedules",
               "all", "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["inputs"]["schedules"] == "all"
    assert {p["plan"]["schedule"] for p in rep["plans"]} == {"zb-v"}
