"""Input bugs of the third fuzzing round (tests/test_fuzz_inputs2.py left two; the rest were
found by fuzzing the plan switches, ``--fix``, ``--framework``, MoE config.json fields, GPU
profile files, ``paraplan calibrate``, ``validate --reference`` and output paths).

Each test holds one refusal to the input rule (tests/fuzz_profile.py ``cli``): exit 2, one
line on stderr naming the field, the value and the rule, no traceback, no output file left;
a reference entry's malformed field is a skipped case whose reason names them (as
``simulator.studies.validate`` skips every entry that does not resolve).
"""
from __future__ import annotations

import json
import os

import pytest

from tests.fuzz_profile import cli
from tests.test_fuzz_recent import MOE_CFG as MOE_CFGS

BASE = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16"]


def refused(argv: list[str], *words: str, outputs: tuple[str, ...] = ()) -> str:
    """``paraplan argv`` exits 2 with one line holding every one of ``words``."""
    rc, _, e = cli(argv, outputs)
    assert rc == 2, (argv, e)
    for w in words:
        assert w in e, (w, e)
    return e


# ----------------------------------------------------------------- left by fuzz2

@pytest.mark.parametrize("degrade,k", [("plane:0=4", "0,1"), ("plane:0=1.5", "0,1")])
def test_whatif_failed_planes_over_a_degraded_plane(degrade, k):
    """``--vary failed_planes=1 --degrade plane:0=4``: the variant's failure replaced the
    degrade given without a word. A degraded plane among the failed ones is refused; one
    above them composes (plane 0 failed and plane 1 at 1/4)."""
    refused(["whatif", "--model", "gpt-1.7b", "--cluster", "dgx-b300-2plane:2",
             "--global-batch", "16", "--fix", "tp=8,pp=1", "--workers", "1",
             "--vary", f"failed_planes={k}", "--degrade", degrade],
            "--vary failed_planes=", degrade.split("=")[0], "already degraded")
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    from topologies.faults import Faults
    c = parse_cluster_arg("dgx-b300-2plane:2").with_faults(Faults.from_texts([], ["plane:1=4"]))
    assert apply_cluster(c, "failed_planes", 1).faults.degraded == (
        ("plane:0", 1e6), ("plane:1", 4.0))
    assert apply_cluster(c, "failed_planes", 0) is c


@pytest.mark.parametrize("items,word", [("memory,memory", "given twice"),
                                        ("Memory, memory", "given twice"),
                                        ("memory,,links", "empty"), ("links,", "empty")])
def test_timeline_detail_repeated_or_empty(tmp_path, items, word):
    """``--timeline-detail memory,memory`` (and an empty item) was accepted: a repeat is a
    typo, not a choice."""
    out = str(tmp_path / "t.svg")
    refused(["simulate", *BASE, "--plan", "tp=1,mbs=1", "--timeline", out,
             "--timeline-detail", items], "--timeline-detail=", word, outputs=(out,))


@pytest.mark.parametrize("tiers,word", [("1,1", "given twice"), ("2, 1,2", "given twice"),
                                        ("1,,2", "integers"), ("\uff11", "integers"),
                                        ("1_0", "integers"), ("0", ">= 1")])
def test_validate_tiers_repeated_or_not_ascii(tiers, word):
    """``--tiers 1,1`` ran tier 1 once without a word; ``--tiers １`` (full width) and
    ``1_0`` were read by ``int()`` as tiers 1 and 10."""
    refused(["validate", "--no-sim", "--tiers", tiers], "--tiers=", word)


def test_validate_tiers_parsed():
    from simulator.cli.validate import parse_tiers
    assert parse_tiers(" 2, 1") == (1, 2) and parse_tiers("ALL") is None


@pytest.mark.parametrize("refs,word", [(["tp=2,pp=1,mbs=1", "pp=1, mbs=1,tp=2"], "same plan"),
                                       (["tp=2,mbs=1", "tp=2,mbs=1"], "same plan"),
                                       (["none", "tp=2,mbs=1"], "'none'")])
def test_search_reference_repeated(refs, word):
    """``--reference tp=2,pp=1 --reference pp=1,tp=2`` simulated one plan twice and listed it
    twice."""
    argv = ["search", *BASE, "--fix", "tp=2,pp=1,mbs=1", "--workers", "1"]
    for r in refs:
        argv += ["--reference", r]
    refused(argv, "--reference=", word)


# ----------------------------------------------------------------- output paths

