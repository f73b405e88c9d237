"""The command-line contract (documented in docs/cli.md), through the real
CLI: every shared input flag, every default, every JSON key it names and the exit-status
rules, for each command, on small inputs.

Most checks call ``simulator.cli.main`` in-process (fast); ``test_json_is_alone_on_stdout``
runs real ``python -m simulator.cli`` processes so that stdout is exactly what a script sees.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import build_parser, main
from strategies.cost import flop_counts
from strategies.job import make_job
from strategies.memory.scalar import peak_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30

# Small, fast inputs: 8 GPUs, a few layers' worth of work.
LLAMA = ["--model", "llama3-8b", "--cluster", "dgx-h100:1"]
GPT = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1"]
PLAN = "tp=2,pp=2,mbs=1"
SEARCH = ["search", *GPT, "--global-batch", "16", "--workers", "1"]

SHARED = ("--model", "--cluster", "--plan", "--seq-len", "--global-batch", "--dtype",
          "--framework", "--json", "--straggler", "--degrade")
MEMORY_KEYS = ("peak_gib", "params_gib", "grads_gib", "optimizer_gib", "activations_gib",
               "other_gib")
BREAKDOWN_KEYS = ("compute", "recompute", "offload", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
                  "dp_comm", "bubble", "optimizer")
ESTIMATE_KEYS = ("step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction", "memory",
                 "memory_by_stage", "fits", "breakdown_s", "inputs")
SIMULATE_EXTRA = ("simulated", "exposed_comm_s", "overlapped_comm_s", "events", "wall_s")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_json(capsys, *argv: str) -> dict:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def job_of(d: dict, model: str, cluster: str, nodes: int):
    """The Job that a JSON answer's ``inputs`` describe (for checking units against the
    library)."""
    plan = parse_plan(",".join(f"{k}={v}" for k, v in d["inputs"]["plan"].items()
                               if v is not None))
    return make_job(model_preset(model).with_seq_length(d["inputs"]["seq_len"]),
                    cluster_preset(cluster, nodes), plan, dtype=d["inputs"]["dtype"])


# -------------------------------------------------------------- flags and help
@pytest.mark.parametrize("command", ["estimate", "simulate", "compare", "search"])
def test_shared_inputs_on_every_command_that_takes_a_plan(command):
    assert set(SHARED) <= flags(subcommands()[command])


def test_every_command_takes_json_and_help(capsys):
    cmds = subcommands()
    assert {"estimate", "simulate", "search", "compare", "validate", "presets"} <= set(cmds)
    for name, parser in cmds.items():
        assert "--json" in flags(parser), name
        rc, out, _ = run(capsys, name, "--help")
        assert rc == 0 and out.startswith(f"usage: paraplan {name}")


def test_help_names_what_docs_cli_md_states(capsys):
    """The help of the plan inputs names the rules docs/cli.md states: the K/V exchange keys
    and the blank/empty-item refusal of --plan, the exchange axis of search, --csv's .csv."""
    for name in ("estimate", "simulate", "compare"):
        _, out, _ = run(capsys, name, "--help")
        text = " ".join(out.split())
        assert "cp_comm, hierarchical_cp" in text and "blank --plan exits 2" in text, name
    _, out, _ = run(capsys, "search", "--help")
    text = " ".join(out.split())
    assert "(cp_comm p2p, all_gather, a2a, a2a+p2p with hierarchical_cp)" in text
    assert "FILE must end with .csv" in text and "cp=8,cp_comm=a2a" in text


def test_defaults_of_the_shared_inputs():
    ns = build_parser().parse_args(["estimate", *GPT, "--plan", "gbs=8"])
    assert (ns.dtype, ns.seq_len, ns.global_batch, ns.json) == ("bf16", None, None, False)
    ns = build_parser().parse_args(["search"])
    assert (ns.model, ns.cluster, ns.dtype, ns.plan) == ("gpt3-175b", "dgx-a100:128", "bf16",
                                                         None)
    for name in ("simulate", "estimate", "compare"):
        with pytest.raises(SystemExit):        # --model, --cluster and --plan are required
            build_parser().parse_args([name, *GPT])


