"""Plan key ``param_gather_with_optimizer`` (Megatron-Core's
``--overlap-param-gather-with-optimizer-step``, docs/calibration.md §5.200, docs/cli.md): read
from plan text, YAML and ``--fix``, kept by the search's columns and keys, refused by field
where Megatron-LM or the stack cannot run it, written by ``--export megatron``."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import export
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.fix_parse import parse_fix
from strategies.search.fix_rules import fixed_contradictions
from strategies.search.plan_rows import columns_from_plans, plan_key, plan_of
from topologies.cluster import cluster_preset

SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
BASE = "tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2"


def _job(plan: str, framework: str | None = None):
    return make_job(SMALL, cluster_preset("dgx-h100", 4), parse_plan(plan), framework=framework)


def test_parse_alias_yaml_and_round_trip(tmp_path):
    """Off by default; the key and Megatron's long name read alike, from text and from a YAML
    plan file; the search's columns, rows and canonical key keep it (and leave it out off)."""
    assert parse_plan(BASE).param_gather_with_optimizer is False
    on = parse_plan(BASE + ",param_gather_with_optimizer=true")
    assert on.param_gather_with_optimizer is True
    assert parse_plan(BASE + ",overlap_param_gather_with_optimizer_step=true") == on
    f = tmp_path / "plan.yaml"
    f.write_text("".join(f"{k}: {v}\n" for k, v in (x.split("=") for x in BASE.split(",")))
                 + "overlap_param_gather_with_optimizer_step: true\n")
    assert parse_plan(str(f)) == on
    key = plan_key(on)
    assert "param_gather_with_optimizer=true" in key and parse_plan(key) == on
    assert "param_gather_with_optimizer" not in plan_key(parse_plan(BASE))
    cols = columns_from_plans([on, parse_plan(BASE)])
    assert cols["pgo"].tolist() == [True, False]
    assert plan_of(cols, 0) == on and plan_of(cols, 1) == parse_plan(BASE)
    assert PlanArrays.of_plan(on).param_gather_with_optimizer
    assert parse_fix("param_gather_with_optimizer=true") == {"param_gather_with_optimizer": True}


@pytest.mark.parametrize("plan, framework, words", [
    ("tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=0,sp=true,schedule=interleaved,vpp=2", None,
     "distributed optimizer, zero=1"),
    (BASE + ",overlap_param_gather=false", None, "needs overlap_param_gather=true"),
    ("tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=1f1b", None,
     "interleaved schedule, pp > 1 and vpp > 1"),
    ("tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=1f1b", "megatron-core",
     "interleaved schedule"),
    (BASE + ",flash_attn=false", "megatron-lm-2021",
     "megatron-lm-2021 has no parameter gathers inside the optimizer"),
])
def test_refused_by_field_value_and_rule(capsys, plan, framework, words):
    """Exit 2, one line, naming the field, its value and the rule: Megatron-LM's asserts
    (``arguments.py`` L622-630) with or without a stack named, and a stack without it."""
    plan += ",param_gather_with_optimizer=true"
    with pytest.raises(SpecError) as e:
        _job(plan, framework)
    assert e.value.field == "param_gather_with_optimizer" and words in e.value.rule
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:4", "--plan", plan]
              + (["--framework", framework] if framework else []))
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "param_gather_with_optimizer=True" in err and words in err


def test_fix_contradiction_refused_before_the_search():
    """A ``--fix`` no plan can carry the key with is refused naming the fields and the rule;
    torchtitan refuses the key itself."""
    bad = fixed_contradictions(None, {"param_gather_with_optimizer": True, "zero": 0})
    assert bad and bad[0][0] == {"param_gather_with_optimizer": True, "zero": 0}
    assert "distributed optimizer" in bad[0][1]
    assert fixed_contradictions(None, {"param_gather_with_optimizer": True, "tp": 2}) == []
    from strategies.framework import get_profile
    tt = fixed_contradictions(get_profile("torchtitan"), {"param_gather_with_optimizer": True})
    assert any("torchtitan has no parameter gathers" in why for _, why in tt)


def test_on_and_off_priced_and_the_search_prices_the_fixed_key(capsys):
    """The key moves the step of one plan (the §5.200 physics: estimate and simulation move
    by the same seconds, ``tests/test_param_gather_optimizer.py``); a search with ``--fix
    param_gather_with_optimizer=true`` proposes only plans that run it, and its analytic
    score of each is the estimate of its key."""
    off = _job(BASE)
    on = _job(BASE + ",param_gather_with_optimizer=true")
    assert estimate(on).step_time_s != estimate(off).step_time_s
    rc = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:4", "--global-batch",
               "64", "--fix", "param_gather_with_optimizer=true,tp=2", "--top", "2",
               "--workers", "1", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for row in out["plans"]:
        assert row["key"].endswith("param_gather_with_optimizer=true")
        p = parse_plan(row["key"])
        assert p.schedule == "interleaved" and p.vpp > 1 and p.zero == 1
        j = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 4), p)
        assert estimate(j).step_time_s == pytest.approx(row["analytic_step_time_s"],
                                                        rel=1e-12)


def test_export_writes_the_flag_and_other_stacks_refuse():
    """``--export megatron`` (megatron-core, nemo) writes the switch with what Megatron-LM
    asserts beside it; without it neither flag; DeepSpeed's and torchtitan's exporters refuse
    the plan by their stack's rules."""
    plan = BASE + ",param_gather_with_optimizer=true"
    for fw in (None, "nemo"):
        args, _ = export("megatron", _job(plan, fw))
        assert "--overlap-param-gather-with-optimizer-step" in args
        assert "--overlap-param-gather " in args + " " and "--ckpt-format torch" in args
        assert "--use-distributed-optimizer" in args
    args, _ = export("megatron", _job(BASE))
    assert "with-optimizer-step" not in args and "--ckpt-format torch" not in args
    for kind in ("deepspeed", "torchtitan"):
        with pytest.raises(SpecError) as e:
            export(kind, _job(plan))
        assert e.value.field == "--export"
