"""Held-out MLPerf Training rows (``strategies/reference/data/heldout_mlperf_llama8b.json``,
calibration §5.221): the Llama 3.1 8B runs of training_results_v5.1 on NVIDIA GPUs whose
launch config can be identified. The transcriber writes the file byte for byte from the kept
inputs; every row's step is the median over its result files of their per-step medians; every
plan is its sourced config's and agrees with the log's batch and accumulation; the runs left
out say why."""
from __future__ import annotations

import copy
import json
import os
import statistics

import pytest

from experiments import transcribe_mlperf_llama8b as tr
from strategies.reference.cases import case_from_entry, load_reference

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
ROWS = load_reference(os.path.join(ROOT, tr.OUT))
with open(os.path.join(ROOT, tr.INPUTS), encoding="utf-8") as _f:
    INPUTS = json.load(_f)
SUBS = [(repo, s) for repo in INPUTS["repos"] for s in repo["submissions"]]
# the results mirrors (``fetch``'s snapshots: ``<root>/<owner>+<repo>/repo``) are read only
# when PARAPLAN_MIRRORS names their root: a check of the kept inputs against their sources,
# not of the code, and a minute of reading (docs/calibration.md §5.215, §5.216, §5.221)
_MIRROR_ROOT = os.environ.get("PARAPLAN_MIRRORS", "")
MIRRORS = [f"{_MIRROR_ROOT}/{r.replace('/', '+')}/repo" for r in tr.REPOS] if _MIRROR_ROOT else []


def test_the_transcriber_writes_the_data_file() -> None:
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        assert tr.tr.dump(tr.transcribe(copy.deepcopy(INPUTS))) == f.read()


def test_row_count_and_the_runs_left_out() -> None:
    """39 llama31_8b submissions in v5.1: 6 on AMD GPUs (not in the catalog), 33 on NVIDIA
    GPUs; 25 identified and run by the reader (the two B300 ones on dgx-b300), 8 left out:
    Lenovo's three and Nebius's 4-node run name no config the repository holds, HPE's log
    names one the repository lacks, Lambda's and Nebius's B300 run read to different
    precisions or switches from the copies of the file they name, and Nebius's 2-node log's
    accumulation (2) contradicts the one copy of its config (1)."""
    (repo,) = INPUTS["repos"]
    assert len(ROWS) == len(repo["submissions"]) == 25
    assert len(repo["not_in_catalog"]) == 6 and all(
        "AMD" in o["accelerator"] for o in repo["not_in_catalog"])
    left = {(u["submitter"], u["system"]): u["reason"] for u in repo["unidentified"]}
    assert len(left) == 8
    assert sum(s == "Lenovo" for s, _ in left) == 3 and sum(s == "Nebius" for s, _ in left) == 3
    assert "do not give 16 GPUs, gbs 32, GA 2" in left[("Nebius", "nebius_b200_n2")]
    assert "different plans or precisions" in left[("Nebius", "nebius_b300_n1")]
    assert "different plans or precisions" in left[("Lambda", "gb300_n18_ngc25.04_nemo")]
    assert "no folder of the repository holds" in left[
        ("HPE", "HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09")]
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        assert not case.skipped, (r["id"], case.skipped)
        assert case.measured_step_s == pytest.approx(r["measured"]["step_time_s"], rel=1e-12)
        p, pl = case.job.plan, r["plan"]
        assert (p.tp, p.pp, p.dp, p.cp, p.mbs, p.gbs) == (
            pl["tp"], pl["pp"], pl["dp"], pl["cp"], pl["microbatch"], pl["global_batch"])
        if r["hardware"]["gpu"] == "B300":
            assert case.job.cluster.name == "dgx-b300"
    assert sum(r["hardware"]["gpu"] == "B300" for r in ROWS) == 2


