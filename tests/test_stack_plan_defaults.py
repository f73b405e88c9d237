"""A named stack fills the plan fields a plan leaves out with what the stack runs by default
(``strategies.stacks.plan_defaults``), states each, and refuses only what the plan gives."""
import json
from dataclasses import replace

import pytest

from strategies.errors import SpecError
from strategies.framework import PROFILES, get_profile
from strategies.plan import Plan, plan_mapping
from strategies.stacks.plan_defaults import (StackFieldDefaults, given_fields,
                                             plan_with_stack_defaults)
from strategies.stacks.rules import plan_violations

# (stack, plan text, GPUs, the fields filled {field: value}, a word of each source)
CASES = [
    ("torchtitan", "tp=2,pp=1", 16, {"zero": 3, "sp": True, "recompute": "op"}, "configs.py:133"),
    ("torchtitan", "tp=2,pp=2", 16, {"zero": 2, "sp": True, "recompute": "op"}, "fsdp.py:128-131"),
    ("torchtitan", "tp=1,pp=2", 16, {"zero": 2, "recompute": "op"}, "not pp_enabled"),
    ("torchtitan", "tp=8,pp=1", 8, {"sp": True, "recompute": "op"}, "configs.py:169"),      # dp 1: no FSDP
    ("torchtitan", "tp=1,pp=1,cp=2", 2, {"zero": 3, "recompute": "op"}, "configs.py:133"),  # FSDP over cp
    ("torchtitan", "tp=1,pp=1", 1, {"recompute": "op"}, "SelectiveAC.Config"),
    ("torchtitan-compile", "tp=2,pp=2", 16, {"zero": 2, "sp": True, "recompute": "op"},
     ":145 fsdp_reshard_after_forward"),
    ("pytorch-eager", "tp=1,pp=1", 16, {"zero": 3}, "mpt-7b.yaml:92"),
    ("jax-xla", "tp=1,pp=1", 16, {"zero": 3, "recompute": "full"}, "base.yml:674"),
    ("jax-xla", "tp=1,pp=2", 16, {"recompute": "full", "schedule": "gpipe"}, "base.yml:358"),
    ("megatron-deepspeed", "tp=2,pp=2", 16, {"zero": 1, "recompute": "full"}, "README.md:305"),
    ("nemo", "tp=2,pp=2", 16, {"zero": 1}, "adam.py:44"),
    ("hai-llm", "tp=1,pp=2", 16, {"zero": 1}, "DeepSeek-V3 report"),
    ("hai-llm", "tp=1,pp=2,ep=8", 16, {"zero": 1, "moe_dispatcher": "deepep"}, "report §3.2"),
    ("automodel", "tp=1,pp=1", 16, {"zero": 3}, "reshard_after_forward=not pp_enabled"),
    ("automodel", "tp=1,pp=2", 16, {"zero": 2}, "apply_fsdp"),
    ("automodel", "tp=1,pp=1", 1, {"zero": 3}, "apply_fsdp"),   # no ZeRO-0 on this stack
    ("megatron-core", "tp=2,pp=2", 16, {}, ""),
    ("megatron-lm-2021", "tp=2,pp=2", 16, {}, ""),
]


@pytest.mark.parametrize("stack,text,gpus,filled,source", CASES)
def test_a_field_left_out_takes_the_stacks_default_stated(stack, text, gpus, filled, source):
    fw = get_profile(stack)
    plan, fills = plan_with_stack_defaults(plan_mapping(text), fw, gpus)
    assert {f.field: f.value for f in fills} == filled
    for f in fills:
        assert getattr(plan, f.field) == f.value and f.why.startswith(stack)
    assert not fills or source in fills[0].why
    if "sp" in filled:
        assert "configs.py:169 enable_sequence_parallel=True" in {f.field: f.why
                                                                  for f in fills}["sp"]
    for field in ("zero", "sp", "schedule", "recompute", "moe_dispatcher"):
        if field not in filled:
            assert getattr(plan, field) == getattr(Plan(), field)


