"""Fuzzing of the inputs recent sessions added (tests/test_fuzz_parsers.py covers the older
ones): ``search --fix`` keys (etp, the MoE switches, ``recompute_modules=a+b``),
``--framework`` names and the features a stack refuses, plan fields (Megatron layout strings,
first/last stage layers, flushes, microbatch_group_size, recompute_modules), GPU profile
files (``gpu: {profile: FILE}``, calibrate's format with measured collectives),
``paraplan calibrate`` on the fake backend, ``validate --reference`` with malformed reference
JSON, HuggingFace config.json of the MoE types (deepseek_v3, qwen3_moe, gpt_oss, llama4
text) and cluster YAMLs (network planes, node groups of mixed generations, faults).

Whatever comes in, the answer is a valid object (and an accepted job estimates to finite,
positive numbers) or a ``SpecError`` with a one-line message naming a field; through the
CLI, exit status 0 or 2 with one line on stderr and no output file left behind after a
refusal. Derandomized like tests/test_fuzz_parsers.py (``PARAPLAN_HYPOTHESIS_SCALE=k``
runs k times as many, ``PARAPLAN_HYPOTHESIS_RANDOM=1`` new ones each run).
"""
from __future__ import annotations

import copy
import json
import math
import os
import tempfile

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.framework import PROFILES, get_profile
from strategies.hf_config import model_from_hf
from strategies.job import make_job
from strategies.model import ModelSpec
from strategies.plan import Plan, parse_plan, plan_from_mapping
from strategies.presets import model_preset
from topologies.cluster import Cluster, cluster_from_mapping, parse_cluster_arg
from tests.fuzz_profile import clean, cli, fuzz
from topologies.gpu_profile import profile_from_mapping, profile_to_mapping


_DIR = tempfile.mkdtemp(prefix="paraplan-fuzz-recent-")


# ----------------------------------------------------------------- values

HUGE = st.sampled_from([20, -20, 63, 400, 5000]).map(lambda e: (-1 if e < 0 else 1) * 10 ** abs(e))
NASTY = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), HUGE,
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 0.5, 1.5, 1e308,
                     5e-324, -1.0, 2.0]),
    st.text(max_size=6),
    st.sampled_from(["8", "-1", "0", "nan", "inf", "1e3", "true", "", " ", "２", "0x10",
                     "1_0", "a+b", "|", "E|L", "\x00"]),
    st.lists(st.integers(0, 4), max_size=3), st.dictionaries(st.text(max_size=3),
                                                             st.integers(), max_size=2))
TEXT_VALUES = ["1", "2", "4", "8", "0", "-1", "3", "1.5", "2.0", "1e3", "nan", "inf", "-inf",
               "true", "false", "yes", "on", "", "x", "99999999999999999999999", "9" * 60,
               "２", "+2", "1_000", "0x8", " 2 "]


# ----------------------------------------------------------------- plans: recent keys

#: (key, values valid for some job)
RECENT_GOOD = {
    "layout": ["Et*8|t*8|t*8|t*8L", "Et*4|(t*4|)*6,t*4L", "Et|t*2|t*1|tL", "E|t*4|t*4|L",
               "Et*16|t*16L", "E(t*4|)*7t*4L", "Et*3|(tt|)*1,m|L", "Ett|ttL", "Et*2|t*2|tmL"],
    "first_stage_layers": ["1", "2", "3", "6", "10", "31"],
    "last_stage_layers": ["1", "2", "5", "7", "10"],
    "account_embedding": ["true", "false"], "account_loss": ["true", "false"],
    "flushes": ["1", "2", "4"], "microbatch_group_size": ["2", "4", "8"],
    "recompute_modules": ["core_attn", "mlp", "core_attn+mlp", "moe+layernorm", "moe_act",
                          "shared_experts", "mla_up_proj", "core_attn/mlp"],
    "recompute_layers": ["1", "2", "4"], "recompute_method": ["block", "uniform"],
    "etp": ["1", "2", "4"], "moe_dispatcher": ["alltoall", "deepep", "hybridep"],
    "ep_overlap": ["true", "false"], "tp_comm_overlap": ["true", "false"],
    "cuda_graph": ["true", "false"], "moe_routing": ["random", "contiguous"],
    "moe_imbalance": ["1", "1.2", "2.5"], "moe_capacity_factor": ["1", "1.25", "4"],
    "layers_per_stage": ["8/8/8/8", "10/6/6/10", "2/2", "4/4"],
    "group_microbatches": ["2/2", "4/4"],
    "tp": ["1", "2", "4", "8"], "pp": ["1", "2", "4"], "ep": ["1", "2", "4", "8"],
    "cp": ["1", "2"], "mbs": ["1", "2"], "gbs": ["8", "16", "32"], "vpp": ["1", "2", "4"],
    "schedule": ["1f1b", "interleaved", "interleaved:2", "zb-h1", "zb-v", "dualpipe",
                 "dualpipev", "gpipe", "deepspeed-1f1b", "zb-1p"],
    "recompute": ["none", "selective", "full", "op"], "sp": ["true", "false"],
    "zero": ["0", "1", "3"],
}
LAYOUT_JUNK = ["E", "L", "t", "m", "|", "*", "(", ")", ",", "*0", "*-1", "*99999", "*2",
               "x", " ", "tt", "||", "E|", "|L", "(t|)*3", "*1e3", "*２"]


@st.composite
def layouts(draw) -> str:
    """Megatron layout strings: a valid-looking one, mutated by junk insertions."""
    s = draw(st.sampled_from(RECENT_GOOD["layout"]))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(s)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        j = draw(st.sampled_from(LAYOUT_JUNK))
        s = s[:i] + j + s[i:] if op == "insert" else (
            s[:i] + s[i + 2:] if op == "delete" else s[:i] + j + s[i + len(j):])
    return s


