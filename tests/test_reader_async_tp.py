"""The reference reader states torchtitan's async TP where a row's techniques or precision
name it (docs/calibration.md §5.84): the Dec 2024 benchmark's Table 4 "2D + AsyncTP" and
Table 5 "... + AsyncTP" rows ran it, and so did Table 6's ("4D parallelism ... + torch.compile +
Float8 + AsyncTP + 1F1B", §5.94)."""
import copy

import pytest

from simulator.studies.validate import load_cases
from strategies.reference.cases import case_from_entry, load_reference
from strategies.reference.stated_switches import stated_async_tp

DATA = "strategies/reference/data/"


@pytest.mark.parametrize("text,said", [
    ("FSDP+TP(async)+compile+Float8", True), ("FSDP+TP+PP 1F1B+compile+Float8+AsyncTP", True),
    ("fp8 linears (torch.compile, async TP)", True), ("FSDP2+TP(async)", True),
    ("FSDP+TP+compile+Float8", False), ("FSDP+TP+PP 1F1B+CP", False), ("", False)])
def test_stated_async_tp(text: str, said: bool) -> None:
    assert (stated_async_tp({"plan": {"techniques": text}}) is not None) == said
    assert (stated_async_tp({"precision": text}) is not None) == said


def test_rows_read_with_async_tp() -> None:
    # Table 6's title states "+ torch.compile + Float8 + AsyncTP + 1F1B": its four CP rows
    # are transcribed with it (docs/calibration.md §5.94)
    on = {"torchtitan_2412_70B_t4_2d_asynctp", "torchtitan_2412_405B_t5_1f1b",
          "torchtitan_2412_405B_t5_interleaved", "torchtitan_2412_405b_512_fp8_1f1b",
          "torchtitan_2412_405b_512_fp8_interleaved"} \
        | {f"torchtitan_2412_405B_t6_cp{n}" for n in (1, 2, 4, 8)}
    seen = set()
    for name in ("published.json", "published_2026.json"):
        for c in load_cases(DATA + name, tiers=None):
            if not c.id.startswith("torchtitan_2412") or c.job is None:
                continue
            seen.add(c.id)
            assert c.job.plan.tp_comm_overlap == (c.id in on), c.id
            if c.id in on:
                assert any(a.startswith("tp_comm_overlap=true (stated:") for a in c.assumptions)
    assert on <= seen and "torchtitan_2412_70B_t4_2d" in seen


def test_a_stated_boolean_wins_and_other_stacks_ignore_the_words() -> None:
    rows = {c["id"]: c for c in load_reference()}
    row = copy.deepcopy(rows["torchtitan_2412_70B_t4_2d_asynctp"])
    row["plan"]["tp_comm_overlap"] = False
    assert not case_from_entry(row).job.plan.tp_comm_overlap
    other = copy.deepcopy(rows["torchtitan_2412_70B_t4_2d_asynctp"])
    other["source"]["ref"] = "Megatron-Core benchmark"
    case = case_from_entry(other)
    assert case.job is None or case.job.framework.tp_overlap != "async-tp" \
        and not any("async TP" in a for a in case.assumptions)
