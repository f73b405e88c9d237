"""``--framework``: each software stack's defaults and plan limits, one rule for the search's
space and for a given plan, in every command's report (issue 15, item 1)."""
from __future__ import annotations

from dataclasses import replace
import json
import re

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.framework import ALIASES, PROFILES, get_profile
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.rules import check_plan, plan_violations
from strategies.job import make_job
from strategies.plan import Plan, parse_plan, plan_from_mapping, plan_mapping
from strategies.presets import model_preset
from strategies.search.plan_rows import plan_key
from strategies.search.space import enumerate_space
from topologies.cluster import cluster_preset

SMALL = ["--model", "llama3-8b", "--cluster", "dgx-a100:2"]


def stack_plan(fw, text: str) -> Plan:
    """A plan as the CLI reads it under stack ``fw``: unset switches take its defaults."""
    return plan_from_mapping(plan_mapping(text), fw.plan_defaults())


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def refused(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("name,plan,field", [
    ("megatron-core", "pp=2,schedule=gpipe", "schedule"),
    ("megatron-deepspeed", "pp=2,schedule=interleaved,vpp=2", "schedule"),
    ("megatron-deepspeed", "pp=2,zero=2", "zero"),
    ("megatron-deepspeed", "cp=2", "cp"),
    ("megatron-lm-2021", "ep=2", "ep"),
    ("megatron-lm-2021", "tp=2,tp_comm_overlap=true", "tp_comm_overlap"),
    ("megatron-lm-2021", "zero=3", "zero"),
    ("pytorch-eager", "tp=2", "tp"),
    ("pytorch-eager", "pp=2", "pp"),        # pp is what the plan asked for
    ("torchtitan", "zero=1", "zero"),
    ("torchtitan", "tp=2,tp_comm_overlap=true", "tp_comm_overlap"),
    ("jax-xla", "pp=2,schedule=1f1b", "schedule"),
    # pipeline layouts (LAYOUT_WAYS): DeepSpeed's partition_method has no Megatron layout
    # string and no first/last counts; MaxText's vmapped stages are all alike
    ("megatron-deepspeed", "pp=2,layout=Et*12|t*12L", "layout"),
    ("megatron-deepspeed", "pp=2,first_stage_layers=10,last_stage_layers=14",
     "first_stage_layers"),
    ("megatron-deepspeed", "pp=2,last_stage_layers=14", "last_stage_layers"),
    ("jax-xla", "pp=2,schedule=gpipe,account_embedding=true", "account_embedding"),
    ("jax-xla", "pp=2,schedule=gpipe,account_loss=true", "account_loss"),
    ("jax-xla", "pp=2,schedule=gpipe,layout=Et*12|t*12L", "layout"),
])
def test_a_plan_the_stack_cannot_run_names_stack_feature_rule(name, plan, field):
    fw = get_profile(name)
    bad = plan_violations(fw, stack_plan(fw, plan))
    assert bad and bad[0][0] == field
    with pytest.raises(SpecError) as e:
        check_plan(fw, stack_plan(fw, plan))
    assert e.value.field == field and name in e.value.rule


@pytest.mark.parametrize("name,plan", [
    ("megatron-core", "tp=2,pp=2,schedule=interleaved,vpp=2,cp=2,sp=true,tp_comm_overlap=true"),
    ("megatron-deepspeed", "tp=2,pp=2,zero=1"),
    ("megatron-deepspeed", "zero=3"),              # DeepSpeed ZeRO-3 without pipelining
    ("torchtitan", "pp=2,schedule=gpipe,zero=2"),
    ("torchtitan", "zero=3,cp=2,tp=2,sp=true"),
    ("pytorch-eager", "zero=2"),
    ("jax-xla", "pp=2,schedule=gpipe"),
    # DeepSpeed's type:transformer|embedding partition (BLOOM): the slots
    ("megatron-deepspeed", "tp=2,pp=2,zero=1,account_embedding=true,account_loss=true"),
    # torchtitan's module_fqns_per_model_part expresses any layout
    ("torchtitan", "pp=2,layout=Et*12|t*12L"),
    ("torchtitan", "pp=2,first_stage_layers=10,last_stage_layers=14"),
    ("torchtitan", "pp=2,schedule=interleaved,vpp=2,account_embedding=true,account_loss=true"),
    ("megatron-core", "pp=2,schedule=interleaved,layout=Et*6|t*6|t*6|t*6L"),
])
def test_what_each_stack_runs(name, plan):
    fw = get_profile(name)
    assert plan_violations(fw, stack_plan(fw, plan)) == []


def test_aliases_and_unknown_names():
    for alias, name in ALIASES.items():
        assert get_profile(alias) is PROFILES[name]
    assert get_profile(" TorchTitan ") is TORCHTITAN
    with pytest.raises(SpecError, match="known: megatron-core, .*torchtitan") as e:
        get_profile("paddle")
    assert "torchtitan-compile" in str(e.value)    # the variant a name resolves to is listed


def test_help_lists_every_stack_and_dtype_a_command_takes(capsys):
    """``--framework`` and ``--dtype`` help named neither torchtitan-compile nor fp8-blockwise
    (the DeepSeek-V3 report's --framework hai-llm --dtype fp8-blockwise), which both run."""
    import re
    from simulator.cli.main import main
    from strategies.job import DTYPES
    assert main(["estimate", "--help"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out).replace("- ", "-")
    for name in (*PROFILES, "torchtitan-compile", *DTYPES):
        assert name in text, name


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROFILES))
def test_search_space_is_exactly_what_the_stack_runs(name, monkeypatch):
    """The vectorised rule of the search and the scalar rule of a given plan agree on every
    plan of the unrestricted space, and the named space is that space filtered. The
    unrestricted space is priced with the stack's own loss (``loss.peak_bytes``: what its
    cross-entropy holds at the head decides which plans fit) and optimizer state bytes
    (``optimizer_state_bytes``: hai-llm's bf16 moments), activation cache and FSDP2 state
    (``fsdp2``, ``master_only``), gradient bucket (``dp_bucket``: ZeRO-2/3 buffers), and ZeRO-2 plans are dominated by a ZeRO-1 twin only where
    the stack runs ZeRO-1 (``zero_stages``), as a space with no stack named is with the
    default stack's."""
    import strategies.search.space as space_mod
    from strategies.search.axes import cp_exchanges
    fw = get_profile(name)
    monkeypatch.setattr(space_mod, "DEFAULT_FRAMEWORK",
                        replace(space_mod.DEFAULT_FRAMEWORK, loss=fw.loss,
                                optimizer_state_bytes=fw.optimizer_state_bytes,
                                fp8_activation_cache=fw.fp8_activation_cache,
                                fsdp2=fw.fsdp2, master_only=fw.master_only,
                                zero_stages=fw.zero_stages, dp_bucket=fw.dp_bucket,
                                # (recompute: the default stack's, which runs no op)
                                field_defaults=replace(fw.field_defaults, recompute="none")))
    m, cl = model_preset("mixtral-8x7b"), cluster_preset("dgx-h100", 2)
    free = enumerate_space(m, cl, 64)
    named = enumerate_space(m, cl, 64, framework=fw)
    assert named.pruned["framework"] > 0 or name == "megatron-core"
    # each space's plans built once (``Space.key(i)`` is ``plan_key(Space.plan(i),
    # switch_defaults)``), and the scalar rule asked once per distinct plan: a named plan equal
    # to a switched unnamed one reads the same answer
    free_plans = [free.plan(i) for i in range(free.size)]
    named_plans = [named.plan(i) for i in range(named.size)]
    free_keys = {plan_key(p, free.switch_defaults) for p in free_plans}
    named_keys = {plan_key(p, named.switch_defaults) for p in named_plans}
    violations: dict[Plan, list] = {}

    def violations_of(p: Plan) -> list:
        if p not in violations:
            violations[p] = plan_violations(fw, p)
        return violations[p]

    if fw.default_flash_attn:
        # The same activation memory and redundancy rules as the unnamed space (FlashAttention
        # on): the named space is the unnamed one less what the stack cannot run.
        # The op-level recompute (torchtitan's) is searched only under a stack that runs it.
        runnable = {plan_key(q, fw.plan_defaults())
                    for q in (_switched(p, fw) for p in free_plans) if not violations_of(q)}
        op = {k for k in named_keys if "recompute=op," in k}
        assert bool(op) == ("op" in fw.recompute)
        # A stack that runs several pipeline flushes gives a row that does not fit with one
        # the fewest that fit (``fitting.fewest_flushes``): rows the unnamed space pruned.
        flushed = {k for k in named_keys if ",flushes=" in k}
        assert not flushed or fw.pipeline_flushes
        # ZeRO-2 plans apart: a ZeRO-2 plan is dropped for its ZeRO-1 twin by the stack's own
        # estimate (``zero2_dominated``, tests/test_zero2_dominance.py), which no filter of the
        # unnamed space reproduces
        z2 = {k for k in named_keys | runnable if re.search(r",zero=2(,|$)", k)}
        # A stack that lets a plan choose its K/V exchange: each cp > 1 row once per
        # exchange (``axes.cp_exchanges``, tests/test_search_cp_axis.py), rows no unnamed
        # space holds (none where the stack runs no cp > 1); every one runs (the loop below)
        ex = {k for k in named_keys if ",cp_comm=" in k}
        assert not ex or cp_exchanges({}, fw)
        assert named_keys - op - flushed - z2 - ex == runnable - z2
        if "block" in fw.recompute_methods:
            assert named_keys - op - flushed - z2 - ex <= free_keys
    for p in named_plans:
        assert violations_of(p) == []
        assert (p.flash_attn, p.tp_comm_overlap) == (
            fw.default_flash_attn, fw.default_tp_comm_overlap and p.tp > 1 and p.sp)


