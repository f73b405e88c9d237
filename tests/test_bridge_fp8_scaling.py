"""What a Megatron-Bridge table's plain "FP8" ran: the performance harness has no delayed-scaling
recipe (``perf_harness.FP8_CS_SOURCE``), so a row whose config is an ``*_FP8_CS_*`` one is
read as fp8 with current scaling, said so with the config and the harness file; a row whose
config is not, or that states its recipe itself, keeps its reading."""
from __future__ import annotations

import copy
import json
import os
from dataclasses import replace

import strategies.reference.cases as cases
from strategies.estimate import estimate
from strategies.reference.bridge_recipes import RECIPES, recipe_for
from strategies.reference.perf_harness import FP8_CS_SOURCE
from strategies.reference.cases import case_from_entry

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")
BRIDGE = json.load(open(os.path.join(DATA, "megatron_bridge_2604.json")))
BY_ID = {r["id"]: r for r in BRIDGE}
#: the 26.04.01 MoE rows whose table cell says FP8 (both Qwen3 H100 layouts)
FP8_ROWS = ("mbridge260401_qwen330ba3b_h100_16_fp8", "mbridge260401_qwen3235ba22b_h100_256_fp8")


def test_every_fp8_config_of_the_table_is_a_current_scaling_one() -> None:
    fp8 = [r for r in RECIPES if r.precision == "fp8"]
    assert fp8 and all(r.current_scaling for r in fp8)
    assert not any(r.current_scaling for r in RECIPES if r.precision != "fp8")


def test_the_26_04_fp8_moe_rows_run_current_scaling_and_say_why() -> None:
    for rid in FP8_ROWS:
        row = BY_ID[rid]
        assert row["precision"] == "fp8"
        r = recipe_for(row)
        assert r is not None and "_FP8_CS_" in r.source
        c = case_from_entry(row, BRIDGE)
        assert c.job.dtype == "fp8-current"
        said = [a for a in c.assumptions if a.startswith("precision fp8 with current scaling")]
        assert len(said) == 1 and r.source.split()[-1] in said[0] and FP8_CS_SOURCE in said[0]


def test_reading_equals_stating_current_scaling() -> None:
    """The row read through its config estimates bit for bit as the same row stating current
    scaling in its precision text (the reader's only change is the dtype)."""
    row = BY_ID[FP8_ROWS[0]]
    stated = copy.deepcopy(row)
    stated["precision"] = "fp8 (current scaling)"
    r = recipe_for(row)
    stated["plan"].update(moe_dispatcher=r.dispatcher, ep_overlap=r.ep_overlap,
                          cuda_graph=r.full_iteration_graph, etp=r.etp, recompute="none")
    a, b = case_from_entry(row, BRIDGE).job, case_from_entry(stated, BRIDGE).job
    assert b.dtype == "fp8-current" and recipe_for(stated) is None
    assert estimate(a).step_time_s == estimate(b).step_time_s


def test_a_config_that_is_not_current_scaling_keeps_the_reading(monkeypatch) -> None:
    row = BY_ID[FP8_ROWS[0]]
    r = recipe_for(row)
    other = replace(r, source=r.source.replace("_FP8_CS_", "_FP8_DS_"))
    assert not other.current_scaling
    monkeypatch.setattr(cases, "recipe_for", lambda c: other)
    monkeypatch.setattr(cases, "harness_fp8_is_current", lambda c: False)
    c = case_from_entry(row, BRIDGE)
    assert c.job.dtype == "fp8"
    assert not any(a.startswith("precision fp8 with current") for a in c.assumptions)


def test_a_stated_precision_is_not_overridden() -> None:
    """mxfp8 / bf16 rows with a config are untouched (the rule reads plain fp8 only)."""
    for rid in ("mbridge260401_qwen330ba3b_gb300_8_mxfp8", "mbridge260401_gptoss120b_h100_64_bf16"):
        row = BY_ID[rid]
        assert recipe_for(row) is not None
        assert case_from_entry(row, BRIDGE).job.dtype == row["precision"]


def test_a_plain_fp8_cell_of_the_2026_harness_tables_is_current_scaling() -> None:
    """The 26.04/26.06 tables came from a harness with no delayed-scaling recipe, so their
    dense "FP8" rows (no recipe-table config) read as current scaling too, and say why; a
    25.11 row or a row of another source is not touched by this rule."""
    from strategies.reference.perf_harness import harness_fp8_is_current
    dense = [r for r in BRIDGE if "llama" in r["id"] and r["precision"] == "fp8"]
    assert len(dense) == 6
    for r in dense:
        c = case_from_entry(r, BRIDGE)
        assert c.job.dtype == "fp8-current", r["id"]
        assert any("no delayed-scaling recipe" in a for a in c.assumptions), r["id"]
    assert not harness_fp8_is_current({"source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                                                  "table": "docs/performance-summary.md "
                                                           "(25.11 NeMo container)"}})
    assert not harness_fp8_is_current({"source": {"ref": "NVIDIA NeMo", "table": "(26.04)"}})


def test_the_26_02_tables_plain_fp8_is_current_scaling_too() -> None:
    """The 26.02 (v0.3.0) and 26.02.01 (v0.3.1) harnesses offer no delayed-scaling recipe
    either (calibration §5.214): each plain "FP8" row of heldout_2026c/d (eleven Llama rows,
    the 26.02.01 Qwen3-30B H100 row) reads as current scaling and says why, and so builds the
    same job as its 26.02 twin that states current scaling in its precision text."""
    from strategies.reference.perf_harness import harness_fp8_is_current
    plain = []
    for name in ("heldout_2026c.json", "heldout_2026d.json"):
        rows = json.load(open(os.path.join(DATA, name)))
        for r in rows:
            if r["precision"] == "fp8" and "(26.02" in r["source"]["table"]:
                c = case_from_entry(r, rows)
                assert harness_fp8_is_current(r) and c.job.dtype == "fp8-current", r["id"]
                assert any("no delayed-scaling recipe" in a for a in c.assumptions), r["id"]
                plain.append(r["id"])
    assert len(plain) == 12 and "mbridge260201_qwen330ba3b_h100_16_fp8" in plain
    held_c = json.load(open(os.path.join(DATA, "heldout_2026c.json")))
    stated = next(r for r in held_c if r["id"] == "mbridge2602_qwen330ba3b_h100_16_fp8")
    assert "current scaling" in stated["precision"]
    assert case_from_entry(stated, held_c).job.dtype == "fp8-current"