# (stack, the recompute it fills where the plan names none, a word of its source)
RECOMPUTE = [
    ("torchtitan", "op", "trainer.py:108-110 activation_checkpoint default_factory=SelectiveAC"),
    ("torchtitan-compile", "op", "activation_checkpoint.py:185 SelectiveAC"),
    ("jax-xla", "full", "base.yml:358 remat_policy: 'full'"),
    ("megatron-deepspeed", "full", "README.md:289 --checkpoint-activations"),
    ("pytorch-eager", "none", ""), ("nemo", "none", ""), ("megatron-core", "none", ""),
    ("megatron-lm-2021", "none", ""), ("hai-llm", "none", ""), ("automodel", "none", ""),
]


@pytest.mark.parametrize("stack,value,source", RECOMPUTE)
def test_recompute_left_out_takes_the_stacks_default_and_a_given_one_is_kept(stack, value,
                                                                             source):
    fw = get_profile(stack)
    plan, fills = plan_with_stack_defaults(plan_mapping("tp=1,pp=1,dp=4"), fw)
    assert plan.recompute == value and plan.recompute_layers is None
    rc = [f for f in fills if f.field == "recompute"]
    if value == "none":
        assert rc == []
    else:
        assert [f.value for f in rc] == [value] and rc[0].why == f"{stack}'s default: " \
            f"{fw.field_defaults.recompute_source}" and source in rc[0].why
        assert rc[0].text().startswith(f"recompute={value}: {stack}'s default: ")
    for given in ("none", "full"):             # a given recompute is never replaced
        plan, fills = plan_with_stack_defaults(plan_mapping(f"tp=1,pp=1,dp=4,recompute={given}"),
                                               fw)
        assert plan.recompute == given and "recompute" not in {f.field for f in fills}
    plan, fills = plan_with_stack_defaults(
        plan_mapping("tp=1,pp=1,dp=4,recompute=full,recompute_layers=1"), fw)
    assert (plan.recompute, plan.recompute_layers) == ("full", 1)


def test_a_recompute_default_the_stack_cannot_run_is_refused():
    with pytest.raises(SpecError, match="field_defaults.recompute") as e:
        replace(get_profile("pytorch-eager"), field_defaults=StackFieldDefaults(
            zero=3, zero_with_pp=2, recompute="op"))
    assert e.value.value == "op"


@pytest.mark.parametrize("stack", [*PROFILES, "torchtitan-compile"])
def test_the_defaults_are_plans_the_stack_runs(stack):
    """Whatever tp and pp a plan gives (within the stack's limits), the fields the stack
    fills leave a plan its own rules accept (the generic zero=0 and 1F1B did not)."""
    fw = get_profile(stack)
    for tp in (1, 2):
        for pp in (1, 2):
            if (fw.max_tp or 8) < tp or (fw.max_pp or 8) < pp:
                continue
            plan, _ = plan_with_stack_defaults({"tp": tp, "pp": pp, "dp": 4, "gbs": 64}, fw)
            assert plan_violations(fw, plan) == [], (stack, tp, pp)


def test_a_field_the_plan_gives_is_kept_and_refused_as_before():
    fw = get_profile("torchtitan")
    for text in ("tp=2,pp=2,dp=4,zero=0", "tp=2,pp=2,dp=4,zero_stage=0",
                 "tp=2,pp=2,dp=4,ZERO=0"):
        plan, fills = plan_with_stack_defaults(plan_mapping(text), fw, 16)
        assert plan.zero == 0 and "zero" not in {f.field for f in fills}
        assert [v[0] for v in plan_violations(fw, plan)] == ["zero"]
    plan, fills = plan_with_stack_defaults(plan_mapping("tp=2,sp=false"), fw, 16)
    assert plan.sp is False and "sp" not in {f.field for f in fills}
    assert given_fields({"Tensor_Model_Parallel_Size": 2, " sp ": 1}) == {"tp", "sp"}


