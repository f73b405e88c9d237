"""Held-out published runs (``strategies/reference/data/heldout_2026d.json``, calibration
§5.204): Megatron-Bridge's 26.04 and 26.02.01 container tables. The transcriber writes the
file byte for byte from the inputs the repository keeps; every row names its container and
the Megatron-Bridge tag that container ships, derives its step by the stated formula and
builds a job with the plan its source states; no other reference file holds a row of either
container; a recipe that sets the all-to-all dispatcher overrides its config's flex backend."""
from __future__ import annotations

import copy
import glob
import os

import pytest

from experiments import transcribe_heldout_2026c as c26
from experiments import transcribe_heldout_2026d as tr
from strategies.reference.cases import case_from_entry
from tests.bridge_table_rows import (MIRROR, ROOT, assert_builds_its_plan, assert_table_row,
                                     assert_writes_data_file, transcribed)

ROWS, BY_ID, INPUTS = transcribed(tr)
H100_235B = "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"


def test_the_transcriber_writes_the_data_file() -> None:
    assert_writes_data_file(tr, INPUTS)


def test_rows_name_their_container_and_tag_and_derive_the_step() -> None:
    assert len(ROWS) == len(BY_ID) == 62
    assert sum(r["plan"]["ep"] > 1 for r in ROWS) == 36
    for c in tr.CONTAINERS:
        mine = [r for r in ROWS if r["id"].startswith(c.prefix + "_")]
        assert len(mine) == 31
        for r in mine:
            assert_table_row(r)
            assert f"({c.name} NeMo container), commit " in r["source"]["table"]
            assert r["stack"].startswith(f"Megatron-Bridge {c.tag} ")
            if "moe_dispatcher" in r["plan"]:
                assert f"@{c.tag} scripts/performance/configs/" in r["notes"]


def test_no_other_file_holds_a_row_of_these_containers() -> None:
    marks = [f"({c.name} NeMo container)" for c in tr.CONTAINERS]
    for path in glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json")):
        if path.endswith(os.path.basename(tr.OUT)):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert not any(m in text for m in marks), path


def test_every_row_builds_its_plan_and_switches() -> None:
    for r in ROWS:
        pl, p = r["plan"], assert_builds_its_plan(r, ROWS).job.plan
        if "moe_dispatcher" in pl:
            assert (p.moe_dispatcher, p.ep_overlap, p.cuda_graph) == (
                pl["moe_dispatcher"], pl["ep_overlap"], pl["cuda_graph"])


def test_a_recipe_s_alltoall_overrides_the_config_s_flex_backend() -> None:
    """v0.3.1's Qwen3-235B H100 config names DeepEP, its recipe function sets the all-to-all
    dispatcher: the row runs all-to-all, said; without the recipe's setting it would run
    DeepEP."""
    rid = "mbridge260201_qwen3235ba22b_h100_256_fp8"
    cfg = INPUTS["26.02.01"]["configs"][H100_235B]
    assert (cfg["moe_flex_dispatcher_backend"], cfg["moe_token_dispatcher_type"]) == (
        "deepep", "alltoall")
    assert BY_ID[rid]["plan"]["moe_dispatcher"] == "alltoall"
    assert "moe_flex_dispatcher_backend=deepep goes unused" in BY_ID[rid]["notes"]
    src = copy.deepcopy(INPUTS)
    del src["26.02.01"]["configs"][H100_235B]["moe_token_dispatcher_type"]
    row = next(r for r in tr.transcribe(src) if r["id"] == rid)
    assert row["plan"]["moe_dispatcher"] == "deepep" and "goes unused" not in row["notes"]
    # the same layout in 26.04 (v0.4.0): no flex backend named, all-to-all, nothing to say
    other = BY_ID["mbridge2604_qwen3235ba22b_h100_256_fp8"]
    assert other["plan"]["moe_dispatcher"] == "alltoall" and "goes unused" not in other["notes"]


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge clone (mirror)")
def test_the_recipe_s_dispatcher_is_read_at_the_tag() -> None:
    file = "qwen/qwen3_workload_base_configs.py"
    assert c26.recipe_dispatcher(MIRROR, "v0.3.1", H100_235B, file) == {
        "moe_token_dispatcher_type": "alltoall"}
    # v0.3.0 passes the backend to the library recipe and assigns no dispatcher type
    assert c26.recipe_dispatcher(MIRROR, "v0.3.0", H100_235B, file) == {}


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge clone (mirror)")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRROR) == INPUTS


