"""A hostile user's sweep of every command (docs/cli.md): each bad input exits 2 with one line
on stderr naming the field, the value and the rule, no traceback, nothing on stdout and no
file left behind. ``BROKEN`` are the cases this sweep found answered otherwise (a traceback,
exit 0 with the input dropped, or a rule that did not fit the value) and that are fixed;
``HELD`` a sample of the ones that already held, kept as a guard. The older sweeps:
tests/test_cli_errors.py, tests/test_bad_input_recent.py.

Also: drop-and-pad's refusal under DeepEP names dispatchers the chosen stack runs
(``plan.checks.pad_deepep_rule``, ``stacks.plan_defaults.restate_for_stack``), and every output
file is written atomically: a write that fails on the disk leaves neither the file nor its
temporary, and is refused in one line (``chrome_trace.atomic_path``).

Runs in-process through ``simulator.cli.main`` (seconds); the failing-disk cases as real
processes under a file-size limit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.plan import Plan
from strategies.stacks.plan_defaults import restate_for_stack
from tests.cli_cases import refused_in_one_line

ROOT = Path(__file__).resolve().parents[1]
A100 = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1"]
H100 = ["--model", "llama3-8b", "--cluster", "dgx-h100:1"]
MOE = ["--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:2"]
SEARCH = ["search", *A100, "--global-batch", "16", "--workers", "1"]
LLAMA = dict(model_type="llama", num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
             num_key_value_heads=4, intermediate_size=1024, vocab_size=1000,
             max_position_embeddings=2048)
MODEL_YAML = ("num_layers: 4\nhidden_size: 256\nnum_attention_heads: 8\nvocab_size: 1000\n"
              "seq_length: 1024\n")
CLUSTER = ("gpu: H100\nnodes: 1\ngpus_per_node: 8\nintra_node_GBps: 450\nnics_per_node: 8\n"
           "inter_node_gbps: 400\n")
GPT_OSS = json.loads((ROOT / "tests" / "data" / "hf" / "gpt_oss_120b.json").read_text(
    encoding="utf-8"))
PAD_DEEPEP = "ep=8,gbs=16,moe_capacity_factor=1,moe_pad_to_capacity=true,moe_dispatcher=deepep"


def _est(name, base, plan, words, *extra, files=None):
    return (name, ["estimate", *base, "--plan", plan, *extra], files or {}, words)


def _plan_file(name, text, words, cmd="estimate"):
    return (name, [cmd, *H100, "--plan", "{d}/p.yaml"], {"p.yaml": text}, words)


def _hf(name, cfg, words):
    return (name, ["estimate", "--model", "{d}/config.json", "--cluster", "dgx-h100:1",
                   "--plan", "gbs=8"], {"config.json": json.dumps(cfg)}, words)


# (id, argv, files {name: text or bytes}, words the one stderr line must hold); "{d}": the
# files' folder. Each was answered otherwise before this sweep (docs/calibration.md has no
# section: no cost changed; the report of the session lists them).
BROKEN = [
    # a traceback: --results that is not UTF-8 (UnicodeDecodeError)
    ("results-not-utf8", [*SEARCH, "--results", "{d}/r.jsonl", "--resume"],
     {"r.jsonl": b"\xff\xfe\n"}, ["--results=", "r.jsonl", "not UTF-8"]),
    # a file that is not a results file was cut to its last newline before it was refused
    ("results-one-line-of-notes", [*SEARCH, "--results", "{d}/r.jsonl", "--resume"],
     {"r.jsonl": "my notes"}, ["--results=", "r.jsonl:1", "not a results line"]),
    # exit 0, the input dropped without a word
    ("reference-that-cannot-run", [*SEARCH, "--reference", "tp=3,gbs=16"], {},
     ["--reference='tp=3,gbs=16'", "tp*pp*cp=3", "must divide the cluster's 8 GPUs"]),
    ("ray-address-without-ray", [*SEARCH, "--ray-address", "localhost:1"], {},
     ["--ray-address='localhost:1'", "needs --backend ray"]),
    ("timeline-ranks-without-timeline", ["simulate", *H100, "--plan", "tp=8,gbs=8",
                                         "--timeline-ranks", "5"], {},
     ["--timeline-ranks=5", "needs --timeline"]),
    ("compare-timeline-ranks-without-timeline", ["compare", *H100, "--plan", "tp=2,pp=4,gbs=16",
                                                 "--timeline-ranks", "5"], {},
     ["--timeline-ranks=5", "needs --timeline"]),
    ("seed-without-monte-carlo", ["goodput", *H100, "--plan", "tp=8,gbs=8", "--analytic",
                                  "--tokens", "1e9", "--seed", "7"], {},
     ["--seed=7", "needs --monte-carlo"]),
    ("seed-not-ascii", ["goodput", *H100, "--plan", "tp=8,gbs=8", "--analytic", "--tokens",
                        "1e9", "--monte-carlo", "5", "--seed", "\u0663"], {},
     ["--seed", "must be an integer"]),
    _plan_file("found-for-step-time-text", "tp: 8\ngbs: 8\nfound_for: {step_time_s: x}\n",
               ["found_for.step_time_s='x'", "finite number of seconds > 0"]),
    _plan_file("found-for-step-time-nan", "tp: 8\ngbs: 8\nfound_for: {step_time_s: .nan}\n",
               ["found_for.step_time_s=nan", "finite number of seconds > 0"]),
    _plan_file("found-for-gpus-text", "tp: 8\ngbs: 8\nfound_for: {gpus: x}\n",
               ["found_for.gpus='x'", "whole number >= 1"]),
    _plan_file("found-for-batch-negative", "tp: 8\ngbs: 8\nfound_for: {global_batch: -1}\n",
               ["found_for.global_batch=-1", "whole number >= 1"]),
    _plan_file("found-for-model-bool", "tp: 8\ngbs: 8\nfound_for: {model: true}\n",
               ["found_for.model=True", "a name"]),
    # two outputs naming one file: the later write replaced the earlier (the CSV the results)
    ("csv-is-the-results-file", [*SEARCH, "--results", "{d}/r.csv", "--csv", "{d}/r.csv"], {},
     ["--csv=", "r.csv", "is also the file of --results"]),
    ("save-plan-is-the-csv", [*SEARCH, "--csv", "{d}/r.json", "--save-plan", "{d}/r.json"], {},
     ["--save-plan=", "is also the file of --csv"]),
    ("sweep-is-the-timeline", ["compare", *H100, "--plan", "tp=2,pp=4,gbs=16", "--timeline",
                               "{d}/c.png", "--sweep", "{d}/./c.png"], {},
     ["--sweep=", "is also the file of --timeline"]),
    # a rule that did not fit the value
    ("whatif-plan-is-a-folder", ["whatif", *A100, "--global-batch", "16", "--vary", "nodes=1,2",
                                 "--plan", "{d}/sub"], {"sub/x": ""},
     ["--plan=", "is a folder, not a plan file"]),
    ("plan-is-a-folder", ["estimate", *H100, "--plan", "{d}/sub"], {"sub/x": ""},
     ["plan=", "is a folder, not a plan file", ".yaml, .yml or .json"]),
    ("plan-file-without-extension", ["estimate", *H100, "--plan", "{d}/p.txt"],
     {"p.txt": "tp: 8\ngbs: 8\n"}, ["plan=", "p.txt", "is a file, not a plan file"]),
    ("cluster-is-a-folder", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/sub",
                             "--plan", "gbs=8"], {"sub/x": ""},
     ["cluster=", "is a folder, not a cluster file"]),
    ("cluster-file-without-extension", ["estimate", "--model", "llama3-8b", "--cluster",
                                        "{d}/c.txt", "--plan", "gbs=8"], {"c.txt": CLUSTER},
     ["cluster=", "c.txt", "is a file, not a cluster file"]),
    ("mixed-cluster-with-a-file", ["estimate", "--model", "llama3-8b", "--cluster",
                                   "dgx-h100:1+{d}/c.yaml", "--plan", "gbs=16"],
     {"c.yaml": CLUSTER}, ["cluster=", "a mixed cluster joins presets", "node_groups"]),
    ("hf-config-without-model-type", ["estimate", "--model", "{d}/config.json", "--cluster",
                                      "dgx-h100:1", "--plan", "gbs=8"],
     {"config.json": json.dumps({k: v for k, v in LLAMA.items() if k != "model_type"})},
     ["model_type=None", "is required in a HuggingFace config.json", "num_hidden_layers"]),
    _hf("hf-name-or-path-not-text", {**LLAMA, "_name_or_path": True},
        ["_name_or_path=True", "must be a string"]),
    # gpt_oss is read with biases whatever attention_bias said (any value was taken)
    _hf("gpt-oss-attention-bias-false", {**GPT_OSS, "attention_bias": False},
        ["attention_bias=False", "model_type=gpt_oss", "not modelled"]),
    _hf("gpt-oss-attention-bias-text", {**GPT_OSS, "attention_bias": "x"},
        ["attention_bias='x'", "true or false"]),
    ("model-file-a-number", ["estimate", "--model", "{d}/m.yaml", "--cluster", "dgx-h100:1",
                             "--plan", "gbs=8"], {"m.yaml": "5\n"},
     ["model=", "must hold a mapping of keys, not a number"]),
    _plan_file("plan-file-a-text", "tp\n", ["plan=", "mapping of plan keys, not a text"]),
    ("calibrate-seqs-41-digits", ["calibrate", "--backend", "fake", "--out", "{d}/gpu.yaml",
                                  "--seqs", "9" * 41], {},
     ["--seqs=", "at most 40 digits", "sanity limit"]),
    # advice true for the chosen stack: torchtitan runs no hybridep
    _est("pad-deepep-advice-torchtitan", MOE, PAD_DEEPEP,
         ["moe_pad_to_capacity=True", "torchtitan runs the token dispatchers alltoall",
          "use moe_dispatcher=alltoall"], "--framework", "torchtitan"),
    # polish23: an empty plan file was read as an empty plan (an empty model or cluster
    # file is refused), an empty item between commas was skipped, a --csv without .csv was
    # written, and --resume on a missing --results file started a fresh search into it
    _plan_file("plan-file-empty", "", ["plan=", "p.yaml", "not nothing (an empty file)"]),
    ("plan-file-empty-with-batch", ["estimate", *H100, "--plan", "{d}/p.yaml",
                                    "--global-batch", "8"], {"p.yaml": ""},
     ["plan=", "p.yaml", "not nothing (an empty file)"]),
    _est("plan-empty-item", H100, "tp=2,,gbs=8", ["plan='tp=2,,gbs=8'", "an empty item"]),
    _est("plan-trailing-comma", H100, "tp=2,gbs=8,", ["plan='tp=2,gbs=8,'", "an empty item"]),
    _est("plan-blank", H100, " ", ["plan=''", "is empty"], "--global-batch", "8"),
    ("search-plan-empty-item", [*SEARCH, "--plan", "tp=2,,mbs=1"], {},
     ["--plan='tp=2,,mbs=1'", "an empty item"]),
    ("search-fix-empty-item", [*SEARCH, "--fix", "tp=2,,mbs=1"], {},
     ["--fix='tp=2,,mbs=1'", "an empty item"]),
    # docs24: a blank --fix (an unset shell variable) searched the whole space, exit 0
    ("search-fix-blank", [*SEARCH, "--fix", ""], {}, ["--fix=''", "is empty"]),
    ("whatif-fix-blank", ["whatif", *A100, "--global-batch", "16", "--fix", " ",
                          "--vary", "inter_node_gbps=25,400"], {}, ["--fix=''", "is empty"]),
    ("csv-without-csv-extension", [*SEARCH, "--csv", "{d}/r.txt"], {},
     ["--csv=", "r.txt", "ending with .csv"]),
    ("resume-a-missing-results-file", [*SEARCH, "--results", "{d}/r.jsonl", "--resume"], {},
     ["--results=", "r.jsonl", "does not exist: nothing to resume"]),
    ("pad-deepep-advice-search-fix", [*SEARCH[:1], *MOE, "--global-batch", "16", "--workers",
                                      "1", "--framework", "automodel", "--fix",
                                      "moe_pad_to_capacity=true,moe_capacity_factor=1,"
                                      "moe_dispatcher=deepep"], {},
     ["--fix='moe_pad_to_capacity=true'", "automodel runs the token dispatchers"]),
]

# already refused as the rule says: a guard over each command and each kind of input
HELD = [
    _est("plan-semicolons", H100, "tp=2;pp=2", ["tp='2;pp=2'", "integer"]),
    _est("plan-colon", H100, "tp:2", ["plan='tp:2'", "key=value"]),
    _est("plan-alias-twice", H100, "tp=2,gbs=8,tensor_model_parallel_size=2",
         ["'tensor_model_parallel_size'", "given twice"]),
    _est("plan-case-twice", H100, "TP=2,gbs=8,tp=2", ["'tp'", "given twice"]),
    _est("plan-hex", H100, "tp=0x8,gbs=8", ["tp='0x8'", "integer"]),
    _est("plan-nan", H100, "tp=nan,gbs=8", ["tp='nan'", "integer"]),
    _est("plan-nul", H100, "gbs=8\x00", ["gbs='8\\x00'", "integer"]),
    _est("plan-vpp-in-schedule-text", H100, "gbs=8,schedule=interleaved:2:3",
         ["vpp='2:3'", "integer"]),
    _est("plan-layout-negative-repeat", H100, "gbs=8,pp=2,layout=Et*-1|t*32L",
         ["layout=", "'*' must be followed by a count"]),
    _est("plan-framework-empty", H100, "gbs=8,framework=", ["plan.framework=''",
                                                           "unknown framework"]),
    _est("framework-compile-of-megatron", H100, "tp=8,gbs=8",
         ["--framework='megatron-compile'", "torchtitan only"], "--framework",
         "megatron-compile"),
    _est("straggler-twice", H100, "tp=8,gbs=8", ["GPU 0 is given twice"], "--straggler", "0=2",
         "--straggler", "0=3"),
    _est("degrade-bad-end", H100, "tp=8,gbs=8", ["--degrade='a'", "a link end must be"],
         "--degrade", "a-b=2"),
    _plan_file("plan-yaml-key-null", "null: 3\ngbs: 8\n", ["plan=None", "unknown key"]),
    _plan_file("plan-yaml-tp-inf", "tp: .inf\ngbs: 8\n", ["tp=inf", "integer"]),
    _plan_file("plan-yaml-layout-list", "gbs: 8\npp: 2\nlayout: [E, t]\n",
               ["layout=['E', 't']", "layout string"]),
    _plan_file("plan-yaml-gbs-huge", "gbs: 1.0e+300\n", ["gbs=an integer of 301 digits",
                                                          "sanity limit"]),
    _plan_file("plan-not-utf8", b"\xff", ["plan=", "not UTF-8"]),
    ("model-yaml-deep-nesting", ["estimate", "--model", "{d}/m.yaml", "--cluster",
                                 "dgx-h100:1", "--plan", "gbs=8"],
     {"m.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n"}, ["model=", "malformed YAML"]),
    ("model-yaml-mla-partial", ["estimate", "--model", "{d}/m.yaml", "--cluster", "dgx-h100:1",
                                "--plan", "gbs=8"], {"m.yaml": MODEL_YAML + "kv_lora_rank: 64\n"},
     ["qk_rope_head_dim=None", "kv_lora_rank"]),
    _hf("hf-layers-bool", {**LLAMA, "num_hidden_layers": True},
        ["num_hidden_layers=True", "integer >= 1"]),
    _hf("hf-layers-huge", {**LLAMA, "num_hidden_layers": 10**12},
        ["num_hidden_layers=1000000000000", "sanity limit"]),
    _hf("hf-text-config-list", {"model_type": "llama4", "text_config": [1]},
        ["text_config='list'", "JSON object"]),
    _hf("hf-deepseek-v4-empty", {"model_type": "deepseek_v4"},
        ["num_attention_heads=None", "deepseek_v4 config.json"]),
    _hf("hf-nemotron-h-pattern-short", {"model_type": "nemotron_h", "num_hidden_layers": 4,
                                        "hidden_size": 256, "num_attention_heads": 8,
                                        "num_key_value_heads": 8, "vocab_size": 1000,
                                        "hybrid_override_pattern": "M*",
                                        "intermediate_size": 512},
        ["hybrid_override_pattern='M*'", "one character per layer"]),
    ("cluster-custom-gpu-tflops-text", ["estimate", "--model", "llama3-8b", "--cluster",
                                        "{d}/c.yaml", "--plan", "tp=8,gbs=8"],
     {"c.yaml": CLUSTER.replace("gpu: H100", "gpu: {name: X, bf16_tflops: lots, hbm_gib: 80, "
                                "hbm_tbps: 3}")}, ["gpu.bf16_tflops='lots'", "number"]),
    ("cluster-node-groups-extra-key", ["estimate", "--model", "llama3-8b", "--cluster",
                                       "{d}/c.yaml", "--plan", "gbs=16"],
     {"c.yaml": "node_groups: [{gpu: H100, nodes: 1, foo: 2}]\ngpus_per_node: 8\n"
                "intra_node_GBps: 450\nnics_per_node: 8\ninter_node_gbps: 400\n"},
     ["node_groups[0]=", "keys gpu and nodes"]),
    ("trace-unwritable", ["simulate", *H100, "--plan", "tp=8,gbs=8", "--trace", "/proc/t.json"],
     {}, ["--trace='/proc/t.json'", "cannot be written"]),
    ("calibrate-out-a-folder", ["calibrate", "--backend", "fake", "--out", "{d}/g.yaml"],
     {"g.yaml/x": ""}, ["--out=", "is a folder"]),
    ("search-save-top-a-file", [*SEARCH, "--save-top", "{d}/f"], {"f": "x"},
     ["--save-top=", "existing folder"]),
    ("search-fix-and-plan-disagree", [*SEARCH, "--fix", "tp=2", "--plan", "tp=4"], {},
     ["--plan='tp=4'", "disagrees with --fix tp=2"]),
    ("whatif-vary-twice", ["whatif", *A100, "--global-batch", "16", "--workers", "1", "--vary",
                           "nodes=1,2", "--vary", "nodes=3"], {}, ["--vary='nodes'",
                                                                   "given twice"]),
    ("whatif-network-price-negative", ["whatif", *A100, "--global-batch", "16", "--vary",
                                       "nodes=1,2", "--network-prices", "switch=-1"], {},
     ["--network-prices switch=-1.0", "> 0"]),
    ("compare-schedules-twice", ["compare", *H100, "--plan", "tp=2,pp=4,gbs=16", "--schedules",
                                 "1f1b,1f1b"], {}, ["--schedules='1f1b'", "given twice"]),
    ("validate-tiers-twice", ["validate", "--no-sim", "--tiers", "1,1"], {},
     ["--tiers='1,1'", "given twice"]),
    ("goodput-tokens-nan", ["goodput", *H100, "--plan", "tp=8,gbs=8", "--analytic",
                            "--tokens", "nan"], {}, ["--tokens='nan'", "whole number"]),
    ("sensitivity-factor-inf", ["sensitivity", *H100, "--plan", "tp=8,gbs=8", "--factor",
                                "inf"], {}, ["--factor=inf", "finite"]),
    ("calibrate-fp8-on-a100", ["calibrate", "--backend", "fake", "--out", "{d}/gpu.yaml",
                               "--gpu", "A100", "--dtypes", "fp8"], {},
     ["--dtypes='fp8'", "runs none of these GEMM precisions"]),
    ("export-the-stack-cannot", ["estimate", *MOE, "--plan", "ep=8,gbs=16", "--export",
                                 "deepspeed"], {}, ["--export='deepspeed'", "expert parallelism"]),
]

CASES = BROKEN + HELD


def test_cases_are_distinct():
    assert len({c[0] for c in CASES}) == len(CASES) >= 60


@pytest.mark.parametrize("name,argv,files,words", CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line(tmp_path, capsys, name, argv, files, words):
    err = refused_in_one_line(tmp_path, capsys, argv, files)
    for w in words:
        assert w in err, (w, err)


def test_the_held_inputs_made_good_run(tmp_path, capsys):
    """The refusals are not over-eager: their neighbours run (a preset that is also a path
    in the working folder stays a preset; a reference plan that runs is kept)."""
    (tmp_path / "dgx-h100").mkdir()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--plan",
                     "tp=8,gbs=8", "--json"]) == 0, capsys.readouterr().err
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    assert main([*SEARCH, "--reference", "tp=8,gbs=16", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in rep["references"]] == ["--reference tp=8,gbs=16"]
    assert main(["goodput", *H100, "--plan", "tp=8,gbs=8", "--analytic", "--tokens", "1e9",
                 "--monte-carlo", "5", "--seed", "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["monte_carlo"]["seed"] == 7


# --- drop-and-pad under DeepEP: the advice names what the stack runs ----------------------

def test_pad_deepep_advice_is_true_for_every_stack():
    with pytest.raises(SpecError) as e:
        Plan(ep=8, moe_capacity_factor=1.0, moe_pad_to_capacity=True, moe_dispatcher="deepep")
    assert "Megatron-Core runs the token dispatchers alltoall, deepep, hybridep" in e.value.rule
    assert e.value.rule.endswith("use moe_dispatcher=alltoall or hybridep")
    for fw in PROFILES.values():
        told = restate_for_stack(e.value, fw)
        assert told.field == "moe_pad_to_capacity" and told.value is True
        advised = told.rule.rsplit("use moe_dispatcher=", 1)[1].split(" or ")
        assert advised and set(advised) <= set(fw.moe_dispatchers) - {"deepep"}, (fw.name,
                                                                                  told.rule)
        assert f"{fw.name} runs the token dispatchers" in told.rule
    assert any("hybridep" not in fw.moe_dispatchers for fw in PROFILES.values())


def test_other_errors_are_not_restated():
    e = SpecError("tp", 3, "must divide the heads")
    assert restate_for_stack(e, PROFILES["torchtitan"]) is e


def test_pad_deepep_through_the_cli_names_the_stack(capsys):
    for fw, disp in (("megatron-core", "alltoall or hybridep"), ("torchtitan", "alltoall")):
        assert main(["estimate", *MOE, "--plan", PAD_DEEPEP, "--framework", fw]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{fw} runs the token dispatchers" in err, err
        assert err.rstrip().endswith(f"use moe_dispatcher={disp}"), err


# --- outputs: atomic, and a failing write is one line, not a traceback ---------------------

FSIZE_LIMIT = 2000      # bytes: every output below is larger, the temporary file fails


def _limited(argv: list[str]) -> subprocess.CompletedProcess:
    resource = pytest.importorskip("resource")
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # the write fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    return subprocess.run([sys.executable, "-B", "-m", "simulator.cli", *argv], cwd=ROOT,
                          text=True, capture_output=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE semantics")
@pytest.mark.parametrize("flag,argv,name", [
    ("--trace", ["simulate", *H100, "--plan", "tp=8,gbs=8", "--trace"], "t.json"),
    ("--out", ["calibrate", "--backend", "fake", "--out"], "gpu.yaml"),
    ("--csv", [*SEARCH, "--top", "40", "--csv"], "rows.csv"),
], ids=["simulate-trace", "calibrate-out", "search-csv"])
def test_a_failing_write_leaves_no_file(tmp_path, flag, argv, name):
    (tmp_path / name).write_text("old\n", encoding="utf-8")     # an earlier run's output
    p = _limited([*argv, str(tmp_path / name)])
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    # the message names the flag and the path (a long path is elided in its middle)
    assert f"{flag}='" in p.stderr and f"{name}': cannot be written (File too large)" in p.stderr
    assert sorted(os.listdir(tmp_path)) == [name]                 # no temporary left
    assert (tmp_path / name).read_text(encoding="utf-8") == "old\n"   # the old file intact


@pytest.mark.parametrize("flag,argv", [
    ("--timeline", ["simulate", *H100, "--plan", "tp=8,gbs=8"]),
    ("--plot", ["goodput", *H100, "--plan", "tp=8,gbs=8", "--analytic", "--tokens", "1e9",
                "--monte-carlo", "5"]),
], ids=["simulate-timeline", "goodput-plot"])
def test_a_failing_figure_leaves_no_file(tmp_path, capsys, monkeypatch, flag, argv):
    """The figures (--timeline, --plot, --sweep) go through the same ``atomic_path``: a
    savefig that dies half-way leaves nothing, and the line names the flag."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def half(self, fname, **kw):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Figure, "savefig", half)
    out = tmp_path / "f.png"
    rc = main([*argv, flag, str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag}='{out}': cannot be written (No space left on device)" in err
    assert os.listdir(tmp_path) == []