def test_simulate_and_compare_output_flags():
    assert {"--trace", "--timeline"} <= flags(subcommands()["simulate"])
    assert {"--schedules", "--timeline", "--sweep"} <= flags(subcommands()["compare"])


def test_version_and_no_command(capsys):
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.startswith("paraplan ")
    rc, out, err = run(capsys)
    assert rc == 2 and out == "" and "COMMAND" in err


# --------------------------------------------------------------------- --model
HF = {
    "gpt2": dict(n_layer=4, n_embd=256, n_head=8, n_inner=None, vocab_size=1000,
                 n_positions=1024),
    "llama": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                  num_key_value_heads=4, intermediate_size=688, vocab_size=1000,
                  max_position_embeddings=2048, tie_word_embeddings=False),
    "mistral": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                    num_key_value_heads=2, intermediate_size=896, vocab_size=1000,
                    max_position_embeddings=4096, tie_word_embeddings=False,
                    sliding_window=None),
    "mixtral": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                    num_key_value_heads=4, intermediate_size=512, vocab_size=1000,
                    max_position_embeddings=2048, tie_word_embeddings=False,
                    num_local_experts=8, num_experts_per_tok=2),
    "qwen2": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                  num_key_value_heads=4, intermediate_size=688, vocab_size=1000,
                  max_position_embeddings=2048, tie_word_embeddings=True),
    "gpt_neox": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                     intermediate_size=1024, vocab_size=1000, max_position_embeddings=2048,
                     tie_word_embeddings=False),
}