def recent_items(nasty: bool):
    """(key, value text) pairs, mostly valid for that key."""
    good = st.sampled_from(sorted(RECENT_GOOD)).flatmap(
        lambda k: st.tuples(st.just(k), st.sampled_from(RECENT_GOOD[k])))
    if not nasty:
        return good
    return st.one_of(good, good, st.tuples(st.just("layout"), layouts()),
                     st.tuples(st.sampled_from(sorted(RECENT_GOOD)),
                               st.sampled_from(TEXT_VALUES)))


def _check_plan(p: Plan) -> None:
    assert isinstance(p, Plan)
    for f in ("tp", "pp", "cp", "ep", "mbs", "vpp", "flushes"):
        v = getattr(p, f)
        assert type(v) is int and v >= 1, (f, v)
    for f in ("first_stage_layers", "last_stage_layers", "microbatch_group_size", "etp",
              "recompute_layers"):
        v = getattr(p, f)
        assert v is None or (type(v) is int and v >= 1), (f, v)
    for f in ("moe_imbalance", "moe_capacity_factor"):
        v = getattr(p, f)
        assert v is None or (math.isfinite(v) and v > 0), (f, v)
    if p.recompute_modules is not None:
        assert p.recompute == "selective" and p.recompute_modules


JOB_MODELS = {
    "llama3-8b": None, "qwen3-30b-a3b": None, "tiny-mla": None,
}


def _model(name: str) -> ModelSpec:
    if JOB_MODELS.get(name) is None:
        if name == "tiny-mla":
            JOB_MODELS[name] = ModelSpec(
                "fuzz-mla", 8, 256, 8, 512, 1000, 128, activation="swiglu", num_experts=8,
                moe_router_topk=2, moe_ffn_hidden_size=128, q_lora_rank=64, kv_lora_rank=32,
                qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, num_shared_experts=1,
                first_k_dense_replace=1, num_nextn_predict_layers=1, router_bias=True,
                position_embedding="rope", norm="rmsnorm")
        else:
            JOB_MODELS[name] = model_preset(name)
    return JOB_MODELS[name]


def _check_job_estimate(job) -> None:
    q = job.plan
    assert q.tp * q.pp * q.cp * q.dp == job.cluster.num_gpus
    assert job.num_microbatches >= 1
    layout = getattr(job, "layout", None)
    if layout is not None and hasattr(layout, "layers_per_stage"):
        assert sum(layout.layers_per_stage) == job.model.num_layers, layout
    est = estimate(job)
    assert math.isfinite(est.step_time_s) and est.step_time_s > 0, est.step_time_s
    b = dict(est.breakdown_s)
    assert all(math.isfinite(v) for v in b.values()), b
    assert all(v >= 0 for v in b.values()), b


@fuzz(400)
@given(st.lists(recent_items(True), max_size=6, unique_by=lambda kv: kv[0]),
       st.sampled_from([",", ", "]))
def test_recent_plan_strings(items, sep):
    p = clean(parse_plan, sep.join(f"{k}={v}" for k, v in items))
    if p is not None:
        _check_plan(p)


#: (model, cluster, base plan): valid jobs the recent keys are added to
JOB_BASES = [
    ("llama3-8b", "dgx-h100:1", {"tp": "2", "pp": "4", "gbs": "16"}),
    ("llama3-8b", "dgx-h100:1", {"tp": "1", "pp": "8", "gbs": "32"}),
    ("llama3-8b", "dgx-h100:2", {"tp": "4", "pp": "2", "gbs": "32"}),
    ("llama3-8b", "dgx-a100:1", {"tp": "8", "gbs": "8"}),
    ("qwen3-30b-a3b", "dgx-h100:2", {"ep": "8", "gbs": "16"}),
    ("qwen3-30b-a3b", "dgx-h100:2", {"ep": "4", "pp": "2", "gbs": "32"}),
    ("tiny-mla", "dgx-h100:1", {"ep": "4", "pp": "2", "gbs": "16"}),
    ("tiny-mla", "dgx-h100:1", {"tp": "2", "ep": "2", "pp": "4", "gbs": "32"}),
]


@fuzz(350)
@given(st.sampled_from(range(len(JOB_BASES))),
       st.lists(recent_items(False), min_size=1, max_size=3, unique_by=lambda kv: kv[0]),
       st.sampled_from([None, None, "megatron-core", "torchtitan", "nemo", "megatron-deepspeed",
                        "pytorch-eager", "automodel", "hai-llm", "jax-xla",
                        "megatron-lm-2021"]),
       st.sampled_from(["bf16", "bf16", "fp8"]))
def test_recent_plans_make_valid_jobs(base, items, framework, dtype):
    """Valid jobs with recent keys added: a job whose layout covers the layers and whose
    estimate is finite and positive, or a clean refusal."""
    model, cluster, plan = JOB_BASES[base]
    p = clean(plan_from_mapping, {**plan, **dict(items)})
    if p is None:
        return
    job = clean(make_job, _model(model), parse_cluster_arg(cluster), p, dtype=dtype,
                framework=framework)
    if job is None:
        return
    _check_job_estimate(job)


@fuzz(250)
@given(st.dictionaries(st.sampled_from(sorted(RECENT_GOOD)), NASTY, max_size=5))
def test_recent_plan_mappings_nasty_values(d):
    p = clean(plan_from_mapping, d)
    if p is not None:
        _check_plan(p)


# ----------------------------------------------------------------- search --fix

FIX_GOOD = {
    "tp": ["1", "2", "8"], "pp": ["1", "2"], "dp": ["1", "2"], "cp": ["1", "2"],
    "ep": ["1", "8"], "etp": ["1", "2"], "mbs": ["1", "2"], "vpp": ["1", "2"],
    "schedule": ["1f1b", "interleaved:2", "zb-v", "dualpipe"],
    "recompute": ["none", "selective", "full", "op"],
    "recompute_modules": ["core_attn", "mlp", "core_attn+mlp", "moe+moe_act", "mla_up_proj"],
    "sp": ["true", "false"], "zero": ["0", "1", "3"],
    "moe_dispatcher": ["alltoall", "deepep", "hybridep"], "ep_overlap": ["true", "false"],
    "tp_comm_overlap": ["true", "false"], "cuda_graph": ["true", "false"],
    "moe_routing": ["random", "contiguous"], "moe_imbalance": ["1", "1.3"],
    "moe_capacity_factor": ["1", "1.25"], "flash_attn": ["true", "false"],
    "overlap_grad_reduce": ["true", "false"], "overlap_param_gather": ["true", "false"],
}


