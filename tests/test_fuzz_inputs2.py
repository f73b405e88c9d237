"""Fuzzing of the commands and inputs tests/test_fuzz_recent.py does not reach: ``whatif``
(``--vary`` axes, prices, the space flags), ``compare`` (``--schedules``, the sweep),
``goodput`` and ``sensitivity`` numbers, ``--straggler``/``--degrade`` and the cluster
file's ``faults:``, mixed clusters (``a:N+b:M`` and ``node_groups:``), plan files with every
key (``framework:`` too) and ``--export``.

The rule: any input either works (exit 0) or exits 2 with one line on stderr naming field,
value and rule; never a traceback, never a hang, never an output file left behind after a
refusal, the same answer twice. Derandomized (tests/fuzz_profile.py): a few seconds by
default, ``PARAPLAN_HYPOTHESIS_SCALE=k`` runs k times as many examples and
``PARAPLAN_HYPOTHESIS_RANDOM=1`` new ones each run.
"""
from __future__ import annotations

import json
import math
import os
import tempfile

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from strategies.framework import PROFILES
from tests.fuzz_profile import cli, fuzz, run_cli

BASE = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16"]
GOODPUT = ["goodput", *BASE, "--plan", "tp=1,mbs=1", "--analytic"]


_DIR = tempfile.mkdtemp(prefix="paraplan-fuzz-inputs2-")

# ----------------------------------------------------------------- values

#: numbers as typed on a command line: valid, edge, absurd, not numbers at all
NUM_TEXT = st.sampled_from(
    ["0", "-1", "1", "2", "3", "8", "64", "1.5", "0.5", "-0", "1e3", "1e-300", "5e-324",
     "1e308", "1e400", "nan", "inf", "-inf", "", " ", "x", "9" * 30, "true", "0x10", "1_0",
     "\uff12", "None", "1,2", "=", "+2", " 4 "])
#: values in a YAML/JSON file
NASTY = st.sampled_from([None, True, False, 0, -1, 1, 2, 3, 8, 10 ** 30, 2 ** 63, 1.5,
                         float("nan"), float("inf"), -0.0, 5e-324, 1e308, "8", "", "x", "nan",
                         "1e3", [], {}, [1], {"a": 1}])


def _one_line_or_ok(argv: list[str], outputs: tuple[str, ...] = ()) -> tuple[int, str]:
    rc, out, _ = cli(argv, outputs)
    if rc == 0 and "--json" in argv:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON: {argv}"))
    return rc, out


# ----------------------------------------------------------------- whatif

WHATIF_KEYS = ["cluster", "gpu", "nodes", "inter_node_gbps", "intra_node_GBps",
               "oversubscription", "nics_per_node", "straggler", "network", "failed_planes",
               "global_batch", "seq_len", "unknown"]
WHATIF_VALUES = st.one_of(NUM_TEXT, st.sampled_from(
    ["dgx-h100", "dgx-a100:2", "dgx-h100:1+dgx-a100:1", "gb200-nvl72", "H100-SXM5-80GB",
     "GB200", "MI300X", "foo", "multi-plane:2", "multi-plane:1", "multi-plane:99",
     "fat_tree", "rail_fat_tree", "torus"]))


@fuzz(25)
@given(st.sampled_from(WHATIF_KEYS), st.lists(WHATIF_VALUES, min_size=1, max_size=2),
       st.sampled_from([[], ["--gpu-hour-cost"], ["--network-prices"], ["--power"],
                        ["--memory-limit"], ["--max-bubble"], ["--max-mbs"], ["--max-vpp"],
                        ["--workers"]]), NUM_TEXT, st.booleans())
def test_whatif_vary_and_flags(key, values, flag, value, as_json):
    argv = ["whatif", *BASE, "--vary", f"{key}={','.join(values)}", "--fix", "tp=1,pp=1",
            "--workers", "1"]
    if flag == ["--workers"]:
        argv = argv[:-2]
    if flag == ["--network-prices"]:
        argv += ["--network-prices", f"switch={value},optic_200={value}"]
    elif flag == ["--power"]:
        argv += ["--power"]
    elif flag:
        argv += [flag[0], value]
    rc, out = _one_line_or_ok(argv + (["--json"] if as_json else []))
    if rc == 0 and as_json:
        for row in json.loads(out)["rows"]:
            st_s = row.get("step_time_s")
            assert st_s is None or (math.isfinite(st_s) and st_s > 0), row