@pytest.mark.parametrize("model_type", sorted(HF))
def test_model_from_a_huggingface_config(capsys, tmp_path, model_type):
    cfg = {"model_type": model_type, **HF[model_type]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    d = run_json(capsys, "estimate", "--model", str(path), "--cluster", "dgx-h100:1",
                 "--plan", "tp=2,gbs=8")
    m = d["inputs"]["model"]
    if model_type == "gpt2":
        assert (m["num_layers"], m["hidden_size"], m["num_attention_heads"]) == (4, 256, 8)
        assert m["ffn_hidden_size"] == 4 * 256          # n_inner null = 4·n_embd
        assert m["seq_length"] == 1024                  # n_positions
    else:
        assert (m["num_layers"], m["hidden_size"], m["num_attention_heads"]) == (4, 256, 8)
        assert m["vocab_size"] == 1000
        assert m["tie_word_embeddings"] is cfg["tie_word_embeddings"]
    if "num_key_value_heads" in cfg:
        assert m["num_query_groups"] == cfg["num_key_value_heads"]
    if model_type == "mixtral":
        assert (m["num_experts"], m["moe_router_topk"]) == (8, 2)
    assert d["step_time_s"] > 0


def test_model_from_yaml_and_preset(capsys, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nnum_layers: 4\nhidden_size: 256\nnum_attention_heads: 8\n"
                    "vocab_size: 1000\nseq_length: 1024\n")
    d = run_json(capsys, "estimate", "--model", str(path), "--cluster", "dgx-h100:1",
                 "--plan", "tp=2,gbs=8")
    assert d["inputs"]["model"]["name"] == "tiny" and d["inputs"]["seq_len"] == 1024
    d = run_json(capsys, "estimate", *GPT, "--plan", "gbs=8")
    assert d["inputs"]["model"]["name"] == "gpt-1.7b"


# ------------------------------------------------------------------- --cluster
@pytest.mark.parametrize("preset,gpu,gbps_nvlink,nic_gbps", [
    ("dgx-a100", "A100-SXM4-80GB", 300.0, 200.0),
    ("dgx-h100", "H100-SXM5-80GB", 450.0, 400.0),
])
def test_cluster_presets_are_what_the_contract_says(capsys, preset, gpu, gbps_nvlink, nic_gbps):
    d = run_json(capsys, "estimate", "--model", "gpt-1.7b", "--cluster", f"{preset}:2",
                 "--plan", "tp=8,gbs=16")
    c = d["inputs"]["cluster"]
    assert (c["gpu"], c["gpus_per_node"], c["nodes"]) == (gpu, 8, 2)
    assert (c["intra_node_topology"], c["intra_node_GBps"]) == ("switch", gbps_nvlink)
    assert (c["nics_per_node"], c["inter_node_gbps"]) == (8, nic_gbps)
    assert c["inter_node_topology"] in ("rail_fat_tree", "fat_tree")
    assert d["inputs"]["plan"]["dp"] == 2


def test_cluster_from_yaml(capsys):
    d = run_json(capsys, "estimate", "--model", "gpt-1.7b", "--cluster",
                 str(ROOT / "docs" / "examples" / "cluster.yaml"), "--plan", "tp=8,gbs=64")
    assert d["inputs"]["cluster"]["name"] == "mixed-h100-a100"
    assert d["inputs"]["plan"]["dp"] == 8


# ---------------------------------------------------------------------- --plan
def test_plan_string_and_yaml_file_agree(capsys, tmp_path):
    text = "tp=2,pp=2,dp=2,cp=1,ep=1,mbs=1,gbs=8,schedule=interleaved,vpp=2," \
           "recompute=selective,sp=true,zero=1"
    path = tmp_path / "plan.yaml"
    path.write_text("".join(f"{kv.replace('=', ': ')}\n" for kv in text.split(",")))
    a = run_json(capsys, "estimate", *LLAMA, "--plan", text)
    b = run_json(capsys, "estimate", *LLAMA, "--plan", str(path))
    assert a == b
    plan = a["inputs"]["plan"]
    assert {k: plan[k] for k in ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "schedule", "vpp",
                                 "recompute", "sp", "zero")} == \
        dict(tp=2, pp=2, dp=2, cp=1, ep=1, mbs=1, gbs=8, schedule="interleaved", vpp=2,
             recompute="selective", sp=True, zero=1)


@pytest.mark.parametrize("extra", ["schedule=gpipe", "schedule=1f1b", "recompute=none",
                                   "recompute=full", "sp=false", "zero=0", "zero=2"])
def test_plan_values(capsys, extra):
    d = run_json(capsys, "estimate", *LLAMA, "--plan", f"tp=2,pp=2,gbs=8,{extra}")
    key, value = extra.split("=")
    assert str(d["inputs"]["plan"][key]).lower() == value


def test_zero3_cp_and_ep(capsys):
    d = run_json(capsys, "estimate", *LLAMA, "--plan", "tp=2,cp=2,zero=3,gbs=8")
    assert (d["inputs"]["plan"]["cp"], d["inputs"]["plan"]["dp"]) == (2, 2)
    d = run_json(capsys, "estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100:1",
                 "--plan", "tp=2,ep=4,gbs=8")
    assert d["inputs"]["plan"]["ep"] == 4


def test_dp_is_derived_and_checked(capsys):
    d = run_json(capsys, "estimate", *LLAMA, "--plan", "tp=2,gbs=8")
    assert d["inputs"]["plan"]["dp"] == 4
    rc, out, err = run(capsys, "estimate", *LLAMA, "--plan", "tp=2,dp=2,gbs=8")
    assert rc == 2 and out == "" and "dp=2" in err


# ------------------------------------------ --seq-len, --global-batch, --dtype
def test_seq_len_defaults_to_the_models(capsys):
    d = run_json(capsys, "estimate", *GPT, "--plan", "tp=8,gbs=8")
    assert d["inputs"]["seq_len"] == model_preset("gpt-1.7b").seq_length == 2048
    d = run_json(capsys, "estimate", *GPT, "--plan", "tp=8,gbs=8", "--seq-len", "1024")
    assert d["inputs"]["seq_len"] == 1024
    assert d["tokens_per_s"] == pytest.approx(8 * 1024 / d["step_time_s"], rel=1e-12)