def fix_items():
    good = st.sampled_from(sorted(FIX_GOOD)).flatmap(
        lambda k: st.tuples(st.just(k), st.sampled_from(FIX_GOOD[k])))
    return st.one_of(good, good, st.tuples(st.sampled_from(sorted(FIX_GOOD) + ["gbs", "flushes",
                                                                             "layout", "x"]),
                                           st.sampled_from(TEXT_VALUES)))


@fuzz(400)
@given(st.lists(fix_items(), max_size=5),
       st.sampled_from([None, "megatron-core", "torchtitan", "nemo", "megatron-lm-2021",
                        "megatron-deepspeed", "pytorch-eager"]))
def test_search_fix_keys(items, framework):
    """``parse_fix`` then the stack's check, as ``search`` runs them: a mapping of checked
    values (each accepted value a value ``Plan`` accepts for that key) or a clean refusal."""
    from simulator.cli.search import check_fixed_for_stack
    from strategies.search.fix_parse import parse_fix
    from strategies.search.plan_rows import SWITCH_KEYS
    fixed = clean(parse_fix, ",".join(f"{k}={v}" for k, v in items))
    if fixed is None:
        return
    for k, v in fixed.items():
        if k in ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "vpp"):
            assert type(v) is int and 1 <= v <= 2 ** 20, (k, v)
        if k in SWITCH_KEYS or k == "recompute_modules":
            assert clean(Plan, **{k: v}, **({"recompute": "selective"}
                                            if k == "recompute_modules" else {})) is not None
    if framework is not None:
        clean(check_fixed_for_stack, fixed, get_profile(framework))


# ----------------------------------------------------------------- --framework names

@fuzz(200)
@given(st.text(max_size=16) | st.sampled_from(sorted(PROFILES) + [
    "torchtitan-compile", "Megatron-Core", " nemo ", "megatron_core", "torchtitan-compile-x",
    "-compile", "", "none"]))
def test_framework_names(name):
    fw = clean(get_profile, name)
    if fw is not None:
        assert fw.name


# ----------------------------------------------------------------- GPU profiles

SMALL_PROFILE = {
    "schema": "paraplan-gpu-profile/1", "gpu": "H100-SXM5-80GB", "device": "fake H100",
    "backend": "fake", "software": {"fake": "1"},
    "gemm": [{"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "seconds": 2.4e-4},
             {"dtype": "fp8", "m": 4096, "n": 4096, "k": 4096, "seconds": 1.4e-4}],
    "attention": [{"kernel": "fa2", "batch": 1, "heads": 32, "seq": 1024, "head_dim": 128,
                   "causal": True, "fwd_seconds": 5.6e-5, "bwd_seconds": 1.7e-4}],
    "memory": [{"kernel": "copy", "bytes": 1048576, "seconds": 3.9e-7}],
    "launch_gap_s": 4e-6,
    "collectives": [{"op": "all_reduce", "gpus": 8, "bytes": 1048576, "seconds": 2e-5},
                    {"op": "all_gather", "gpus": 2, "bytes": 1048576, "seconds": 1.5e-6}],
}
PROFILE_LISTS = ("gemm", "attention", "memory", "collectives")


@st.composite
def mutated_profiles(draw) -> dict:
    d = copy.deepcopy(SMALL_PROFILE)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "entry", "entry", "entry"]))
        if where == "top":
            key = draw(st.sampled_from(sorted(d, key=str) + ["extra", 7]))
            op = draw(st.sampled_from(["set", "delete"]))
            if op == "set":
                d[key] = draw(NASTY)
            else:
                d.pop(key, None)
        else:
            lst = draw(st.sampled_from(PROFILE_LISTS))
            entries = d.get(lst)
            if not isinstance(entries, list) or not entries:
                continue
            e = entries[draw(st.integers(0, len(entries) - 1))]
            if not isinstance(e, dict):
                continue
            key = draw(st.sampled_from(sorted(e, key=str) + ["extra", 3]))
            op = draw(st.sampled_from(["set", "set", "delete", "dup"]))
            if op == "set":
                e[key] = draw(NASTY | st.sampled_from(["bf16", "fp4", "all_to_all", "native",
                                                       1, 2, 3, 7, 16, 1023]))
            elif op == "delete":
                e.pop(key, None)
            else:
                entries.append(copy.deepcopy(e))
    return d


@fuzz(500)
@given(mutated_profiles())
def test_gpu_profile_mappings(d):
    p = clean(profile_from_mapping, d)
    if p is None:
        return
    back = profile_from_mapping(profile_to_mapping(p))
    assert back == p
    for c in p.collectives:
        assert c.gpus >= 2 and c.bytes >= 1 and math.isfinite(c.seconds) and c.seconds > 0
    for g in p.gemm:
        assert g.seconds > 0 and math.isfinite(g.seconds)


def _cluster_yaml(gpu: str, extra: str = "", nodes: int = 1) -> str:
    return (f"gpu: {gpu}\nnodes: {nodes}\ngpus_per_node: 8\nintra_node_GBps: 450\n"
            f"nics_per_node: 8\ninter_node_gbps: 400\n{extra}")


@fuzz(120)
@given(mutated_profiles(), st.sampled_from([".yaml", ".json"]),
       st.sampled_from(["H100", "H100-SXM5-80GB", "{name: H100, profile: P}", "A100"]))
