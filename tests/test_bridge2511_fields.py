"""The 25.11 container's MoE rows against the v0.2.0 configs of their GPU and precision
(docs/calibration.md §5.179): only a config whose layout is the row's is applied; every other
row names its GPU's config in its assumptions and keeps the stack's defaults; the recorded
configs equal their tags' where a Megatron-Bridge clone is at hand."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from experiments.bridge2511_fields import (MIRROR, field_table, recipe_mismatches, rows_2511,
                                           tag_audit, what_if)
from strategies.estimate import estimate
from strategies.reference.bridge_recipes import (RECIPES_2511, entry_layout, preset_for,
                                                 recipe_for)
from strategies.reference.cases import case_from_entry

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")
REF_2511 = os.path.join(DATA, "published_2026.json")
REF_2604 = os.path.join(DATA, "megatron_bridge_2604.json")
FITS = "mbridge2511_dsv3_b200_256_mxfp8"


def _rows(path: str) -> list[dict]:
    return json.load(open(path))


def test_only_the_b200_deepseek_row_fits_a_config_the_others_name_theirs():
    """Ten 25.11 MoE rows: one config fits exactly and is applied; each of the nine others
    has its GPU and precision's config (and no other container's), with a layout or GPU
    count that is not the row's."""
    rows = rows_2511()
    assert len(rows) == 10
    for r in rows:
        fit, unfit = recipe_for(r), preset_for(r)
        if r["id"] == FITS:
            assert fit is not None and unfit is None
            continue
        assert fit is None and unfit is not None and unfit.container == "25.11"
        assert (unfit.model, unfit.gpu, unfit.precision) == (
            r["model"]["name"], r["hardware"]["gpu"], r["precision"])
        assert (unfit.n_gpus, unfit.layout) != (r["hardware"]["n_gpus"], entry_layout(r))


def test_an_unfit_rows_assumptions_name_the_config_and_keep_the_defaults():
    """DeepSeek-V3 on 256 GB200 bf16: the GB200 config names HybridEP, mla_up_proj and
    gbs 2048; the row (gbs 4096) is read with the stack's alltoall and no recomputation, and
    says so with the config's file and lines."""
    rows = _rows(REF_2511)
    row = next(r for r in rows if r["id"] == "mbridge2511_dsv3_gb200_256_bf16")
    c = case_from_entry(row, rows)
    note = next(a for a in c.assumptions if a.startswith("no 25.11 config fits"))
    assert "(1, 4, 4, 64, 1, 4096)" in note and "(1, 4, 4, 64, 1, 2048)" in note
    assert "DEEPSEEK_V3_GB200_BF16_BASE_CONFIG" in note and "L45-57" in note
    assert "moe_dispatcher=hybridep" in note and "none of it is applied" in note
    assert c.job.plan.moe_dispatcher == "alltoall" and c.job.plan.recompute == "none"


def test_the_config_applies_once_the_row_has_its_layout():
    """Qwen3-30B-A3B on 8 GB300 with its config's micro-batch (8, the table says 4) fits it:
    HybridEP, no recomputation, the TE partial graphs not the plan's full-iteration graph,
    no unfit note."""
    rows = _rows(REF_2511)
    row = next(r for r in rows if r["id"] == "mbridge2511_qwen3_30b_gb300_8_mxfp8")
    moved = dict(row, plan=dict(row["plan"], microbatch=8, grad_accum=8))
    assert recipe_for(moved) is not None and preset_for(moved) is None
    c = case_from_entry(moved, rows)
    p = c.job.plan
    assert p.moe_dispatcher == "hybridep" and p.recompute == "none"
    assert not p.cuda_graph and not any(a.startswith("no 25.11") for a in c.assumptions)


def test_the_deepseek_gb_config_holds_the_mtp_module_the_rows_ran_without():
    """DeepSeek-V3 on 256 GB200 with the config's batch (gbs 2048) fits its sizes, but the
    config's layout (layout_map[(4, 4)]) places the MTP module the table's "(w/o MTP)" run
    lacked: the reader refuses the pair, naming the layout and the MTP count."""
    rows = _rows(REF_2511)
    row = next(r for r in rows if r["id"] == "mbridge2511_dsv3_gb200_256_bf16")
    moved = dict(row, plan=dict(row["plan"], global_batch=2048, grad_accum=32))
    assert recipe_for(moved) is not None
    c = case_from_entry(moved, rows)
    assert c.job is None and "num_nextn_predict_layers=0" in c.skipped
    assert "Et*4|(t*4|)*14tmL" in c.skipped


