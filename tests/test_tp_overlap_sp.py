"""TP communication overlap without sequence parallelism, as the stacks' code runs it: the
stacks' default overlap only with tp > 1 and sp (``plan.parse.tp_overlap_default``); an explicit
overlap with tp > 1 and sp off refused by Megatron-Core (Megatron-LM's ``arguments.py``
asserts ``--sequence-parallel``) and turned off by NeMo (``MegatronCommOverlapCallback``,
Megatron-Bridge's ``CommOverlapConfig``); and ``--fix`` values no plan can run refused before
the search, naming the fields, their values and the rule (``search.fix_rules``)."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.job import make_job
from strategies.plan import Plan, parse_plan, plan_from_mapping, plan_mapping
from strategies.plan_arrays import PlanArrays
from strategies.plan_file import plan_to_mapping
from strategies.presets import model_preset
from strategies.search.fix_rules import fixed_contradictions
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.stacks.megatron import MEGATRON_CORE, NEMO
from strategies.stacks.rules import plan_violations, stack_tp_overlap
from topologies.cluster import cluster_preset

BASE = "tp=8,mbs=1,gbs=16,zero=1"


@pytest.mark.parametrize("fw", [MEGATRON_CORE, NEMO])
def test_default_overlap_only_with_tp_and_sp(fw) -> None:
    d = fw.plan_defaults()
    assert d["tp_comm_overlap"] is True
    assert plan_from_mapping(plan_mapping(BASE + ",sp=true"), d).tp_comm_overlap is True
    assert plan_from_mapping(plan_mapping(BASE + ",sp=false"), d).tp_comm_overlap is False
    assert plan_from_mapping(plan_mapping("tp=1,mbs=1"), d).tp_comm_overlap is False
    # a plan that names the switch keeps it
    given = plan_from_mapping(plan_mapping(BASE + ",tp_comm_overlap=true"), d)
    assert given.tp_comm_overlap is True and given.sp is False
    # written without the switch where it equals that default, read back equal
    for text in (BASE + ",sp=false", BASE + ",sp=true", BASE + ",sp=true,tp_comm_overlap=false"):
        p = replace(plan_from_mapping(plan_mapping(text), d), dp=1)
        m = plan_to_mapping(p, d)
        assert ("tp_comm_overlap" in m) is text.endswith("tp_comm_overlap=false")
        assert plan_from_mapping(m, d) == p
        assert plan_from_mapping(plan_mapping(plan_key(p, d)), d) == p


def test_megatron_core_refuses_overlap_without_sp() -> None:
    bad = parse_plan(BASE + ",sp=false,tp_comm_overlap=true")
    (field, value, why), = plan_violations(MEGATRON_CORE, bad)
    assert (field, value) == ("tp_comm_overlap", True)
    assert "sp=true" in why and "arguments.py" in why and "megatron-core" in why
    assert plan_violations(MEGATRON_CORE, replace(bad, sp=True)) == []
    assert plan_violations(MEGATRON_CORE, replace(bad, tp=1)) == []
    # NeMo turns it off instead of refusing
    assert plan_violations(NEMO, bad) == []


def test_cli_refuses_megatron_core_overlap_without_sp(capsys) -> None:
    from simulator.cli.main import main
    argv = ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--framework"]
    assert main([*argv, "megatron-core", "--plan", BASE + ",sp=false,tp_comm_overlap=true"]) == 2
    err = capsys.readouterr().err
    assert "tp_comm_overlap=True" in err and "megatron-core" in err and "sp=true" in err
    assert "Traceback" not in err
    assert main([*argv, "megatron-core", "--plan", BASE + ",sp=false"]) == 0
    assert main([*argv, "nemo", "--plan", BASE + ",sp=false,tp_comm_overlap=true"]) == 0


def _step(fw, text: str) -> tuple[bool, float, float]:
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), parse_plan(text),
                   framework=fw)
    r = estimate_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan), fw)
    return job.plan.tp_comm_overlap, float(r["layer_comm_s"]), float(np.ravel(r["step_time_s"])[0])


def test_nemo_runs_it_off_and_prices_it_so() -> None:
    on, comm_on, step_on = _step(NEMO, BASE + ",sp=false,tp_comm_overlap=true")
    off, comm_off, step_off = _step(NEMO, BASE + ",sp=false,tp_comm_overlap=false")
    assert on is False and off is False
    assert (comm_on, step_on) == (comm_off, step_off)       # bit for bit: the same plan
    # with sp the overlap runs and hides TP communication
    sp_on, comm_sp_on, _ = _step(NEMO, BASE + ",sp=true,tp_comm_overlap=true")
    sp_off, comm_sp_off, _ = _step(NEMO, BASE + ",sp=true,tp_comm_overlap=false")
    assert sp_on is True and sp_off is False and comm_sp_on < comm_sp_off
    # the one rule, on arrays too (the search's columns)
    got = stack_tp_overlap(NEMO, np.array([1, 8, 8]), np.array([False, False, True]),
                           np.array([True, True, True]))
    assert got.tolist() == [True, False, True]
    assert stack_tp_overlap(MEGATRON_CORE, 8, False, True) is True    # refused, not resolved


@pytest.mark.parametrize("fw", [MEGATRON_CORE, NEMO])
def test_search_keeps_sp_off_plans_without_the_overlap(fw) -> None:
    sp = enumerate_space(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), 64,
                         SpaceOptions(fixed={"tp": 8}), framework=fw)
    c = sp.cols
    assert c["sp"].any() and (~c["sp"]).any()          # sp=false plans are not pruned
    assert (c["tpo"] == c["sp"]).all()                  # overlap exactly where sp (tp = 8)
    for i in (int(np.argmax(c["sp"])), int(np.argmax(~c["sp"]))):
        p = sp.plan(i)
        assert "tp_comm_overlap" not in sp.key(i)
        assert plan_from_mapping(plan_mapping(sp.key(i)), fw.plan_defaults()) == p


def test_fixed_contradictions_name_fields_and_rule() -> None:
    got = fixed_contradictions(None, {"delay_wgrad": True, "ep_overlap": False})
    assert got == [({"delay_wgrad": True, "ep_overlap": False},
                    got[0][1])] and "needs ep_overlap=true" in got[0][1]
    # a fixed field the rule does not need is not named
    got = fixed_contradictions(MEGATRON_CORE, {"delay_wgrad": True, "ep_overlap": False,
                                               "mbs": 2})
    assert [g for g, _ in got] == [{"delay_wgrad": True, "ep_overlap": False}]
    got = fixed_contradictions(MEGATRON_CORE, {"tp": 4, "sp": False, "tp_comm_overlap": True})
    assert [g for g, _ in got] == [{"tp_comm_overlap": True, "sp": False, "tp": 4}]
    assert fixed_contradictions(NEMO, {"tp": 4, "sp": False, "tp_comm_overlap": True}) == []
    # values some plan runs are not refused: ep_overlap alone (ep and the schedule free)
    assert fixed_contradictions(MEGATRON_CORE, {"ep_overlap": True}) == []
    assert fixed_contradictions(MEGATRON_CORE, {"ep_overlap": True, "ep": 8, "pp": 4,
                                                "schedule": "interleaved"}) == []
    got = fixed_contradictions(MEGATRON_CORE, {"ep_overlap": True, "ep": 1})
    assert [g for g, _ in got] == [{"ep_overlap": True, "ep": 1}]


@pytest.mark.parametrize("extra,want", [
    ([], ["delay_wgrad=true", "ep_overlap=false", "needs ep_overlap=true"]),
    (["--framework", "megatron-core"], ["delay_wgrad=true", "ep_overlap=false"]),
])
def test_search_refuses_contradictory_fix_up_front(capsys, extra, want) -> None:
    from simulator.cli.main import main
    rc = main(["search", "--model", "mixtral-8x7b", "--cluster", "dgx-h100:8", *extra,
               "--fix", "delay_wgrad=true,ep_overlap=false"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "no plan passes" not in err
    assert "--fix" in err and all(w in err for w in want)


def test_search_refuses_megatron_core_fixed_overlap_without_sp(capsys) -> None:
    from simulator.cli.main import main
    rc = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--framework",
               "megatron-core", "--fix", "tp=8,sp=false,tp_comm_overlap=true"])
    err = capsys.readouterr().err
    assert rc == 2 and "tp_comm_overlap=true" in err and "sp=false" in err
    assert "tp=8" in err and "arguments.py" in err


def test_bad_profile_field_is_refused() -> None:
    with pytest.raises(SpecError, match="framework.tp_overlap_without_sp"):
        replace(NEMO, tp_overlap_without_sp="ignored")
    assert MEGATRON_CORE.tp_overlap_without_sp == "refused"
    assert NEMO.tp_overlap_without_sp == "disabled"
    assert Plan().tp_comm_overlap is False
