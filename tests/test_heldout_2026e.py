"""Held-out published runs (``strategies/reference/data/heldout_2026e.json``, calibration
§5.208): Megatron-Bridge's 25.11 and 25.09 container tables. The transcriber writes the file
byte for byte from the inputs the repository keeps; a cell "a (b)" gives two runs; every row
names its container and derives its step by the stated formula; a run whose layout another
file holds for the same container is skipped; the 25.09 token-dropping runs drop and pad at
the capacity factor ``apply_moe_token_drop`` defaults to, and the reader runs them so; each
row takes the switches its tag's config states (calibration §5.210)."""
from __future__ import annotations

import copy
import os

import pytest

from experiments import transcribe_heldout_2026e as tr
from strategies.reference.cases import case_from_entry, load_reference
from tests.bridge_table_rows import (MIRROR, ROOT, assert_builds_its_plan, assert_table_row,
                                     assert_writes_data_file, transcribed)

ROWS, BY_ID, INPUTS = transcribed(tr)


def test_the_transcriber_writes_the_data_file() -> None:
    assert_writes_data_file(tr, INPUTS)


def test_rows_name_their_container_and_derive_the_step() -> None:
    assert len(ROWS) == len(BY_ID) == 47
    for (name, tag, _, prefix), n in zip(tr.CONTAINERS, (20, 27)):
        mine = [r for r in ROWS if r["id"].startswith(prefix + "_")]
        assert len(mine) == n
        for r in mine:
            assert_table_row(r, "| ")
            assert f"({name} NeMo container), commit " in r["source"]["table"]
            assert r["stack"].startswith(f"Megatron-Bridge {tag} ")


def test_a_cell_with_parentheses_is_two_runs() -> None:
    """25.09's GB200 Llama 3 70B row: FSDP tp1 pp1 outside the parentheses, tp2 pp4 vp5
    inside (MXFP8, the footnote's other granularity), each with its own tokens/s."""
    cells = next(c for c in INPUTS["25.09"]["tables"]["DGX-GB200"] if c[0] == "LLAMA3_70B")
    a, b = tr.parse("25.09", "DGX-GB200", cells)
    assert (a["prec"], a["fsdp"], a["tp"], a["pp"], a["vp"], a["ga"], a["tok"]) == (
        "FP8-CS", 64, 1, 1, None, 1, 3986)
    assert (b["prec"], b["fsdp"], b["tp"], b["pp"], b["vp"], b["ga"], b["tok"]) == (
        "FP8-MX", 0, 2, 4, 5, 16, 3546)
    # a row without a parenthesised tokens cell is one run (H100: no blockwise run given)
    cells = next(c for c in INPUTS["25.09"]["tables"]["DGX-H100"] if c[0].startswith("DeepS"))
    assert [r["prec"] for r in tr.parse("25.09", "DGX-H100", cells)] == ["FP8-CS"]
    assert tr.runs("338 (330)") == ("338", "330") and tr.runs("n/a") == ("n/a", None)


def test_runs_another_file_holds_are_skipped() -> None:
    """published_2026.json holds twelve of the 25.11 table's runs: exactly those are left
    out; no 25.09 run is held elsewhere."""
    every = tr.every_run(copy.deepcopy(INPUTS))
    held = [(r["id"], other) for r, other in every if other]
    assert len(every) == 59 and len(held) == 12
    assert all(i.startswith("mbridge2511_") and o.startswith("mbridge2511_") for i, o in held)
    assert not any(i in BY_ID for i, _ in held)
    pub = {r["id"] for r in load_reference(os.path.join(
        ROOT, "strategies/reference/data/published_2026.json"))}
    assert {o for _, o in held} <= pub