SIM = ["simulate", *BASE, "--plan", "tp=1,mbs=1"]


@pytest.mark.parametrize("flag,name", [("--trace", "a" * 250 + ".json"),
                                       ("--trace", "a\x00b.json"),
                                       ("--timeline", "b" * 250 + ".svg")])
def test_output_name_that_cannot_be_written(tmp_path, flag, name):
    """A 254-character file name (its temporary sibling is longer than NAME_MAX) and a NUL
    byte passed the up-front check and failed after the simulation: OSError/ValueError
    tracebacks. Now the check creates the temporary file an atomic write starts with."""
    out = str(tmp_path / name)
    refused([*SIM, flag, out], f"{flag}=", "cannot be written")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,flag,rule", [
    (["search", *BASE, "--fix", "tp=1,pp=1,mbs=1,zero=0", "--workers", "1", "--csv"], "--csv",
     "must be a file name ending with .csv"),     # the extension rule since polish23
    (["search", *BASE, "--fix", "tp=1,pp=1,mbs=1,zero=0", "--workers", "1", "--results"],
     "--results", "must name a file")])
def test_output_path_ending_with_a_separator(tmp_path, argv, flag, rule):
    """``--csv DIR/x.csv/`` (no extension rule then) passed the check and ``os.replace``
    failed after the search: NotADirectoryError (IsADirectoryError for ``--results``)."""
    refused([*argv, str(tmp_path / "x.csv") + os.sep], f"{flag}=", rule)
    refused([*argv, ""], f"{flag}=", rule)
    assert list(tmp_path.iterdir()) == []


def test_output_folder_root_may_not_write(tmp_path, monkeypatch):
    """``os.access`` says yes to root in ``/proc`` and ``/sys`` (and on a read-only mount):
    the write failed after the work with a traceback. The probe's own failure is the error."""
    import builtins
    real = builtins.open

    def deny(path, mode="r", *a, **k):
        if "x" in mode and str(path).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, mode, *a, **k)
    monkeypatch.setattr(builtins, "open", deny)
    out = str(tmp_path / "t.json")
    refused([*SIM, "--trace", out], "--trace=", "cannot be written (Permission denied)")
    refused(["search", *BASE, "--fix", "tp=1,pp=1,mbs=1,zero=0", "--workers", "1",
             "--save-top", str(tmp_path)], "--save-top=", str(tmp_path), "Permission denied")
    assert list(tmp_path.iterdir()) == []


def test_probe_leaves_nothing(tmp_path):
    from simulator.cli.common import check_output
    check_output(str(tmp_path / "ok.json"), "--trace", (".json",))
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------- validate --reference

_HELD = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                     "heldout_2026b.json")


def _entry(**plan) -> dict:
    with open(_HELD, encoding="utf-8") as f:
        e = next(e for e in json.load(f) if e["id"] == "mbridge2606_qwen330ba3b_b300_8_mxfp8")
    e["plan"].update(plan)
    return e


def _skipped(tmp_path, entry: dict) -> str:
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([entry]))
    rc, out, e = cli(["validate", "--reference", str(path), "--no-sim", "--json"])
    assert rc == 0, e
    (case,) = json.loads(out)["cases"]
    return case["skipped"]


@pytest.mark.parametrize("key,value,rule", [
    ("ep_overlap", "false", "must be true or false"), ("ep_overlap", 1, "must be true or false"),
    ("cuda_graph", "no", "must be true or false"), ("cuda_graph", [1], "must be true or false"),
    ("moe_capacity_factor", True, "must be a number"),
    ("moe_capacity_factor", "1.5", "must be a number"),
    ("moe_imbalance", True, "must be a number"), ("moe_imbalance", "x", "must be a number"),
    ("attn_impl", True, "must be a text"), ("attn_impl", 2, "must be a text")])
def test_reference_entry_switches(tmp_path, key, value, rule):
    """A reference entry's ``plan.ep_overlap: "false"`` (and ``cuda_graph``) was read by
    ``bool()``: the overlap on; ``moe_capacity_factor: true`` was a factor of 1.0; a text
    number a "malformed entry (ValueError ...)" naming no field; ``attn_impl: true`` was
    ignored. A malformed entry is a skipped case (``simulator.studies.validate``), its reason
    naming the field, the value and the rule."""
    why = _skipped(tmp_path, _entry(**{key: value}))
    assert f"plan.{key}={value!r}" in why and rule in why, why


