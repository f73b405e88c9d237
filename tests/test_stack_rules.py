"""Stack limits: one rule list (``rules.stack_rules``) read for one plan and as a mask."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.profile_fields import LAYOUT_WAYS
from strategies.stacks.rules import plan_view, plan_violations, stack_mask, stack_rules
from strategies.plan import Plan, plan_from_mapping, plan_mapping
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset



def _plans():
    out = []
    for tp, pp, z, rc, s, sp, cp, fa, tpo in itertools.product(
            (1, 2), (1, 2), (0, 1, 2, 3), ("none", "full", "op"),
            ("1f1b", "interleaved", "gpipe"), (False, True), (1, 2), (False, True),
            (False, True)):
        try:
            out.append(Plan(tp=tp, pp=pp, dp=2, mbs=1, gbs=64, zero=z, recompute=rc, schedule=s,
                            sp=sp, cp=cp, flash_attn=fa, tp_comm_overlap=tpo,
                            vpp=2 if s == "interleaved" else 1))
        except SpecError:
            pass        # a plan no stack may hold (e.g. interleaving without a pipeline)
    return out


PLANS = _plans()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROFILES))
def test_mask_and_scalar_read_the_same_rules(name):
    fw = PROFILES[name]
    arrays = PlanArrays.from_plans(PLANS)
    mask = stack_mask(fw, arrays)
    scalar = np.array([not plan_violations(fw, p) for p in PLANS])
    assert (mask == scalar).all()
    assert 0 < mask.sum() < len(PLANS)
    # rule by rule, not only the conjunction (each plan's scalar rules read once, not per rule)
    per_plan = [stack_rules(fw, plan_view(p)) for p in PLANS]
    for k, (field, _, ok, _) in enumerate(stack_rules(fw, arrays)):
        one = [bool(rules[k][2]) for rules in per_plan]
        assert (np.broadcast_to(ok, (len(PLANS),)) == np.array(one)).all(), field


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_refusal_names_the_stack_field_and_value(name):
    fw = PROFILES[name]
    for p in PLANS:
        for field, value, rule in plan_violations(fw, p):
            assert rule.startswith(fw.name + " ")
            assert value == getattr(p, field)


def test_no_stack_named_runs_everything():
    assert stack_mask(None, PlanArrays.from_plans(PLANS)).all()


# --- pipeline layouts (``FrameworkProfile.layouts``, ``rules.layout_rules``) -----------

LAYOUT_PLANS = [Plan(tp=1, pp=2, dp=2, mbs=1, gbs=64, **kw) for kw in (
    {}, {"first_stage_layers": 10, "last_stage_layers": 14}, {"first_stage_layers": 10},
    {"last_stage_layers": 14}, {"account_embedding": True, "account_loss": True})]


@pytest.mark.parametrize("name", list(PROFILES))
def test_layout_rules_mask_and_scalar_agree(name):
    """The search's columns (first/last counts, both slots) and one plan read the same
    layout rules, rule by rule."""
    fw = PROFILES[name]
    arrays = PlanArrays.from_plans(LAYOUT_PLANS)
    scalar = np.array([not plan_violations(fw, p) for p in LAYOUT_PLANS])
    assert (stack_mask(fw, arrays) == scalar).all()
    for k, (field, _, ok, _) in enumerate(stack_rules(fw, arrays)):
        one = [bool(stack_rules(fw, plan_view(p))[k][2]) for p in LAYOUT_PLANS]
        assert (np.broadcast_to(ok, (len(LAYOUT_PLANS),)) == np.array(one)).all(), field


@pytest.mark.parametrize("name", list(PROFILES))
def test_each_stack_takes_exactly_its_layout_ways(name):
    fw = PROFILES[name]
    by_way = {"string": Plan(tp=1, pp=2, dp=2, gbs=64, layout="Et*12|t*12L"),
              "first_last": LAYOUT_PLANS[1], "slots": LAYOUT_PLANS[-1],
              "per_stage": Plan(tp=1, pp=2, dp=2, gbs=64, layers_per_stage=(10, 14))}
    assert set(by_way) == set(LAYOUT_WAYS)
    for way, plan in by_way.items():
        bad = [f for f, _, _ in plan_violations(fw, plan)
               if f in ("layout", "first_stage_layers", "last_stage_layers",
                        "account_embedding", "account_loss", "layers_per_stage")]
        assert bool(bad) == (way not in fw.layouts), (way, bad)


def test_layout_ways_of_the_stacks():
    """What the sources say (framework module docstring, docs/layout.md): Megatron-Core all
    three; DeepSpeed's partition_method the slots only (type:transformer|embedding);
    torchtitan's module_fqns_per_model_part all three; MaxText none."""
    assert PROFILES["megatron-core"].layouts == LAYOUT_WAYS
    assert PROFILES["nemo"].layouts == LAYOUT_WAYS
    assert PROFILES["megatron-deepspeed"].layouts == ("slots",)
    assert PROFILES["torchtitan"].layouts == LAYOUT_WAYS
    assert PROFILES["jax-xla"].layouts == ()
    with pytest.raises(SpecError, match="framework.layouts"):
        replace(PROFILES["megatron-core"], layouts=("ragged",))