def _switched(p: Plan, fw) -> Plan:
    """``p`` with the stack's switches; the least-recompute layer count the search gives a
    full-recompute plan (``recompute_layers``, block) dropped where the stack has no block
    method: its space keeps such a plan at every layer."""
    from dataclasses import replace
    from strategies.plan.parse import tp_overlap_default
    d = fw.plan_defaults()
    d["tp_comm_overlap"] = tp_overlap_default(d["tp_comm_overlap"], p.tp, p.sp)  # with sp only
    if "block" not in fw.recompute_methods:
        d.update(recompute_layers=None, recompute_method=None)
    return replace(p, **d)


def test_no_stack_named_keeps_every_plan_and_the_plan_switches():
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-a100", 2)
    job = make_job(m, cl, parse_plan("tp=2,pp=2,schedule=gpipe,gbs=16"))
    assert job.framework is MEGATRON_CORE and job.named_framework is None
    with pytest.raises(SpecError, match="megatron-core runs 1f1b, interleaved"):
        make_job(m, cl, parse_plan("tp=2,pp=2,schedule=gpipe,gbs=16"), framework="megatron-core")


def test_cli_framework_in_every_report(capsys):
    # dp = 1: zero=0 is no DDP, a plan every stack here runs (torchtitan's DDP runs alone)
    plan = ["--plan", "tp=8,pp=2,gbs=16"]
    est = run_json(capsys, "estimate", *SMALL, *plan, "--framework", "torchtitan")
    assert est["inputs"]["framework"] == "torchtitan"
    sim = run_json(capsys, "simulate", *SMALL, *plan, "--framework", "deepspeed")
    assert sim["inputs"]["framework"] == "megatron-deepspeed"
    default = run_json(capsys, "estimate", *SMALL, *plan)
    assert default["inputs"]["framework"] == "megatron-core"
    # Same plan, another stack: another step time (eager kernels, unfused accumulation).
    assert est["step_time_s"] != default["step_time_s"]


