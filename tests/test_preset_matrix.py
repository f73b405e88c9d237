"""What the preset matrix (``experiments/preset_matrix.py``) found, pinned: a stack default a
model cannot take is refused naming the default and what to give instead
(``strategies.stacks.plan_defaults.stack_default_refusal``); a search with no plan names the
rule that pruned the last plans, in words (``simulator.search.run.empty_space_rule``); and the
script's own checks."""
from __future__ import annotations

import pytest

from experiments import preset_matrix as pm
from simulator.cli.main import main
from simulator.search.run import empty_space_rule
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.plan import parse_plan
from strategies.search.prune_rules import RULES
from strategies.stacks.plan_defaults import stack_default_refusal


def err_of(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def test_torchtitan_default_op_recompute_on_mamba_names_the_default(capsys):
    rc, err = err_of(capsys, "estimate", "--model", "nemotron-h-8b", "--cluster", "dgx-h100:1",
                     "--framework", "torchtitan", "--plan", "tp=2,mbs=1,gbs=16")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "recompute='op'" in err
    assert "recompute=op is torchtitan's default where a plan names none" in err
    assert "give recompute=none or recompute=full" in err
    # the advice is true: the first alternative runs
    assert main(["estimate", "--model", "nemotron-h-8b", "--cluster", "dgx-h100:1",
                 "--framework", "torchtitan", "--plan", "tp=2,mbs=1,gbs=16,recompute=none",
                 "--json"]) == 0
    capsys.readouterr()


def test_no_stack_named_keeps_the_plain_rule(capsys):
    rc, err = err_of(capsys, "estimate", "--model", "nemotron-h-8b", "--cluster", "dgx-h100:1",
                     "--plan", "tp=2,mbs=1,gbs=16,recompute=op")
    assert rc == 2 and "not modelled for them" in err and "default" not in err


def test_dsv4_on_a_stack_without_fused_attention_says_choose_another_stack(capsys):
    for stack in ("megatron-lm-2021", "megatron-deepspeed"):
        rc, err = err_of(capsys, "estimate", "--model", "deepseek-v4-flash", "--cluster",
                         "dgx-h100:1", "--framework", stack, "--plan", "tp=1,mbs=1,gbs=16,ep=8")
        assert rc == 2 and err.startswith("paraplan: error: flash_attn=False:")
        assert f"flash_attn=false is {stack}'s default where a plan names none" in err
        assert f"{stack} runs no other flash_attn: choose another --framework" in err


def test_stack_default_refusal_leaves_other_errors_alone():
    fw = get_profile("torchtitan")
    plan = parse_plan("tp=2,recompute=full")
    e = SpecError("plan.recompute", "full", "some rule")
    assert stack_default_refusal(fw, plan, e) is e          # not the stack's default value
    e2 = SpecError("tp", 2, "must divide num_attention_heads=3")
    assert stack_default_refusal(fw, parse_plan("tp=2,recompute=op"), e2) is e2


def test_empty_search_names_the_last_rule_in_words(capsys):
    text = empty_space_rule({"tp_heads": 10, "pp_layers": 0, "memory": 7})
    assert text.startswith("no plan passes the constraints: the last 7 were pruned by rule "
                           f"memory ({dict(RULES)['memory']})")
    assert text.endswith("plans pruned by rule: tp_heads 10, memory 7")
    rc, err = err_of(capsys, "search", "--model", "gpt-1t", "--cluster", "dgx-a100:1",
                     "--global-batch", "8", "--top", "1", "--workers", "1", "--reference", "none")
    assert rc == 2 and err.count("\n") == 1
    assert "pruned by rule memory (peak memory above the limit)" in err


def test_matrix_checks_catch_what_they_claim():
    bad = {"step_time_s": None, "mfu": 1.5, "breakdown_s": {"compute": 1.0, "bubble": 0.5},
           "memory": {"peak_gib": -1.0}}
    probs = " | ".join(pm.report_problems(bad, 80.0))
    assert "step_time_s is null" in probs and "mfu = 1.5 > 1" in probs
    assert "memory.peak_gib = -1.0 < 0" in probs
    ok = {"step_time_s": 1.5, "mfu": 0.4, "breakdown_s": {"compute": 1.0, "bubble": 0.5},
          "memory": {"peak_gib": 81.0}, "fits": True}
    assert pm.report_problems(ok, 80.0) == ["fits=True but peak 81.000 GiB vs 80.000 GiB stated"]


def test_matrix_sensible_plan_runs_on_every_stack(capsys):
    from strategies.presets import MODEL_PRESETS
    from topologies.cluster import parse_cluster_arg
    cl = parse_cluster_arg("gb200-nvl72:18")        # 72 GPUs: dp not a power of two
    for stack in ("-", "megatron-core", "torchtitan", "automodel", "jax-xla"):
        fw = None if stack == "-" else get_profile(stack)
        plan = pm.sensible_plan(MODEL_PRESETS["mixtral-8x7b"], cl, fw)
        assert (72 // (plan["tp"] * plan["pp"])) % plan.get("ep", 1) == 0
        c = pm.call(["estimate", *pm.base_args("mixtral-8x7b", "gb200-nvl72:18", stack),
                     "--plan", pm.plan_text(plan), "--json"])
        pm.check_exit(c)
        assert c.rc == 0 and not c.problems, (stack, c.err)


def test_megatron_deepspeed_search_prices_the_schedule_the_stack_runs(capsys):
    """The search's rows under megatron-deepspeed were priced as Megatron's 1F1B (their key
    said schedule=1f1b) while ``make_job`` runs DeepSpeed's engine: the analytic step and the
    peak memory of the search's top plan differed from ``estimate`` of its own key (mpt-70b on
    64 DGX A100: 4.2467 s and 49.059 GiB against 4.2568 s and 49.092 GiB). Now the same."""
    import json
    base = ["--model", "mpt-70b", "--cluster", "dgx-a100:8", "--framework",
            "megatron-deepspeed"]
    assert main(["search", *base, "--global-batch", "64", "--fix", "tp=8,pp=4,mbs=1",
                 "--top", "1", "--workers", "1", "--reference", "none", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["plans"][0]
    assert top["plan"]["schedule"] == "deepspeed-1f1b"
    assert main(["estimate", *base, "--plan", top["key"], "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["step_time_s"] == top["analytic_step_time_s"]
    assert est["memory"]["peak_gib"] == top["memory"]["peak_gib"]


def test_megatron_deepspeed_space_has_one_row_per_plan_with_every_schedule():
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import parse_cluster_arg
    sp = enumerate_space(model_preset("gpt-1.7b"), parse_cluster_arg("dgx-a100:2"), 64,
                         SpaceOptions(schedules="all"), framework=get_profile("megatron-deepspeed"))
    keys = [sp.key(i) for i in range(sp.size)]
    assert len(keys) == len(set(keys))
    piped = [k for k in keys if ",pp=1," not in k]
    assert piped and all("schedule=deepspeed-1f1b" in k for k in piped)


def test_matrix_frameworks_list_may_start_with_dash(capsys):
    # argparse alone reads a separate "-,megatron-core" as an unknown option
    for argv in (["--frameworks", "-,megatron-core"], ["--frameworks=-,megatron-core"]):
        assert pm.parse_args(argv).frameworks == "-,megatron-core"
    assert pm.parse_args(["--frameworks", "-"]).frameworks == "-"
    a = pm.parse_args(["--frameworks", "-,torchtitan", "--models", "llama3-8b", "--search", "0"])
    assert (a.frameworks, a.models, a.search) == ("-,torchtitan", "llama3-8b", 0)
    with pytest.raises(SystemExit) as e:        # a typo is not run as torchtitan-compile
        pm.parse_args(["--frameworks", "-,megatron-cor"])
    assert e.value.code == 2
    assert "unknown stack 'megatron-cor'" in capsys.readouterr().err


def test_stack_defaults_refuse_only_models_the_stack_would_run_otherwise_unmodelled():
    """Where the stack defaults meet a model the cost cannot take (docs/cli.md: no
    model-aware default, the stack would run the same value): exactly the Mamba-2 presets
    under torchtitan (per-op selective recomputation) and DeepSeek-V4 under the two stacks
    without fused attention. A new preset or stack default that the models refuse shows here."""
    import argparse

    from simulator.cli.common import resolve_job
    from strategies.framework import PROFILES
    from strategies.presets import MODEL_PRESETS
    refused = set()
    for m in MODEL_PRESETS:
        for fw in PROFILES:
            for plan in ("tp=8,gbs=64", "tp=1,gbs=64"):
                a = argparse.Namespace(model=m, cluster="dgx-h100", plan=plan, framework=fw,
                                       global_batch=None, dtype="bf16", seq_len=None)
                try:
                    resolve_job(a)
                except SpecError as e:
                    if "default where a plan names none" in e.rule:
                        refused.add((m, fw, e.field.removeprefix("plan.")))
    mamba = {m for m, spec in MODEL_PRESETS.items() if spec.is_hybrid
             and spec.layer_counts()["mamba"]}
    dsv4 = {m for m, spec in MODEL_PRESETS.items() if spec.is_dsv4}
    assert mamba and dsv4
    assert refused == ({(m, "torchtitan", "recompute") for m in mamba}
                       | {(m, fw, "flash_attn") for m in dsv4
                          for fw in ("megatron-lm-2021", "megatron-deepspeed")})