def test_step_time_is_the_median_of_the_files_medians() -> None:
    """step = median over the 10 result files of each file's median train_step_time (first
    event dropped), to 1e-12; samples/s and tokens/s/GPU are gbs / step and gbs x seq /
    (step x n); the spread is the files' min and max."""
    for (repo, sub), r in zip(SUBS, ROWS):
        meds = [sub["logs"][f]["median_step_s"] for f in sorted(sub["logs"])]
        step = statistics.median(meds)
        gbs, seq, n = r["plan"]["global_batch"], r["model"]["seq_len"], r["hardware"]["n_gpus"]
        assert len(meds) == 10 and seq == 8192
        assert r["measured"]["step_time_s"] == pytest.approx(step, rel=1e-12)
        assert r["derived"]["step_time_s"] == r["measured"]["step_time_s"]
        assert gbs / r["measured"]["samples_per_s"] == pytest.approx(step, rel=1e-12)
        assert gbs * seq / (r["measured"]["tokens_per_s_per_gpu"] * n) == pytest.approx(
            step, rel=1e-12)
        assert r["derived"]["spread_s"] == [min(meds), max(meds)]
        assert max(meds) / min(meds) < 1.06
        assert all(sub["logs"][f]["step_events"] > 80 for f in sub["logs"])


def test_plans_are_the_configs_and_the_logs() -> None:
    """Every plan cell is the sourced config's (tp, pp, cp, mbs; dp from the system's GPUs;
    gbs = MINIBS x dp) and agrees with the log's global_batch_size and
    gradient_accumulation_steps; the model is Llama 3.1 8B with its 128,256-id tokenizer."""
    for (repo, sub), r in zip(SUBS, ROWS):
        e, pl = sub["env"], r["plan"]
        n = int(sub["system_json"]["number_of_nodes"]) * int(
            sub["system_json"]["accelerators_per_node"])
        assert r["hardware"]["n_gpus"] == n
        assert (pl["tp"], pl["pp"], pl["cp"], pl["microbatch"]) == tuple(int(e[k]) for k in (
            "TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL", "CONTEXT_PARALLEL",
            "MICRO_BATCH_SIZE"))
        assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n
        assert pl["global_batch"] == int(e["MINIBS"]) * pl["dp"] == pl["microbatch"] * pl[
            "dp"] * pl["grad_accum"]
        assert {(v["gbs"], v["ga"]) for v in sub["logs"].values()} == {
            (pl["global_batch"], pl["grad_accum"])}
        assert pl["cuda_graph"] == tr.tr.on(sub, "FULL_CUDA_GRAPH")
        assert sub["config"] in r["notes"] and repo["commit"][:12] in r["notes"]
        assert r["model"]["vocab"] == 128256 and r["model"]["layers"] == 32
        assert r["id"].startswith("mlperf51_llama318b_")


def test_precision_follows_the_configs() -> None:
    """NVFP4 exactly where the config sources config_common_fp4.sh (FP4=True: the ``_fp4``
    configs and Dell's 1xXE9680L one); Cisco's H100 configs set FP8 and leave the YAML's
    delayed recipe; every other run FP8 tensorwise (current scaling)."""
    for (repo, sub), r in zip(SUBS, ROWS):
        if sub["env"].get("FP4") == "True":
            assert r["precision"].startswith("nvfp4")
            assert sub["config"].endswith("_fp4.sh") or sub["submitter"] == "Dell"
        elif sub["submitter"] == "Cisco":
            assert r["precision"].startswith("fp8 (delayed scaling")
        else:
            assert r["precision"].startswith("fp8 (current scaling")
    assert sum(r["precision"].startswith("nvfp4") for r in ROWS) == 7