def test_named_stack_switch_defaults_apply_to_unset_keys(capsys):
    """Megatron-Core turns TP communication overlap on where it runs (tp > 1 with sp); a plan
    that sets it wins."""
    on = run_json(capsys, "estimate", *SMALL, "--plan", "tp=8,gbs=16,sp=true", "--framework",
                  "nemo")
    assert on["inputs"]["plan"]["tp_comm_overlap"] is True
    no_sp = run_json(capsys, "estimate", *SMALL, "--plan", "tp=8,gbs=16", "--framework", "nemo")
    assert no_sp["inputs"]["plan"]["tp_comm_overlap"] is False
    off = run_json(capsys, "estimate", *SMALL, "--plan", "tp=8,gbs=16,tp_comm_overlap=false",
                   "--framework", "nemo")
    assert off["inputs"]["plan"]["tp_comm_overlap"] is False
    none = run_json(capsys, "estimate", *SMALL, "--plan", "tp=8,gbs=16")
    assert none["inputs"]["plan"]["tp_comm_overlap"] is False


def test_plan_file_framework_key(tmp_path, capsys):
    f = tmp_path / "plan.yaml"
    f.write_text("tp: 8\npp: 2\ngbs: 16\nframework: torchtitan\n")   # dp = 1: no DDP
    d = run_json(capsys, "estimate", *SMALL, "--plan", str(f))
    assert d["inputs"]["framework"] == "torchtitan"
    assert run_json(capsys, "estimate", *SMALL, "--plan", str(f), "--framework",
                    "torchtitan")["inputs"]["framework"] == "torchtitan"
    err = refused(capsys, "estimate", *SMALL, "--plan", str(f), "--framework", "megatron-core")
    assert "--framework" in err and "disagrees" in err
    f.write_text("tp: 2\ngbs: 16\nframework: caffe\n")
    assert "plan.framework" in refused(capsys, "estimate", *SMALL, "--plan", str(f))


