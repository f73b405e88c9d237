"""Fuzzing of every parser (issue 6): plan strings, plan/model/cluster mappings, HuggingFace
configs, YAML/JSON files and the CLI itself. Whatever comes in, the answer is a valid object
or a ``SpecError`` with a one-line message, never a traceback and never a wrong acceptance.

The profile is derandomized (the same examples on every run, so CI is deterministic) and the
runs add up to about 6,000 cases; the parsers take microseconds, so the file runs in about
half a minute. Inputs: random text, random YAML/JSON structures, mutated valid files, huge numbers,
NaN/inf, negatives, booleans where integers are expected, unicode, nested lists.
"""
from __future__ import annotations

import json
import math
import os
import tempfile

import yaml
from hypothesis import given
from hypothesis import strategies as st

from strategies.errors import SpecError
from tests.fuzz_profile import clean, fuzz, run_cli
from strategies.estimate.scalar import estimate
from strategies.hf_config import load_model_arg, model_from_hf
from strategies.job import make_job
from strategies.model import ModelSpec, model_from_mapping
from strategies.model.spec import FIELDS
from strategies.plan import Plan, parse_plan, plan_from_mapping
from strategies.plan.parse import ALIAS
from strategies.schedules import get_schedule, schedule_names
from topologies.cluster import Cluster, cluster_from_mapping, parse_cluster_arg
from topologies.cluster.mapping import load_cluster_file
from topologies.gpus import gpu_from_mapping


# ----------------------------------------------------------------- value strategies

HUGE = st.sampled_from([20, -20, 63, 400, 5000, -5000, 308]).map(
    lambda e: (-1 if e < 0 else 1) * 10 ** abs(e))        # built lazily: repr(10**5000) raises
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324, 0.5, 2.0, 8.0])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 300), st.integers(), HUGE, FLOATS,
                    st.text(max_size=12), st.sampled_from(
                        ["8", " 8 ", "0x10", "1e3", "1_000", "８", "-1", "nan", "inf", "true",
                         "interleaved", "1f1b", "gpipe", "full", "selective", "H100", "A100",
                         "dgx-a100", "🦄", "\x00", "a\nb", "", " "]))
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=8)

PLAN_KEYS = ["tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "schedule", "vpp", "recompute", "sp",
             "zero", "flash_attn", "overlap_grad_reduce", "overlap_param_gather",
             "tp_comm_overlap", "microbatch_group_size", "tensor_model_parallel_size",
             "micro_batch_size", "TP", " pp ", "bogus"]
PLAN_VALUES = ["1", "2", "3", "4", "8", "16", "0", "-1", "2.0", "2.5", "1e3", "true", "false",
               "yes", "no", "interleaved", "interleaved:3", "interleaved:x", "1f1b", "gpipe",
               "none", "full", "selective", "", "nan", "inf", "99999999999999999999999",
               "8" * 60, "２", "0x8"]


PLAN_GOOD = {"tp": ["1", "2", "4", "8"], "pp": ["1", "2", "4"], "dp": ["1", "2", "4", "8"],
             "cp": ["1", "2"], "ep": ["1", "2"], "mbs": ["1", "2", "4"],
             "gbs": ["8", "16", "32", "64"], "vpp": ["1", "2", "4"],
             "schedule": ["1f1b", "gpipe", "interleaved", "interleaved:2", "Interleaved"],
             "recompute": ["none", "selective", "full"], "sp": ["true", "false", "1", "off"],
             "zero": ["0", "1", "2", "3"], "flash_attn": ["true", "false"],
             "overlap_grad_reduce": ["true", "no"], "overlap_param_gather": ["yes", "false"],
             "tp_comm_overlap": ["on", "false"], "microbatch_group_size": ["2", "4"]}


def plan_items(nasty: float):
    """(key, value) pairs: mostly a value valid for that key, sometimes any value."""
    return st.sampled_from(sorted(PLAN_GOOD)).flatmap(lambda k: st.tuples(
        st.just(k), st.sampled_from(PLAN_GOOD[k]) if nasty == 0 else st.one_of(
            st.sampled_from(PLAN_GOOD[k]), st.sampled_from(PLAN_GOOD[k]),
            st.sampled_from(PLAN_VALUES)))) | st.tuples(st.sampled_from(PLAN_KEYS),
                                                       st.sampled_from(PLAN_VALUES)).filter(
        lambda kv: nasty > 0)