def test_token_dropping_runs_drop_and_pad() -> None:
    """A 25.09 'tokendrop' run: capacity factor 1.0 and padding (apply_moe_token_drop's
    defaults at v0.1.0rc3), the all-to-all dispatcher, no forced balancing; the reader runs
    every expert at its capacity. The dropless H100 DeepSeek-V3 run: forced, DeepEP."""
    assert INPUTS["token_drop"]["capacity_factor"] == 1.0 and INPUTS["token_drop"][
        "pad_to_capacity"] is True
    drop = [r for r in ROWS if "tokendrop" in r["source"]["row"]]
    assert len(drop) == 13
    for r in drop:
        pl = r["plan"]
        assert (pl["moe_capacity_factor"], pl["moe_pad_to_capacity"], pl["moe_dispatcher"]) \
            == (1.0, True, "alltoall") and "moe_balance" not in pl
    case = case_from_entry(BY_ID["mbridge2509_qwen330ba3b_b200_8_fp8cs"], ROWS)
    p = case.job.plan
    assert (p.moe_capacity_factor, p.moe_pad_to_capacity) == (1.0, True)
    assert any("drop-and-pad at moe_capacity_factor 1 " in a for a in case.assumptions)
    h100 = BY_ID["mbridge2509_deepseekv3_h100_1024_fp8cs"]["plan"]
    assert (h100["moe_balance"], h100["moe_dispatcher"], h100["ep_overlap"]) == (
        "forced", "deepep", True) and "moe_capacity_factor" not in h100
    # every 25.11 MoE run is dropless with forced balancing (the table's footnote)
    for r in ROWS:
        if r["id"].startswith("mbridge2511_") and r["plan"]["ep"] > 1:
            assert r["plan"]["moe_balance"] == "forced" and "moe_capacity_factor" not in r["plan"]


def test_every_row_builds_its_plan_but_one_that_cannot_be_laid_out() -> None:
    """Each row builds the job its cells state; the 25.09 GB200 DeepSeek-V3 MXFP8 run (pp 8,
    ep 64 on 256 GPUs: 32 ranks a stage) cannot hold its expert groups and is skipped, said."""
    for r in ROWS:
        if r["id"] == "mbridge2509_deepseekv3_gb200_256_mxfp8":
            assert "etp*ep = 1*64 = 64 must divide the ranks of a pipeline stage" in str(
                case_from_entry(r, ROWS).skipped)
            continue
        case = assert_builds_its_plan(r, ROWS)
        if "etp" in r["plan"]:
            assert case.job.plan.expert_tp == r["plan"]["etp"]


def test_expert_tp_is_the_configs() -> None:
    """The tp 2 Qwen3-235B runs take etp 1 from their tag's configs; without it etp would be
    tp and ep 32 on a stage of 32 ranks could not be laid out."""
    rid = "mbridge2511_qwen3235ba22b_h100_256_fp8cs"
    assert INPUTS["etp"]["25.11"]["QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG"] == 1
    assert BY_ID[rid]["plan"]["etp"] == 1
    src = copy.deepcopy(INPUTS)
    del src["etp"]["25.11"]["QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG"]
    row = next(r for r in tr.transcribe(src) if r["id"] == rid)
    assert "etp" not in row["plan"] and case_from_entry(row).skipped


def test_a_ga_cell_that_contradicts_the_batch_is_said() -> None:
    """Two rows' GA cells are not gbs / (mbs x dp): the plan accumulates what the batch cells
    give and the notes say so; every other row's GA cell is the plan's."""
    off = {"mbridge2511_gptoss120b_h100_64_bf16": (2, 8),
           "mbridge2509_llama370b_gb200_64_mxfp8": (16, 8)}
    for r in ROWS:
        if r["id"] in off:
            cell, ga = off[r["id"]]
            assert r["plan"]["grad_accum"] == ga
            assert f"GA cell ({cell}) contradicts" in r["notes"]
        else:
            assert "contradicts" not in r["notes"]


