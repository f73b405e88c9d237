"""Held-out published runs (``strategies/reference/data/heldout_2026b.json``, calibration
§5.48): torchtitan's community benchmarks (async TP on Grand Teton H100s, June 2025; Trainy's
H200 run, June 2025) and Megatron-Bridge's 26.06 container tables. The file loads, every row
names its source and derives its step by the stated formula, every row the reader can run
builds a job with the plan its source states (a stated pipeline layout included), the rows
it cannot run say why, and the transcription agrees with the sources' own redundant
columns."""
from __future__ import annotations

import copy
import os
from collections import defaultdict

import pytest

from simulator.studies.validate import load_cases
from strategies.reference.cases import case_from_entry, load_reference

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "strategies", "reference", "data",
                    "heldout_2026b.json")
ROWS = load_reference(DATA)
BY_ID = {r["id"]: r for r in ROWS}
TITAN = [r for r in ROWS if r["id"].startswith("torchtitan_")]
BRIDGE = [r for r in ROWS if r["id"].startswith("mbridge2606_")]
#: rows the reader cannot run, and the words of the reason it gives (none since the float8
#: rowwise rows read as ``fp8-rowwise``, calibration §5.147)
UNRUN: dict[str, str] = {}


def test_file_loads_with_sources_and_the_stated_step_formula() -> None:
    assert len(ROWS) == len(BY_ID) == 34 and len(TITAN) == 14 and len(BRIDGE) == 20
    for r in ROWS:
        assert r["kind"] == "measured" and r["tier"] == 2
        assert r["source"]["ref"] and r["source"]["table"] and r["notes"]
        pl, n = r["plan"], r["hardware"]["n_gpus"]
        assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n
        assert r["derived"]["how"] == "gbs x seq / (tokens/s/GPU x GPUs)"
        step = pl["global_batch"] * r["model"]["seq_len"] / (
            r["measured"]["tokens_per_s_per_gpu"] * n)
        assert r["derived"]["step_time_s"] == pytest.approx(step, abs=5e-5)


def test_every_runnable_row_builds_a_job_with_the_stated_plan() -> None:
    built = 0
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        if r["id"] in UNRUN:
            assert case.job is None and UNRUN[r["id"]] in case.skipped
            continue
        assert not case.skipped, (r["id"], case.skipped)
        pl, p = r["plan"], case.job.plan
        assert (p.tp, p.pp, p.dp, p.cp, p.ep) == (pl["tp"], pl["pp"], pl["dp"], pl["cp"],
                                                  pl["ep"])
        assert (p.mbs, p.gbs) == (pl["microbatch"], pl["global_batch"])
        assert p.vpp == (pl["virtual_stages"] or 1)
        assert case.job.cluster.num_gpus == r["hardware"]["n_gpus"]
        assert case.job.model.seq_length == r["model"]["seq_len"]
        assert case.measured_step_s == pytest.approx(r["derived"]["step_time_s"], rel=1e-4)
        built += 1
    assert built == len(ROWS) - len(UNRUN) == 34
    cases = load_cases(DATA, tiers=None)
    assert sum(c.job is not None for c in cases) == 34


@pytest.mark.parametrize("rid", [r["id"] for r in TITAN if r["id"] not in UNRUN])
def test_torchtitan_rows_run_under_torchtitan_with_their_switches(rid: str) -> None:
    r = BY_ID[rid]
    case = case_from_entry(r, ROWS)
    job, p = case.job, case.job.plan
    # the rows state torch.compile (plan.compile): the compiled profile (calibration.md §5.69)
    assert job.framework.name == "torchtitan-compile" and p.zero == 3 and p.schedule
    assert p.recompute == ("full" if r["plan"]["recompute"] == "full" else "op")
    assert job.dtype == ("fp8-rowwise" if "fp8rw" in rid else
                         "fp8-current" if "fp8" in rid else "bf16")
    assert p.sp == (p.tp > 1)
    # the stated async TP is taken as stated: torchtitan runs plan tp_comm_overlap as async TP
    # (docs/calibration.md §5.50), the vanilla rows without it
    assert p.tp_comm_overlap == rid.endswith("_asynctp") == bool(r["plan"].get("tp_comm_overlap"))
    assert job.framework.tp_overlap == "async-tp"
    assert r["plan"]["compile"] is True and "torch.compile" in r["notes"]
    assert "compile" not in r["plan"]["techniques"].lower()


# the source's 'Async TP speedup' column: (model, GPUs, quantisation row) -> printed speedup
SPEEDUP = {("70b", 256, "bf16"): 1.09, ("70b", 256, "fp8tw"): 1.16, ("70b", 256, "fp8rw"): 1.04,
           ("8b", 64, "bf16"): 1.10, ("8b", 64, "fp8tw"): 1.10, ("8b", 64, "fp8rw"): 1.06}


