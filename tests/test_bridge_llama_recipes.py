"""What Megatron-Bridge's Llama performance scripts set for the Llama 3 70B / 3.1 405B rows of
its 26.04.01 and 26.06 tables (``strategies.reference.perf_harness``: ``llama_switches``;
docs/calibration.md §5.61): the table's "FP8" runs with current scaling (the harness rule,
``harness_fp8_is_current``, §5.64), NVFP4 runs without TP communication overlap (and 405B on GB200 without the overlapped
parameter gather); each said once with its file; no other row moves."""
from __future__ import annotations

import copy
import json
import os

import pytest

from strategies.reference.perf_harness import harness_fp8_is_current, llama_switches
from strategies.reference.cases import case_from_entry

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")


def _row(name, rid):
    return next(r for r in json.load(open(os.path.join(DATA, name))) if r["id"] == rid)


B2604, B2606 = "megatron_bridge_2604.json", "heldout_2026b.json"


@pytest.mark.parametrize("name,rid", [
    (B2604, "mbridge260401_llama31405b_gb200_256_fp8"),
    (B2604, "mbridge260401_llama370b_gb200_64_fp8"),
    (B2604, "mbridge260401_llama31405b_h100_1024_fp8"),
    (B2606, "mbridge2606_llama31405b_gb300_256_fp8"),
])
def test_table_fp8_runs_current_scaling(name, rid):
    c = case_from_entry(_row(name, rid))
    assert c.job.dtype == "fp8-current"
    said = [a for a in c.assumptions if a.startswith("precision fp8 with current scaling")]
    assert len(said) == 1 and "get_precision_config" in said[0]


@pytest.mark.parametrize("name,rid,pg", [
    (B2604, "mbridge260401_llama31405b_gb200_256_nvfp4", False),
    (B2604, "mbridge260401_llama31405b_gb300_256_nvfp4", True),
    (B2604, "mbridge260401_llama370b_gb200_64_nvfp4", True),
    (B2606, "mbridge2606_llama31405b_gb200_256_nvfp4", False),
])
def test_nvfp4_runs_without_tp_overlap(name, rid, pg):
    """``tp_comm_overlap = False if precision == "nvfp4"`` over the stack's default (on with
    tp and sp); the 405B GB200 config also drops the overlapped parameter gather."""
    c = case_from_entry(_row(name, rid))
    plan = c.job.plan
    assert plan.tp > 1 and plan.sp and plan.tp_comm_overlap is False
    assert plan.overlap_param_gather is pg
    said = [a for a in c.assumptions if a.startswith("tp_comm_overlap=")]
    assert len(said) == 1 and "llm_pretrain.py" in said[0]
    pgs = [a for a in c.assumptions if a.startswith("overlap_param_gather=")]
    assert len(pgs) == 1 and (("PR #3713" in pgs[0]) is not pg)


@pytest.mark.parametrize("name,rid", [
    (B2604, "mbridge260401_llama31405b_gb200_256_mxfp8"),
    (B2604, "mbridge260401_llama370b_gb200_64_mxfp8"),
])
def test_mxfp8_keeps_tp_overlap_and_its_precision(name, rid):
    c = case_from_entry(_row(name, rid))
    assert c.job.dtype == "mxfp8" and c.job.plan.tp_comm_overlap is True
    assert not llama_switches(_row(name, rid))


def test_other_rows_untouched():
    """The DGX Cloud 405B fp8 row (another source), the 25.11 row (which states current
    scaling) and a Bridge MoE row keep their reading."""
    dgxc = _row("dgxc_2505.json", "dgxc2505_llama31_405b_gb200_128_fp8")
    assert not harness_fp8_is_current(dgxc) and not llama_switches(dgxc)
    assert case_from_entry(dgxc).job.dtype == "fp8"
    cs = _row("published_2026.json", "mbridge2511_llama405b_gb200_256_fp8cs")
    assert not llama_switches(cs) and case_from_entry(cs).job.dtype == "fp8-current"
    moe = _row(B2604, "mbridge260401_qwen330ba3b_h100_16_fp8")
    assert not llama_switches(moe)


def test_stated_switch_wins():
    """A row that states its own TP overlap keeps it (the scripts' setting fills only what the
    row leaves to the stack)."""
    r = copy.deepcopy(_row(B2604, "mbridge260401_llama31405b_gb200_256_nvfp4"))
    r["plan"]["tp_comm_overlap"] = True
    c = case_from_entry(r)
    assert c.job.plan.tp_comm_overlap is True and c.job.plan.overlap_param_gather is False