def test_gpu_profile_files_through_estimate(d, ext, gpu):
    """A mutated profile named by a cluster file, through ``estimate``: 0 with finite
    figures, or 2 with one line."""
    prof = os.path.join(_DIR, "prof" + ext)
    try:
        text = json.dumps(d) if ext == ".json" else yaml.safe_dump(d)
    except (ValueError, TypeError, OverflowError):
        return
    with open(prof, "w", encoding="utf-8") as f:
        f.write(text)
    g = "{profile: prof" + ext + "}" if "{" not in gpu else gpu.replace("P", "prof" + ext)
    cfile = os.path.join(_DIR, "c-prof.yaml")
    with open(cfile, "w", encoding="utf-8") as f:
        f.write(_cluster_yaml(g))
    rc, out, _ = cli(["estimate", "--model", "llama3-8b", "--cluster", cfile, "--plan",
                      "tp=8,gbs=8", "--json"])
    if rc == 0:
        r = json.loads(out)
        assert math.isfinite(r["step_time_s"]) and r["step_time_s"] > 0


# ----------------------------------------------------------------- calibrate (fake)

CAL_FLAGS = {
    "--gpus": ["1", "2", "4", "8", "0", "-1", "3", "1025", "x", "8,8", ""],
    "--coll-gpus": ["2", "2,4", "8", "1", "0", "3", "16", "2,,4", "x", "2,2", "9" * 30, ""],
    "--gpu": ["H100", "A100", "B200", "MI300X", "nope", ""],
    "--tp": ["1", "1,2", "0", "x", "", "1,,2", "99999"],
    "--mbs": ["1", "2", "0", ""],
    "--seqs": ["1024", "0", "99999999999", "512,1024"],
    "--dtypes": ["bf16", "fp8", "bf16,fp8", "fp4", "", "bf16,,fp8", "tf32"],
    "--model": ["llama3-8b", "qwen3-30b-a3b", "nope", "gpt-1.7b"],
}


@fuzz(120)
@given(st.dictionaries(st.sampled_from(sorted(CAL_FLAGS)), st.data(), max_size=4),
       st.sampled_from(["g.yaml", "g.json", "g.txt", "nodir/g.yaml"]))
def test_calibrate_fake_arguments(flags, name):
    out_path = os.path.join(_DIR, name)
    argv = ["calibrate", "--backend", "fake", "--out", out_path, "--json",
            "--model", "llama3-8b", "--tp", "1", "--mbs", "1", "--seqs", "1024"]
    for flag, data in flags.items():
        value = data.draw(st.sampled_from(CAL_FLAGS[flag]))
        if flag in ("--tp", "--mbs", "--seqs", "--model"):
            i = argv.index(flag)
            argv[i + 1] = value
        else:
            argv += [flag, value]
    rc, out, _ = cli(argv, outputs=(out_path,))
    if rc == 0:
        summary = json.loads(out)
        assert summary["out"] == out_path
        # what calibrate writes, a cluster file reads back
        from topologies.gpu_profile import load_gpu_profile
        p = load_gpu_profile(out_path)
        assert p.gemm


# ----------------------------------------------------------------- validate --reference

_REF = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "published_2026.json")
with open(_REF, encoding="utf-8") as _f:
    REF_ENTRIES = json.load(_f)


@st.composite
def mutated_reference(draw) -> object:
    entry = copy.deepcopy(REF_ENTRIES[draw(st.integers(0, len(REF_ENTRIES) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["", "model", "hardware", "plan", "measured", "derived",
                                      "model.hf_config"]))
        d = entry
        for part in filter(None, where.split(".")):
            d = d.get(part) if isinstance(d, dict) else None
        if not isinstance(d, dict) or not d:
            continue
        key = draw(st.sampled_from(sorted(d) + ["extra"]))
        op = draw(st.sampled_from(["set", "set", "delete"]))
        if op == "set":
            d[key] = draw(NASTY)
        else:
            d.pop(key, None)
    shape = draw(st.sampled_from(["list", "list", "list", "dict", "scalar", "nested"]))
    if shape == "list":
        return [entry]
    if shape == "dict":
        return {"entries": [entry]}
    if shape == "scalar":
        return draw(NASTY)
    return [[entry]]


@pytest.mark.slow
@fuzz(100)
@given(mutated_reference())
def test_validate_malformed_reference(ref):
    path = os.path.join(_DIR, "ref.json")
    try:
        text = json.dumps(ref, allow_nan=True)
    except (ValueError, TypeError, OverflowError):
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    plot = os.path.join(_DIR, "parity.png")
    rc, out, _ = cli(["validate", "--reference", path, "--no-sim", "--json"], outputs=(plot,))
    if rc == 0:
        r = json.loads(out)
        for row in r["cases"]:
            for k in ("analytic_step_time_s", "measured_step_s", "estimated_memory_gib",
                      "measured_memory_gib"):
                v = row.get(k)
                assert v is None or (math.isfinite(v) and v > 0), (k, row)


# ----------------------------------------------------------------- HF MoE configs

MOE_CFG = {
    "deepseek_v3": dict(model_type="deepseek_v3", num_hidden_layers=4, hidden_size=256,
                        num_attention_heads=8, num_key_value_heads=8, intermediate_size=1024,
                        vocab_size=1000, max_position_embeddings=4096, n_routed_experts=8,
                        num_experts_per_tok=2, moe_intermediate_size=128, kv_lora_rank=64,
                        qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
                        q_lora_rank=None, first_k_dense_replace=1, num_nextn_predict_layers=1,
                        n_shared_experts=1, n_group=1, topk_group=1),
    "qwen3_moe": dict(model_type="qwen3_moe", num_hidden_layers=4, hidden_size=256,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                      intermediate_size=1024, moe_intermediate_size=128, num_experts=8,
                      num_experts_per_tok=2, vocab_size=1000, max_position_embeddings=4096,
                      decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                      tie_word_embeddings=False),
    "gpt_oss": dict(model_type="gpt_oss", num_hidden_layers=4, hidden_size=256,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                    intermediate_size=256, num_local_experts=8, num_experts_per_tok=2,
                    vocab_size=1000, max_position_embeddings=4096, sliding_window=128,
                    layer_types=["sliding_attention", "full_attention"] * 2,
                    attention_bias=True, tie_word_embeddings=False,
                    swiglu_limit=None, rope_scaling=None),   # plain: no clamp, no YaRN
    "llama4_text": dict(model_type="llama4_text", num_hidden_layers=4, hidden_size=256,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                        intermediate_size=1024,
                        vocab_size=1000, max_position_embeddings=4096, num_local_experts=4,
                        num_experts_per_tok=1, intermediate_size_mlp=512,
                        interleave_moe_layer_step=2, attention_chunk_size=1024,
                        no_rope_layer_interval=4),
}
ABSURD = st.sampled_from([-1, 0, -(2 ** 40), 2 ** 40, 10 ** 30, 1.5, float("nan"),
                          float("inf"), True, None, "8", [], {}, [1], 7, 3, 2, 1, 5, 100000])


@pytest.mark.slow
@fuzz(400)
@given(st.sampled_from(sorted(MOE_CFG)), st.data())
def test_hf_moe_configs_absurd_fields(mt, data):
    cfg = copy.deepcopy(MOE_CFG[mt])
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(cfg) + ["n_group", "topk_group", "topk_method",
                                                        "moe_layer_freq", "mlp_only_layers",
                                                        "decoder_sparse_step",
                                                        "num_nextn_predict_layers",
                                                        "first_k_dense_replace",
                                                        "layer_types", "head_dim"]))
        if key == "model_type":
            continue
        if data.draw(st.booleans()):
            cfg.pop(key, None)
        else:
            cfg[key] = data.draw(ABSURD)
    m = clean(model_from_hf, cfg, "fuzz")
    if m is None:
        return
    assert isinstance(m, ModelSpec) and m.num_params() > 0
    assert 1 <= m.moe_router_topk <= max(1, m.num_experts)
    assert m.active_params() <= m.num_params() + m.embedding_params()
    job = clean(make_job, m, parse_cluster_arg("dgx-h100:1"),
                Plan(ep=min(8, m.num_experts) if m.num_experts % min(8, m.num_experts) == 0
                     else 1), global_batch=16)
    if job is not None:
        _check_job_estimate(job)