def _mutate(base: dict, keys: list, data) -> dict:
    """A valid mapping with a few keys replaced by other values (valid or nasty), deleted,
    or added."""
    d = dict(base)
    for _ in range(data.draw(st.integers(0, 2))):
        op = data.draw(st.sampled_from(["set", "set", "small", "small", "delete", "add", "nest"]))
        key = data.draw(st.sampled_from(keys))
        if op == "set":
            d[key] = data.draw(VALUES)
        elif op == "small":
            d[key] = data.draw(st.sampled_from([1, 2, 4, 8, 16, 64, 512, 4096, 2.0, 0.5, True,
                                                 "2", None]))
        elif op == "delete":
            d.pop(key, None)
        elif op == "add":
            d[data.draw(st.text(max_size=8) | st.sampled_from(["Tp", "name ", "x"]))] = \
                data.draw(SCALARS)
        else:
            d[key] = [d.get(key)]
    return d


# ----------------------------------------------------------------- plans

def _check_plan(p: Plan) -> None:
    assert isinstance(p, Plan)
    for f in ("tp", "pp", "cp", "ep", "mbs", "vpp"):
        v = getattr(p, f)
        assert type(v) is int and v >= 1
    # every registered schedule parses (zero-bubble and DualPipe(V) too); a chunked one runs
    # vpp >= 2 chunks per rank, the others one
    assert p.schedule in schedule_names()
    assert (p.vpp >= 2) == get_schedule(p.schedule).chunked
    assert all(type(getattr(p, f)) is bool for f in ("sp", "flash_attn", "overlap_grad_reduce",
                                                      "overlap_param_gather", "tp_comm_overlap"))


@fuzz(500)
@given(st.text(max_size=60))
def test_plan_string_random_text(text):
    p = clean(parse_plan, text)
    if p is not None:
        _check_plan(p)


@fuzz(600)
@given(st.lists(plan_items(0.3), max_size=6), st.sampled_from([",", ", ", ",,"]))
def test_plan_string_key_values(items, sep):
    p = clean(parse_plan, sep.join(f"{k}={v}" for k, v in items))
    if p is None:
        return
    _check_plan(p)
    # what is typed is what is read: the plan written back parses to itself
    back = ",".join(f"{k}={v}" for k, v in p.to_dict().items() if v is not None)
    assert parse_plan(back) == p


@fuzz(400)
@given(st.dictionaries(st.sampled_from(PLAN_KEYS) | st.text(max_size=5), VALUES, max_size=5))
def test_plan_mapping_random(d):
    p = clean(plan_from_mapping, d)
    if p is None:
        return
    _check_plan(p)
    for raw, v in d.items():   # what is given is what is read
        key = ALIAS.get(raw.strip().lower(), raw.strip().lower())
        if key in ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "zero") and v is not None:
            assert not isinstance(v, bool)
            assert getattr(p, key) == (int(v.strip()) if isinstance(v, str) else v)


@fuzz(150)
@given(VALUES)
def test_plan_mapping_not_a_mapping(v):
    p = clean(plan_from_mapping, v)
    assert p is None or isinstance(v, dict)


# ----------------------------------------------------------------- models

VALID_MODEL = dict(num_layers=4, hidden_size=256, num_attention_heads=8, ffn_hidden_size=1024,
                   vocab_size=1000, seq_length=512, num_query_groups=4, activation="swiglu")
VALID_HF = dict(model_type="llama", num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                num_key_value_heads=4, intermediate_size=1024, vocab_size=1000,
                max_position_embeddings=2048, tie_word_embeddings=False)
HF_KEYS = list(VALID_HF) + ["n_layer", "n_embd", "n_head", "n_inner", "n_positions",
                            "num_local_experts", "num_experts_per_tok", "attention_bias"]


def _check_model(m: ModelSpec) -> None:
    assert isinstance(m, ModelSpec)
    for f in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
              "vocab_size", "seq_length", "num_experts", "moe_router_topk"):
        assert type(getattr(m, f)) is int and getattr(m, f) >= 1
    assert m.hidden_size % m.num_attention_heads == 0 or m.kv_channels or m.is_mla
    assert m.num_attention_heads % m.kv_heads == 0
    assert type(m.tie_word_embeddings) is bool and type(m.bias) is bool
    n = m.num_params()
    assert n > 0 and math.isfinite(float(n))


@fuzz(450)
@given(st.data())
def test_model_mapping_mutated(data):
    m = clean(model_from_mapping, _mutate(VALID_MODEL, list(FIELDS), data))
    if m is not None:
        _check_model(m)


@fuzz(300)
@given(st.dictionaries(st.sampled_from(list(FIELDS)) | st.text(max_size=6), VALUES, max_size=8))
def test_model_mapping_random(d):
    m = clean(model_from_mapping, d)
    if m is not None:
        _check_model(m)