#: the 26.02.01 rows whose layout cells differ from v0.3.1's default config, and the cells
#: (table vs config): every other row of both containers agrees with its tag's config
DIFFERS = {
    "mbridge260201_llama370b_gb300_64_nvfp4": "pp 1 vs 4, vp n/a vs 5, mbs 2 vs 1",
    "mbridge260201_llama370b_gb300_64_mxfp8": "vp n/a vs 5, mbs 2 vs 1",
    "mbridge260201_llama31405b_gb200_256_nvfp4": "vp 4 vs 8",
    "mbridge260201_llama31405b_gb300_256_fp8": "tp 2 vs 4, cp 2 vs 1",
    "mbridge260201_gptoss120b_b300_64_bf16": "ep 8 vs 64",
    "mbridge260201_gptoss120b_b200_64_bf16": "ep 8 vs 64",
    "mbridge260201_qwen330ba3b_h100_16_fp8": "pp 2 vs 1, vp 12 vs n/a, ep 8 vs 16",
    "mbridge260201_qwen3235ba22b_b300_256_mxfp8": "vp 4 vs n/a"}


#: the rows whose table cells cannot fit in memory while their config's can (§5.206): the
#: config's cells (tp, pp, vp, mbs) and the two peaks (GiB per GPU) their assumptions state
MOVED = {"mbridge260201_llama370b_gb300_64_nvfp4": ((1, 4, 5, 1), "839.8", "335.4"),
         "mbridge260201_llama370b_gb300_64_mxfp8": ((1, 4, 5, 1), "443.9", "318.1")}


def test_each_row_s_layout_is_checked_against_its_tag_s_default_config() -> None:
    """§5.204: every row names the config the performance script loads by default at its
    tag (V2, else V1) and either agrees with it or lists the cells that differ; the row
    keeps the table's cells unless they cannot fit in memory and the config's can (§5.206:
    two rows move, and their assumptions say from where and why)."""
    for r in ROWS:
        tag = next(c.tag for c in tr.CONTAINERS if r["id"].startswith(c.prefix + "_"))
        assert f"NVIDIA-NeMo/Megatron-Bridge@{tag} scripts/performance/configs/" in r["notes"]
        cells = r["source"]["row"].strip("| \n").split(" | ")
        table = (int(cells[7]), int(cells[8]), 1 if cells[10] == "n/a" else int(cells[10]),
                 int(cells[4]))
        pl = r["plan"]
        plan = (pl["tp"], pl["pp"], pl["virtual_stages"], pl["microbatch"])
        if r["id"] in MOVED:
            cfg, before, after = MOVED[r["id"]]
            assert plan == cfg != table
            why = r["plan_from"]
            assert why in r["notes"] and f": {DIFFERS[r['id']]} (table vs config)" in why
            assert f"peaks at {before} GiB per GPU against 279.0 GiB" in why
            assert f"config's cells at {after} GiB" in why
            assert f"plan: {why}" in case_from_entry(r).assumptions
            continue
        assert "plan_from" not in r
        assert plan == table      # the table's cells are the plan
        if r["id"] in DIFFERS:
            assert (f"differ from NVIDIA-NeMo/Megatron-Bridge@{tag}" in r["notes"]
                    and f": {DIFFERS[r['id']]} (table vs config); the row keeps the table's "
                    "cells" in r["notes"]), r["id"]
        else:
            assert "Layout cells (tp, pp, cp, vp, ep, mbs, gbs, sharded dp) as " in r["notes"]
    row = BY_ID["mbridge260201_llama370b_gb300_64_mxfp8"]
    assert "L219-223 LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2" in row["notes"]