def test_reference_entry_switches_still_read(tmp_path):
    from simulator.studies.validate import load_cases
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([_entry(ep_overlap=False, cuda_graph=False,
                                       moe_capacity_factor=2, moe_imbalance=1.5)]))
    (case,) = load_cases(str(path), None)
    assert not case.skipped, case.skipped
    p = case.job.plan
    assert (p.ep_overlap, p.cuda_graph, p.moe_capacity_factor, p.moe_imbalance) == \
        (False, False, 2.0, 1.5)


# ----------------------------------------------------------------- plan files: framework

@pytest.mark.parametrize("command", ["estimate", "search"])
def test_plan_file_names_framework_twice(tmp_path, command):
    """A plan file with ``framework: deepspeed`` and ``Framework: megatron-core``: estimate
    said ``plan='framework': unknown key`` (the key it does read) and search took the first
    one without a word. One key names the stack."""
    f = tmp_path / "p.yaml"
    f.write_text("tp: 1\nmbs: 1\nframework: deepspeed\nFramework: megatron-core\n")
    argv = [command, *BASE, "--plan", str(f)]
    if command == "search":
        argv += ["--fix", "pp=1,zero=0", "--workers", "1"]
    refused(argv, "plan='framework, Framework'", "framework given twice")
    refused(["estimate", *BASE, "--plan", "tp=1,Framework=deepspeed,framework=megatron"],
            "framework given twice")


def test_plan_file_framework_key_spelling(tmp_path):
    """`` Framework :`` names the stack as ``framework:`` does (estimate, read_plan_file)."""
    from strategies.plan_file import read_plan_file
    f = tmp_path / "p.yaml"
    f.write_text('tp: 1\nmbs: 1\n" Framework ": deepspeed\n')
    rc, out, e = cli(["estimate", *BASE, "--plan", str(f), "--json"])
    assert rc == 0, e
    assert json.loads(out)["inputs"]["framework"] == "megatron-deepspeed"
    assert read_plan_file(str(f))[0].tp == 1


# ----------------------------------------------------------------- config.json of MoE types

#: the four MoE model types' small configs (every field stated): MOE_CFGS, imported above


@pytest.mark.parametrize("mt,key,default", [
    ("deepseek_v3", "n_shared_experts", "1"), ("deepseek_v3", "first_k_dense_replace", "3"),
    ("deepseek_v3", "q_lora_rank", "1536"), ("qwen3_moe", "num_key_value_heads", "4"),
    ("gpt_oss", "head_dim", "64"), ("gpt_oss", "num_key_value_heads", "8"),
    ("gpt_oss", "layer_types", "alternating"), ("llama4_text", "intermediate_size_mlp", "16384"),
    ("llama4_text", "num_key_value_heads", "8"), ("llama4_text", "head_dim", "128")])
def test_moe_config_field_missing(tmp_path, mt, key, default):
    """A config.json without ``first_k_dense_replace`` built DeepSeek-V3 with no dense layer
    and no shared expert (``n_shared_experts``), where transformers' DeepseekV3Config builds 3
    and 1; a Qwen3-MoE without ``num_key_value_heads`` had a K/V head per query head
    (transformers: 4); gpt-oss and Llama 4 likewise for head_dim, the K/V heads, the dense
    MLP and the window pattern. A missing one is refused, naming transformers' default."""
    from strategies.hf_config import model_from_hf
    cfg = dict(MOE_CFGS[mt])
    assert model_from_hf(cfg).num_layers == 4          # the whole config is valid
    del cfg[key]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    refused(["estimate", "--model", str(f), "--cluster", "dgx-a100:1", "--global-batch", "16",
             "--plan", "tp=1,mbs=1"], f"{key}=None", f"required in a {mt} config.json",
            default)


@pytest.mark.parametrize("mt,key", [("deepseek_v3", "q_lora_rank"), ("gpt_oss", "head_dim"),
                                    ("gpt_oss", "num_key_value_heads"),
                                    ("llama4_text", "head_dim")])
def test_moe_config_null_read_as_transformers(mt, key):
    """Null where transformers reads null too (no Q compression, head_dim = hidden/heads, a
    K/V head per query head) is still accepted."""
    from strategies.hf_config import model_from_hf
    model_from_hf({**MOE_CFGS[mt], key: None})


# ----------------------------------------------------------------- GPU profile files