def test_cli_refusals(capsys):
    err = refused(capsys, "estimate", *SMALL, "--plan", "pp=2,schedule=gpipe,gbs=16",
                  "--framework", "megatron-core")
    assert "schedule='gpipe'" in err and "megatron-core runs 1f1b, interleaved" in err
    err = refused(capsys, "simulate", *SMALL, "--plan", "pp=2,zero=2,gbs=16",
                  "--framework", "megatron-deepspeed")
    assert "zero=2" in err and "megatron-deepspeed" in err
    err = refused(capsys, "estimate", *SMALL, "--plan", "gbs=16", "--framework", "caffe")
    assert "--framework='caffe'" in err and "megatron-core" in err
    err = refused(capsys, "search", *SMALL, "--global-batch", "16", "--framework",
                  "torchtitan", "--export", "megatron")
    assert "--export" in err and "torchtitan" in err


def test_compare_follows_the_named_stack(capsys):
    plan = ["--plan", "tp=8,pp=2,gbs=16"]   # dp = 1: torchtitan's zero=0 is no DDP
    rows = run_json(capsys, "compare", *SMALL, *plan, "--schedules", "gpipe,1f1b",
                    "--framework", "megatron-core")["rows"]
    assert "megatron-core runs 1f1b, interleaved" in rows[0]["error"]
    assert rows[1]["error"] is None
    d = run_json(capsys, "compare", *SMALL, *plan, "--schedules", "gpipe,1f1b",
                 "--framework", "torchtitan")
    assert [r["schedule"] for r in d["rows"]] == ["gpipe", "1f1b"]
    assert d["inputs"]["framework"] == "torchtitan"