@fuzz(450)
@given(st.data(), st.sampled_from(["llama", "mistral", "mixtral", "qwen2", "gpt_neox", "gpt2",
                                   "bert", None, 7]))
def test_hf_config_mutated(data, model_type):
    cfg = _mutate({**VALID_HF, "model_type": model_type}, HF_KEYS, data)
    m = clean(model_from_hf, cfg, "fuzz")
    if m is not None:
        _check_model(m)
        assert cfg["model_type"] in ("llama", "mistral", "mixtral", "qwen2", "gpt_neox", "gpt2")


@fuzz(200)
@given(VALUES)
def test_hf_config_not_a_mapping(v):
    assert clean(model_from_hf, v) is None or isinstance(v, dict)


@fuzz(300)
@given(st.text(max_size=30) | st.sampled_from(["gpt3-175b", "LLAMA3-8B", " llama3-70b ",
                                               "gpt3", "llama3-8b\x00", "../x", "~"]))
def test_model_arg_random_text(text):
    m = clean(load_model_arg, text)
    if m is not None:
        _check_model(m)


# ----------------------------------------------------------------- clusters

VALID_CLUSTER = dict(name="c", gpu="H100", nodes=2, gpus_per_node=8, intra_node_GBps=450,
                     intra_node_latency_us=2.0, nics_per_node=8, inter_node_gbps=400,
                     inter_node_latency_us=5.0, oversubscription=1, nodes_per_leaf=4,
                     inter_node_topology="rail_fat_tree", intra_node_topology="switch")
CLUSTER_KEYS = list(VALID_CLUSTER) + ["preset", "node_groups"]


def _check_cluster(c: Cluster) -> None:
    assert isinstance(c, Cluster)
    assert 1 <= c.num_gpus <= 1 << 20
    for v in (c.intra_node_bandwidth, c.inter_node_bandwidth):
        assert math.isfinite(v) and v > 0
    for v in (c.intra_node_latency, c.inter_node_latency):
        assert math.isfinite(v) and v >= 0
    assert math.isfinite(c.oversubscription) and c.oversubscription >= 1
    # the file form written back reads as the same cluster (up to unit-conversion rounding)
    _same(cluster_from_mapping(c.to_dict()).to_dict(), c.to_dict())


def _same(a, b) -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12), (a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@fuzz(500)
@given(st.data())
def test_cluster_mapping_mutated(data):
    c = clean(cluster_from_mapping, _mutate(VALID_CLUSTER, CLUSTER_KEYS, data))
    if c is not None:
        _check_cluster(c)


@fuzz(300)
@given(st.data())
def test_cluster_node_groups_and_custom_gpus(data):
    gpu = _mutate(dict(name="X1", bf16_tflops=500, hbm_gib=96, hbm_tbps=3.0, fp8_tflops=1000),
                  ["name", "bf16_tflops", "hbm_gib", "hbm_tbps", "fp8_tflops",
                   "matmul_efficiency", "vendor"], data)
    groups = [{"gpu": gpu, "nodes": data.draw(SCALARS)}, {"gpu": "A100", "nodes": 1}]
    d = {**VALID_CLUSTER, "node_groups": data.draw(st.sampled_from([groups, groups[:1], [],
                                                                     "A100", [None]]))}
    c = clean(cluster_from_mapping, d)
    if c is not None:
        _check_cluster(c)
    g = clean(gpu_from_mapping, gpu)
    if g is not None:
        assert all(math.isfinite(v) and v > 0 for v in g.peak_flops.values())


@fuzz(400)
@given(st.text(max_size=24) | st.builds(lambda p, n: f"{p}:{n}",
                                        st.sampled_from(["dgx-a100", "DGX-H100", "mi300x", "x"]),
                                        st.sampled_from(["1", "0", "-3", "2.5", "", "1:2", "８",
                                                         "1e3", "99999999999999999", "8" * 5000,
                                                         " 16 ", "0x10"])))
def test_cluster_arg_random_text(text):
    c = clean(parse_cluster_arg, text)
    if c is not None:
        _check_cluster(c)


# ----------------------------------------------------------------- files

_DIR = tempfile.mkdtemp(prefix="paraplan-fuzz-")


def _write(name: str, data: bytes) -> str:
    path = os.path.join(_DIR, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


VALID_FILES = {
    "model.yaml": yaml.safe_dump(VALID_MODEL),
    "config.json": json.dumps(VALID_HF, indent=1),
    "cluster.yaml": open(os.path.join(os.path.dirname(__file__), "..", "docs", "examples",
                                      "cluster.yaml"), encoding="utf-8").read(),
    "plan.yaml": "tp: 2\npp: 2\nschedule: interleaved\nvpp: 2\nmbs: 1\ngbs: 16\n",
    "plan.json": '{"tp": 2, "pp": 1, "gbs": 8, "recompute": "selective"}',
}


def _load(name: str, path: str):
    if name.startswith("cluster"):
        return load_cluster_file(path)
    if name.startswith("plan"):
        return parse_plan(path)
    return load_model_arg(path)


@fuzz(500)
@given(st.sampled_from(sorted(VALID_FILES)), st.data())
def test_mutated_valid_files(name, data):
    text = VALID_FILES[name]
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["delete", "insert", "replace", "dup-line", "cut"]))
        junk = data.draw(st.sampled_from(["", ":", "- ", "{", "}", "[", "]", '"', "\t", "\n",
                                          "  ", "&a ", "*a", "!!python/object:os.system ",
                                          ".nan", "-.inf", "1e999", "9" * 5000, "~", "true",
                                          "\u00e9", "\U0001f984", "\x00", "\ufeff"])
                         | st.text(max_size=4))
        if op == "delete":
            text = text[:i] + text[i + 3:]
        elif op == "insert":
            text = text[:i] + junk + text[i:]
        elif op == "replace":
            text = text[:i] + junk + text[i + len(junk):]
        elif op == "dup-line":
            lines = text.splitlines(True)
            if lines:
                k = i % len(lines)
                lines.insert(k, lines[k])
                text = "".join(lines)
        else:
            text = text[:i]
    path = _write(name, text.encode("utf-8", "surrogatepass"))
    out = clean(_load, name, path)
    assert out is None or isinstance(out, (ModelSpec, Cluster, Plan))