@pytest.mark.parametrize("size,n,q", sorted(SPEEDUP))
def test_async_tp_columns_agree_with_the_printed_speedup(size: str, n: int, q: str) -> None:
    van = BY_ID[f"torchtitan_2506_{size}_{n}gpu_{q}_tp"]
    asy = BY_ID[f"torchtitan_2506_{size}_{n}gpu_{q}_asynctp"]
    ratio = asy["measured"]["tokens_per_s_per_gpu"] / van["measured"]["tokens_per_s_per_gpu"]
    assert ratio == pytest.approx(SPEEDUP[(size, n, q)], abs=0.005)
    # and the async row's step is the vanilla one over that ratio, to rounding
    assert van["derived"]["step_time_s"] / asy["derived"]["step_time_s"] == pytest.approx(
        ratio, rel=1e-4)


def test_h200_rows_are_fsdp_over_every_gpu_at_local_batch_2() -> None:
    for n in (32, 64):
        r = BY_ID[f"torchtitan_2506_8b_h200_{n}gpu_fp8"]
        job = case_from_entry(r, ROWS).job
        assert job.cluster.gpu.name == "H200-SXM-141GB" and job.plan.dp == n
        assert job.plan.gbs == 2 * n and job.plan.mbs == 2


def test_bridge_rows_model_flops_per_token_is_one_per_model() -> None:
    """The table's two figures are one measurement: Model TFLOP/s over tokens/s is each
    model's FLOPs per token, the same on every system and layout (to the table's rounding)."""
    per = defaultdict(list)
    for r in BRIDGE:
        m = r["measured"]
        per[r["model"]["name"]].append(m["tflops_per_gpu"] * 1e12 / m["tokens_per_s_per_gpu"])
    assert set(per) == {"llama3.1-405b", "deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b",
                        "qwen3-235b-a22b"}
    for name, v in per.items():
        assert max(v) / min(v) < 1.01, (name, v)


def test_bridge_moe_rows_run_the_switches_their_release_config_states() -> None:
    """The MoE rows state the token dispatcher, expert-parallel overlap, whole-step CUDA graph
    and recomputation of the Megatron-Bridge v0.5.0 config that fits their layout (NeMo
    26.06's, named in the notes); the reader runs them as stated under ``nemo``. The dense
    rows state none and run on the stack's defaults."""
    for r in BRIDGE:
        if r["id"] in UNRUN:
            continue
        pl = r["plan"]
        case = case_from_entry(r, ROWS)
        p = case.job.plan
        assert case.job.framework.name == "nemo" and p.zero in (0, 1)
        if r["model"]["name"] == "llama3.1-405b":
            assert "moe_dispatcher" not in pl and "No Megatron-Bridge v0.5.0 config" in r["notes"]
            continue
        assert "@v0.5.0 scripts/performance/configs/" in r["notes"]
        assert (p.moe_dispatcher, p.ep_overlap, p.cuda_graph) == (
            pl["moe_dispatcher"], pl["ep_overlap"], pl["cuda_graph"])
        if pl.get("recompute") == "none":
            assert p.recompute == "none"
        if pl.get("recompute_modules"):
            assert p.recompute == "selective"
            assert "+".join(p.recompute_modules) == pl["recompute_modules"]
        # DeepSeek-V3's layout: the config's, or the recipe map's for its (pp, vpp); 61
        # decoder layers, the MTP layer and the loss, as stated
        if r["model"]["name"] == "deepseek-v3":
            assert p.layout == pl["pp_layout"] and "stated: plan.pp_layout" in " ".join(
                case.assumptions)
            assert case.job.model.num_layers == 61
    # the GB300/GB200 MXFP8 configs overlap the expert all-to-all and graph the whole step
    gb = [r for r in BRIDGE if r["precision"] == "mxfp8" and "_gb" in r["id"]
          and r["model"]["name"] != "llama3.1-405b"]
    assert len(gb) == 9 and all(r["plan"]["ep_overlap"] and r["plan"]["cuda_graph"] for r in gb)
    assert BY_ID["mbridge2606_qwen330ba3b_h100_16_fp8"]["precision"].startswith(
        "fp8 (current scaling")
    assert case_from_entry(BY_ID["mbridge2606_qwen330ba3b_h100_16_fp8"], ROWS).job.dtype == \
        "fp8-current"


def test_a_stated_pipeline_layout_is_run_or_refused_with_the_reason() -> None:
    """``plan.pp_layout`` is what makes DeepSeek-V3's 61 layers + MTP run on pp 2 x vpp 8:
    without it the row does not divide; a layout that does not fit the model is refused
    with ``make_job``'s reason, never a crash."""
    r = copy.deepcopy(BY_ID["mbridge2606_deepseekv3_gb300_256_mxfp8"])
    assert case_from_entry(r, ROWS).job.plan.layout == "Et*4|(t*4|)*14tmL"
    del r["plan"]["pp_layout"]
    assert "must be divisible by pp*vpp" in case_from_entry(r, ROWS).skipped
    r["plan"]["pp_layout"] = "Et*4|(t*4|)*13tmL"            # 15 chunks for pp*vpp = 16
    bad = case_from_entry(r, ROWS)
    assert bad.job is None and "layout" in bad.skipped