def test_rows_of_other_containers_and_stacks_name_no_2511_config():
    """Every 26.04.01 MoE row fits its v0.4.2 config (no unfit note); a 25.11 row relabelled
    26.04.01 and a row of another source find no 25.11 config."""
    for r in _rows(REF_2604):
        assert preset_for(r) is None
    row = next(r for r in _rows(REF_2511) if r["id"] == "mbridge2511_qwen3_30b_gb300_8_mxfp8")
    assert preset_for(dict(row, source=dict(row["source"], table="docs/performance-summary.md"
                                            " (26.04.01 NeMo container)"))) is None
    assert preset_for(dict(row, source={"ref": "somebody else", "table": row["source"]["table"]
                                        })) is None


def test_the_field_table_reads_the_table_the_config_and_the_reader():
    """Table 1 of the experiment: the GB300 Qwen3-30B row states mbs 4, its config mbs 8 with
    HybridEP, the reader alltoall; the fitting B200 row's config is applied."""
    rows = _rows(REF_2511)
    row = next(r for r in rows if r["id"] == "mbridge2511_qwen3_30b_gb300_8_mxfp8")
    t = {f[0]: f[1:] for f in field_table(row, rows)}
    assert t["mbs / gbs"] == ("4 / 512", "8 / 512", "4 / 512")
    assert t["dispatcher"] == ("not stated", "hybridep", "alltoall")
    assert t["config"][2].startswith("not applied")
    fit = next(r for r in rows if r["id"] == FITS)
    assert dict((f[0], f[1:]) for f in field_table(fit, rows))["config"][2] == "applied"


def test_the_what_if_is_the_estimate_with_the_configs_switches():
    """Table 2: the row as read, then with the config's dispatcher, then also its
    recomputation, each the estimate of that plan; none for the fitting row."""
    rows = _rows(REF_2511)
    row = next(r for r in rows if r["id"] == "mbridge2511_gptoss120b_gb200_64_bf16")
    rid, measured, read, disp, rc = what_if(row, rows)
    job = case_from_entry(row, rows).job
    assert read == pytest.approx(estimate(job).step_time_s, rel=1e-12)
    assert disp == pytest.approx(read, rel=1e-12)       # its config names alltoall too
    rcj = replace(job, plan=replace(job.plan, recompute="selective",
                                    recompute_modules=("layernorm", "moe_act")))
    assert rc == pytest.approx(estimate(rcj).step_time_s, rel=1e-12) and rc > read
    assert what_if(next(r for r in rows if r["id"] == FITS), rows) is None


def test_a_recipe_that_differs_from_its_tag_is_flagged():
    """``recipe_mismatches`` names each differing field; a config equal to the record, none."""
    r = RECIPES_2511[0]
    same = {"num_gpus": 256, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size":
            16, "virtual_pipeline_model_parallel_size": None, "expert_model_parallel_size": 8,
            "micro_batch_size": 1, "global_batch_size": 2048, "moe_flex_dispatcher_backend":
            None, "moe_a2a_overlap": False, "expert_tensor_parallel_size": 1,
            "recompute_modules": ["mla_up_proj"], "cuda_graph_impl": None,
            "cuda_graph_scope": None}
    assert recipe_mismatches(r, same) == []
    bad = recipe_mismatches(r, dict(same, moe_flex_dispatcher_backend="hybridep",
                                    global_batch_size=4096))
    assert len(bad) == 2 and any(b.startswith("dispatcher: alltoall") for b in bad)


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="Megatron-Bridge clone absent")
def test_every_recorded_config_is_its_tags():
    """RECIPES (v0.4.2), RECIPES_2604 (v0.4.0), RECIPES_2511 (v0.2.0) and the 26.06 rows'
    v0.5.0 configs equal the WorkloadBaseConfig their tag defines."""
    audit = tag_audit(MIRROR)
    assert len(audit) >= 80
    assert [a for a in audit if a[3] != "as the tag"] == []