def test_global_batch_where_the_plan_has_no_gbs(capsys):
    a = run_json(capsys, "estimate", *GPT, "--plan", "tp=8", "--global-batch", "16")
    b = run_json(capsys, "estimate", *GPT, "--plan", "tp=8,gbs=16")
    c = run_json(capsys, "estimate", *GPT, "--plan", "tp=8,gbs=16", "--global-batch", "16")
    assert a == b == c and a["inputs"]["plan"]["gbs"] == 16
    rc, _, err = run(capsys, "estimate", *GPT, "--plan", "tp=8,gbs=16", "--global-batch", "32")
    assert rc == 2 and "--global-batch" in err and "gbs=16" in err


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
def test_dtype_and_mfu_against_its_peak(capsys, dtype):
    argv = ["estimate", *LLAMA, "--plan", "tp=2,pp=2,gbs=8,recompute=full"]
    d = run_json(capsys, *argv, *([] if dtype == "bf16" else ["--dtype", dtype]))
    assert d["inputs"]["dtype"] == dtype
    job = job_of(d, "llama3-8b", "dgx-h100", 1)
    flops = flop_counts.model_flops_per_step(job.model, 8)
    peak = job.cluster.gpu.peak(dtype)
    # mfu: model FLOPs (no recomputation) / (GPUs · step time · peak of the dtype)
    assert d["mfu"] == pytest.approx(flops / (8 * d["step_time_s"] * peak), rel=1e-9)
    # hfu counts the recomputation, mfu does not: against the same plan without it, the
    # model FLOPs per step (mfu · step) are the same and hfu · step grows
    none = run_json(capsys, *argv[:-1], argv[-1].replace("full", "none"),
                    *([] if dtype == "bf16" else ["--dtype", dtype]))
    assert d["mfu"] * d["step_time_s"] == pytest.approx(none["mfu"] * none["step_time_s"],
                                                        rel=1e-9)
    assert d["hfu"] * d["step_time_s"] > 1.2 * none["hfu"] * none["step_time_s"]
    assert none["hfu"] == pytest.approx(none["mfu"], rel=1e-12)   # nothing recomputed


# ---------------------------------------------------- estimate / simulate JSON
@pytest.fixture(scope="module")
def estimated():
    return _in_process(["estimate", *LLAMA, "--plan", PLAN, "--global-batch", "32", "--json"])


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    out = _in_process(["simulate", *LLAMA, "--plan", PLAN, "--global-batch", "32", "--json",
                       "--trace", str(d / "t.json"), "--timeline", str(d / "t.svg")])
    return out, d


def _in_process(argv: list[str]) -> dict:
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def _check_estimate_keys(d: dict, pp: int) -> None:
    for key in ESTIMATE_KEYS:
        assert key in d, key
    assert set(MEMORY_KEYS) <= set(d["memory"])
    assert len(d["memory_by_stage"]) == pp
    for stage in d["memory_by_stage"]:
        assert set(MEMORY_KEYS) <= set(stage)
    # memory: the stage with the peak (its breakdown), peak over all ranks
    worst = max(d["memory_by_stage"], key=lambda s: s["peak_gib"])
    assert d["memory"]["peak_gib"] == pytest.approx(worst["peak_gib"], rel=1e-12)
    assert {k: d["memory"][k] for k in MEMORY_KEYS} == \
        pytest.approx({k: worst[k] for k in MEMORY_KEYS}, rel=1e-12)
    assert set(d["breakdown_s"]) == set(BREAKDOWN_KEYS)
    assert all(v >= 0 for v in d["breakdown_s"].values())
    assert 0 <= d["bubble_fraction"] < 1
    assert 0 < d["mfu"] <= 1 and 0 < d["hfu"] <= 1
    assert set(d["inputs"]) >= {"model", "cluster", "plan"}