# ----------------------------------------------------------------- compare

SCHEDULE_ITEMS = st.sampled_from(
    ["gpipe", "1f1b", "zb-h1", "zb-h2", "deepspeed-1f1b", "dualpipe", "zb-1p", "zb-2p",
     "interleaved", "zb-v", "dualpipev", "interleaved:", "zb-v:", "dualpipev:", "", " ",
     "1F1B", "foo"])


@fuzz(15)
@given(st.lists(st.tuples(SCHEDULE_ITEMS, st.one_of(st.just(""), NUM_TEXT)), min_size=1,
                max_size=3),
       st.sampled_from(["pp=2,mbs=1", "pp=4,mbs=1", "tp=2,pp=2,mbs=1,vpp=2",
                        "pp=2,mbs=1,layers_per_stage=20/4", "pp=2,mbs=1,flushes=2",
                        "pp=2,mbs=2,layout=Et*12|t*12L", "pp=3,mbs=1"]),
       st.one_of(st.none(), NUM_TEXT), st.booleans())
def test_compare_schedules(items, plan, ranks, as_json):
    text = ",".join(f"{a}{b}" if a.endswith(":") else a for a, b in items)
    argv = ["compare", *BASE, "--plan", plan, "--schedules", text]
    if ranks is not None:
        argv += ["--timeline-ranks", ranks]
    rc, out = _one_line_or_ok(argv + (["--json"] if as_json else []))
    if rc == 0 and as_json:
        rows = json.loads(out)["rows"]
        assert any(r.get("valid", True) for r in rows)
        for r in rows:
            if r.get("valid", True):
                assert math.isfinite(r["step_time_s"]) and r["step_time_s"] > 0, r


# ----------------------------------------------------------------- goodput, sensitivity

GOODPUT_FLAGS = ["--mtbf-gpu-h", "--mtbf-node-h", "--ckpt-bw", "--restart-s", "--interval-s",
                 "--monte-carlo", "--seed"]


@fuzz(40)
@given(st.one_of(NUM_TEXT, st.sampled_from(["1e9", "15e12", "1e18", "1e19", "2048"])),
       st.dictionaries(st.sampled_from(GOODPUT_FLAGS), NUM_TEXT, max_size=3))
def test_goodput_numbers(tokens, flags):
    argv = [*GOODPUT, "--json", "--tokens", tokens]
    for k, v in flags.items():
        argv += [k, v]
    rc, out = _one_line_or_ok(argv)
    if rc == 0:
        r = json.loads(out)
        g = r.get("goodput", r)
        for k in ("expected_wall_s", "expected_gpu_hours", "goodput_fraction"):
            if k in g:
                assert math.isfinite(g[k]) and g[k] >= 0, (k, g)


@fuzz(20)
@given(st.dictionaries(st.sampled_from(["--factor", "--link-factor", "--rows"]), NUM_TEXT,
                       max_size=2))
def test_sensitivity_numbers(flags):
    argv = ["sensitivity", *BASE, "--plan", "tp=2,pp=2,mbs=1", "--json"]
    for k, v in flags.items():
        argv += [k, v]
    _one_line_or_ok(argv)


# ----------------------------------------------------------------- faults

LINK_HEADS = st.sampled_from(["nic:", "node:", "plane:", "", "gpu:", "nvswitch:", "leaf:",
                              "spine:", "nic:0.", "3-nvswitch:", "nvswitch:0-", "0-",
                              "nic:1.3-leaf:"])


@fuzz(60)
@given(st.lists(st.tuples(st.sampled_from(["--straggler", "--degrade"]), LINK_HEADS,
                          NUM_TEXT, NUM_TEXT), min_size=1, max_size=3),
       st.sampled_from(["dgx-a100:1", "dgx-a100:2", "dgx-b300-2plane:2",
                        "dgx-h100:1+dgx-a100:1"]),
       st.sampled_from(["estimate", "simulate"]))
def test_fault_flags(faults, cluster, command):
    argv = [command, "--model", "gpt-1.7b", "--cluster", cluster, "--global-batch", "16",
            "--plan", "tp=2,pp=2,mbs=1", "--json"]
    for flag, head, key, factor in faults:
        argv += [flag, f"{key}={factor}" if flag == "--straggler" else f"{head}{key}={factor}"]
    rc, out = _one_line_or_ok(argv)
    if rc == 0:
        assert json.loads(out)["step_time_s"] > 0