def test_profile_memory_faster_than_the_datasheet(tmp_path):
    """A profile copying 1 GiB in 1 ns (10^6 TB/s on an A100 of 2.039 TB/s) was accepted and
    its bandwidth read as the usable HBM rate: 0.208 s a step against 0.287 s. As the GEMMs
    faster than the dense peak (``check_profile_peaks``), it is refused."""
    prof = tmp_path / "p.yaml"
    prof.write_text("schema: paraplan-gpu-profile/1\ngpu: A100-SXM4-80GB\nbackend: fake\n"
                    "gemm: [{dtype: bf16, m: 2048, n: 2048, k: 2048, seconds: 2.0e-4}]\n"
                    "memory: [{kernel: copy, bytes: 1073741824, seconds: 1.0e-9}]\n")
    c = tmp_path / "c.yaml"
    c.write_text(f"name: c\ngpu: {{profile: {prof}}}\nnodes: 1\ngpus_per_node: 8\n"
                 "intra_node_GBps: 300\ninter_node_gbps: 200\nnics_per_node: 8\n"
                 "intra_node_topology: switch\ninter_node_topology: rail_fat_tree\n")
    argv = ["estimate", "--model", "gpt-1.7b", "--cluster", str(c), "--global-batch", "16",
            "--plan", "tp=1,mbs=1"]
    refused(argv, "gpu.profile.memory=", "TB/s", "datasheet 2.039 TB/s")
    # at the datasheet rate exactly it is read
    prof.write_text(prof.read_text().replace("1.0e-9", repr(1073741824 / 2.039e12)))
    assert cli(argv)[0] == 0


@pytest.mark.parametrize("tier", [True, "1", 1.0, 0, -1, None])
def test_reference_entry_tier(tmp_path, tier):
    """``tier: true`` ran as tier 1 (``True in (1,)``), as did ``1.0``; ``"1"``, 0, -1 and
    null were tiers no ``--tiers`` names (only ``all`` ran them). The tier picks the cases,
    so the file is refused before any runs."""
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([{**_entry(), "tier": tier}]))
    refused(["validate", "--reference", str(path), "--no-sim", "--tiers", "all"],
            f"reference[0].tier={tier!r}", "integer >= 1")


def test_reference_case_id_twice(tmp_path):
    """Two entries with one id both ran: the case counted twice in the MAPE."""
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([_entry(), _entry()]))
    refused(["validate", "--reference", str(path), "--no-sim"], "reference[1].id=",
            "given twice")


def test_whatif_cluster_keeps_the_faults():
    """``--vary cluster=dgx-h100 --straggler 0=4``: the preset swap built a healthy cluster,
    the straggler (and every ``--degrade``) lost without a word. They stay; one the preset
    lacks (a NIC on one NVL72 rack, a plane on one plane) is refused."""
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    from topologies.faults import Faults
    c = parse_cluster_arg("dgx-a100:2").with_faults(Faults.from_texts(["0=4"], ["nic:3=2"]))
    assert apply_cluster(c, "cluster", "dgx-h100").faults == c.faults
    refused(["whatif", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--global-batch",
             "16", "--fix", "tp=1,pp=1", "--workers", "1",
             "--vary", "cluster=dgx-h100,gb200-nvl72", "--degrade", "nic:3=2"],
            "--vary cluster='gb200-nvl72'", "single-node cluster has no NICs")
    refused(["whatif", "--model", "gpt-1.7b", "--cluster", "dgx-b300-2plane:2",
             "--global-batch", "16", "--fix", "tp=8,pp=1", "--workers", "1",
             "--vary", "cluster=dgx-h100", "--degrade", "plane:1=2"],
            "--vary cluster='dgx-h100'", "needs a multi-plane network")


@pytest.mark.parametrize("given,vary,flag", [
    (["--plan", "tp=1,pp=1,mbs=1,gbs=16"], "global_batch=32,64", "--plan gbs=16"),
    (["--global-batch", "16", "--fix", "tp=1,pp=1"], "global_batch=32", "--global-batch=16"),
    (["--seq-len", "1024", "--fix", "tp=1,pp=1"], "seq_len=2048", "--seq-len=1024")])
def test_whatif_batch_or_sequence_given_and_varied(given, vary, flag):
    """``--plan gbs=16 --vary global_batch=32,64`` ran 32 and 64 and reported the base's
    global batch as 16: each variant replaced the value given without a word (as
    ``--straggler`` with ``--vary straggler`` did, test_fuzz_inputs2)."""
    refused(["whatif", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", *given,
             "--vary", vary, "--workers", "1"],
            f"--vary {vary.split('=')[0]}=", f"also given ({flag})", "not both")