# ----------------------------------------------------------------- clusters

CLUSTER_BASE = dict(name="c", gpu="H100", nodes=2, gpus_per_node=8, intra_node_GBps=450,
                    nics_per_node=8, inter_node_gbps=400)
CLUSTER_EXTRA = {
    "network": [{"kind": "multi_plane", "planes": 2}, {"kind": "multi_plane", "planes": 4,
                                                       "plane_topology": "rail_fat_tree"},
                {"kind": "rail_only"}, {"kind": "multi_plane", "planes": 3},
                {"kind": "multi_plane"}, {"kind": "fat_tree", "planes": 2}, {"planes": 2}],
    "faults": [{"stragglers": {0: 1.5}}, {"stragglers": {"3": 2}},
               {"degrade": {"nic:0": 2.0}}, {"stragglers": ["1=1.2"]}, {"degrade": ["x=2"]},
               {"stragglers": {99: 2}}, {"stragglers": {0: 0.5}}],
    "node_groups": [[{"gpu": "H100", "nodes": 1}, {"gpu": "A100", "nodes": 1}],
                    [{"gpu": "B200", "nodes": 1, "inter_node_gbps": 800},
                     {"gpu": "H100", "nodes": 1}],
                    [{"gpu": {"name": "X", "bf16_tflops": 900, "hbm_gib": 80, "hbm_tbps": 3},
                      "nodes": 1}]],
    "storage_write_GBps": [100, 0, -1],
    "gpus_per_tray": [4, 3, 8], "nvlink_domain_gpus": [72, 8, 4],
    "preset": ["dgx-h100", "gb200-nvl72", "dgx-b300-2plane", "nope"],
    "inter_node_topology": ["rail_fat_tree", "fat_tree", "rail_only", "torus"],
    "oversubscription": [1, 2, 0.5],
}


