"""The precisions a stack runs (issue 15): ``FrameworkProfile.precisions`` read by one rule
(``strategies.stacks.rules.precision_rule`` / ``check_precision``). A named stack refuses a
``--dtype`` it lacks before any work in estimate, simulate, compare and search (exit 2, one
line naming the dtype, the stack and what it runs; whatif too), accepts the ones it has; the exporters'
dtype refusals are the profile's words; ``paraplan presets`` lists each profile's precisions.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.stacks.rules import check_precision, precision_rule
from strategies.job import make_job
from strategies.launch import export
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.precision import DTYPES

#: a plan every stack runs (no tp, pp, cp, ep; ZeRO-0: each profile's zero_stages has 0)
PLAN = "mbs=1,gbs=16,zero=0"
#: per stack, one precision it lacks (every stack but the Megatron-Core ones lacks one)
LACKS = {"megatron-lm-2021": "fp8", "megatron-deepspeed": "mxfp8", "torchtitan": "fp16",
         "pytorch-eager": "fp8-current", "jax-xla": "fp8-blockwise", "hai-llm": "fp8",
         "automodel": "fp8"}


def _job(fw: str | None, dtype: str, cluster: str = "dgx-b200"):
    plan = parse_plan(PLAN)
    if fw is not None:        # the stack's own attention kernel (Megatron-LM 2021 has no flash)
        plan = replace(plan, flash_attn=PROFILES[fw].default_flash_attn)
        if PROFILES[fw].zero_follows_pp:      # AutoModel: ZeRO-3 without pipelining
            plan = replace(plan, zero=3 if plan.pp == 1 else 2)
    return make_job(model_preset("llama3-8b"), cluster_preset(cluster, 1), plan,
                    dtype=dtype, framework=fw)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_every_profile_names_known_precisions_and_a_source():
    for fw in PROFILES.values():
        assert fw.precisions and set(fw.precisions) <= set(DTYPES), fw.name
        assert fw.precision_source, fw.name
        assert set(dict(fw.precision_notes)) <= set(DTYPES) - set(fw.precisions), fw.name
    with pytest.raises(SpecError, match="framework.precisions"):
        replace(TORCHTITAN, precisions=("bf16", "int4"))
    with pytest.raises(SpecError, match="framework.precisions"):
        replace(TORCHTITAN, precisions=())


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_rule_refuses_exactly_what_the_stack_lacks(name):
    fw = PROFILES[name]
    for d in DTYPES:
        why = precision_rule(fw, d)
        if d in fw.precisions:
            assert why is None
            check_precision(fw, d)
        else:
            assert why is not None and why.startswith(f"{name} runs --dtype ")
            with pytest.raises(SpecError) as e:
                check_precision(fw, d)
            assert e.value.field == "dtype" and e.value.value == d


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_make_job_accepts_each_precision_the_stack_has(name):
    # B200: every tensor-core rate and block format, so only the stack decides
    for d in PROFILES[name].precisions:
        assert _job(name, d).dtype == d


@pytest.mark.parametrize("name, dtype", sorted(LACKS.items()))
def test_make_job_refuses_before_the_chip_check(name, dtype):
    # on an A100 (no fp8 rate) the stack's rule still comes first: it is checked before any work
    with pytest.raises(SpecError) as e:
        _job(name, dtype, cluster="dgx-a100")
    assert e.value.field == "dtype" and name in str(e.value)
    _job(None, dtype)            # no stack named: any precision the chip has


@pytest.mark.parametrize("name, dtype", sorted(LACKS.items()))
@pytest.mark.parametrize("command", ["estimate", "simulate", "search"])
def test_cli_refuses_in_one_line(capsys, command, name, dtype):
    argv = [command, "--model", "llama3-8b", "--cluster", "dgx-b200:1", "--global-batch", "16",
            "--framework", name, "--dtype", dtype]
    if command != "search":
        argv += ["--plan", PLAN]
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"dtype='{dtype}'" in lines[0] and f"{name} runs --dtype" in lines[0]
    assert "Traceback" not in err


def test_compare_refuses_in_one_line(capsys):
    rc, out, err = run(capsys, "compare", "--model", "llama3-8b", "--cluster", "dgx-h100:2",
                       "--plan", "pp=2,mbs=1,gbs=16,zero=0", "--framework", "megatron-lm-2021",
                       "--dtype", "fp8")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "dtype='fp8'" in err and "megatron-lm-2021 runs --dtype fp16, bf16" in err


def test_whatif_refuses_in_one_line(capsys):
    rc, out, err = run(capsys, "whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                       "--global-batch", "16", "--framework", "composer", "--dtype", "mxfp8",
                       "--vary", "nodes=1,2")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "dtype='mxfp8'" in err and "pytorch-eager runs --dtype" in err


def test_estimate_accepts_a_precision_the_stack_has(capsys):
    rc, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--cluster", "dgx-b200:1",
                       "--plan", PLAN, "--framework", "torchtitan", "--dtype", "mxfp8",
                       "--json")
    assert rc == 0, err
    assert json.loads(out)["inputs"]["dtype"] == "mxfp8"


@pytest.mark.parametrize("kind, fw, dtype", [
    ("torchtitan", TORCHTITAN, "fp16"), ("torchtitan", TORCHTITAN, "fp8-blockwise"),
    ("torchtitan", TORCHTITAN, "nvfp4"), ("maxtext", JAX_XLA, "fp8-blockwise"),
    ("llm-foundry", PYTORCH_EAGER, "fp8-current"), ("llm-foundry", PYTORCH_EAGER, "mxfp8"),
    ("deepspeed", MEGATRON_DEEPSPEED, "fp8"), ("deepspeed", MEGATRON_DEEPSPEED, "nvfp4"),
])
def test_exporter_dtype_refusal_is_the_profiles(kind, fw, dtype):
    # built with no stack named, so the exporter's own check is what refuses
    job = _job(None, dtype)
    with pytest.raises(SpecError) as e:
        export(kind, job)
    assert e.value.field == "--export"
    assert f"--dtype {dtype}: {precision_rule(fw, dtype)}" in str(e.value)


@pytest.mark.parametrize("kind, fw", [("torchtitan", TORCHTITAN), ("maxtext", JAX_XLA),
                                      ("llm-foundry", PYTORCH_EAGER),
                                      ("deepspeed", MEGATRON_DEEPSPEED)])
def test_exporters_write_each_precision_the_profile_has(kind, fw):
    for d in fw.precisions:
        if kind == "torchtitan" and d in ("fp8", "fp8-delayed"):
            # the 2024 stack's delayed scaling; torchao dropped it before v0.2.2
            with pytest.raises(SpecError, match="delayed scaling"):
                export(kind, _job(fw.name, d))
            continue
        text, _ = export(kind, _job(fw.name, d))
        assert text


def test_presets_lists_each_profiles_precisions(capsys):
    rc, out, _ = run(capsys, "presets", "--json")
    assert rc == 0
    rows = {f["name"]: f for f in json.loads(out)["frameworks"]}
    for name, fw in PROFILES.items():
        assert rows[name]["precisions"] == list(fw.precisions)
        assert rows[name]["precision_source"] == fw.precision_source
    rc, out, _ = run(capsys, "presets")
    assert rc == 0 and "precisions" in out
    assert ",".join(PROFILES["megatron-lm-2021"].precisions) in out
