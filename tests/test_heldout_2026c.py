"""Held-out published runs (``strategies/reference/data/heldout_2026c.json``, calibration
§5.199): Megatron-Bridge's 26.02 container tables. The transcriber writes the file byte for
byte from the inputs the repository keeps; every row names its source and derives its step by
the stated formula; every row builds a job with the plan its source states; the MoE rows run
the switches of the v0.3.0 config whose layout is theirs, the Llama rows the stack's
defaults."""
from __future__ import annotations

import copy
import json
import os

import pytest

from experiments import transcribe_heldout_2026c as tr
from strategies.reference.cases import case_from_entry, load_reference
from tests.bridge_table_rows import assert_table_row

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
ROWS = load_reference(os.path.join(ROOT, tr.OUT))
BY_ID = {r["id"]: r for r in ROWS}
MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"


with open(os.path.join(ROOT, tr.INPUTS), encoding="utf-8") as _f:
    INPUTS = json.load(_f)


def _inputs() -> dict:
    """A copy of the kept inputs (a test may change it)."""
    return copy.deepcopy(INPUTS)


def test_the_transcriber_writes_the_data_file() -> None:
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        assert tr.dump(tr.transcribe(_inputs())) == f.read()


def test_rows_name_their_source_and_derive_the_step() -> None:
    assert len(ROWS) == len(BY_ID) == 33
    assert sum(r["plan"]["ep"] > 1 for r in ROWS) == 19
    for r in ROWS:
        assert_table_row(r)
        assert "(26.02 NeMo container), commit " in r["source"]["table"]
        assert "Megatron-Bridge v0.3.0" in r["stack"]


def test_a_row_s_cells_parse_in_the_table_s_order() -> None:
    """The 14 cells (FSDP the 7th): a changed cell moves exactly its field."""
    cells = "DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | n/a | 1621 | 728".split(
        " | ")
    b = tr.parse("LLAMA3_70B", cells)
    assert (b["n"], b["gbs"], b["mbs"], b["seq"], b["fsdp"], b["tp"], b["pp"], b["cp"],
            b["vp"], b["ep"], b["tok"], b["tfl"]) == (64, 256, 1, 8192, 0, 4, 8, 1, 5, 1,
                                                      1621, 728)
    cells[6] = "64"
    assert tr.parse("LLAMA3_70B", cells)["fsdp"] == 64


def test_every_row_builds_the_stated_plan() -> None:
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        assert not case.skipped, (r["id"], case.skipped)
        pl, p = r["plan"], case.job.plan
        assert (p.tp, p.pp, p.dp, p.cp, p.ep) == (pl["tp"], pl["pp"], pl["dp"], pl["cp"],
                                                  pl["ep"])
        assert (p.mbs, p.gbs, p.vpp) == (pl["microbatch"], pl["global_batch"],
                                         pl["virtual_stages"])
        assert case.job.framework.name == "nemo"
        assert case.measured_step_s == pytest.approx(r["derived"]["step_time_s"], rel=1e-4)
        # the FSDP column: 64 -> ZeRO-3 over every GPU; 0 -> none stated, no sharding
        assert p.zero == 3 if pl["zero_stage"] == 3 else p.zero in (0, 1)


def test_moe_rows_run_their_v030_config_and_llama_rows_the_defaults() -> None:
    for r in ROWS:
        pl, p = r["plan"], case_from_entry(r, ROWS).job.plan
        if pl["ep"] == 1:
            assert "moe_dispatcher" not in pl and "No Megatron-Bridge v0.3.0" in r["notes"]
            continue
        assert "@v0.3.0 scripts/performance/configs/" in r["notes"]
        assert (p.moe_dispatcher, p.ep_overlap, p.cuda_graph, p.etp) == (
            pl["moe_dispatcher"], pl["ep_overlap"], pl["cuda_graph"], pl["etp"])
        if r["model"]["name"] == "deepseek-v3":
            assert p.layout == pl["pp_layout"] == tr.DSV3_16
    # v0.3.0 graphs no whole step; the H100 Qwen3 configs overlap the expert all-to-all
    assert not any(r["plan"].get("cuda_graph") for r in ROWS)
    assert {r["id"] for r in ROWS if r["plan"].get("ep_overlap")} == {
        "mbridge2602_qwen330ba3b_h100_16_fp8", "mbridge2602_qwen3235ba22b_h100_256_fp8",
        "mbridge2602_qwen3235ba22b_b300_256_mxfp8"}
    # the H100 235B config's expert TP 1 under tp 2 is what lets ep 32 divide the stage
    assert BY_ID["mbridge2602_qwen3235ba22b_h100_256_fp8"]["plan"]["etp"] == 1
    assert BY_ID["mbridge2602_qwen3235ba22b_h100_256_fp8"]["precision"].startswith(
        "fp8 (current scaling")


def test_a_layout_no_config_has_keeps_the_defaults() -> None:
    """Change a row's micro-batch in the inputs: no v0.3.0 config fits, so no switch is
    stated."""
    src = _inputs()
    cells = src["tables"]["Qwen3_30B_a3B"][0]
    cells[4] = str(int(cells[4]) * 2)
    row = next(r for r in tr.transcribe(src)
               if r["id"] == "mbridge2602_qwen330ba3b_gb300_8_mxfp8")
    assert "moe_dispatcher" not in row["plan"] and "No Megatron-Bridge v0.3.0" in row["notes"]


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge clone (mirror)")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRROR) == _inputs()