# ----------------------------------------------------------------- cluster and plan files

CLUSTER = dict(name="c", gpu="A100-SXM4-80GB", nodes=2, gpus_per_node=8, intra_node_GBps=300,
               inter_node_gbps=200, nics_per_node=8, intra_node_topology="switch",
               inter_node_topology="rail_fat_tree",
               faults={"stragglers": {3: 1.5}, "degrade": {"nic:0": 2}})
GROUPS = [dict(gpu="H100-SXM5-80GB", nodes=1, intra_node_GBps=450, inter_node_gbps=400),
          dict(gpu="A100-SXM4-80GB", nodes=1)]
CLUSTER_KEYS = sorted(CLUSTER) + ["node_groups", "storage_write_GBps", "oversubscription",
                                  "network", "preset", "extra"]
PLAN = dict(tp=2, pp=2, mbs=1, gbs=16, sp=True, zero=1, schedule="1f1b", vpp=1,
            recompute="none", cp=1, ep=1, layers_per_stage="12/12", framework="megatron-core")
PLAN_KEYS = sorted(PLAN) + ["flushes", "etp", "moe_dispatcher", "group_microbatches",
                            "layout", "first_stage_layers", "microbatch_group_size", "extra"]


def _mutate(d: dict, keys: list[str], data) -> dict:
    d = json.loads(json.dumps(d))
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.sampled_from(keys))
        if data.draw(st.integers(0, 4)) == 0:
            d.pop(k, None)
        else:
            d[k] = data.draw(NASTY)
    return d


