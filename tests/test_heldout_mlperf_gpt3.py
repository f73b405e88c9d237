"""Held-out MLPerf Training GPT-3 175B runs (``strategies/reference/data/heldout_mlperf_gpt3.json``,
calibration §5.215): the file is rebuilt byte for byte from the committed inputs (the
transcriber's reading of the configs and result logs of mlcommons/training_results_v3.0-v4.1);
every row is read by the reference reader (none skipped), its step time is the median of the
result files' medians, and its plan is the config's (with the log's global batch)."""
from __future__ import annotations

import json
import os
import statistics

import pytest

from experiments import transcribe_mlperf_gpt3 as tr
from strategies.reference.cases import case_from_entry

with open(tr.OUT) as fh:
    TEXT = fh.read()
ROWS = json.loads(TEXT)
with open(tr.INPUTS) as fh:
    INPUTS = json.load(fh)
PAIRS = list(zip(ROWS, INPUTS))
# the results mirrors (``fetch``'s snapshots: ``<root>/<owner>+<repo>/repo``) are read only
# when PARAPLAN_MIRRORS names their root: a check of the kept inputs against their sources,
# not of the code, and a minute of reading (docs/calibration.md §5.215, §5.216, §5.221)
_MIRROR_ROOT = os.environ.get("PARAPLAN_MIRRORS", "")
MIRRORS = [f"{_MIRROR_ROOT}/mlcommons+training_results_{v}/repo" for v in ("v3.0", "v3.1", "v4.0", "v4.1")] if _MIRROR_ROOT else []


def test_the_data_file_is_rebuilt_from_the_inputs() -> None:
    assert tr.rows_text(INPUTS) == TEXT


@pytest.mark.skipif(not MIRRORS or not all(os.path.isdir(m) for m in MIRRORS), reason="results mirrors not fetched")
def test_the_transcriber_reads_the_mirrors_to_the_same_files() -> None:
    assert tr.main(["--sources", *MIRRORS, "--check"]) == 0


def test_rows_one_per_submission() -> None:
    assert len(ROWS) == len(INPUTS) == len(tr.SUBMISSIONS) == 22
    assert len({r["id"] for r in ROWS}) == 22
    rounds = [s["round"] for s in INPUTS]
    assert [rounds.count(v) for v in ("v3.0", "v3.1", "v4.0", "v4.1")] == [5, 8, 3, 6]
    for r, s in PAIRS:
        assert r["kind"] == "measured" and r["tier"] == 2
        assert s["config"] in r["notes"] and s["commit"][:12] in r["notes"]
        assert all(os.path.basename(f["file"]) in r["notes"] for f in s["files"])
        assert len(s["files"]) == 3


def test_every_row_is_read_and_priced_from_its_step_time() -> None:
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        assert case.job is not None, (r["id"], case.skipped)
        assert case.measured_step_s == r["measured"]["step_time_s"]
        assert case.how_measured == "step time as printed"
        assert case.job.dtype == "fp8"     # delayed scaling: not read as current scaling


def test_step_time_is_the_median_of_the_files_medians() -> None:
    for r, s in PAIRS:
        tracked = all(f["step_median_s"] is not None for f in s["files"])
        per = [f["step_median_s"] if tracked else f["block_median_s"] for f in s["files"]]
        assert r["derived"]["per_file_step_s"] == per
        assert abs(r["measured"]["step_time_s"] - statistics.median(per)) <= 1e-12
        assert (r["derived"]["min_s"], r["derived"]["max_s"]) == (min(per), max(per))
        assert ("tracked_stats" in r["derived"]["how"]) == tracked
        # the tracked runs are the v3.x and v4.1 logs; v4.0 and v4.1's 1,452-node rerun
        # log no per-step timing (LOG_METRICS=OFF) and are read from their blocks
        assert tracked == (s["round"] != "v4.0" and "n1452" not in s["system"])


def test_the_run_throughput_holds_the_evaluations() -> None:
    """The one ``throughput`` event of a log is tokens over NeMo's train_epoch_timing, which
    holds the evaluation passes: the step it implies is longer than the timed steps."""
    n = 0
    for r, s in PAIRS:
        for f in s["files"]:
            if f["throughput_tokens_per_s"] is None or f["step_median_s"] is None:
                continue
            implied = f["global_batch_size"] * tr.SEQ / f["throughput_tokens_per_s"]
            assert 1.03 < implied / f["step_median_s"] < 1.2, (r["id"], implied)
            n += 1
    assert n == 3 * 18


def test_plan_fields_are_the_configs() -> None:
    for r, s in PAIRS:
        sw = {k: v[0] for k, v in s["switches"].items()}
        pl, f0 = r["plan"], s["files"][0]
        n = int(s["system_json"]["number_of_nodes"]) * int(s["system_json"]["accelerators_per_node"])
        assert r["hardware"]["n_gpus"] == n == pl["tp"] * pl["pp"] * pl["dp"]
        assert (pl["tp"], pl["pp"], pl["microbatch"], pl["virtual_stages"]) == (
            int(sw["TENSOR_MODEL_PARALLEL"]), int(sw["PIPELINE_MODEL_PARALLEL"]),
            int(sw["MICRO_BATCH_SIZE"]), int(sw["INTERLEAVED_PIPELINE"]))
        assert (pl["global_batch"], pl["grad_accum"]) == (f0["global_batch_size"],
                                                          f0["gradient_accumulation_steps"])
        assert pl["grad_accum"] * pl["dp"] * pl["microbatch"] == pl["global_batch"]
        assert pl["sequence_parallel"] is (sw["SEQ_PARALLEL"].lower() == "true")
        assert pl["tp_comm_overlap"] is (sw["TP_COMM_OVERLAP"].lower() == "true")
        assert pl["zero_stage"] == (1 if sw["USE_DIST_OPTIMIZER"] == "True" else 0)
        assert pl["cuda_graph"] is False and pl["recompute"] == "none"
        assert r["precision"] == "fp8 (delayed scaling)" and sw["FP8_AMAX_ALGO"] == "max"
        assert r["hardware"]["gpu"] == ("B200" if "b200" in s["system"] else "H100 SXM")