def test_search_never_proposes_a_layout_the_stack_cannot_take():
    """A 30-layer model (the search proposes first/last counts and slots): the named
    stack's space keeps only the layouts the stack takes."""
    m = replace(model_preset("llama3-8b"), num_layers=30, name="llama3-8b (30 layers)")
    cl = cluster_preset("dgx-h100", 2)
    counts = {}
    for name in ("megatron-core", "megatron-deepspeed", "torchtitan", "jax-xla"):
        fw = PROFILES[name]
        c = enumerate_space(m, cl, 16, SpaceOptions(max_vpp=2), framework=fw).cols
        fl, acc = int(np.sum((c["lf"] > 0) | (c["ll"] > 0))), int(np.sum(c["acc"]))
        counts[name] = (fl, acc)
        assert (fl > 0) == ("first_last" in fw.layouts), name
        assert (acc > 0) == ("slots" in fw.layouts), name
    assert counts["megatron-deepspeed"][1] > 0 and counts["torchtitan"][0] > 0


def test_cli_refuses_a_layout_the_stack_cannot_take(capsys):
    from simulator.cli.main import main
    argv = ["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--framework",
            "megatron-deepspeed", "--plan"]
    assert main([*argv, "pp=2,first_stage_layers=10,last_stage_layers=14,gbs=16"]) == 2
    err = capsys.readouterr().err
    assert "first_stage_layers=10" in err and "megatron-deepspeed" in err
    assert "partition_method" in err and "Traceback" not in err
    assert main([*argv, "pp=2,layout=Et*12|t*12L,gbs=16"]) == 2
    err = capsys.readouterr().err
    assert "layout=" in err and "Megatron pipeline layout string" in err
    assert main([*argv, "pp=2,account_embedding=true,account_loss=true,gbs=16"]) == 0


def test_deepspeed_export_follows_the_layout_rules():
    """--export deepspeed: the slots as partition_method's regex; a layout DeepSpeed's
    partition cannot give is refused with the stack's rule."""
    from strategies.job import make_job
    from strategies.export.deepspeed import deepspeed_config
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1)
    job = make_job(m, cl, Plan(tp=1, pp=2, dp=4, mbs=1, gbs=16, zero=1,
                               account_embedding=True, account_loss=True))
    _, notes = deepspeed_config(job)
    assert any("type:transformer|" in n for n in notes)
    bad = make_job(m, cl, Plan(tp=1, pp=2, dp=4, mbs=1, gbs=16, zero=1,
                               first_stage_layers=10, last_stage_layers=14))
    with pytest.raises(SpecError, match="first_stage_layers=10.*partition_method"):
        deepspeed_config(bad)