@fuzz(400)
@given(st.sampled_from(["m.yaml", "m.json", "c.yaml", "c.json", "plan.yaml", "plan.yml",
                        "plan.json"]), VALUES)
def test_random_structures_as_files(name, value):
    kind = "cluster" if name.startswith("c.") else ("plan" if name.startswith("plan") else "m")
    try:
        text = (json.dumps(value) if name.endswith(".json")
                else yaml.safe_dump(value, allow_unicode=True))
    except (ValueError, TypeError, OverflowError):
        return  # not representable in that format
    path = _write(name, text.encode("utf-8", "surrogatepass"))
    out = clean(_load, kind if kind != "m" else "model", path)
    assert out is None or isinstance(out, (ModelSpec, Cluster, Plan))


@fuzz(250)
@given(st.binary(max_size=200), st.sampled_from(["r.yaml", "r.json"]))
def test_random_bytes_as_files(raw, name):
    path = _write(name, raw)
    for kind in ("model", "cluster", "plan"):
        out = clean(_load, kind, path)
        assert out is None or isinstance(out, (ModelSpec, Cluster, Plan))


def test_file_refusals_name_the_problem():
    """The loader's own rules, each with one example."""
    cases = {
        "dup.yaml": (b"tp: 2\ntp: 4\ngbs: 8\n", "given twice"),
        "dup.json": (b'{"tp": 2, "tp": 4}', "given twice"),
        "nan.json": (b'{"tp": NaN}', "not a JSON number"),
        "big.json": (b'{"tp": ' + b"9" * 5000 + b"}", "malformed JSON"),
        "deep.json": (b"[" * 100000 + b"]" * 100000, "malformed JSON"),
        "deep.yaml": (b"[" * 5000 + b"]" * 5000, "malformed YAML"),
        "obj.yaml": (b"!!python/object/apply:os.system ['echo hi']", "malformed YAML"),
        "bin.yaml": (b"\xff\xfe\x00", "UTF-8"),
        "key.yaml": (b"? [1, 2]\n: 3\n", "malformed YAML"),
    }
    for name, (raw, words) in cases.items():
        with_error = None
        try:
            parse_plan(_write(name, raw))
        except SpecError as e:
            with_error = str(e)
        assert with_error and words in with_error and "\n" not in with_error, (name, with_error)
    # too large, and a folder or a device in place of a file
    big = _write("huge.yaml", b"# " + b"x" * (4 * 1024 * 1024) + b"\n")
    for path, words in ((big, "limit"), (_DIR + "/sub.yaml", "no such file"),
                        ("/dev/null.yaml", "no such file")):
        try:
            load_cluster_file(path)
            raise AssertionError(path)
        except SpecError as e:
            assert words in str(e), str(e)
    os.makedirs(os.path.join(_DIR, "d.yaml"), exist_ok=True)
    try:
        load_cluster_file(os.path.join(_DIR, "d.yaml"))
        raise AssertionError("a folder was read")
    except SpecError as e:
        assert "not a regular file" in str(e)


