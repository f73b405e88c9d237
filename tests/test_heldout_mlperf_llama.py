"""Held-out MLPerf Training rows (``strategies/reference/data/heldout_mlperf_llama.json``,
calibration §5.216): the Llama 3.1 405B submissions of training_results_v5.0 and v5.1. The
transcriber writes the file byte for byte from the kept inputs; every row's step is the median
over its result files of their per-step medians; every row's plan is the launch config's;
the rows the reader cannot run say why."""
from __future__ import annotations

import copy
import os
import statistics

import pytest

from experiments import transcribe_mlperf_llama as tr
from strategies.reference.cases import case_from_entry, load_reference

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
ROWS = load_reference(os.path.join(ROOT, tr.OUT))
BY_ID = {r["id"]: r for r in ROWS}
with open(os.path.join(ROOT, tr.INPUTS), encoding="utf-8") as _f:
    INPUTS = __import__("json").load(_f)
SUBS = [(repo, s) for repo in INPUTS["repos"] for s in repo["submissions"]]
MIRRORS = [f"/work/.mirror/{r.replace('/', '+')}/repo" for r in tr.REPOS]


def test_the_transcriber_writes_the_data_file() -> None:
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        assert tr.dump(tr.transcribe(copy.deepcopy(INPUTS))) == f.read()


def test_row_count_and_what_the_reader_runs() -> None:
    """22 submissions on catalog GPUs (14 in v5.0, 8 in v5.1; no AMD or TPU 405B run): 14
    run; the 6 GB200 runs of 256 trays or more are refused by the rack rule (equal trays
    per NVL72 rack in the fewest racks); Nebius's two v5.1 rows are its v5.0 logs again."""
    assert len(ROWS) == 22 and len(BY_ID) == 22
    assert [len(r["submissions"]) for r in INPUTS["repos"]] == [14, 8]
    assert all(not r["not_in_catalog"] for r in INPUTS["repos"])
    ran, rack, dup = [], [], []
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        if not case.skipped:
            ran.append(r["id"])
            assert case.measured_step_s == pytest.approx(r["measured"]["step_time_s"],
                                                         rel=1e-12)
            p, pl = case.job.plan, r["plan"]
            assert (p.tp, p.pp, p.dp, p.cp, p.mbs, p.gbs, p.vpp) == (
                pl["tp"], pl["pp"], pl["dp"], pl["cp"], pl["microbatch"],
                pl["global_batch"], pl["virtual_stages"])
        elif "racks must hold equal tray counts" in case.skipped:
            rack.append(r)
        else:
            assert "the same run as mlperf50_" in case.skipped
            dup.append(r["id"])
    assert len(ran) == 14 and len(rack) == 6 and len(dup) == 2
    assert all(r["hardware"]["gpu"] == "GB200" and r["hardware"]["n_gpus"] >= 1024
               for r in rack)
    assert all(i.startswith("mlperf51_llama31405b_nebius") for i in dup)


def test_step_time_is_the_median_of_the_files_medians() -> None:
    """step = median over result files of each file's median train_step_time (first event
    dropped), to 1e-12; samples/s and tokens/s/GPU are gbs / step and gbs x seq / (step x n);
    the spread is the files' min and max."""
    for (repo, sub), r in zip(SUBS, ROWS):
        meds = [sub["logs"][f]["median_step_s"] for f in sorted(sub["logs"])]
        step = statistics.median(meds)
        gbs, seq, n = r["plan"]["global_batch"], r["model"]["seq_len"], r["hardware"]["n_gpus"]
        assert r["measured"]["step_time_s"] == pytest.approx(step, rel=1e-12)
        assert r["derived"]["step_time_s"] == r["measured"]["step_time_s"]
        assert gbs / r["measured"]["samples_per_s"] == pytest.approx(step, rel=1e-12)
        assert gbs * seq / (r["measured"]["tokens_per_s_per_gpu"] * n) == pytest.approx(
            step, rel=1e-12)
        assert r["derived"]["spread_s"] == [min(meds), max(meds)]
        assert min(meds) <= step <= max(meds) and max(meds) / min(meds) < 1.02
        assert all(sub["logs"][f]["step_events"] > 200 for f in sub["logs"])


def test_plans_are_the_configs() -> None:
    """Every plan cell is the sourced config's: tp, pp, cp, vp, mbs; dp from the system's
    GPUs; gbs = MINIBS x dp and the log's global_batch_size; the switches."""
    for (repo, sub), r in zip(SUBS, ROWS):
        e, pl = sub["env"], r["plan"]
        n = int(sub["system_json"]["number_of_nodes"]) * int(
            sub["system_json"]["accelerators_per_node"])
        assert r["hardware"]["n_gpus"] == n
        assert (pl["tp"], pl["pp"], pl["cp"], pl["virtual_stages"], pl["microbatch"]) == tuple(
            int(e[k]) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
                                "CONTEXT_PARALLEL", "INTERLEAVED_PIPELINE", "MICRO_BATCH_SIZE"))
        assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n
        assert pl["global_batch"] == int(e["MINIBS"]) * pl["dp"] == pl["microbatch"] * pl[
            "dp"] * pl["grad_accum"]
        assert {v["gbs"] for v in sub["logs"].values()} == {pl["global_batch"]}
        assert pl["tp_comm_overlap"] == tr.on(sub, "TP_COMM_OVERLAP")
        assert pl["cuda_graph"] == tr.on(sub, "FULL_CUDA_GRAPH")
        assert pl["pp_layout"] == "Et|(tt|)*62tL"
        assert sub["config"] in r["notes"] and repo["commit"][:12] in r["notes"]
        assert all(f in r["notes"] for f in sub["logs"])


def test_precision_follows_the_switches() -> None:
    """v5.0: FP8 with the YAML's default recipe (delayed); v5.1 NVIDIA: NVFP4 (FP4=True);
    v5.1 University of Florida B200: FP8 tensorwise (current scaling)."""
    prec = {r["id"]: r["precision"] for r in ROWS}
    assert all(p.startswith("fp8 (delayed scaling") for i, p in prec.items()
               if i.startswith("mlperf50_"))
    assert prec["mlperf51_llama31405b_theiangpu512ngc2509nemo_gb300_512"].startswith("nvfp4")
    assert prec["mlperf51_llama31405b_hpgdgxb200x8n32_b200_256"].startswith(
        "fp8 (current scaling")
    sub = copy.deepcopy(SUBS[0][1])
    sub["env"]["FP8_RECIPE"] = "tensorwise"
    assert tr.precision(sub).startswith("fp8 (current scaling")


def test_pp_layout_counts_embedding_and_loss() -> None:
    """126 layers + embedding + loss over pp 8 x vp 8 = 64 chunks of 2 slots; slots that do
    not divide give no layout."""
    lay = tr.pp_layout(126, 8, 8)
    assert lay == "Et|(tt|)*62tL"
    assert tr.pp_layout(126, 8, 5) is None


@pytest.mark.skipif(not all(os.path.isdir(m) for m in MIRRORS), reason="no results mirrors")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRRORS) == INPUTS


def test_the_terms_script_fits_a_line_exactly() -> None:
    """``mlperf_llama_terms.line``: points on y = 0.19 x + 0.6 give that slope and
    intercept to floating-point precision."""
    from experiments.mlperf_llama_terms import line
    xs = [24.0, 56.0, 72.0, 288.0]
    s, b = line(xs, [0.19 * x + 0.6 for x in xs])
    assert s == pytest.approx(0.19, rel=1e-12) and b == pytest.approx(0.6, rel=1e-12)