def test_the_fit_rule_moves_a_row_only_to_cells_that_fit() -> None:
    """``fit_rule``: the table's cells where they fit (the 405B GB200 NVFP4 row differs from its
    config, vp 4 vs 8, and fits) or where the config's do not fit either; the config's where
    only they fit; no config: the table's."""
    src = INPUTS["26.02.01"]
    c = tr.CONTAINERS[1]
    rows = {f"{b['key']} {b['sysn']} {b['prec']}": b for b in
            (c26.parse(name, cells) for name, t in src["tables"].items() for cells in t)}

    def plan(b: dict, note: str) -> dict:    # the row of cells b, by fit_rule's own builder
        models = {r["model"]["name"]: {k: v for k, v in r["model"].items() if k != "seq_len"}
                  for r in ROWS}
        return c26.row_of(src, b, c, models, note)

    nvfp4 = rows["llama3-70b DGX-GB300 NVFP4"]
    got = c26.fit_rule(src, nvfp4, c, plan)
    assert (got["plan"]["pp"], got["plan"]["virtual_stages"], got["plan"]["microbatch"]) == (
        4, 5, 1) and "plan_from" in got
    vp4 = rows["llama3.1-405b DGX-GB200 NVFP4"]
    got = c26.fit_rule(src, vp4, c, plan)
    assert got["plan"]["virtual_stages"] == 4 and "plan_from" not in got
    # a config that cannot fit either (pp 1, mbs 4): the table's cells stay
    name = c26.default_config(src["layout_configs"], nvfp4)
    worse = {**src["layout_configs"][name], "pipeline_model_parallel_size": 1,
             "virtual_pipeline_model_parallel_size": None, "micro_batch_size": 4}
    got = c26.fit_rule({**src, "layout_configs": {name: worse}}, nvfp4, c, plan)
    assert (got["plan"]["pp"], got["plan"]["microbatch"]) == (1, 2) and "plan_from" not in got
    # no config for the row: the table's cells, and no config cells to try
    assert c26.config_cells({**src, "layout_configs": {}}, nvfp4) is None
    got = c26.fit_rule({**src, "layout_configs": {}}, nvfp4, c, plan)
    assert got["plan"]["pp"] == 1 and "plan_from" not in got


def test_the_layout_check_reads_the_script_s_default_variant() -> None:
    cfg = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=4,
               context_parallel_size=1, virtual_pipeline_model_parallel_size=5,
               expert_model_parallel_size=1, micro_batch_size=1, global_batch_size=256,
               use_megatron_fsdp=None, file="llama/llama3_workload_base_configs.py",
               lines="L1-4")
    b = c26.parse("LLAMA3_70B", ["DGX-GB300", "64", "MXFP8", "256", "2", "8192", "0", "1",
                                 "4", "1", "n/a", "n/a", "4798", "2157"])
    head = "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX"
    both = {head + "_V1": {**cfg, "global_batch_size": 128}, head + "_V2": cfg}
    assert c26.default_config(both, b) == head + "_V2"
    assert c26.default_config({head + "_V1": cfg, head: cfg}, b) == head + "_V1"
    assert c26.default_config({"LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_V2": cfg}, b) is None
    note = c26.layout_check({"layout_configs": both}, b, tr.CONTAINERS[1])
    assert ": vp n/a vs 5, mbs 2 vs 1 (table vs config)" in note
    # a stated sharded data-parallel cell against a config without it: named, not as "FSDP"
    # (the reader would take the word in notes for a stated FSDP)
    b64 = {**b, "fsdp": 64, "vp": 5, "mbs": 1}
    note = c26.layout_check({"layout_configs": both}, b64, tr.CONTAINERS[1])
    assert note.endswith("sharded dp True vs False (table vs config); the row keeps the "
                         "table's cells (the page states what ran; calibration §5.204).")
    assert "fsdp" not in note.lower().replace("use_megatron_fsdp", "")


def test_config_lines_span_the_definition() -> None:
    text = "A = 1\nB = replace(\n    A,\n    x=2,\n)\nC = B\n"
    assert (c26.config_lines(text, "B"), c26.config_lines(text, "C")) == ("L2-5", "L6")