def test_megatron_deepspeed_export_gives_megatron_tp_with_pipelining():
    """--framework megatron-deepspeed --export deepspeed on BLOOM's plan (tp 4, pp 12, ZeRO-1,
    full recomputation): Megatron's tensor parallelism as pretrain_gpt.py arguments beside
    the config, no AutoTP key; with no stack named the same plan is DeepSpeed's AutoTP, which
    its pipeline engine does not take, and the refusal names the stack that runs it."""
    import json
    from strategies.job import make_job
    from strategies.export.deepspeed import deepspeed_config
    m, cl = model_preset("bloom-176b"), cluster_preset("dgx-a100", 48)
    plan = Plan(tp=4, pp=12, dp=8, mbs=2, gbs=2048, zero=1, recompute="full", flash_attn=False,
                account_embedding=True, account_loss=True)   # 70 layers + 2 slots over 12
    text, notes = deepspeed_config(make_job(m, cl, plan, framework="megatron-deepspeed"))
    cfg = json.loads(text)
    assert "tensor_parallel" not in cfg and cfg["zero_optimization"]["stage"] == 1
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["train_batch_size"] == 2048
    (line,) = [n for n in notes if n.startswith("Megatron-DeepSpeed")]
    for arg in ("--nnodes 48", "--tensor-model-parallel-size 4",
                "--pipeline-model-parallel-size 12", "--micro-batch-size 2",
                "--global-batch-size 2048", "--bf16", "--recompute-num-layers 1",
                "--deepspeed-activation-checkpointing", "--deepspeed_config ds_config.json",
                "--zero-stage 1"):
        assert arg in line, arg
    assert "--no-pipeline-parallel" not in line
    assert not any("PipelineModule(..., num_stages" in n for n in notes)
    z3 = replace(plan, pp=1, dp=96, gbs=1920, zero=3, recompute="none", account_embedding=False,
                 account_loss=False)   # ZeRO-3: DeepSpeed's plain engine, not the pipeline
    _, notes = deepspeed_config(make_job(m, cl, z3, framework="megatron-deepspeed"))
    assert any("--no-pipeline-parallel" in n and "--zero-stage 3" in n for n in notes)
    with pytest.raises(SpecError, match="AutoTP does not combine.*--framework megatron-"
                                        "deepspeed.*use --export megatron"):
        deepspeed_config(make_job(m, cl, plan))


@pytest.mark.slow
def test_mixed_cluster_search_gives_per_rank_counts_only_where_the_stack_can():
    """On a mixed cluster the search sizes stages to their GPUs (``layers_per_stage``): under
    torchtitan (module_fqns_per_model_part) such variants are offered, under
    megatron-deepspeed (partition_method) none is."""
    from simulator.search.run import SearchConfig, run_search
    from topologies.cluster import parse_cluster_arg
    cl = parse_cluster_arg("dgx-h100:1+dgx-a100:1")
    keys = {}
    for name in ("megatron-deepspeed", "torchtitan"):
        rep = run_search(SearchConfig(model=model_preset("gpt-1.7b"), cluster=cl, gbs=16,
                                      framework=PROFILES[name], workers=1))
        keys[name] = [p["key"] for p in rep["uneven"]["plans"]]
        for p in rep["uneven"]["plans"]:
            plan = plan_from_mapping(plan_mapping(p["key"]), PROFILES[name].plan_defaults())
            assert not plan_violations(PROFILES[name], plan)
    assert not any("layers_per_stage" in k for k in keys["megatron-deepspeed"])
    assert any("layers_per_stage" in k for k in keys["torchtitan"])


def test_member_is_isin_on_one_value_and_on_columns():
    """``validity.member``: the rules' one membership test gives ``np.isin``'s answer on a
    plan's single values (Python ints, numpy scalars, 0-d arrays) and on the search's columns,
    empty and repeated allowed sets included."""
    from strategies.schedules.validity import member
    cols = np.array([0, 1, 2, 3, 3, 7])
    for allowed in ([], [3], (1, 3), [0, 7, 7], range(2, 5)):
        assert np.array_equal(member(cols, allowed), np.isin(cols, list(allowed)))
        for v in (0, 3, np.int64(7), np.array(2), np.int32(5)):
            got = member(v, allowed)
            assert np.ndim(got) == 0 and bool(got) == bool(np.isin(v, list(allowed)))
