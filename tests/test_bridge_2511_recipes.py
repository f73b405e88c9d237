"""The 25.11 container's Megatron-Bridge rows (``published_2026.json``) read with what their
recipes and their table state (docs/calibration.md §5.25): the v0.2.0 config that fits a row
exactly (``bridge_recipes.RECIPES_2511``), the table's "(w/o MTP)" label, the stated
expert-parallel overlap and parameter-gather switches; a config applies to its own container's
rows only; a bad container is refused with field, value and rule."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from strategies.errors import SpecError
from strategies.reference.bridge_recipes import RECIPES, RECIPES_2511, RECIPES_2604, recipe_for
from strategies.reference.moe_recipe import CONTAINERS
from strategies.reference.cases import case_from_entry

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")
REF_2511 = os.path.join(DATA, "published_2026.json")
REF_2604 = os.path.join(DATA, "megatron_bridge_2604.json")


def _row(path: str, rid: str) -> dict:
    return next(r for r in json.load(open(path)) if r["id"] == rid)


def test_the_b200_deepseek_row_takes_its_v020_config_and_layout():
    """pp16 ep8 mbs1 gbs2048 on 256 B200 is DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG: the recipe's
    layout_map[(16, 1)] with the MTP module on the last stage, mla_up_proj recomputed,
    Megatron's alltoall dispatcher, no overlap; each said with the v0.2.0 file."""
    row = _row(REF_2511, "mbridge2511_dsv3_b200_256_mxfp8")
    r = recipe_for(row)
    assert r is not None and r.container == "25.11" and r in RECIPES_2511
    c = case_from_entry(row)
    p = c.job.plan
    assert p.layout == "Et*4|(t*4|)*14tmL"
    assert p.recompute == "selective" and p.recompute_modules == ("mla_up_proj",)
    assert p.moe_dispatcher == "alltoall" and not p.ep_overlap and not p.cuda_graph
    assert c.job.model.num_layers == 61 and c.job.model.num_nextn_predict_layers == 1
    assert c.job.layout.mtp_of_stage(15) == 1 and c.job.layout.mtp_of_stage(0) == 0
    assert any(a.startswith("pipeline layout") and "v0.2.0" in a for a in c.assumptions)


def test_a_config_fits_only_its_own_containers_rows():
    """The same row under the 26.04 table finds no config (no v0.4.2 config has its layout);
    a 26.04 row relabelled 25.11 loses its v0.4.2 config."""
    row = _row(REF_2511, "mbridge2511_dsv3_b200_256_mxfp8")
    moved = dict(row, source=dict(row["source"], table="docs/performance-summary.md "
                                  "(26.04.01 NeMo container)"))
    assert recipe_for(moved) is None
    r26 = _row(REF_2604, "mbridge260401_deepseekv3_b200_256_mxfp8")
    assert recipe_for(r26) is not None and recipe_for(r26).container == "26.04.01"
    relabelled = dict(r26, source=dict(r26["source"], table="docs/performance-summary.md "
                                       "(25.11 NeMo container)"))
    assert recipe_for(relabelled) is None


@pytest.mark.parametrize("rid,mtp", [("mbridge2511_dsv3_gb200_256_bf16", 0),
                                     ("mbridge2511_dsv3_gb200_256_mxfp8", 0),
                                     ("mbridge2511_dsv3_b200_256_mxfp8", 1)])
def test_the_tables_mtp_label_reaches_the_model(rid, mtp):
    """The 25.11 table labels the GB200/GB300 DeepSeek-V3 runs "(w/o MTP)" and the B200 run
    "(w/ MTP)": the rows' config.json says so, and the model has that many MTP modules."""
    c = case_from_entry(_row(REF_2511, rid))
    assert c.job.model.num_nextn_predict_layers == mtp
    assert ("w/o MTP" in c.raw["notes"]) == (mtp == 0)


def test_the_b200_qwen3_row_runs_the_overlap_its_config_ran():
    """Qwen3-235B-A22B on 64 B200 in 25.11: moe_a2a_overlap=True (v0.2.0 config; PR #1760
    names this run's step), the parameter gather not overlapped for fp8_mx; both stated."""
    c = case_from_entry(_row(REF_2511, "mbridge2511_qwen3_235b_b200_64_mxfp8"))
    assert c.job.plan.ep_overlap and not c.job.plan.overlap_param_gather
    assert "overlap_param_gather=false (stated: plan.overlap_param_gather=false)" in \
        c.assumptions


@pytest.mark.parametrize("rid", ["mbridge2511_dsv3_gb200_256_mxfp8",
                                 "mbridge2511_dsv3_gb200_256_bf16",
                                 "mbridge2511_qwen3_235b_b200_64_mxfp8"])
def test_the_25_11_rows_that_no_config_fits_take_none(rid):
    assert recipe_for(_row(REF_2511, rid)) is None


def test_a_bad_container_is_refused():
    with pytest.raises(SpecError) as e:
        replace(RECIPES[0], container="24.12")
    msg = str(e.value)
    assert "container" in msg and "24.12" in msg and "25.11" in msg


def test_every_recipe_names_a_known_container_once_per_key():
    every = RECIPES + RECIPES_2604 + RECIPES_2511
    keys = [(r.container, r.model, r.gpu, r.n_gpus, r.precision, r.layout) for r in every]
    assert len(keys) == len(set(keys))
    assert {r.container for r in every} <= set(CONTAINERS)


def test_the_expert_floor_table_adds_up():
    """``experiments/moe_expert_floor.py``: each row's implied time is the model's layer time
    plus the missed time, divided by E/ep per local expert; the B200 Qwen3-235B rows hold 16."""
    from experiments.moe_expert_floor import floor_rows
    rows = {r[0]: r for r in floor_rows()}
    for rid in ("mbridge260401_qwen3235ba22b_b200_256_mxfp8",
                "mbridge2511_qwen3_235b_b200_64_mxfp8"):
        _, _, disp, graphs, mbs, local, layer, missed, implied, per, err = rows[rid]
        assert local == 16 and mbs == 1 and graphs == "none" and disp.startswith("alltoall")
        assert implied == pytest.approx(layer + missed, rel=1e-12)
        assert per == pytest.approx(implied / 16, rel=1e-12) and err < 0
    assert rows["mbridge2511_dsv3_b200_256_mxfp8"][5] == 32
