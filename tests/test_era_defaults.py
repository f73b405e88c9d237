"""Era and stack defaults: each profile's default switches carry a source, and the reference
reader states every default it applies as an assumption of the case."""
import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.profile_fields import DEFAULT_SWITCHES
from strategies.reference.cases import case_from_entry

DATA = json.loads((Path(__file__).resolve().parents[1] / "strategies" / "reference" / "data"
                   / "published.json").read_text())
BY_ID = {e["id"]: e for e in DATA}


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_default_has_a_source(name):
    fw = PROFILES[name]
    assert {k for k, _ in fw.default_sources} == set(DEFAULT_SWITCHES)
    assert all(len(src) > 20 for _, src in fw.default_sources)


def test_a_source_for_an_unknown_switch_is_refused():
    with pytest.raises(SpecError, match="default_sources"):
        replace(MEGATRON_CORE, default_sources=(("fp8", "x"),))


def _lines(case, switch):
    return [a for a in case.assumptions if a.startswith(switch + "=")]


def test_2022_megatron_lm_run_has_no_flash_attention_and_says_so():
    e = copy.deepcopy(BY_ID["narayanan2021_t1_18.4B"])
    e["id"] = "synthetic_megatron_lm_2022"
    e["source"] = {"ref": "Megatron-LM, 2022 benchmark", "table": "synthetic"}
    case = case_from_entry(e)
    assert case.job.framework.name == "megatron-lm-2021"
    assert case.job.plan.flash_attn is False
    (line,) = _lines(case, "flash_attn")
    assert "megatron-lm-2021 default" in line and "FlashAttention" in line


def test_nemo_recipe_turns_tp_overlap_on_and_says_so():
    case = case_from_entry(BY_ID["dgxc_nemo2411_nemotron4_15B_bf16_16gpu"])
    assert case.job.plan.tp_comm_overlap is True
    (line,) = _lines(case, "tp_comm_overlap")
    assert line.startswith("tp_comm_overlap=true (nemo default: NeMo")


def test_stated_flags_are_not_assumptions():
    """Megatron-Core's README runs state --overlap-grad-reduce etc.: applied, not assumed."""
    case = case_from_entry(BY_ID["megatron_core_h100_weak_32B"])
    assert case.job.plan.overlap_grad_reduce and case.job.plan.overlap_param_gather
    for switch in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"):
        assert _lines(case, switch) == []
    assert len(_lines(case, "flash_attn")) == 1


def test_every_applied_switch_is_stated_or_assumed():
    for e in DATA:
        case = case_from_entry(e)
        if case.job is None:
            continue
        flags = str((e.get("plan") or {}).get("overlap") or "").lower()
        words = f"{(e.get('plan') or {}).get('techniques') or ''} {e.get('notes') or ''}".lower()
        for switch in ("flash_attn", "overlap_grad_reduce", "overlap_param_gather",
                       "tp_comm_overlap"):
            lines = _lines(case, switch)
            assert len(lines) <= 1
            if lines:
                value = getattr(case.job.plan, switch)
                assert lines[0].startswith(f"{switch}={str(value).lower()} (")
            else:
                stated = ("flash" in words if switch == "flash_attn"
                          else "--" + switch.replace("_", "-") in flags)
                assert stated, (e["id"], switch)