def _write(d: object, name: str, as_json: bool) -> str:
    path = os.path.join(_DIR, name + (".json" if as_json else ".yaml"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(d, allow_nan=True) if as_json else yaml.safe_dump(d))
    return path


@fuzz(40)
@given(st.data(), st.booleans(), st.sampled_from(["estimate", "simulate", "sensitivity",
                                                  "goodput"]))
def test_cluster_files_faults_and_groups(data, as_json, command):
    base = dict(CLUSTER)
    if data.draw(st.booleans()):
        base = {k: v for k, v in base.items() if k not in ("gpu", "nodes")}
        base["node_groups"] = json.loads(json.dumps(GROUPS))
    d = _mutate(base, CLUSTER_KEYS, data)
    for sec in ("faults", "node_groups"):
        v = d.get(sec)
        if isinstance(v, dict) and data.draw(st.booleans()):
            sub = v.get(data.draw(st.sampled_from(["stragglers", "degrade"])))
            if isinstance(sub, dict):
                sub[data.draw(st.sampled_from([0, 15, 16, -1, "nic:00", "node:1", "0-1",
                                               "nvswitch:0-3", "x"]))] = data.draw(NASTY)
        if isinstance(v, list) and v and isinstance(v[0], dict):
            v[data.draw(st.integers(0, len(v) - 1))][data.draw(st.sampled_from(
                ["gpu", "nodes", "intra_node_GBps", "inter_node_gbps", "gpus_per_node",
                 "extra"]))] = data.draw(NASTY)
    try:
        path = _write(d, "cluster", as_json)
    except (ValueError, TypeError, OverflowError, yaml.YAMLError):
        return
    argv = [command, "--model", "gpt-1.7b", "--cluster", path, "--global-batch", "16",
            "--plan", data.draw(st.sampled_from(["tp=2,pp=2,mbs=1",
                                                 "tp=1,pp=2,mbs=1,layers_per_stage=20/4",
                                                 "tp=8,mbs=1,group_microbatches=1/1"])),
            "--json"]
    if command == "goodput":
        argv += ["--tokens", "1e9", "--analytic"]
    _one_line_or_ok(argv)


@fuzz(30)
@given(st.data(), st.booleans(),
       st.sampled_from(["estimate", "simulate", "compare", "goodput", "whatif"]))
def test_plan_files_every_key(data, as_json, command):
    d = _mutate(PLAN, PLAN_KEYS, data)
    if data.draw(st.booleans()):
        d["framework"] = data.draw(st.sampled_from(sorted(PROFILES) + ["foo", "", 1]))
    try:
        path = _write(d, "plan", as_json)
    except (ValueError, TypeError, OverflowError, yaml.YAMLError):
        return
    argv = [command, "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--plan", path]
    if command == "goodput":
        argv += ["--tokens", "1e9", "--analytic"]
    if command == "whatif":
        argv += ["--vary", "inter_node_gbps=100,200", "--workers", "1"]
    _one_line_or_ok(argv)


# ----------------------------------------------------------------- --export

EXPORT_PLANS = ["tp=2,pp=2,mbs=1", "tp=2,pp=2,vpp=2,mbs=1,schedule=interleaved",
                "tp=1,pp=2,mbs=1,layers_per_stage=20/4", "tp=2,pp=4,mbs=1,schedule=zb-h1",
                "tp=2,ep=4,mbs=1", "tp=1,pp=2,schedule=dualpipev,mbs=1", "zero=3,mbs=1",
                "tp=2,cp=2,mbs=1", "tp=2,pp=2,mbs=1,recompute=selective,"
                "recompute_modules=core_attn+mlp", "tp=2,pp=2,mbs=1,flushes=2",
                "tp=2,pp=2,mbs=1,layout=Et*12|t*12L", "tp=2,mbs=1,etp=2,ep=2",
                "tp=8,mbs=1,group_microbatches=1/1", "zero=2,mbs=2", "tp=2,mbs=1,sp=true"]


@fuzz(30)
@given(st.sampled_from(["gpt-1.7b", "mixtral-8x7b", "llama3-8b", "qwen3-30b-a3b"]),
       st.sampled_from(EXPORT_PLANS),
       st.sampled_from(["dgx-h100:1", "dgx-h100:1+dgx-a100:1", "dgx-b200:1"]),
       st.sampled_from(["megatron", "deepspeed", "torchtitan", "maxtext", "llm-foundry"]),
       st.one_of(st.none(), st.sampled_from(sorted(PROFILES))),
       st.sampled_from(["bf16", "fp8", "mxfp8", "fp16"]))
def test_exports(model, plan, cluster, kind, framework, dtype):
    argv = ["estimate", "--model", model, "--cluster", cluster, "--global-batch", "16",
            "--plan", plan, "--export", kind, "--dtype", dtype, "--json"]
    if framework:
        argv += ["--framework", framework]
    rc, out = _one_line_or_ok(argv)
    if rc == 0:
        r = json.loads(out)
        assert r["export"]["kind"] == kind and r["export"]["text"].strip()
        assert run_cli(argv)[1] == out        # the same answer twice


# ----------------------------------------------------------------- found by the fuzzing

@pytest.mark.parametrize("command", ["search", "whatif"])
@pytest.mark.parametrize("n", ["99999999999999999999", "100000", "257"])
def test_found_workers_sanity_limit(command, n):
    """``--workers 10**20`` overflowed a C int in the process pool (a traceback) and
    ``--workers 100000`` forked thousands of processes: at most MAX_WORKERS (256)."""
    extra = ["--vary", "nodes=1"] if command == "whatif" else []
    rc, _, e = cli([command, *BASE, *extra, "--fix", "tp=1,pp=1", "--workers", n])
    assert rc == 2 and "--workers" in e and "256" in e, e


def test_found_workers_limit_in_the_library():
    from simulator.search.executors import make_executor
    from simulator.workers import MAX_WORKERS, default_workers, process_pool
    from strategies.errors import SpecError
    assert 1 <= default_workers() <= MAX_WORKERS
    for bad in (0, MAX_WORKERS + 1, 10 ** 20):
        with pytest.raises(SpecError, match="workers"):
            make_executor("local", bad, (), lambda i: None)
        with pytest.raises(SpecError, match="workers"):
            process_pool(bad)



@pytest.mark.parametrize("extra,field", [
    (["--tokens", "1e18", "--mtbf-gpu-h", "1e-300"], "checkpoint_interval_s"),
    (["--tokens", "1e9", "--interval-s", "1e-300"], "checkpoint_interval_s"),
    (["--tokens", "1e18", "--mtbf-gpu-h", "1", "--restart-s", "1e308"], "restart_s")])
def test_found_goodput_overflows(extra, field):
    """A Daly interval of 1e-298 s (MTBF 1e-300 h) made ``work / interval`` infinite and
    ``math.ceil`` raised OverflowError; a restart of 1e308 s made the expected wall time and
    GPU-hours ``inf`` (printed, and ``Infinity`` in the JSON)."""
    rc, _, e = cli([*GOODPUT, *extra])
    assert rc == 2 and field in e, e


def test_found_goodput_segments_exact():
    from strategies import goodput as gp
    from strategies.errors import SpecError
    assert gp.full_segments(10.0, 3.0) == 3 and gp.full_segments(9.0, 3.0) == 2
    assert gp.full_segments(0.0, 3.0) == 0
    assert gp.full_segments(float(gp.MAX_SEGMENTS), 1.0) == gp.MAX_SEGMENTS - 1
    with pytest.raises(SpecError, match="checkpoint_interval_s"):
        gp.full_segments(float(gp.MAX_SEGMENTS) * 2, 1.0)
    with pytest.raises(SpecError, match="restart_s"):
        gp.expected_run_s(1e6, 1e3, 10.0, 450.0, 1e308)


COMPARE = ["compare", *BASE, "--plan", "pp=2,mbs=1"]


@pytest.mark.parametrize("counts", ["1_0", "\uff12", "0x8", "1e1", "0", "4097"])
def test_found_sweep_counts_ascii(tmp_path, counts):
    """``--sweep-microbatches`` read ``int()``: "1_0" and a full-width "２" were sweeps of 10
    and 2 micro-batches (every other integer input refuses them: parse_int_text)."""
    out = str(tmp_path / "s.svg")
    rc, _, e = cli([*COMPARE, "--sweep", out, "--sweep-microbatches", counts], outputs=(out,))
    assert rc == 2 and "--sweep-microbatches" in e, e


def test_found_sweep_counts_without_sweep():
    """``--sweep-microbatches`` without ``--sweep`` was dropped without a word."""
    rc, _, e = cli([*COMPARE, "--sweep-microbatches", "4,8"])
    assert rc == 2 and "--sweep-microbatches" in e and "--sweep" in e, e


def test_sweep_counts_parsed():
    from simulator.cli.compare import parse_counts
    assert parse_counts(" 8, 4,4 ,", 2) == [4, 8]
    assert parse_counts(None, 2) == [2, 4, 8, 16]


def test_found_degrade_spellings_name_one_link(tmp_path):
    """``--degrade nic:00=2`` did not replace the cluster file's ``nic:0: 8`` (keyed by the
    text, both were kept and the larger won: 0.657 s instead of 0.244 s for ``nic:0=2``);
    ``0-nvswitch:0`` and ``nvswitch:0-gpu:0`` were two entries for one duplex link."""
    import json
    import yaml
    from topologies.faults import Faults, parse_link
    from strategies.errors import SpecError
    assert parse_link("nic:00").text == parse_link(" nic:+0 ").text == "nic:0"
    assert parse_link("nvswitch:0-gpu:3").text == parse_link("03-nvswitch:00").text \
        == "3-nvswitch:0"
    assert parse_link("nic:0.1-leaf:1.0.1").ends == parse_link("leaf:1.0.1-nic:0.1").ends
    with pytest.raises(SpecError, match="given twice"):
        Faults.from_texts(degrade=["0-nvswitch:0=2", "nvswitch:0-gpu:0=3"])
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(dict(
        name="c", gpu="A100-SXM4-80GB", nodes=2, gpus_per_node=8, intra_node_GBps=300,
        inter_node_gbps=200, nics_per_node=8, intra_node_topology="switch",
        inter_node_topology="rail_fat_tree", faults={"degrade": {"nic:0": 8}})))
    steps = set()
    for spelling in ("nic:0", "nic:00", "nic:+0"):
        rc, out, e = cli(["simulate", "--model", "gpt-1.7b", "--cluster", str(f),
                          "--global-batch", "16", "--plan", "tp=1,pp=1,mbs=1", "--json",
                          "--degrade", f"{spelling}=2"])
        assert rc == 0, e
        r = json.loads(out)
        assert r["inputs"]["cluster"]["faults"] == {"degrade": {"nic:0": 2.0}}
        steps.add(r["step_time_s"])
    assert len(steps) == 1