def test_25_11_rows_take_their_configs_switches() -> None:
    """The v0.2.0 config of a 25.11 run's model, GPU and precision gives its switches: the
    all-to-all overlap (with delayed weight gradients) and no TP overlap on H100's
    Qwen3-235B-A22B, a full-iteration CUDA graph for Llama 3 8B on Blackwell, 5 layers of
    full recomputation for Llama 3 8B on H100, HybridEP on GB200 only, gpt-oss's selective
    recomputation; layer-level CPU offloading as the plan key (§5.211), which brings the
    GB200 Llama 3 70B row under its HBM."""
    q = BY_ID["mbridge2511_qwen3235ba22b_h100_256_fp8cs"]["plan"]
    assert (q["ep_overlap"], q["delay_wgrad"], q["tp_comm_overlap"], q["recompute"]) == (
        True, True, False, "none")
    cfgs = INPUTS["configs"]["25.11"]
    assert cfgs["QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG"]["moe_a2a_overlap"] is True
    for gpu in ("gb300", "gb200", "b200"):
        assert BY_ID[f"mbridge2511_llama38b_{gpu}_8_fp8cs"]["plan"]["cuda_graph"] is True
    assert "cuda_graph" not in BY_ID["mbridge2511_llama38b_h100_8_fp8cs"]["plan"]
    p = case_from_entry(BY_ID["mbridge2511_llama38b_h100_8_fp8cs"], ROWS).job.plan
    assert (p.recompute, p.recompute_layers, p.recompute_method) == ("full", 5, "block")
    # the same config key both Qwen3-30B-A3B Blackwell runs read: HybridEP named on GB200
    # runs there; B200's names none
    assert BY_ID["mbridge2511_qwen330ba3b_gb200_8_mxfp8"]["plan"]["moe_dispatcher"] == "hybridep"
    assert BY_ID["mbridge2511_qwen330ba3b_b200_8_mxfp8"]["plan"]["moe_dispatcher"] == "alltoall"
    src = copy.deepcopy(INPUTS)
    src["configs"]["25.11"]["QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG"][
        "moe_flex_dispatcher_backend"] = "hybridep"
    row = next(r for r in tr.transcribe(src) if r["id"] == "mbridge2511_qwen330ba3b_b200_8_mxfp8")
    assert row["plan"]["moe_dispatcher"] == "alltoall" and "GB200/GB300 only" in row["notes"]
    g = BY_ID["mbridge2511_gptoss120b_h100_64_bf16"]["plan"]
    assert (g["recompute"], g["recompute_modules"]) == ("selective", "layernorm+moe_act")
    r70 = BY_ID["mbridge2511_llama370b_gb200_64_fp8cs"]
    assert "cpu_offloading_num_layers 40" in r70["notes"] and "§5.211" in r70["notes"]
    assert r70["plan"]["cpu_offloading_num_layers"] == 40
    assert BY_ID["mbridge2511_llama370b_gb300_64_fp8cs"]["plan"]["cpu_offloading_num_layers"] == 20
    assert "cpu_offloading_num_layers" not in BY_ID["mbridge2511_llama38b_h100_8_fp8cs"]["plan"]


def test_25_09_deepseek_takes_the_yamls_pipeline_layout_where_it_fits() -> None:
    """v0.1.0rc3's DeepSeek-V3 YAML names the 32-stage layout Et|(tt|)*30mL: H100's pp 8 x vp 4
    is it; B200's pp 16 with no vp gets vp 2 from it (Megatron-Core takes an unset vp from the
    layout); GB200's pp 4 x vp 4 cannot be it (a stated vp must equal the layout's) and keeps
    the reader's split, said."""
    h100 = BY_ID["mbridge2509_deepseekv3_h100_1024_fp8cs"]["plan"]
    assert (h100["pp_layout"], h100["virtual_stages"], h100["overlap_grad_reduce"]) == (
        "Et|(tt|)*30mL", 4, False)
    for rid in ("mbridge2509_deepseekv3_b200_256_fp8cs", "mbridge2509_deepseekv3_b200_256_mxfp8"):
        pl = BY_ID[rid]["plan"]
        assert (pl["pp"], pl["virtual_stages"], pl["schedule"], pl["pp_layout"]) == (
            16, 2, "interleaved 1F1B", "Et|(tt|)*30mL")
        plan = case_from_entry(BY_ID[rid], ROWS).job.plan
        assert (plan.pp, plan.vpp, plan.layout) == (16, 2, "Et|(tt|)*30mL")
    gb = BY_ID["mbridge2509_deepseekv3_gb200_256_fp8cs"]
    assert "pp_layout" not in gb["plan"] and gb["plan"]["virtual_stages"] == 4
    assert "not applied, the table's pp 4 x vp 4 = 16 chunks" in gb["notes"]
    # a 25.09 Qwen3 run recomputes nothing (the YAML's recompute_granularity null)
    assert BY_ID["mbridge2509_qwen330ba3b_h100_16_fp8cs"]["plan"]["recompute"] == "none"


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge clone (mirror)")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRROR) == INPUTS