@fuzz(400)
@given(st.data())
def test_cluster_recent_sections(data):
    d = dict(CLUSTER_BASE)
    for key in data.draw(st.lists(st.sampled_from(sorted(CLUSTER_EXTRA)), max_size=3,
                                  unique=True)):
        d[key] = copy.deepcopy(data.draw(st.sampled_from(CLUSTER_EXTRA[key]) | NASTY))
    if "node_groups" in d and data.draw(st.booleans()):
        d.pop("gpu"), d.pop("nodes")
    for _ in range(data.draw(st.integers(0, 2))):
        key = data.draw(st.sampled_from(sorted(d)))
        if isinstance(d[key], dict) and d[key]:
            sub = dict(d[key])
            sub[data.draw(st.sampled_from(sorted(sub, key=str)))] = data.draw(NASTY)
            d[key] = sub
        elif data.draw(st.booleans()):
            d[key] = data.draw(NASTY)
        else:
            d.pop(key)
    c = clean(cluster_from_mapping, d)
    if c is None:
        return
    assert isinstance(c, Cluster) and 1 <= c.num_gpus <= 1 << 20
    assert math.isfinite(c.inter_node_bandwidth) and c.inter_node_bandwidth > 0
    job = clean(make_job, _model("llama3-8b"), c, Plan(tp=8), global_batch=c.num_gpus // 8 * 2)
    if job is not None:
        _check_job_estimate(job)


# ----------------------------------------------------------------- the CLI, mutated commands

H100 = ["--model", "llama3-8b", "--cluster", "dgx-h100:1"]
MOE = ["--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:2"]
BASE_COMMANDS = [
    ["estimate", *H100, "--plan", "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*8L"],
    ["estimate", *H100, "--plan", "pp=2,tp=4,gbs=8,flushes=2", "--framework", "torchtitan"],
    ["estimate", *MOE, "--plan", "ep=8,gbs=16,moe_dispatcher=deepep,moe_capacity_factor=1.5"],
    ["estimate", *MOE, "--plan", "ep=4,pp=2,gbs=16,schedule=interleaved,vpp=2,ep_overlap=true"],
    ["estimate", *H100, "--plan", "tp=2,pp=4,gbs=16,recompute=selective,"
     "recompute_modules=core_attn+mlp"],
    ["estimate", *H100, "--plan", "tp=2,pp=4,gbs=16,first_stage_layers=6,last_stage_layers=10"],
    ["simulate", *H100, "--plan", "tp=2,pp=4,gbs=16,schedule=zb-v", "--trace", "@t.json"],
    ["compare", *H100, "--plan", "tp=2,pp=4,gbs=16", "--schedules", "1f1b,zb-h1,interleaved:2"],
    ["whatif", *H100, "--global-batch", "16", "--vary", "nodes=1,2", "--plot", "@w.png"],
    ["search", *H100, "--global-batch", "16", "--fix", "tp=8,recompute_modules=core_attn",
     "--save-plan", "@best.yaml"],
    ["estimate", *H100, "--plan", "tp=2,pp=4,gbs=32,schedule=interleaved,vpp=2", "--export",
     "megatron"],
    ["estimate", *MOE, "--plan", "ep=8,zero=3,gbs=16", "--export", "torchtitan",
     "--framework", "torchtitan"],
]
ARG_JUNK = ["0", "-1", "nan", "inf", "x", "", "2", "3", "interleaved:0", "flushes=0",
            "layout=E|L", "etp=3", "recompute_modules=moe", "moe_capacity_factor=nan",
            "ep_overlap=maybe", "--framework", "torchtitan", "nope", "--dtype", "nvfp4",
            "--json", "dgx-h100:0", "1e3", "megatron-core", "schedule=dualpipe", "mbs=3",
            "microbatch_group_size=3", "cuda_graph=true", "moe_routing=contiguous",
            "--straggler", "0=2", "--degrade", "nic:0=2", "--export", "deepspeed", "maxtext",
            "llm-foundry", "flushes=2", "layout=Et*4|(t*4|)*6,t*4L", "first_stage_layers=2"]


@fuzz(150)
@given(st.integers(0, len(BASE_COMMANDS) - 1), st.data())
def test_cli_mutated_commands(which, data):
    argv = list(BASE_COMMANDS[which])
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["replace", "append-plan", "insert", "delete"]))
        i = data.draw(st.integers(1, len(argv) - 1))
        junk = data.draw(st.sampled_from(ARG_JUNK))
        if op == "replace":
            argv[i] = junk
        elif op == "append-plan" and "--plan" in argv:
            j = argv.index("--plan") + 1
            if j < len(argv):
                argv[j] = argv[j] + "," + junk
        elif op == "insert":
            argv.insert(i, junk)
        elif len(argv) > 2:
            del argv[i]
    outputs = []
    for k, a in enumerate(argv):
        if a.startswith("@"):
            argv[k] = os.path.join(_DIR, a[1:])
            outputs.append(argv[k])
    if argv[0] == "search" and "--fix" not in argv and "--plan" not in argv:
        return   # a full search: seconds each (covered by tests/test_search_cli.py)
    if argv[0] == "search" and "qwen3-30b-a3b" in argv:
        return
    cli(argv, tuple(outputs))


# ----------------------------------------------------------------- the bugs found, one each

def _refusal(fn, *args, **kw) -> SpecError:
    with pytest.raises(SpecError) as e:
        fn(*args, **kw)
    assert "\n" not in str(e.value)
    return e.value


def test_found_profile_non_text_keys():
    """A YAML profile with a number as a key (``7: x``) was a KeyError ('7')."""
    e = _refusal(profile_from_mapping, {**SMALL_PROFILE, 7: None})
    assert e.field == "profile.7" and "unknown key" in e.rule
    gemm = [{**SMALL_PROFILE["gemm"][0], 3: 1}]
    e = _refusal(profile_from_mapping, {**SMALL_PROFILE, "gemm": gemm})
    assert e.field == "profile.gemm[0].3" and "unknown key" in e.rule


@pytest.mark.parametrize("gbps", [None, "fast", [400], float("nan"), 10 ** 400, "missing"])
def test_found_planes_on_a_bad_nic_rate(gbps):
    """``network: {kind: multi_plane}`` split ``float(inter_node_gbps)`` before the rate was
    checked: KeyError (missing), ValueError (text, NaN), TypeError (a list, null),
    OverflowError (10**400)."""
    d = {**CLUSTER_BASE, "network": {"kind": "multi_plane", "planes": 2}}
    if gbps == "missing":
        d.pop("inter_node_gbps")
    else:
        d["inter_node_gbps"] = gbps
    assert _refusal(cluster_from_mapping, d).field == "inter_node_gbps"


def test_found_planes_on_a_node_groups_own_rate():
    """A node group's own ``inter_node_gbps`` split over the planes was not checked: 30 Gb/s
    over 2 planes (15 Gb/s ports, below the 25 Gb/s rule) was accepted."""
    groups = [{"gpu": "H100", "nodes": 1, "inter_node_gbps": 30}, {"gpu": "A100", "nodes": 1}]
    d = {k: v for k, v in CLUSTER_BASE.items() if k not in ("gpu", "nodes")}
    d.update(node_groups=groups, network={"kind": "multi_plane", "planes": 2})
    e = _refusal(cluster_from_mapping, d)
    assert e.field == "node_groups[0].inter_node_gbps" and "at least 25" in e.rule
    groups[0]["inter_node_gbps"] = 800          # 2 x 400 Gb/s ports: fine
    assert cluster_from_mapping(d).planes == 2


@pytest.mark.parametrize("key,value", [("inter_node_gbps", 5e-324), ("intra_node_GBps", 1e-300),
                                       ("storage_write_GBps", 1e-30)])
def test_found_vanishing_bandwidths(key, value):
    """5e-324 Gb/s between nodes passed ``> 0`` and made a step of -inf seconds; a floor
    far below any link (1 kB/s) refuses it."""
    e = _refusal(cluster_from_mapping, {**CLUSTER_BASE, key: value})
    assert e.field == key and "sanity limit" in e.rule
    assert cluster_from_mapping({**CLUSTER_BASE, key: 1.0}).num_gpus == 16   # 1 GB/s: fine