# ----------------------------------------------------------------- jobs and the CLI

SMALL_MODELS = [ModelSpec("fuzz", 8, 512, 8, 2048, 1000, 256, 4, "swiglu"),
                ModelSpec("fuzz-moe", 4, 256, 8, 512, 1000, 128, 8, "swiglu", num_experts=4,
                          moe_router_topk=2),
                # DeepSeek-style: MLA, a shared expert, a dense first layer, an MTP module
                ModelSpec("fuzz-mla", 4, 256, 8, 512, 1000, 128, activation="swiglu",
                          num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=128,
                          q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16,
                          qk_nope_head_dim=32, v_head_dim=32, num_shared_experts=1,
                          first_k_dense_replace=1, num_nextn_predict_layers=1, router_bias=True,
                          position_embedding="rope", norm="rmsnorm"),
                # gpt-oss-style: head size 64 != 256/8, biases, sinks, a window on every other layer
                ModelSpec("fuzz-win", 4, 256, 8, 512, 1000, 256, 2, "swiglu", num_experts=4,
                          moe_router_topk=2, kv_channels=64, bias=True, router_bias=True,
                          attention_sinks=True, sliding_window=32, global_attention_every=2,
                          position_embedding="rope", norm="rmsnorm")]


@fuzz(200)
@given(st.lists(plan_items(0), max_size=6).map(dict),
       st.sampled_from(["dgx-a100:1", "dgx-h100:2", "mi300x:1", "dgx-a100:3"]),
       st.sampled_from(["bf16", "bf16", "fp16", "fp8", "int8"]),
       st.sampled_from([64, 128, 96]) | st.integers(1, 64) | st.none(),
       st.sampled_from(SMALL_MODELS))
def test_jobs_are_valid_or_refused(plan, cluster, dtype, gbs, model):
    p = clean(plan_from_mapping, plan)
    if p is None:
        return
    job = clean(make_job, model, parse_cluster_arg(cluster), p, global_batch=gbs, dtype=dtype)
    if job is None:
        return
    q = job.plan
    assert q.tp * q.pp * q.cp * q.dp == job.cluster.num_gpus
    assert q.gbs % (q.mbs * q.dp) == 0 and job.num_microbatches >= 1
    assert model.num_layers % (q.pp * q.vpp) == 0
    est = estimate(job)
    assert math.isfinite(est.step_time_s) and est.step_time_s > 0
    assert all(math.isfinite(v) and v >= 0 for v in est.breakdown_s.values())


_cli = run_cli


@fuzz(150)
@given(st.lists(plan_items(0.3), max_size=5),
       st.sampled_from(["gpt-1.7b", "llama3-8b", "nope", "", "x.json"]),
       st.sampled_from(["dgx-a100:1", "dgx-h100:0", "dgx-a100:x", "mi300x", "c.yaml"]),
       st.lists(st.sampled_from(["--seq-len", "0", "512", "-3", "--global-batch", "16", "nan",
                                 "--dtype", "fp8", "--json", "--bogus"]), max_size=3))
def test_cli_estimate_never_a_traceback(items, model, cluster, extra):
    plan = ",".join(f"{k}={v}" for k, v in items)
    rc, out, err = _cli(["estimate", "--model", model, "--cluster", cluster, "--plan", plan,
                         "--json", *extra][:12])
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err
    if rc == 2:
        assert err.count("\n") == 1 and err.startswith("paraplan"), err
    else:
        json.loads(out)


_HF_DIR = os.path.join(os.path.dirname(__file__), "data", "hf")
_HF_FILES = sorted(f for f in os.listdir(_HF_DIR) if f.endswith(".json"))


@fuzz(400)
@given(st.data(), st.sampled_from(_HF_FILES))
def test_frontier_hf_configs_mutated(data, fname):
    """The real-shaped MoE/MLA configs (tests/data/hf/), mutated: a valid model or a clean
    SpecError, never a traceback."""
    with open(os.path.join(_HF_DIR, fname)) as f:
        cfg = json.load(f)
    if "text_config" in cfg and data.draw(st.booleans()):
        cfg["text_config"] = _mutate(cfg["text_config"], list(cfg["text_config"]), data)
    else:
        cfg = _mutate(cfg, list(cfg) + ["sliding_window", "layer_types", "q_lora_rank"], data)
    m = clean(model_from_hf, cfg, "fuzz")
    if m is not None:
        assert isinstance(m, ModelSpec) and m.num_params() > 0
        assert m.active_params() <= m.num_params() + m.embedding_params()