def test_estimate_json(estimated):
    d = estimated
    _check_estimate_keys(d, pp=2)
    assert "simulated" not in d or d["simulated"] is False
    assert d["tokens_per_s"] == pytest.approx(32 * 8192 / d["step_time_s"], rel=1e-12)
    job = job_of(d, "llama3-8b", "dgx-h100", 1)
    assert d["memory"]["peak_gib"] == pytest.approx(peak_memory(job)[1].total / GIB, rel=1e-9)
    hbm_gib = job.cluster.gpu.hbm_bytes / GIB
    assert d["fits"] is (d["memory"]["peak_gib"] <= hbm_gib)
    # the exposed parts add up to the step
    assert sum(d["breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=1e-6)


def test_simulate_json(simulated, estimated):
    d, folder = simulated
    _check_estimate_keys(d, pp=2)
    assert d["simulated"] is True
    assert d["exposed_comm_s"] >= 0 and d["overlapped_comm_s"] >= 0
    assert isinstance(d["events"], int) and d["events"] > 0
    assert d["wall_s"] > 0
    assert d["inputs"] == estimated["inputs"]
    assert d["memory"] == estimated["memory"]
    assert sum(d["breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=1e-6)


def test_simulate_writes_a_chrome_trace_and_a_timeline(simulated):
    _, folder = simulated
    trace = json.loads((folder / "t.json").read_text())
    assert trace["traceEvents"] and {"ph", "pid", "tid", "name"} <= set(trace["traceEvents"][0])
    assert (folder / "t.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_a_plan_that_does_not_fit_is_an_answer(capsys):
    d = run_json(capsys, "estimate", "--model", "llama3-70b", "--cluster", "dgx-h100:1",
                 "--plan", "tp=8,gbs=8")
    assert d["fits"] is False and d["memory"]["peak_gib"] > 80


# ---------------------------------------------------------------------- search
@pytest.fixture(scope="module")
def searched():
    return _in_process([*SEARCH, "--json"])


def test_search_json(searched):
    rep = searched
    for key in ("plans", "recommended", "pruned", "evaluated", "wall_s"):
        assert key in rep
    times = [p["step_time_s"] for p in rep["plans"]]
    assert times == sorted(times) and 1 <= len(times) <= 5        # best first, --top 5
    for i, p in enumerate(rep["plans"], 1):
        assert p["rank"] == i
        assert set(p["plan"]) >= {"tp", "pp", "dp", "mbs", "gbs", "schedule"}
        assert p["step_time_s"] > 0 and 0 < p["mfu"] <= 1 and p["simulated"] is True
        assert p["memory"]["peak_gib"] > 0
        assert p["reasons"] and all(isinstance(r, str) for r in p["reasons"])
    rec = rep["recommended"]
    assert rec["why"] and all(isinstance(w, str) for w in rec["why"])
    assert set(rec) >= {"plan", "step_time_s", "memory", "mfu", "simulated", "rank"}
    if rec["rank"] is not None:
        assert rep["plans"][rec["rank"] - 1]["key"] == rec["key"]
    assert all(isinstance(n, int) and n >= 0 for n in rep["pruned"].values())
    ev = rep["evaluated"]
    assert ev["analytic"] >= ev["simulated"] >= len(rep["plans"])
    assert rep["wall_s"] > 0
    assert rep["inputs"]["global_batch"] == 16


def test_search_recommendation_below_the_top_k_has_no_rank(capsys):
    """``recommended.rank`` is its place in ``plans``, or null when the simplest plan within
    the tolerance ranks below the top-k (here: ZeRO-0 a little slower than ZeRO-1, top 1)."""
    rep = run_json(capsys, *SEARCH, "--top", "1", "--tolerance", "20")
    rec, best = rep["recommended"], rep["plans"][0]
    assert rec["rank"] == (1 if rec["key"] == best["key"] else None)
    assert rec["rank"] is None and rec["plan"]["zero"] < best["plan"]["zero"]


def test_search_takes_the_shared_plan_input(capsys, tmp_path):
    rep = run_json(capsys, "search", *GPT, "--workers", "1", "--plan", "tp=2,gbs=16")
    assert rep["inputs"]["fixed"] == {"tp": 2} and rep["inputs"]["global_batch"] == 16
    assert {p["plan"]["tp"] for p in rep["plans"]} == {2}
    path = tmp_path / "p.yaml"
    path.write_text("tensor_model_parallel_size: 2\nsp: true\ngbs: 16\n")
    rep2 = run_json(capsys, "search", *GPT, "--workers", "1", "--plan", str(path))
    assert rep2["inputs"]["fixed"] == {"tp": 2, "sp": True}
    assert {p["plan"]["sp"] for p in rep2["plans"]} == {True}
    for bad, words in ((["--plan", "tp=2,gbs=16", "--global-batch", "32"], ["--global-batch"]),
                       (["--plan", "layers_per_stage=48/48,gbs=16"],
                        ["--plan", "layers_per_stage", "not a key a search can fix"]),
                       (["--plan", "tp=2,gbs=16", "--fix", "tp=4"], ["--plan", "tp=2", "--fix"])):
        rc, out, err = run(capsys, "search", *GPT, *bad)
        assert rc == 2 and out == "" and err.count("\n") == 1, err
        assert all(w in err for w in words), err


def test_search_csv_is_checked_before_the_search(capsys, tmp_path):
    (tmp_path / "out.csv").mkdir()     # a folder, named as --csv wants (.csv)
    rc, out, err = run(capsys, *SEARCH, "--csv", str(tmp_path / "out.csv"))
    assert rc == 2 and out == "" and "--csv" in err and "folder" in err
    rc, out, err = run(capsys, *SEARCH, "--csv", str(tmp_path / "out.txt"))
    assert rc == 2 and out == "" and "must be a file name ending with .csv" in err


# The README main job with no arguments (``paraplan search --json``) is checked in
# test_search_layouts.py (test_the_main_job_search_with_no_arguments), on the one search that
# file's module fixture runs for its README-job tests.


# -------------------------------------------------- compare, validate, presets
def test_compare_json(capsys):
    d = run_json(capsys, "compare", *GPT, "--plan", "tp=2,pp=4,gbs=8",
                 "--schedules", "1f1b,interleaved:2,interleaved:5")
    assert set(d) >= {"inputs", "schedules", "rows"}
    assert d["schedules"] == ["1f1b", "interleaved:2", "interleaved:5"]
    rows = {r["schedule"]: r for r in d["rows"]}
    for name in ("1f1b", "interleaved:2"):
        r = rows[name]
        assert r["valid"] is True and r["error"] is None
        for key in ("step_time_s", "analytic_step_time_s", "bubble_fraction",
                    "bubble_over_ideal", "bubble_closed_form", "exposed_comm_s"):
            assert r[key] >= 0
        assert set(MEMORY_KEYS) <= set(r["memory"]) and isinstance(r["fits"], bool)
        assert set(r["p2p"]) >= {"total_bytes", "per_gpu_bytes"}
        assert set(r["breakdown_s"]) == set(BREAKDOWN_KEYS)
    assert rows["interleaved:5"]["valid"] is False and rows["interleaved:5"]["error"]


def test_compare_exits_2_when_no_schedule_fits(capsys):
    rc, out, err = run(capsys, "compare", *GPT, "--plan", "tp=2,pp=4,gbs=8",
                       "--schedules", "interleaved:5", "--json")
    assert rc == 2 and err.count("\n") == 1 and "--schedules" in err
    assert json.loads(out)["rows"][0]["valid"] is False      # the rows are still reported


def test_validate_json(capsys):
    d = run_json(capsys, "validate", "--no-sim")
    assert set(d) >= {"reference", "tiers", "analytic", "simulated", "evaluated", "skipped",
                      "cases", "wall_s"}
    assert d["tiers"] == [1]
    assert set(d["analytic"]) >= {"mape_pct", "cases", "max_abs_error_pct", "mean_error_pct"}
    assert d["analytic"]["cases"] == d["evaluated"] > 0
    assert d["simulated"]["mape_pct"] is None                 # --no-sim
    case = next(c for c in d["cases"] if c["plan"] is not None)
    assert set(case) >= {"id", "measured_step_s", "analytic_step_time_s", "analytic_error_pct",
                         "simulated_step_time_s"}


def test_presets_json(capsys):
    d = run_json(capsys, "presets")
    assert set(d) == {"models", "gpus", "clusters", "frameworks"}
    assert {"gpt3-175b", "llama3-70b"} <= {m["name"] for m in d["models"]}
    assert {"dgx-a100", "dgx-h100"} <= {c["name"] for c in d["clusters"]}
    assert {"A100-SXM4-80GB", "H100-SXM5-80GB"} <= {g["name"] for g in d["gpus"]}
    for m in d["models"]:
        assert set(m) >= {"name", "params_b", "active_params_b", "layers", "hidden", "heads",
                          "kv_heads", "seq_len", "experts"}
        assert m["active_params_b"] <= m["params_b"]
    for g in d["gpus"]:
        assert set(g) >= {"name", "bf16_tflops", "fp8_tflops", "hbm_gib", "hbm_tb_s"}


# ---------------------------------------------- --json alone on stdout; errors
def _proc(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator.cli", *argv], cwd=ROOT, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("argv", [
    ["estimate", *GPT, "--plan", "tp=8,gbs=8"],
    ["simulate", *GPT, "--plan", "tp=2,pp=2,gbs=8"],
    [*SEARCH, "--max-mbs", "2", "--fix", "zero=1", "--export", "megatron"],
    ["presets"],
], ids=["estimate", "simulate", "search", "presets"])
def test_json_is_alone_on_stdout(argv):
    p = _proc(*argv, "--json")
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)                      # one document, nothing else


@pytest.mark.parametrize("argv,words", [
    (["estimate", *GPT, "--plan", "tp=3,gbs=8"], ["tp*pp*cp=3"]),
    (["simulate", *GPT, "--plan", "tp=8,gbs=8", "--dtype", "fp8"], ["dtype='fp8'"]),
    (["search", *GPT, "--global-batch", "16", "--fix", "tp=x"], ["--fix", "tp"]),
    (["compare", *GPT, "--plan", "tp=8,gbs=8"], ["pp"]),
    (["validate", "--tiers", "x"], ["--tiers", "'x'"]),
    (["presets", "--models"], ["--models"]),
    (["estimate", *GPT, "--plan", "gbs=8", "--seq-len", "0"], ["--seq-len", "'0'"]),
], ids=["estimate", "simulate", "search", "compare", "validate", "presets", "argparse"])
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("paraplan") and "error:" in err, err
    assert "Traceback" not in err and all(w in err for w in words), err


def test_debug_raises_instead(capsys):
    from strategies.errors import SpecError
    with pytest.raises(SpecError):
        main(["estimate", *GPT, "--plan", "tp=3,gbs=8", "--debug"])


# ---------------------------------------------------------- the reference page
@pytest.mark.parametrize("command", ["estimate", "simulate", "search", "compare", "validate",
                                     "presets"])
def test_every_flag_is_documented_in_docs_cli_md(command):
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    start = text.index(f"## `paraplan {command}`")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else None]
    missing = sorted(f for f in flags(subcommands()[command]) - {"-h", "--help"}
                     if f"`{f}" not in section and f not in SHARED)
    assert not missing, f"docs/cli.md does not document {missing} of paraplan {command}"