@pytest.mark.parametrize("text", ["dgx-h100:1+dgx-b300-2plane:1", "dgx-b300-2plane:1+dgx-h100:1"])
def test_found_mixed_cluster_planes_by_order(text):
    """A ``+`` cluster took the first term's network planes: ``dgx-h100:1+dgx-b300-2plane:1``
    had one plane and the same groups the other way round two. One fabric joins the groups,
    so its planes (and topology) are shared like the node shape."""
    from strategies.errors import SpecError
    from topologies.cluster import parse_cluster_arg
    with pytest.raises(SpecError, match="planes"):
        parse_cluster_arg(text)
    rc, _, e = cli(["estimate", "--model", "gpt-1.7b", "--cluster", text, "--global-batch",
                    "16", "--plan", "tp=2,pp=2,mbs=1"])
    assert rc == 2 and "planes=" in e, e
    assert parse_cluster_arg("dgx-b300-2plane:1+dgx-b300-2plane:1").planes == 2


def test_found_whatif_bandwidths_on_a_mixed_cluster():
    """``--vary inter_node_gbps=10,400`` (and ``intra_node_GBps``) changed only the
    cluster-wide rates, which a mixed cluster's simulator ignores for each node group's own
    links: 0.189 s at 10 and at 400 Gb/s. Now every group's link takes the varied value."""
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    mixed = parse_cluster_arg("dgx-h100:1+dgx-a100:1")
    c = apply_cluster(mixed, "inter_node_gbps", 123.0)
    assert c.inter_node_bandwidth == 123.0 * 1e9 / 8
    assert all(g.inter_node_bandwidth is None for g in c.groups)
    assert [g.intra_node_bandwidth for g in c.groups] == \
        [g.intra_node_bandwidth for g in mixed.groups]
    c = apply_cluster(mixed, "intra_node_GBps", 77.0)
    assert c.intra_node_bandwidth == 77e9 and all(g.intra_node_bandwidth is None
                                                  for g in c.groups)
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    m, p = model_preset("gpt-1.7b"), parse_plan("tp=1,mbs=1,zero=0")
    steps = [simulate(make_job(m, apply_cluster(mixed, "intra_node_GBps", v), p,
                               global_batch=16)).step_time_s for v in (10.0, 450.0)]
    assert steps[0] > 2 * steps[1], steps


