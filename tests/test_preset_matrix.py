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


def test_long_context_exchanges_name_each_hierarchical_size():
    from experiments import preset_matrix_cp as lc
    assert lc.exchanges(list(lc.ALL_COMMS), 8) == [
        {"cp_comm": "p2p"}, {"cp_comm": "all_gather"}, {"cp_comm": "a2a"},
        {"cp_comm": "a2a+p2p", "hierarchical_cp": 2},
        {"cp_comm": "a2a+p2p", "hierarchical_cp": 4}]
    assert lc.exchanges(list(lc.ALL_COMMS), 2)[-1] == {"cp_comm": "a2a"}   # no 1 < k < 2
    assert lc.stack_comms(get_profile("torchtitan")) == [None]      # its own ring only
    assert lc.exchanges([None], 4) == [{}]


def test_long_context_shapes_are_what_the_stack_runs():
    """ZeRO-3 only without a pipeline; the zero-bubble schedule the stack runs (torchtitan's
    ZB-V needs two chunks a stage); no interleaving where no vpp divides the stage."""
    from experiments import preset_matrix_cp as lc
    tt = lc.shapes(get_profile("torchtitan"), 32, 2)
    assert ("zb-v", 2, 2) in tt and (None, 1, 3) in tt and all(z != 1 for _, _, z in tt)
    assert all(s is None for s, _, z in tt if z == 3)
    mc = lc.shapes(get_profile("megatron-core"), 35, 2)     # 35 layers: no pp=2 split
    assert {s for s, _, _ in mc} == {"1f1b", None}
    assert ("zb-h1", 1, 1) in lc.shapes(None, 61, 2)          # DeepSeek-V3's 61: not ZB-V


def test_long_context_checks_catch_what_they_claim():
    from experiments import preset_matrix_cp as lc
    ok = pm.Call(["estimate"], 2, "", "paraplan: error: cp=8: cp must divide heads\n", 0.0)
    bad = pm.Call(["estimate"], 2, "", "paraplan: error: something went wrong\n", 0.0)
    assert lc.refusal_problem(ok) == []
    assert lc.refusal_problem(bad)[0].startswith("refusal without field=value: rule")
    sim = pm.Call(["simulate"], 0, '{"step_time_s": 1.03, "analytic_step_time_s": 1.0}', "",
                  0.0)
    assert lc.sim_problems(sim, 1.0, "dgx-h100:1") == (1.0, 1.03)
    assert sim.problems == ["simulated 1.03 s vs estimate 1 s: +3.00 % (tolerance 1.5 %)"]
    near = pm.Call(["simulate"], 0, '{"step_time_s": 1.01, "analytic_step_time_s": 1.0}', "",
                   0.0)
    lc.sim_problems(near, 1.0, "dgx-h100:1")
    assert near.problems == []


def test_long_context_slice_runs_clean(capsys):
    """A slice of the section: one search under Megatron-Core at 32K (its top plans against
    ``estimate`` of their keys, the top one simulated contention-free) and an a2a+p2p
    estimate under selective recomputation; no failure, the exchange in the plan's echo."""
    from experiments import preset_matrix_cp as lc
    srch, sims = lc.run_searches((("gpt-1.7b", "dgx-h100:1", "megatron-core", 32768, 8,
                                   "tp=2,pp=1,cp=4,mbs=1,zero=1,cp_comm=a2a+p2p"),))
    assert [c.rc for _, c in srch] == [0] and not srch[0][1].problems
    assert "hierarchical_cp=2" in srch[0][1].data["plans"][0]["key"]
    assert len(sims) == 1 and not sims[0][1].problems and sims[0][3] is not None
    plan = lc.lc_plan(pm.MODEL_PRESETS["gpt-1.7b"], get_profile("megatron-core"), 4, 2,
                      "1f1b", 1, 1, "selective", {"cp_comm": "a2a+p2p", "hierarchical_cp": 2},
                      16)
    c = lc.estimate(("gpt-1.7b", "dgx-h100:2", "megatron-core"), 65536, plan, 80.0)
    assert c.rc == 0 and not c.problems
    assert '"cp_comm": "a2a+p2p",\n      "hierarchical_cp": 2,' in c.out


def test_stack_without_context_parallelism_refuses_a_kv_exchange(capsys):
    """HAI-LLM (no context parallelism) inherited Megatron-Core's four K/V exchanges: a plan
    naming ``cp_comm=a2a`` ran and ``--fix cp_comm=a2a`` searched, under a stack that runs no
    exchange at all. Now refused naming the field, the value and the rule (exit 2), as the
    other stacks without CP are, and a profile giving both is refused when built."""
    import dataclasses
    base = ["--model", "llama3-8b", "--cluster", "dgx-h100:1", "--framework"]
    for stack in ("hai-llm", "megatron-deepspeed"):
        assert get_profile(stack).cp_comms == ()
        rc, err = err_of(capsys, "estimate", *base, stack, "--plan",
                         "tp=1,cp=1,mbs=1,gbs=16,cp_comm=a2a")
        assert rc == 2 and err.count("\n") == 1
        assert f"cp_comm='a2a': {stack} has no context parallelism: no cp_comm" in err
    rc, err = err_of(capsys, "search", *base, "hai-llm", "--global-batch", "16", "--fix",
                     "cp_comm=a2a", "--top", "1", "--workers", "1", "--reference", "none")
    assert rc == 2 and "--fix='cp_comm=a2a': hai-llm has no context parallelism" in err
    with pytest.raises(SpecError, match=r"framework.cp_comms=\('p2p',\): a stack without "
                                        r"context parallelism"):
        dataclasses.replace(get_profile("hai-llm"), cp_comms=("p2p",))


def test_a_stop_signal_caught_by_a_call_stops_the_sweep(monkeypatch, tmp_path, capsys):
    """A SIGTERM that lands while a call runs is caught by the CLI's own handler (exit 143,
    'paraplan: stopped by SIGTERM'); the sweep used to record it as one failing row and go
    on. Now the call raises ``Stopped`` and the command exits 143 writing no records."""
    import sys

    from simulator.workers import Stopped

    def stopped_cli(argv):
        print("paraplan: stopped by SIGTERM", file=sys.stderr)
        return 143

    monkeypatch.setattr(pm, "cli_main", stopped_cli)
    with pytest.raises(Stopped) as e:
        pm.call(["estimate", "--model", "gpt-1.7b"])
    assert e.value.signum == 15 and e.value.exit_status == 143
    # an ordinary failing call is still a row
    monkeypatch.setattr(pm, "cli_main", lambda argv: 2)
    assert pm.call(["estimate"]).rc == 2
    # the command: exit 143, one line on stderr, no records file
    rec = tmp_path / "records.jsonl"
    monkeypatch.setattr(pm, "cli_main", stopped_cli)
    monkeypatch.setattr(sys, "argv", ["preset_matrix.py", "--models", "gpt-1.7b",
                                      "--clusters", "dgx-a100:1", "--search", "0",
                                      "--simulate", "0", "--long-context", "off",
                                      "--records", str(rec)])
    assert pm.run() == 143
    err = capsys.readouterr().err
    assert "preset_matrix: stopped by SIGTERM; nothing written" in err
    assert "Traceback" not in err and not rec.exists()