def test_an_error_the_filled_values_cause_names_the_given_field_or_the_fills():
    tt = get_profile("torchtitan")
    with pytest.raises(SpecError) as e:      # the stack refuses the given field itself
        plan_with_stack_defaults(plan_mapping("tp=2,pp=2,dp=4,group_microbatches=2/2"), tt, 16)
    assert e.value.field == "group_microbatches" and "same batch" in e.value.rule
    stack = replace(get_profile("megatron-core"), name="zero3-stack",
                    field_defaults=StackFieldDefaults(zero=3, zero_with_pp=1))
    with pytest.raises(SpecError) as e:      # Plan's own rule, broken by a filled zero
        plan_with_stack_defaults(plan_mapping("tp=1,pp=1,dp=4,group_microbatches=2/2"), stack)
    assert e.value.field == "group_microbatches" and "with zero=3" in e.value.rule
    assert "zero3-stack's defaults" in e.value.rule


def test_a_profile_whose_defaults_its_rules_refuse_is_refused():
    tt = get_profile("torchtitan")
    for bad in (StackFieldDefaults(zero=1), StackFieldDefaults(zero=3, zero_with_pp=3)):
        with pytest.raises(SpecError, match="framework.field_defaults"):
            replace(tt, field_defaults=bad)
    with pytest.raises(SpecError, match="sp_with_tp"):
        replace(get_profile("megatron-deepspeed"), field_defaults=StackFieldDefaults(
            zero=1, zero_with_pp=1, sp_with_tp=True))


def test_hai_llm_dispatches_node_deduplicated_where_the_plan_names_no_dispatcher(capsys):
    """HAI-LLM's default dispatcher is DeepEP-like (DeepSeek-V3 report §3.2.2: once per
    destination node over IB, then NVLink), not Megatron-Core's ``alltoall``; only where
    expert parallelism runs, and a given dispatcher is kept."""
    fw = get_profile("hai-llm")
    assert fw.field_defaults.moe_dispatcher == "deepep"
    plan, fills = plan_with_stack_defaults(plan_mapping("tp=1,pp=1,ep=8"), fw, 64)
    why = {f.field: f.why for f in fills}["moe_dispatcher"]
    assert plan.moe_dispatcher == "deepep" and "§3.2.2" in why and "ep > 1" in why
    plan, fills = plan_with_stack_defaults(plan_mapping("tp=1,ep=8,moe_dispatcher=alltoall"),
                                           fw, 64)
    assert plan.moe_dispatcher == "alltoall" and "moe_dispatcher" not in {f.field for f in fills}
    plan, fills = plan_with_stack_defaults(plan_mapping("tp=1,pp=2"), fw, 64)   # ep 1
    assert plan.moe_dispatcher == "alltoall" and "moe_dispatcher" not in {f.field for f in fills}
    plan, fills = plan_with_stack_defaults(plan_mapping(    # DeepEP does not pad: kept
        "tp=1,ep=8,moe_pad_to_capacity=true,moe_capacity_factor=1"), fw, 64)
    assert plan.moe_dispatcher == "alltoall" and "moe_dispatcher" not in {f.field for f in fills}
    for stack in ("megatron-core", "nemo", "torchtitan", "automodel"):
        assert get_profile(stack).field_defaults.moe_dispatcher == "alltoall"
    # the deduplicated dispatch costs less on the wire than alltoall, given explicitly
    from simulator.cli.main import main
    base = ["estimate", "--model", "deepseek-v3", "--cluster", "hgx-h800:8", "--framework",
            "hai-llm", "--dtype", "fp8-blockwise", "--json", "--plan"]
    ep_comm = {}
    for disp in ("", ",moe_dispatcher=deepep", ",moe_dispatcher=alltoall"):
        assert main([*base, "tp=1,pp=1,ep=64,mbs=1,gbs=512" + disp]) == 0
        ep_comm[disp] = json.loads(capsys.readouterr().out)["breakdown_s"]["ep_comm"]
    assert ep_comm[""] == ep_comm[",moe_dispatcher=deepep"] < ep_comm[",moe_dispatcher=alltoall"]