@pytest.mark.parametrize("key", ["bf16_tflops", "hbm_tbps", "matmul_efficiency",
                                 "attention_efficiency", "exp_tera_per_s"])
def test_found_vanishing_gpu_rates(key):
    """A custom GPU's rate or efficiency of 5e-324 passed ``> 0`` and made a NaN step."""
    from topologies.gpus import gpu_from_mapping
    gpu = {"name": "X", "bf16_tflops": 900, "hbm_gib": 80, "hbm_tbps": 3.3, key: 5e-324}
    e = _refusal(gpu_from_mapping, gpu)
    assert e.field == f"gpu.{key}" and "sanity limit" in e.rule


def test_found_profile_gemm_faster_than_the_peak(tmp_path):
    """A profile GEMM timed at 10^-12 s (5 x 10^5 TFLOP/s on an H100) was read as a ratio of
    ~0 to the catalog: the compute time vanished. A GEMM above the dense peak is refused;
    calibrate's own (fake) profile passes."""
    d = copy.deepcopy(SMALL_PROFILE)
    d["gemm"][0]["seconds"] = 1e-12
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(d), encoding="utf-8")
    (tmp_path / "c.yaml").write_text(_cluster_yaml("{profile: p.yaml}"), encoding="utf-8")
    rc, _, err = cli(["estimate", "--model", "llama3-8b", "--cluster", str(tmp_path / "c.yaml"),
                      "--plan", "tp=8,gbs=8"])
    assert rc == 2 and "gpu.profile.gemm[0].seconds=1e-12" in err and "dense peak" in err
    d["gemm"][0]["seconds"] = 2.4e-4            # 573 TFLOP/s: below the 989 peak
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(d), encoding="utf-8")
    assert cli(["estimate", "--model", "llama3-8b", "--cluster", str(tmp_path / "c.yaml"),
                "--plan", "tp=8,gbs=8"])[0] == 0


@example({"moe_capacity_factor": 10 ** 400})
@example({"moe_imbalance": 10 ** 400})
@given(st.just({"moe_imbalance": 10 ** 30}))
@fuzz(1)
def test_found_huge_moe_factors(d):
    """``moe_capacity_factor: 10**400`` in YAML was an OverflowError (``float()``)."""
    assert _refusal(plan_from_mapping, d).field in d
    assert _refusal(Plan, **d).field in d


def _calibrate(tmp_path, *flags: str) -> tuple[int, str, str]:
    return cli(["calibrate", "--backend", "fake", "--out", str(tmp_path / "g.yaml"), "--json",
                "--model", "llama3-8b", "--mbs", "1", "--seqs", "1024", *flags],
               outputs=(str(tmp_path / "g.yaml"),))


def test_found_calibrate_arguments(tmp_path):
    """``--dtypes fp8,fp8`` measured fp8 twice and failed after measuring on the profile's
    own duplicate rule (``profile.gemm[14]``); ``--gpus 2,4`` ran as 2; a sweep that times no
    GEMM (``--gpu A100 --dtypes fp8``, ``--tp 3`` on 32 heads) failed after measuring with
    ``profile.gemm=[]``. Now: measured once; refused before measuring, naming the flag."""
    rc, out, _ = _calibrate(tmp_path, "--tp", "1", "--dtypes", "fp8,fp8")
    assert rc == 0 and json.loads(out)["gemm"]["fp8"]["shapes"] > 0
    for flags, words in ((("--tp", "1", "--gpus", "2,4"), "--gpus='2,4'"),
                         (("--tp", "1", "--gpu", "A100", "--dtypes", "fp8"),
                          "--dtypes='fp8': fake A100-SXM4-80GB runs none"),
                         (("--tp", "3"), "--tp='3': no tensor-parallel degree divides")):
        rc, _, err = _calibrate(tmp_path, *flags)
        assert rc == 2 and words in err, err


def _validate_one(tmp_path, entry: dict) -> dict:
    (tmp_path / "r.json").write_text(json.dumps([entry]), encoding="utf-8")
    rc, out, err = cli(["validate", "--reference", str(tmp_path / "r.json"), "--no-sim",
                        "--json"])
    assert rc == 0, err
    return json.loads(out)["cases"][0]


def test_found_reference_entries(tmp_path):
    """A reference entry with a 10**400 model size (OverflowError in the measured FLOP
    count), ``measured: true`` (AttributeError reading its memory), ``virtual_stages: "4"``
    (text, silently read as not given and the chunk count inferred) or a negative sequence
    length (a negative measured step): each row is skipped with its reason or read without
    the malformed section, never a traceback or a negative time."""
    e0 = copy.deepcopy(REF_ENTRIES[0])
    row = _validate_one(tmp_path, {**e0, "model": {**e0["model"], "hidden": 10 ** 400}})
    assert row["id"] == e0["id"]
    row = _validate_one(tmp_path, {**e0, "measured": True})
    assert row["measured_memory_gib"] is None
    row = _validate_one(tmp_path, {**e0, "plan": {**e0["plan"], "virtual_stages": "4"}})
    assert "virtual_stages='4'" in row["skipped"]
    # a negative sequence length made a measured step of -4e17 s; a fractional batch was cut
    row = _validate_one(tmp_path, {**e0, "model": {**e0["model"], "seq_len": -10 ** 20}})
    assert row["measured_step_s"] is None and "model.seq_len" in row["skipped"]
    row = _validate_one(tmp_path, {**e0, "plan": {**e0["plan"], "global_batch": 4096.5}})
    assert row["measured_step_s"] is None and "plan.global_batch=4096.5" in row["skipped"]


# ------------------------------------------------- found by this file (each fixed)

def test_fix_vpp_overflow(tmp_path):
    rc, _, err = cli(["search", *H100, "--global-batch", "16", "--fix",
                      "vpp=99999999999999999999", "--json"])
    assert rc == 2 and "vpp" in err