def test_found_resized_cluster_keeps_group_links():
    """``Cluster.with_nodes`` (``--vary nodes``) and ``--vary gpu`` rebuilt the node group and
    dropped its own link rates (a one-group ``node_groups:`` file)."""
    from dataclasses import replace
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    base = parse_cluster_arg("dgx-a100:1")
    one = replace(base, groups=(replace(base.groups[0], intra_node_bandwidth=1e11,
                                        inter_node_bandwidth=2e10),))
    for c in (one.with_nodes(3), apply_cluster(one, "nodes", 3),
              apply_cluster(one, "gpu", "H100-SXM5-80GB")):
        assert (c.groups[0].intra_node_bandwidth, c.groups[0].inter_node_bandwidth) == \
            (1e11, 2e10)
    assert one.with_nodes(3).num_nodes == 3


def test_found_whatif_planes_split_every_groups_nic(tmp_path):
    """``--vary network=multi-plane:16`` checked the split of the cluster-wide NIC only
    (400 Gb/s: 25 Gb/s ports) and ran a node group's 100 Gb/s NIC as 6.25 Gb/s ports, which
    the same cluster file with ``network: {planes: 16}`` refuses."""
    f = tmp_path / "mixed.yaml"
    f.write_text(yaml.safe_dump(dict(
        name="m", gpus_per_node=8, intra_node_GBps=300, inter_node_gbps=400, nics_per_node=8,
        intra_node_topology="switch", inter_node_topology="rail_fat_tree",
        node_groups=[dict(gpu="H100-SXM5-80GB", nodes=1, inter_node_gbps=400),
                     dict(gpu="A100-SXM4-80GB", nodes=1, inter_node_gbps=100)])))
    rc, _, e = cli(["whatif", "--model", "gpt-1.7b", "--cluster", str(f), "--global-batch",
                    "16", "--vary", "network=multi-plane:16", "--fix", "tp=8,mbs=1",
                    "--workers", "1"])
    assert rc == 2 and "100 Gb/s" in e and "6.25" in e, e