def test_a_dispatcher_default_the_stack_does_not_run_is_refused():
    with pytest.raises(SpecError, match="field_defaults.moe_dispatcher") as e:
        replace(get_profile("pytorch-eager"), field_defaults=StackFieldDefaults(
            zero=3, zero_with_pp=2, moe_dispatcher="deepep"))
    assert e.value.value == "deepep" and "token dispatchers" in e.value.rule


BUG = ["--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch", "64"]


def test_the_reported_command_runs_and_states_its_defaults(capsys):
    from simulator.cli.main import main
    argv = ["estimate", "--framework", "torchtitan", *BUG, "--plan", "tp=2,pp=2,dp=4,mbs=1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "tp2 pp2 dp4 mbs1 1f1b op-rc sp z2" in out
    assert "assumed zero=2: torchtitan's default with pipelining" in out
    assert "sp=true: torchtitan's default with tp > 1" in out
    assert main([*argv, "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert "recompute=op: torchtitan's default: per-op selective" in out
    assert [(d["field"], d["value"]) for d in inputs["plan_defaults"]] == [
        ("zero", 2), ("sp", True), ("recompute", "op")]
    assert inputs["plan"]["zero"] == 2 and inputs["plan"]["sp"] is True
    assert inputs["plan"]["recompute"] == "op"
    # given: refused as before, exit 2 naming the stack, the field and the rule
    assert main([*argv[:-1], "tp=2,pp=2,dp=4,mbs=1,zero=0"]) == 2
    err = capsys.readouterr().err
    assert "zero=0: torchtitan runs zero=0 with dp > 1 as DDP" in err and "Traceback" not in err


def test_no_stack_named_fills_nothing_and_the_json_keeps_its_keys(capsys):
    from simulator.cli.main import main
    assert main(["estimate", *BUG, "--plan", "tp=2,pp=2,dp=4,mbs=1", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert "plan_defaults" not in inputs and inputs["plan"]["zero"] == 0


def test_a_plan_file_naming_the_stack_fills_the_same(tmp_path, capsys):
    from simulator.cli.main import main
    path = tmp_path / "p.yaml"
    path.write_text("framework: jax-xla\ntp: 1\npp: 2\nmbs: 1\n")
    assert main(["simulate", *BUG, "--plan", str(path), "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert inputs["plan"]["schedule"] == "gpipe" and inputs["framework"] == "jax-xla"
    assert [d["field"] for d in inputs["plan_defaults"]] == ["recompute", "schedule"]
    assert inputs["plan"]["recompute"] == "full"
    path.write_text("framework: torchtitan\ntp: 2\npp: 2\nmbs: 1\nschedule: 1f1b\nzero: 0\n")
    assert main(["estimate", *BUG, "--plan", str(path)]) == 2
    assert "zero=0: torchtitan runs zero=0" in capsys.readouterr().err


def test_compare_states_the_defaults(capsys):
    from simulator.cli.main import main
    assert main(["compare", "--framework", "megatron-deepspeed", "--model", "gpt-1.7b",
                 "--cluster", "dgx-a100:1", "--global-batch", "16", "--plan", "tp=2,pp=2,mbs=1",
                 "--schedules", "1f1b"]) == 0
    out = capsys.readouterr().out
    assert "assumed zero=1: megatron-deepspeed's default: ZeRO stage 1" in out


def test_a_stack_without_pipelining_names_pp_not_the_schedule(capsys):
    from simulator.cli.main import main
    assert main(["estimate", "--framework", "pytorch-eager", *BUG, "--plan",
                 "tp=1,pp=2,mbs=1"]) == 2
    err = capsys.readouterr().err
    assert "pp=2: pytorch-eager has no pipeline parallelism (pp <= 1)" in err