def test_fits_is_the_batch_arithmetic() -> None:
    """gbs = MINIBS x dp and GA = gbs / (mbs x dp), dp = n / (tp pp cp); DGXNGPU unset takes
    the system's GPUs per node."""
    env = {"DGXNNODES": "8", "DGXNGPU": "8", "MINIBS": "1", "MICRO_BATCH_SIZE": "1",
           "TENSOR_MODEL_PARALLEL": "1", "PIPELINE_MODEL_PARALLEL": "1",
           "CONTEXT_PARALLEL": "2"}
    assert tr.fits(env, 64, 8, 32, 1.0)
    assert not tr.fits(env, 64, 8, 32, 2.0) and not tr.fits(env, 64, 8, 64, 1.0)
    assert not tr.fits(env, 32, 8, 16, 1.0)
    del env["DGXNGPU"]
    assert tr.fits(env, 64, 8, 32, 1.0) and not tr.fits(env, 64, 4, 32, 1.0)


def test_log_more_and_scale_out() -> None:
    """The DLPAL line's last word is the config name; GB/s clauses leave the scale-out text."""
    text = ("+ echo x\n:::DLPAL img 78 1 GPU-380 'unknown' DGXB200_1x8x2xtp1pp1cp1_8b_fp4\n"
            ':::MLLOG {"key": "gradient_accumulation_steps", "value": 2.0}\n')
    assert tr.log_more(text) == {"ga": 2.0, "dlpal": "DGXB200_1x8x2xtp1pp1cp1_8b_fp4"}
    assert tr.log_more("") == {"ga": None, "dlpal": None}
    assert tr.scale_out("ROCE2; Data bandwidth for GPU-PCIe: 504 GB/s; PCIe-NIC: 500 GB/s") \
        == "ROCE2"
    assert tr.scale_out("4x ConnectX-8 IB XDR 800 Gb/s") == "4x ConnectX-8 IB XDR 800 Gb/s"
    assert tr.scale_out(None) == ""


@pytest.mark.skipif(not MIRRORS or not all(os.path.isdir(m) for m in MIRRORS), reason="no results mirror")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRRORS) == INPUTS


def test_result_files_groups_by_submitter_and_system() -> None:
    """Only ``<submitter>/results/<system>/<benchmark>/result_N.txt`` counts."""
    from experiments.mlperf_log import result_files
    paths = ["A/results/s1/llama31_8b/result_0.txt", "A/results/s1/llama31_8b/result_1.txt",
             "A/results/s1/llama31_405b/result_0.txt", "B/results/s2/llama31_8b/notes.txt",
             "B/systems/s2.json", "B/results/s2/llama31_8b/result_9.txt"]
    assert result_files(paths, "llama31_8b") == {
        ("A", "s1"): paths[:2], ("B", "s2"): [paths[5]]}


def test_fp8_param_gather_is_the_configs_switch() -> None:
    """``config_common.sh`` sets ``FP8_PARAM_GATHER=True`` (custom.yaml's
    ``optim.fp8_param_gather``, passed to ``MegatronMixedPrecision``), ``config_common_fp4.sh``
    sets it False (§5.224): every row whose sourced config or YAML names the switch states it as
    ``plan.fp8_param_gather``, and the reader keeps one byte per stored and gathered weight on
    the per-tensor FP8 rows (16) and none on the NVFP4 rows (7); Cisco's two rows (their YAML
    reads ``FP8_PARAMS``, not kept in the inputs) state nothing."""
    subs = {s["system"]: s for _, s in SUBS}
    said, quantised = [], []
    for r in ROWS:
        s = subs[r["source"]["row"].split(":")[0]]
        named = "FP8_PARAM_GATHER" in s["env"] or "FP8_PARAM_GATHER" in s["yaml_defaults"]
        assert ("fp8_param_gather" in r["plan"]) is named, r["id"]
        if not named:
            continue
        assert r["plan"]["fp8_param_gather"] is tr.tr.on(s, "FP8_PARAM_GATHER")
        said += [r["id"]] if r["plan"]["fp8_param_gather"] else []
        sy = case_from_entry(r, ROWS).job.system
        if sy is not None and sy.quantised_weights == 1.0:
            assert sy.gather_bytes() == 1.0
            quantised.append(r["id"])
    assert sorted(said) == sorted(quantised) and len(said) == 16
    assert all("nvfp4" not in next(r for r in ROWS if r["id"] == i)["precision"] for i in said)