@pytest.mark.parametrize("nics", [16, 1000])
def test_found_nics_beyond_the_gpus(nics):
    """``nics_per_node`` above ``gpus_per_node`` (``--vary nics_per_node=1000``): the
    simulator models one NIC per GPU at most (``topologies.graph.rails``) but the analytic
    estimate counted every NIC (0.18522 s against 0.18650 s at 8 NICs, simulated 0.18918 s
    both). Both now read the same rails."""
    from dataclasses import replace
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import parse_cluster_arg
    base = parse_cluster_arg("dgx-a100:2")
    more = replace(base, nics_per_node=nics)
    assert more.inter_node_bandwidth_per_gpu == base.inter_node_bandwidth_per_gpu
    m, p = model_preset("gpt-1.7b"), parse_plan("tp=1,mbs=1,zero=0")
    a = estimate(make_job(m, base, p, global_batch=16))
    b = estimate(make_job(m, more, p, global_batch=16))
    assert a.step_time_s == b.step_time_s


def test_found_whatif_straggler_over_a_given_one():
    """``--vary straggler=1,1.5 --straggler 0=2``: each variant replaced GPU 0's factor, so
    the flag was lost without a word (the ``straggler=1`` row was the healthy cluster)."""
    rc, _, e = cli(["whatif", *BASE, "--fix", "tp=1,pp=1", "--workers", "1",
                    "--vary", "straggler=1,1.5", "--straggler", "0=2"])
    assert rc == 2 and "already a straggler" in e, e
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    from topologies.faults import Faults
    other = parse_cluster_arg("dgx-a100:1").with_faults(Faults.from_texts(["1=2"]))
    c = apply_cluster(other, "straggler", 1.5)
    assert (c.faults.straggler_factor(0), c.faults.straggler_factor(1)) == (1.5, 2.0)


def test_found_whatif_multi_plane_named_twice():
    """``network=multi-plane,multi-plane:2`` ran the same network twice (every other key
    refuses a value given twice: ``nodes=1,01``)."""
    from simulator.studies.whatif_variants import parse_vary
    rc, _, e = cli(["whatif", *BASE, "--fix", "tp=1,pp=1", "--workers", "1",
                    "--vary", "network=multi-plane,multi-plane:2"])
    assert rc == 2 and "given twice" in e, e
    assert parse_vary(["network=multi-plane"]) == [("network", ["multi-plane:2"])]


def test_found_whatif_price_and_power_of_a_mixed_cluster():
    """``--gpu-hour-cost`` and ``--power`` priced every GPU of a mixed cluster as
    ``Cluster.gpu`` (the lowest peak: 16 x A100 at 400 W for 8 H100 + 8 A100); now each type
    counts its own GPUs (550 W per GPU on average; USD 3 at 4 and 2)."""
    from simulator.studies.prices import price_of
    from simulator.studies.whatif import per_gpu_mean
    from topologies.cluster import parse_cluster_arg
    mixed = parse_cluster_arg("dgx-h100:1+dgx-a100:3")
    tdp = {g.name: g.tdp_w for g, _ in mixed.gpu_counts()}
    assert per_gpu_mean(mixed, lambda g: g.tdp_w) == \
        (8 * tdp["H100-SXM5-80GB"] + 24 * tdp["A100-SXM4-80GB"]) / 32
    prices = {"H100-SXM5-80GB": 4.0, "A100-SXM4-80GB": 2.0}
    assert per_gpu_mean(mixed, lambda g: price_of(prices, g.name)) == (8 * 4 + 24 * 2) / 32
    assert per_gpu_mean(mixed, lambda g: price_of({"H100-SXM5-80GB": 4.0}, g.name)) is None
    one = parse_cluster_arg("dgx-a100:3")
    assert per_gpu_mean(one, lambda g: price_of(2.1, g.name)) == 2.1      # exactly


@pytest.mark.parametrize("flag,text", [
    ("--gpu-hour-cost", "H100=2,H100-SXM5-80GB=3"), ("--gpu-hour-cost", "A100=1,A100=1"),
    ("--network-prices", "switch=1000,switch=2000"),
    ("--network-prices", "optic_400=5, optic_400=6")])
def test_found_prices_given_twice(flag, text):
    """``--gpu-hour-cost H100=2,H100-SXM5-80GB=3`` (one GPU under its alias and its name) and
    ``--network-prices switch=1000,switch=2000`` kept the last price without a word."""
    rc, _, e = cli(["whatif", *BASE, "--fix", "tp=1,pp=1", "--workers", "1",
                    "--vary", "nodes=1", flag, text])
    assert rc == 2 and "given twice" in e, e
