"""Held-out MLPerf Training rows (``strategies/reference/data/heldout_mlperf_llama.json``,
calibration §5.216): the Llama 3.1 405B submissions of training_results_v5.0 and v5.1. The
transcriber writes the file byte for byte from the kept inputs; every row's step is the median
over its result files of their per-step medians; every row's plan is the launch config's;
the rows the reader cannot run say why; the GB200/GB300 rows state their NVLink domain
(16 trays a rack, calibration §5.220)."""
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
# the results mirrors (``fetch``'s snapshots: ``<root>/<owner>+<repo>/repo``) are read only
# when PARAPLAN_MIRRORS names their root: a check of the kept inputs against their sources,
# not of the code, and a minute of reading (docs/calibration.md §5.215, §5.216, §5.221)
_MIRROR_ROOT = os.environ.get("PARAPLAN_MIRRORS", "")
MIRRORS = [f"{_MIRROR_ROOT}/{r.replace('/', '+')}/repo" for r in tr.REPOS] if _MIRROR_ROOT else []


def test_the_transcriber_writes_the_data_file() -> None:
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        assert tr.dump(tr.transcribe(copy.deepcopy(INPUTS))) == f.read()


def test_row_count_and_what_the_reader_runs() -> None:
    """22 submissions on catalog GPUs (14 in v5.0, 8 in v5.1; no AMD or TPU 405B run): 20
    run, the GB200 runs of 256 trays or more (1024-5120 GPUs) among them on racks of the 16
    trays their rows state (``hardware.nvlink_domain_gpus`` 64: one NVLink domain of 64 GPUs a
    rack, where the fewest racks of equal trays would refuse 256 trays); Nebius's two v5.1
    rows are its v5.0 logs again."""
    assert len(ROWS) == 22 and len(BY_ID) == 22
    assert [len(r["submissions"]) for r in INPUTS["repos"]] == [14, 8]
    assert all(not r["not_in_catalog"] for r in INPUTS["repos"])
    ran, racks, dup = [], [], []
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
            cl, n = case.job.cluster, r["hardware"]["n_gpus"]
            if r["hardware"]["gpu"] in ("GB200", "GB300"):
                racks.append(r["id"])
                assert r["hardware"]["nvlink_domain_gpus"] == 64
                assert (cl.num_gpus, cl.nvlink_domain_size, cl.num_nodes) == (n, 64, n // 64)
                assert cl.gpus_per_tray == 4 and cl.nvlink_domain_capacity == 72
            else:
                assert "nvlink_domain_gpus" not in r["hardware"]
        else:
            assert "the same run as mlperf50_" in case.skipped
            dup.append(r["id"])
    assert len(ran) == 20 and len(racks) == 11 and len(dup) == 2
    assert sum(BY_ID[i]["hardware"]["n_gpus"] >= 1024 for i in racks) == 6
    assert all(i.startswith("mlperf51_llama31405b_nebius") for i in dup)


def test_nvlink_domain_is_the_racks_in_the_system_name_and_the_segment() -> None:
    """Trays per rack = the system JSON's nodes over the racks its name gives (``Carina (16x
    NVIDIA GB200 NVL72)``: 256 / 16); v5.1's configs' ``SEGMENT`` says the same; a SEGMENT
    that disagrees, or racks that do not divide the trays, stop the transcriber."""
    seg = 0
    for repo, sub in SUBS:
        got = tr.nvlink_domain(sub)
        if sub["gpu"] not in ("GB200", "GB300"):
            assert got is None
            continue
        assert got[0] == 64
        if "SEGMENT" in sub["env"]:
            seg += 1
            assert int(sub["env"]["SEGMENT"]) * 4 == got[0] and "SEGMENT=16" in got[1]
    assert seg == 4
    sub = copy.deepcopy(next(s for _, s in SUBS if "SEGMENT" in s["env"]))
    sub["env"]["SEGMENT"] = "8"
    with pytest.raises(ValueError, match="SEGMENT=8"):
        tr.nvlink_domain(sub)
    sub["env"].pop("SEGMENT")
    sub["system_json"]["system_name"] = "X (7x NVIDIA GB200 NVL72)"
    with pytest.raises(ValueError, match="over 7 racks"):
        tr.nvlink_domain(sub)


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


@pytest.mark.skipif(not MIRRORS or not all(os.path.isdir(m) for m in MIRRORS), reason="no results mirrors")
def test_the_kept_inputs_are_the_source() -> None:
    assert tr.read_sources(MIRRORS) == INPUTS


def test_the_terms_script_fits_a_line_exactly() -> None:
    """``mlperf_llama_terms.line``: points on y = 0.19 x + 0.6 give that slope and
    intercept to floating-point precision."""
    from experiments.mlperf_llama_terms import line
    xs = [24.0, 56.0, 72.0, 288.0]
    s, b = line(xs, [0.19 * x + 0.6 for x in xs])
    assert s == pytest.approx(0.19, rel=1e-12) and b == pytest.approx(0.6, rel=1e-12)


def test_scale_out_text_counts_nics_or_says_it_does_not() -> None:
    """A system JSON whose host_networking counts no NICs (University of Florida's DGX B200:
    "InfiniBand" and PCIe figures) gives a text the reader takes no links from, so the
    dgx-b200 preset's 8 x 400 Gb/s (§5.223); the others keep theirs as written."""
    assert tr.scale_out("4x ConnectX-7 IB NDR 400Gb/s") == "4x ConnectX-7 IB NDR 400Gb/s"
    for rid in ("mlperf51_llama31405b_hpgdgxb200x8n32_b200_256",
                "mlperf51_llama31405b_hpgdgxb200x8n56_b200_448"):
        hw = BY_ID[rid]["hardware"]
        assert "InfiniBand (NIC count and rate not stated" in hw["interconnect"]
        cl = case_from_entry(BY_ID[rid]).job.cluster
        assert (cl.nics_per_node, cl.to_dict()["inter_node_gbps"]) == (8, 400.0)