def test_a_config_whose_batch_the_log_contradicts_keeps_the_logs() -> None:
    """Two published configs name a MINIBS the run did not use (v3.1 eos_n64: 192, log 2048 =
    128 x 16; v4.0 eos_n64: 128, log 2304 = 144 x 16): the row takes the log's batch and says
    so."""
    odd = [r["id"] for r, s in PAIRS
           if int(s["switches"]["MINIBS"][0]) * r["plan"]["dp"] != r["plan"]["global_batch"]]
    assert odd == ["mlperf31_gpt3_nvidia_eos_n64", "mlperf40_gpt3_nvidia_eos_n64"]
    for i in odd:
        assert "the log's" in next(r for r in ROWS if r["id"] == i)["notes"]


def test_printed_config_reads_a_resolved_hydra_dump() -> None:
    log = "  0:     sequence_parallel: true\n 0:   fp8: false\n0: foo bar\n  0:   fp8: true\n"
    assert tr.printed_config(log) == {"sequence_parallel": "true", "fp8": "false"}


def test_fp8_params_rows_store_and_gather_fp8_weights() -> None:
    """v4.0/v4.1 set FP8_PARAMS=True (NeMo's ``fp8_params``: weights built under TE's
    ``fp8_model_init``, gathered as uint8): those rows state ``plan.fp8_param_gather`` and
    the reader keeps one byte per stored weight and no 16-bit copy; the v3.x rows (no such
    switch in their configs or their NeMo) state false and keep 16-bit weights."""
    on = []
    for r, s in PAIRS:
        said = s["switches"]["FP8_PARAMS"][0] == "True"
        assert r["plan"]["fp8_param_gather"] is said
        sy = case_from_entry(r, ROWS).job.system
        assert (sy.quantised_weights, sy.gather_bytes()) == ((1.0, 1.0) if said else (0.0, 2.0))
        on += [r["id"]] if said else []
    assert len(on) == 9 and all(i.startswith(("mlperf40", "mlperf41")) for i in on)


def test_the_mbs2_h100_rows_fit_in_hbm_with_fp8_weights() -> None:
    """The H100 micro-batch-2 rows ran, so their estimated peak must fit the 80 GB; with
    16-bit weights beside the FP8 copies it did not (peak 1.07-1.13 x HBM, §5.215)."""
    from dataclasses import replace
    from strategies.estimate import estimate
    from strategies.job import make_job
    rows = [r for r in ROWS if r["plan"]["microbatch"] == 2 and r["hardware"]["gpu"] == "H100 SXM"]
    assert len(rows) == 5
    for r in rows:
        job = case_from_entry(r, ROWS).job
        hbm = job.cluster.gpu.hbm_bytes
        peak = max(sum(vars(s).values()) for s in estimate(job).memory_by_stage)
        assert peak <= hbm, r["id"]
        bf16_weights = make_job(job.model, job.cluster, job.plan, dtype=job.dtype,
                                framework=job.framework,
                                system=replace(job.system, quantised_weights=0.0,
                                               param_gather_bytes=0.0))
        assert max(sum(vars(s).values()) for s in estimate(bf16_weights).memory_by_stage) > hbm


def test_deferred_output_weight_gradients_as_the_configs_set_them() -> None:
    """v4.1's 32/64-node configs export DEFER_EMBEDDING_WGRAD_COMPUTE=True with
    WGRAD_DEFERRAL_LIMIT=65; v4.0's and v4.1's custom.yaml turn it on by rule at pp > 1,
    MINIBS <= 256 and micro-batch 1 (the three 1,344/1,452-node rows, limit 0: every
    micro-batch); Oracle's logs print it false; v3.x's NeMo and Megatron have no such switch.
    The reader gives the last stage's deferral (``SystemConfig.head_wgrad_deferral``)."""
    import math
    want = {"mlperf41_gpt3_nvidia_eos_n32": 65.0, "mlperf41_gpt3_nvidia_eos_n64": 65.0,
            "mlperf40_gpt3_nvidia_eos-dfw_n1344": math.inf,
            "mlperf40_gpt3_nvidia_eos-dfw_n1452": math.inf,
            "mlperf41_gpt3_nvidia_eos-dfw_n1452": math.inf}
    for r, s in PAIRS:
        said = r["plan"].get("defer_embedding_wgrad_compute")
        assert said is (True if r["id"] in want else None), r["id"]
        assert case_from_entry(r, ROWS).job.system.head_wgrad_deferral == want.get(r["id"], 0.0)
        if s["round"] in ("v3.0", "v3.1"):
            assert s["switches"]["DEFER_EMBEDDING_WGRAD_COMPUTE"] == [None, "not set"]
        if r["id"] in want:
            assert "drain_embedding_wgrad_compute" in r["notes"]