def test_presets_lists_the_stacks(capsys):
    d = run_json(capsys, "presets")
    rows = {f["name"]: f for f in d["frameworks"]}
    assert set(rows) == set(PROFILES) | {"torchtitan-compile"}   # and the compile switch
    assert rows["torchtitan-compile"]["schedules"] == rows["torchtitan"]["schedules"]
    assert rows["megatron-deepspeed"]["schedules"] == ["deepspeed-1f1b"]
    assert rows["megatron-deepspeed"]["zero_with_pp"] == 1
    assert rows["megatron-deepspeed"]["layouts"] == ["slots"]
    assert "partition_method" in rows["megatron-deepspeed"]["pipeline_split"]
    assert rows["nemo"]["aliases"] == ["megatron-bridge"]
    assert "deepspeed" in rows["megatron-deepspeed"]["aliases"]


def test_deepspeed_profile_costs_like_the_2021_stack():
    """Same kernels and gradient handling as Megatron-LM 2021 (its pipeline engine is not yet
    modelled apart: issue 15 item 2)."""
    from strategies.stacks.megatron import MEGATRON_LM_2021
    for f in ("grad_accum_fusion", "kernels_per_layer", "launch_gap_s", "attention_kernel"):
        assert getattr(MEGATRON_DEEPSPEED, f) == getattr(MEGATRON_LM_2021, f)
    assert np.isfinite(MEGATRON_DEEPSPEED.launch_gap_s)


def test_torchtitan_runs_exactly_the_pipelining_schedules_it_has():
    """torch.distributed.pipelining's get_schedule_class names GPipe, 1F1B, Interleaved1F1B,
    LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV; five are ours."""
    from strategies.stacks.pytorch import TORCHTITAN_SCHEDULE_NAMES
    assert TORCHTITAN.schedules == ("gpipe", "1f1b", "interleaved", "zb-v", "dualpipev")
    assert dict(TORCHTITAN_SCHEDULE_NAMES)["zb-v"] == "ZBVZeroBubble"
    fw = TORCHTITAN
    for plan in ("pp=2,schedule=zb-v,vpp=2", "pp=2,schedule=dualpipev,vpp=2",
                 "pp=2,schedule=interleaved,vpp=2"):
        assert plan_violations(fw, stack_plan(fw, plan)) == [], plan
    for plan in ("pp=2,schedule=zb-h1", "pp=2,schedule=zb-h2", "pp=2,schedule=dualpipe",
                 "pp=2,schedule=zb-1p"):
        bad = plan_violations(fw, stack_plan(fw, plan))
        assert bad and bad[0][0] == "schedule" and "torchtitan runs" in bad[0][2], plan
        assert "zb-v, dualpipev" in bad[0][2]


def test_cli_torchtitan_zbv_and_dualpipev(capsys):
    for s in ("zb-v", "dualpipev"):
        d = run_json(capsys, "estimate", *SMALL, "--plan",
                     f"tp=2,pp=2,zero=2,schedule={s},vpp=2,gbs=32",
                     "--framework", "torchtitan")
        assert d["inputs"]["framework"] == "torchtitan" and d["step_time_s"] > 0
    err = refused(capsys, "estimate", *SMALL, "--plan", "pp=2,schedule=zb-h1,gbs=16",
                  "--framework", "torchtitan")
    assert "schedule='zb-h1'" in err and "torchtitan runs" in err


def test_search_all_schedules_under_torchtitan_offers_its_v_schedules():
    """``--schedules all`` under torchtitan: ZB-V and DualPipeV rows (its ZBVZeroBubble and
    DualPipeV), none of the schedules it lacks."""
    from strategies.schedules import schedule_code
    from strategies.search.space import SpaceOptions
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    sp = enumerate_space(m, cl, 16, SpaceOptions(schedules="all", max_mbs=1), framework=TORCHTITAN)
    codes = set(sp.cols["sched"].tolist())
    assert {schedule_code("zb-v"), schedule_code("dualpipev")} <= codes
    assert not codes & {schedule_code(s) for s in ("zb-h1", "zb-h2", "dualpipe")}
    assert all(not plan_violations(TORCHTITAN, sp.plan(i)) for i in range(sp.size))