@pytest.mark.parametrize("text", ["tp=\u0668", "tp=1_0", "cp=99999999999999999999999"])
def test_fix_int_ascii_and_limits(text):
    from strategies.search.fix_parse import parse_fix
    _refusal(parse_fix, text)


def test_no_negative_dp_comm():
    """Every rank's slack longer than its reduction (a one-layer first stage): the part of the
    optimizer the pipeline hides leaves the breakdown's optimizer, not a negative dp_comm;
    the step is still the sum of its parts."""
    job = make_job(_model("qwen3-30b-a3b"), parse_cluster_arg("dgx-h100:2"),
                   parse_plan("ep=4,pp=2,gbs=32,first_stage_layers=1"))
    e = estimate(job)
    b = e.breakdown_s
    assert b["dp_comm"] >= 0 and b["optimizer"] >= 0
    assert sum(b.values()) == pytest.approx(e.step_time_s, rel=1e-12)


# ----------------------------------------------------------------- saved plan files

SAVED_PLAN = {"tp": 2, "pp": 4, "dp": 1, "cp": 1, "ep": 1, "mbs": 1, "gbs": 16,
              "schedule": "interleaved", "vpp": 2, "recompute": "selective", "sp": True,
              "zero": 1, "recompute_modules": ["core_attn", "mlp"],
              "microbatch_group_size": 4, "framework": "megatron-core",
              "found_for": {"model": "llama3-8b", "cluster": "dgx-h100:1", "gpus": 8,
                            "global_batch": 16, "seq_len": 8192, "dtype": "bf16",
                            "step_time_s": 2.0}}


@pytest.mark.slow
@fuzz(150)
@given(st.data(), st.sampled_from(["p.yaml", "p.json"]),
       st.sampled_from(["estimate", "estimate", "compare"]))
def test_saved_plan_files_mutated(data, name, command):
    """A plan file as ``search --save-plan`` writes it (a framework and a ``found_for``
    record), mutated, through ``--plan FILE``: 0 (a differing ``found_for`` only warns) or 2
    with one line."""
    d = copy.deepcopy(SAVED_PLAN)
    for _ in range(data.draw(st.integers(1, 3))):
        target = d["found_for"] if (isinstance(d.get("found_for"), dict)
                                    and data.draw(st.booleans())) else d
        key = data.draw(st.sampled_from(sorted(target, key=str) + ["extra", "layout",
                                                                   "flushes"]))
        if data.draw(st.integers(0, 3)) == 0:
            target.pop(key, None)
        else:
            target[key] = data.draw(NASTY | st.sampled_from(
                ["torchtitan", "nemo", "llama3-70b", "dgx-a100:1", 4, 32, "fp8", "1f1b",
                 "Et*8|t*8|t*8|t*8L", ["mlp"], "full"]))
    path = os.path.join(_DIR, name)
    try:
        text = json.dumps(d) if name.endswith(".json") else yaml.safe_dump(d)
    except (ValueError, TypeError, OverflowError):
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    cli([command, *H100, "--plan", path, "--json"])


def test_found_search_plan_file_value_with_commas(tmp_path):
    """``search --plan FILE`` joined the file's values with ',' for ``parse_fix``: a value
    ``"alltoall,tp=8"`` fixed tp=8 too (``estimate`` refuses the same file)."""
    (tmp_path / "p.yaml").write_text('gbs: 16\nmoe_dispatcher: "alltoall,tp=8"\n',
                                     encoding="utf-8")
    for command in ("search", "estimate"):
        rc, _, err = cli([command, *H100, "--plan", str(tmp_path / "p.yaml"), "--json"])
        assert rc == 2 and "moe_dispatcher" in err and "alltoall,tp=8" in err, err


def test_found_exports_of_flushes():
    """A plan with flushes=2 (no --framework) was exported as one flush: Megatron-LM's and
    DeepSpeed's launches silently, torchtitan's with ``local_batch_size`` = the whole step's
    micro-batches (no accumulation loop). Megatron and DeepSpeed now refuse it; torchtitan's
    local batch is one flush's (its accumulation loop runs the flushes)."""
    rc, _, err = cli(["estimate", *H100, "--plan", "tp=2,pp=4,gbs=32,flushes=2", "--export",
                      "megatron"])
    assert rc == 2 and "flushes=2" in err and "Megatron-LM runs one pipeline schedule" in err
    rc, _, err = cli(["estimate", *H100, "--plan", "pp=4,dp=2,gbs=32,flushes=2", "--export",
                      "deepspeed"])
    assert rc == 2 and "flushes=2" in err and "use --export megatron" not in err, err
    rc, out, _ = cli(["estimate", *H100, "--plan", "tp=2,pp=4,gbs=32,flushes=2", "--export",
                      "torchtitan"])
    assert rc == 0 and "local_batch_size = 16\n" in out and "global_batch_size = 32\n" in out
    rc, out, _ = cli(["estimate", *H100, "--plan", "tp=2,pp=4,gbs=32", "--export",
                      "torchtitan"])
    assert rc == 0 and "local_batch_size = 32\n" in out


def test_found_megatron_export_keeps_group_size_and_graph():
    """``--export megatron`` dropped ``microbatch_group_size`` (Megatron-Core's default group
    is pp: another schedule than the one costed) and ``cuda_graph`` (the host time the
    estimate removed would be paid)."""
    rc, out, _ = cli(["estimate", *H100, "--plan", "tp=2,pp=4,gbs=32,schedule=interleaved,"
                      "vpp=2,microbatch_group_size=8", "--export", "megatron"])
    assert rc == 0 and "--microbatch-group-size-per-virtual-pipeline-stage 8" in out
    rc, out, _ = cli(["estimate", *H100, "--plan", "tp=8,gbs=16,cuda_graph=true", "--export",
                      "megatron"])
    assert rc == 0 and "--cuda-graph-impl full_iteration" in out
    rc, out, _ = cli(["estimate", *H100, "--plan", "tp=8,gbs=16", "--export", "megatron"])
    assert rc == 0 and "--cuda-graph-impl" not in out and "--microbatch-group-size" not in out
