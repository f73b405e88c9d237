"""experiments/report_deepseek.py: the DeepSeek-V3 DualPipe-vs-1F1B report, on a toy of the
same shape (MLA, shared expert, a dense first layer, an MTP module) so that it runs in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TOY = os.path.join(ROOT, "tests", "data", "tiny_mla_moe.yaml")
PLAN = "tp=1,pp=4,ep=4,zero=1,mbs=1,recompute=selective,recompute_modules=layernorm+moe_act"


def test_padding_is_validates_busiest_stage_rule():
    from experiments.report_deepseek import padded_model
    from strategies.presets import model_preset
    real = model_preset("deepseek-v3")
    model, extra = padded_model(real, 16)
    assert (real.num_layers, model.num_layers, extra) == (61, 64, 3)
    assert model.first_k_dense_replace == real.first_k_dense_replace   # added layers are MoE
    assert model.num_moe_layers == real.num_moe_layers + 3
    same, none = padded_model(model, 16)
    assert none == 0 and same is model


def test_end_stage_split_takes_the_padding_off_the_end_stages():
    from experiments.report_deepseek import end_stage_split
    assert end_stage_split(61, 16) == (3, 2)           # calibration §5.33's split
    assert end_stage_split(64, 16) == (4, 4)           # even: nothing taken off
    assert end_stage_split(126, 16) == (7, 7)          # 2 added: one off each end
    for layers, pp in ((61, 16), (126, 16), (10, 4), (7, 3)):
        first, last = end_stage_split(layers, pp)
        assert first + last + (pp - 2) * -(-layers // pp) == layers
        assert 0 <= first - last <= 1
    with pytest.raises(ValueError, match="each end stage must keep a layer"):
        end_stage_split(5, 4)                          # 2 per stage, 3 added: 1 and 0
    with pytest.raises(ValueError, match="pp=1"):
        end_stage_split(61, 1)


def test_real_split_rows_fit_where_the_padded_model_does_not():
    """The published plan on the real 61 layers (§5.33's split) fits the H800 under DualPipe;
    the report prints it beside the padded model's end-rank peak (calibration §5.138)."""
    import argparse
    from experiments.report_deepseek import real_split_lines, real_split_rows, padded_model
    from strategies.presets import model_preset
    real = model_preset("deepseek-v3")
    model, _ = padded_model(real, 16)
    a = argparse.Namespace(cluster="hgx-h800:256", plan=(
        "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,recompute_modules=layernorm+"
        "moe_act+mla_up_proj,moe_dispatcher=deepep"), dtype="fp8-blockwise",
        framework="hai-llm", gbs=15360)
    rs = real_split_rows(real, a, 16)
    assert (rs["first"], rs["last"]) == (3, 2)
    assert rs["dualpipe"]["fits"] and rs["1f1b"]["fits"]
    by = [x["peak_gib"] for x in rs["dualpipe"]["memory_by_stage"]]
    assert by[0] < by[1] == max(by)
    text = "\n".join(real_split_lines(rs, real, model, 16))
    assert "the padded model gives it 8 layers, this split 5" in text and "(over)" not in text
    # a plan the real model's split does not resolve on: the reason, not a crash
    bad = real_split_rows(real, argparse.Namespace(**{**vars(a), "plan": a.plan.replace(
        "ep=64", "ep=512")}), 16)
    assert set(bad) == {"error"} and "ep" in bad["error"]


def test_timeline_window_is_checked(tmp_path):
    from simulator.output.timeline import draw_timeline
    from simulator.simulate import simulate
    from strategies.hf_config import load_model_arg
    from experiments.report_deepseek import job_of
    job = job_of(load_model_arg(TOY), "hgx-h800:1", "tp=1,pp=2,ep=4,mbs=1", "1f1b", 16,
                 "bf16", "hai-llm")
    res = simulate(job)
    with pytest.raises(ValueError, match="window"):
        draw_timeline(res, str(tmp_path / "t.png"), window=(1.0, 0.5))
    draw_timeline(res, str(tmp_path / "t.png"), window=(0.0, res.step_time_s / 3))
    assert (tmp_path / "t.png").stat().st_size > 0


@pytest.mark.slow
def test_report_runs_and_dualpipe_hides_all_to_all(tmp_path):
    out = tmp_path / "r"
    proc = subprocess.run(
        [sys.executable, "experiments/report_deepseek.py", "--model", TOY, "--cluster",
         "hgx-h800:2", "--plan", PLAN, "--gbs", "64", "--sim-gbs", "32", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    names = sorted(os.listdir(out))
    assert names == ["deepseek_v3.json", "deepseek_v3.md", "deepseek_v3_1f1b_window.png",
                     "deepseek_v3_dualpipe_window.png", "deepseek_v3_model.json"]
    data = json.loads((out / "deepseek_v3.json").read_text())
    d, o = data["simulated"]["dualpipe"], data["simulated"]["1f1b"]
    assert data["inputs"]["layers_added"] == 2
    assert d["num_microbatches"] == o["num_microbatches"] == 8
    # DualPipe's paired micro-batches hide part of the all-to-all under the partner's compute;
    # under 1F1B the next layer waits for it, so none runs beside compute.
    assert d["a2a"]["under_compute_s"] > 0
    assert o["a2a"]["under_compute_s"] == 0
    assert d["a2a"]["exposed_s"] <= o["a2a"]["exposed_s"]
    assert d["a2a"]["exposed_s"] <= d["a2a"]["in_flight_s"]
    # the measured reference read from strategies/reference: 180K GPU-hours per 1e12 tokens
    ref = data["reference"]
    assert ref["step_time_s"] == pytest.approx(15360 * 4096 * 180000 * 3600 / (1e12 * 2048),
                                               rel=1e-12)
    md = (out / "deepseek_v3.md").read_text()
    assert "Assumption: 2 layers added" in md and "paraplan simulate" in md
    # the padded model file reads back as the model the rows ran
    from strategies.hf_config import load_model_arg
    assert load_model_arg(str(out / "deepseek_v3_model.json")).num_layers == 8


def test_report_and_validate_build_the_same_job():
    """One source of truth: the report's default plan is the one ``validate`` builds for the
    published run (node-limited routing from the entry's config.json, §3.2.3/§3.3.2's
    recomputation), and the two estimates agree bit for bit (20.51 s before either moved:
    validate had 22.24 s without the routing groups and the recomputation)."""
    from experiments import report_deepseek as rd
    from strategies.estimate.scalar import estimate
    from strategies.hf_config import load_model_arg
    from strategies.reference.cases import case_from_entry
    entry, siblings = rd._entry()
    case = case_from_entry(entry, siblings)
    a = rd.parse_args([])
    model, extra = rd.padded_model(load_model_arg(a.model), 16)
    job = rd.job_of(model, a.cluster, rd.reference_plan(), "dualpipe", a.gbs, a.dtype,
                    a.framework)
    v = case.job
    assert extra == 3 and v.model.num_layers == job.model.num_layers == 64
    assert job.plan == v.plan and job.dtype == v.dtype and job.framework == v.framework
    assert (v.model.moe_router_num_groups, v.model.moe_router_group_topk) == (8, 4)
    assert v.plan.recompute_modules is not None and set(v.plan.recompute_modules) == {
        "layernorm", "mla_up_proj", "moe_act"}
    assert estimate(job).step_time_s == estimate(v).step_time_s
