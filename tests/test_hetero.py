"""Mixed clusters (node groups of different GPUs): described truthfully, each rank at its own
GPU's speed, each group's links; two identical node groups are exactly one group."""
from __future__ import annotations

import pytest

from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_from_mapping, cluster_preset, parse_cluster_arg
from topologies.errors import SpecError
from topologies.graph import build_graph
from topologies.gpus import get_gpu

MIXED = "dgx-h100:1+dgx-a100:1"


def _job(cluster, plan=Plan(tp=2, pp=2, mbs=1), gbs=16, model="gpt-1.7b"):
    return make_job(model_preset(model), cluster, plan, global_batch=gbs)


def test_preset_sum_names_groups_and_sums_peak():
    c = parse_cluster_arg("dgx-h100:4+dgx-a100:4")
    assert c.describe_gpus() == "32 x H100-SXM5-80GB + 32 x A100-SXM4-80GB"
    h, a = get_gpu("H100-SXM5-80GB").peak("bf16"), get_gpu("A100-SXM4-80GB").peak("bf16")
    assert c.mean_peak("bf16") == pytest.approx((32 * h + 32 * a) / 64, rel=1e-15)
    assert c.gpu.name == "A100-SXM4-80GB" and c.fastest_gpu.name == "H100-SXM5-80GB"
    assert not c.uniform and c.num_gpus == 64
    # the cluster-wide links (analytic collectives) are the slowest group's
    assert c.intra_node_bandwidth == 300e9
    assert c.inter_bandwidth_of_node(0) == 400e9 / 8 and c.inter_bandwidth_of_node(4) == 200e9 / 8


def test_graph_uses_each_groups_links():
    g = build_graph(parse_cluster_arg(MIXED))
    assert g.edges[0, ("nvswitch", 0)]["bandwidth"] == 450e9
    assert g.edges[8, ("nvswitch", 1)]["bandwidth"] == 300e9
    assert g.edges[0, ("nic", 0, 0)]["bandwidth"] == 400e9 / 8
    assert g.edges[8, ("nic", 1, 0)]["bandwidth"] == 200e9 / 8
    assert g.nodes[0]["gpu"] == "H100-SXM5-80GB" and g.nodes[8]["gpu"] == "A100-SXM4-80GB"


def test_yaml_node_groups_with_links_round_trip():
    d = {"name": "mix", "gpus_per_node": 8, "intra_node_GBps": 300, "nics_per_node": 8,
         "inter_node_gbps": 200,
         "node_groups": [{"gpu": "H100-SXM5-80GB", "nodes": 2, "intra_node_GBps": 450,
                          "inter_node_gbps": 400},
                         {"gpu": "A100-SXM4-80GB", "nodes": 2}]}
    c = cluster_from_mapping(d)
    assert c.intra_bandwidth_of_node(1) == 450e9 and c.intra_bandwidth_of_node(2) == 300e9
    assert cluster_from_mapping(c.to_dict()) == c


@pytest.mark.parametrize("text, rule", [
    ("dgx-h100:4+hgx-h100-pcie:4", "nics_per_node"),
    ("dgx-h100:4+gb200-nvl72:18", "rack-scale"),
    ("dgx-h100:4+dgx-a100:x", "NODES an integer"),
])
def test_bad_mixed_spelling(text, rule):
    with pytest.raises(SpecError, match=rule):
        parse_cluster_arg(text)


def test_bad_group_link():
    d = {"gpus_per_node": 8, "intra_node_GBps": 300, "nics_per_node": 8, "inter_node_gbps": 200,
         "node_groups": [{"gpu": "A100", "nodes": 1, "inter_node_gbps": 0}]}
    with pytest.raises(SpecError, match=r"node_groups\[0\].inter_node_gbps"):
        cluster_from_mapping(d)


def test_each_rank_computes_at_its_own_gpus_speed():
    job = _job(parse_cluster_arg(MIXED), Plan(tp=1, pp=1, mbs=1))
    progs = compile_job(job, ranks=[0, 8])
    fast = [op.seconds for op in progs[0].streams["compute"] if op.kind == "forward"]
    slow = [op.seconds for op in progs[8].streams["compute"] if op.kind == "forward"]
    assert len(fast) == len(slow) and all(f < s for f, s in zip(fast, slow))
    homo = compile_job(_job(cluster_preset("dgx-a100", 2), Plan(tp=1, pp=1, mbs=1)), ranks=[8])
    assert [op.seconds for op in homo[8].streams["compute"]] == \
        [op.seconds for op in progs[8].streams["compute"]]


def test_mixed_data_parallel_waits_for_the_slow_group():
    """Pure data parallelism on H100 + A100: the H100 ranks finish their compute first and wait
    at the gradient all-reduce; the step is the A100 step (not faster, not slower by much)."""
    plan = Plan(tp=1, pp=1, mbs=1)
    mixed = simulate(_job(parse_cluster_arg(MIXED), plan))
    a100 = simulate(_job(cluster_preset("dgx-a100", 2), plan))
    h100 = simulate(_job(cluster_preset("dgx-h100", 2), plan))
    assert h100.step_time_s < mixed.step_time_s
    assert mixed.step_time_s == pytest.approx(a100.step_time_s, rel=0.05)
    gpus = mixed.metrics["rank_gpus"]          # the timeline names each rank's GPU type
    assert gpus[0] == "H100-SXM5-80GB" and gpus[max(gpus)] == "A100-SXM4-80GB"
    assert "rank_gpus" not in a100.metrics


@pytest.mark.parametrize("plan", [Plan(tp=2, pp=2, mbs=1), Plan(tp=1, pp=4, mbs=2),
                                  Plan(tp=4, pp=1, mbs=1, zero=1)])
def test_two_identical_groups_are_exactly_one_group(plan):
    one = cluster_preset("dgx-a100", 2)
    spelled = parse_cluster_arg("dgx-a100:1+dgx-a100:1")
    yaml = cluster_from_mapping({**{k: v for k, v in one.to_dict().items()
                                    if k not in ("gpu", "nodes")},
                                 "node_groups": [{"gpu": "A100-SXM4-80GB", "nodes": 1}] * 2})
    ref_e, ref_s = estimate(_job(one, plan)), simulate(_job(one, plan))
    for c in (spelled, yaml):
        assert c.describe_gpus() == one.describe_gpus()
        e, s = estimate(_job(c, plan)), simulate(_job(c, plan))
        assert e.step_time_s == ref_e.step_time_s and e.mfu == ref_e.mfu
        assert s.step_time_s == ref_s.step_time_s
        assert s.metrics["rank_ends_s"] == ref_s.metrics["rank_ends_s"]


def test_split_layers_is_the_exact_minmax():
    import itertools
    from strategies.search.uneven import split_layers
    for t, e, L in [([1.0, 3.0], [0.5, 2.0], 12), ([1.0, 1.0, 3.2], [0.0, 0.0, 0.7], 10),
                    ([2.0, 1.0, 1.0, 3.0], [0.3, 0.0, 0.0, 1.1], 9)]:
        got = split_layers(L, t, e)
        assert sum(got) == L and min(got) >= 1
        best = min(max(n * ti + ei for n, ti, ei in zip(c, t, e))
                   for c in itertools.product(range(1, L + 1), repeat=len(t)) if sum(c) == L)
        assert max(n * ti + ei for n, ti, ei in zip(got, t, e)) == best


def test_balanced_plan_gives_the_h100_stage_more_layers_and_runs_faster():
    from strategies.search.uneven import balanced_plan
    cl = parse_cluster_arg(MIXED)
    job = _job(cl, Plan(tp=1, pp=2, mbs=1), gbs=32, model="gpt-1.7b")
    plan = balanced_plan(job)
    assert plan is not None and plan.layers_per_stage[0] > plan.layers_per_stage[1]
    even, uneven = simulate(job), simulate(_job(cl, plan, gbs=32, model="gpt-1.7b"))
    assert uneven.step_time_s < even.step_time_s
    # a homogeneous cluster: nothing to balance beyond the embedding and the head
    homo = _job(cluster_preset("dgx-a100", 2), Plan(tp=1, pp=2, mbs=1), gbs=32)
    p = balanced_plan(homo)
    assert p is None or abs(p.layers_per_stage[0] - p.layers_per_stage[1]) <= 2


def test_balanced_plan_leaves_dualpipe_to_layouts():
    """DualPipe holds stages r and pp-1-r on rank r: per-rank GPU sizing (``layers_per_stage``)
    is refused for it (``plan.checks``), so the search's balancing proposes none, and a
    DualPipe search on a mixed cluster runs instead of stopping on that refusal."""
    from strategies.search.uneven import balanced_plan
    cl = parse_cluster_arg("dgx-h100:1+dgx-a100:1")
    m = model_preset("llama3-8b")
    assert balanced_plan(make_job(m, cl, Plan(tp=1, pp=2, mbs=1), global_batch=64)) is not None
    dual = make_job(m, cl, Plan(tp=1, pp=2, mbs=1, schedule="dualpipe"), global_batch=64)
    assert balanced_plan(dual) is None


@pytest.mark.parametrize("text, field, rule", [
    ("tp=1,pp=2,layers_per_stage=20/3", "layers_per_stage",
     "must sum to num_layers=24 (sums to 23)"),
    ("tp=1,pp=2,layers_per_stage=24", "layers_per_stage", "one layer count per pipeline stage"),
    ("tp=1,pp=2,layers_per_stage=24/0", "layers_per_stage", ">= 1"),
    ("tp=1,pp=2,layers_per_stage=12/x", "layers_per_stage", ""),
])
def test_bad_layer_splits(text, field, rule):
    from strategies.plan import parse_plan
    with pytest.raises(SpecError, match=field) as e:
        _job(cluster_preset("dgx-a100", 1), parse_plan(text), model="gpt-1.7b")
    assert rule in str(e.value)


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--model", "gpt-1.7b", "--cluster", MIXED, "--global-batch", "16",
      "--plan", "tp=1,pp=2,layers_per_stage=20/3"], ["layers_per_stage='20/3'", "sum to"]),
    (["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-h100:1+dgx-a100-40gb:1",
      "--global-batch", "64", "--plan", "tp=1,pp=2,mbs=8,layers_per_stage=4/20"],
     ["memory of stage 1", "40 GiB", "A100-SXM4-40GB"]),
    (["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-h100:1+hgx-h100-pcie:1",
      "--global-batch", "16", "--plan", "tp=1"], ["nics_per_node", "node shape"]),
])
def test_cli_bad_input_exits_2(argv, words, capsys):
    from simulator.cli.main import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for w in words:
        assert w in err


@pytest.mark.slow
def test_search_on_a_mixed_cluster_reports_uneven_plans(hetero_report):
    """The report's two searches (``paraplan search``, gpt-1.7b, global batch 32, its top 5):
    the mixed cluster's reports heterogeneity-aware plans, each simulated to its step time;
    the uniform baseline's reports none."""
    rep = hetero_report[1]["mixed"]
    assert rep["inputs"]["gpus_text"] == "8 x H100-SXM5-80GB + 8 x A100-SXM4-80GB"
    un = rep["uneven"]
    assert un["plans"] and un["candidates"] >= len(un["plans"])
    steps = [r["step_time_s"] for r in un["plans"]]
    assert steps == sorted(steps)
    for r in un["plans"]:
        if "layers_per_stage" in r["plan"]:
            ls = r["plan"]["layers_per_stage"]
            assert sum(ls) == 24 and ls[0] > ls[-1]      # the H100 stage holds more layers
        else:
            gm = r["plan"]["group_microbatches"]
            assert gm[0] > gm[1]                         # H100 replicas take more micro-batches
        job = _job(parse_cluster_arg(MIXED), __import__("strategies.plan").plan.parse_plan(
            r["key"]), model="gpt-1.7b")
        assert simulate(job).step_time_s == pytest.approx(r["step_time_s"], rel=1e-9)
    assert hetero_report[1]["baseline"]["inputs"]["cluster"] == "dgx-a100:2"
    assert "uneven" not in hetero_report[1]["baseline"]


def test_example_file_is_the_preset_sum():
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "docs" / "examples" / "mixed-h100-a100.yaml"
    a, b = parse_cluster_arg(str(path)), parse_cluster_arg("dgx-h100:4+dgx-a100:4")
    assert a.describe_gpus() == b.describe_gpus()
    for n in range(8):
        assert a.intra_bandwidth_of_node(n) == b.intra_bandwidth_of_node(n)
        assert a.inter_bandwidth_of_node(n) == b.inter_bandwidth_of_node(n)
    assert (a.intra_node_bandwidth, a.inter_node_bandwidth) == \
        (b.intra_node_bandwidth, b.inter_node_bandwidth)


# ---------------------------------------------------------------- uneven batch shares


def test_split_microbatches_is_the_exact_minmax():
    import itertools
    from strategies.search.uneven import split_microbatches
    for total, reps, t in [(64, {0: 4, 1: 4}, {0: 1.0, 1: 3.1}),
                           (30, {0: 2, 1: 3, 2: 1}, {0: 0.5, 1: 1.0, 2: 2.0}),
                           (7, {0: 2, 1: 2}, {0: 1.0, 1: 1.0})]:
        got = split_microbatches(total, reps, t)
        ok = [c for c in itertools.product(range(1, total + 1), repeat=len(reps))
              if sum(reps[g] * m for g, m in zip(sorted(reps), c)) == total]
        if not ok:
            assert got is None
            continue
        best = min(max(m * t[g] for g, m in zip(sorted(reps), c)) for c in ok)
        assert sum(reps[g] * m for g, m in got.items()) == total
        assert max(m * t[g] for g, m in got.items()) == best


def test_group_microbatches_gives_h100_replicas_more_work():
    from strategies.search.uneven import balanced_microbatches
    from strategies.plan import parse_plan
    cl = parse_cluster_arg(MIXED)
    even = _job(cl, Plan(tp=2, mbs=1), gbs=32)
    plan = balanced_microbatches(even)
    assert plan is not None and plan.group_microbatches[0] > plan.group_microbatches[1]
    job = _job(cl, plan, gbs=32)
    assert job.microbatches_of_rank(0) == plan.group_microbatches[0]
    assert job.microbatches_of_rank(8) == plan.group_microbatches[1]
    progs = compile_job(job, ranks=[0, 8])
    fwd = {r: sum(op.kind == "forward" for op in progs[r].streams["compute"]) for r in progs}
    assert fwd[0] == plan.group_microbatches[0] and fwd[8] == plan.group_microbatches[1]
    res = simulate(job)
    assert res.step_time_s < simulate(even).step_time_s
    assert parse_plan(plan_key_of(job.plan)) == job.plan


def plan_key_of(plan):
    from strategies.search.plan_rows import plan_key
    return plan_key(plan)


def test_equal_group_microbatches_on_identical_groups_is_the_even_plan():
    cl = parse_cluster_arg("dgx-a100:1+dgx-a100:1")
    even = simulate(_job(cl, Plan(tp=2, mbs=1), gbs=16))
    same = simulate(_job(cl, Plan(tp=2, mbs=1, group_microbatches=(2, 2)), gbs=16))
    assert same.step_time_s == pytest.approx(even.step_time_s, rel=1e-12)


@pytest.mark.parametrize("plan, words", [
    ("tp=2,mbs=1,group_microbatches=3/2", ["must add up to the global batch", "is 20, not gbs=16"]),
    ("tp=2,mbs=1,group_microbatches=2", ["one count per node group (2), not 1"]),
    ("tp=2,mbs=1,zero=2,group_microbatches=2/2", ["zero <= 1"]),
    ("tp=1,pp=4,mbs=1,group_microbatches=2/2", ["replica 0 spans groups [0, 1]"]),
])
def test_bad_group_microbatches(plan, words, capsys):
    from simulator.cli.main import main
    argv = ["simulate", "--model", "gpt-1.7b", "--cluster", MIXED, "--global-batch", "16",
            "--plan", plan]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "group_microbatches" in err and "Traceback" not in err
    for w in words:
        assert w in err


def test_estimate_of_batch_shares_waits_for_the_slowest_group():
    from strategies.cost import flop_counts
    cl = parse_cluster_arg(MIXED)
    plan = Plan(tp=2, mbs=1, group_microbatches=(3, 1))
    job = _job(cl, plan, gbs=16)
    e = estimate(job)
    flops = float(flop_counts.model_flops_per_step(job.model, 16))
    assert e.mfu == pytest.approx(flops / (16 * e.step_time_s * cl.mean_peak("bf16")), rel=1e-12)
    # each group alone over the cluster-wide links: the longest run to the reduction, then
    # the longest optimizer
    alone = [estimate(_job(cl.group_view(g, links=False), Plan(tp=2, mbs=1), gbs=m * 8))
             for g, m in enumerate((3, 1))]
    opt = [a.breakdown_s["optimizer"] for a in alone]
    assert e.step_time_s == pytest.approx(max(a.step_time_s - o for a, o in zip(alone, opt))
                                          + max(opt), rel=1e-15)
    assert e.step_time_s == pytest.approx(simulate(job).step_time_s, rel=0.1)
    # identical groups with equal counts: exactly the even plan's estimate
    two = parse_cluster_arg("dgx-a100:1+dgx-a100:1")
    a = estimate(_job(two, Plan(tp=2, mbs=1, group_microbatches=(2, 2)), gbs=16))
    b = estimate(_job(two, Plan(tp=2, mbs=1), gbs=16))
    assert (a.step_time_s, a.mfu, a.hfu) == (b.step_time_s, b.mfu, b.hfu)


@pytest.fixture(scope="module")
def hetero_report(tmp_path_factory):
    """experiments/report_heterogeneous.py run once (gpt-1.7b, dgx-a100:2 against ``MIXED``,
    global batch 32): its output folder and its JSON, which holds the two searches' reports;
    read by the report's test and the mixed-cluster search's (the same two searches)."""
    import json
    from experiments import report_heterogeneous as rh
    out = tmp_path_factory.mktemp("hetero")
    assert rh.main(["--model", "gpt-1.7b", "--baseline", "dgx-a100:2", "--mixed", MIXED,
                    "--global-batch", "32", "--out", str(out)]) == 0
    return out, json.loads((out / "heterogeneous.json").read_text())


@pytest.mark.slow
def test_heterogeneous_report(hetero_report):
    from experiments import report_heterogeneous as rh
    tmp_path, data = hetero_report
    md = (tmp_path / "heterogeneous.md").read_text()
    best = rh.best_of(data["mixed"])
    assert f"{best['step_time_s']:.4g} s per step" in md
    assert best["step_time_s"] < rh.best_of(data["baseline"])["step_time_s"]
    assert data["simulated"][0]["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    assert (tmp_path / "heterogeneous_timeline_batch.png").stat().st_size > 0


def test_megatron_export_of_uneven_stages():
    from strategies.export.deepspeed import deepspeed_config
    from strategies.launch import megatron_args
    from strategies.plan import parse_plan
    cl = parse_cluster_arg(MIXED)
    text, _ = megatron_args(_job(cl, parse_plan("tp=2,pp=2,layers_per_stage=17/7"), gbs=32))
    assert "--decoder-first-pipeline-num-layers 17" in text
    assert "--decoder-last-pipeline-num-layers 7" in text
    text, _ = megatron_args(_job(cl, parse_plan("tp=1,pp=4,layers_per_stage=9/5/5/5"), gbs=32))
    assert "--decoder-first-pipeline-num-layers 9" in text
    # unequal middle stages: Megatron's layout string gives each rank its count
    text, _ = megatron_args(_job(cl, parse_plan("tp=1,pp=4,layers_per_stage=9/6/4/5"), gbs=32))
    assert "--pipeline-model-parallel-layout 'Et*9|t*6|t*4|t*5L'" in text
    assert "--decoder-first-pipeline-num-layers" not in text
    with pytest.raises(SpecError, match="same micro-batch count"):
        megatron_args(_job(cl, parse_plan("tp=2,group_microbatches=3/1"), gbs=16))
    with pytest.raises(SpecError, match="layers_per_stage"):
        deepspeed_config(_job(cl, parse_plan("tp=1,pp=2,layers_per_stage=17/7"), gbs=32))


def test_lower_bound_holds_on_a_mixed_cluster():
    """The bound that makes the search exact stays below the simulated step of every plan on
    a mixed cluster (each stage's own chain on its own GPU; links at the fastest)."""
    import numpy as np
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.search.space import SpaceOptions, enumerate_space
    m, cl = model_preset("gpt-1.7b"), parse_cluster_arg(MIXED)
    space = enumerate_space(m, cl, 32, SpaceOptions())
    bounds = step_time_lower_bound(m, cl, "bf16", space.cols)
    rng = np.random.default_rng(7)
    for i in rng.choice(space.size, 16, replace=False).tolist():
        t = simulate(make_job(m, cl, space.plan(i))).step_time_s
        assert bounds[i] <= t, space.plan(i).short()


def test_split_layers_under_memory_caps_is_the_exact_minmax():
    import itertools
    from strategies.search.uneven import split_layers
    t, e, L = [1.0, 3.0, 2.0], [0.5, 0.0, 2.0], 14
    for cap in ([3, 14, 14], [14, 2, 3], [5, 5, 4], [4, 4, 4]):
        got = split_layers(L, t, e, cap)
        ok = [c for c in itertools.product(range(1, L + 1), repeat=3)
              if sum(c) == L and all(x <= k for x, k in zip(c, cap))]
        if not ok:
            assert got is None
            continue
        assert all(x <= k for x, k in zip(got, cap)) and sum(got) == L
        assert max(n * ti + ei for n, ti, ei in zip(got, t, e)) == \
            min(max(n * ti + ei for n, ti, ei in zip(c, t, e)) for c in ok)


def test_balanced_plan_fits_each_stage_in_its_own_gpus():
    """H100 80 GB before A100 40 GB: the split by speed alone overflows the H100 stage; capped
    by each stage's memory it moves layers to the A100 stage and fits both."""
    from strategies.memory.scalar import memory_by_stage, stage_hbm_bytes
    from strategies.search.uneven import balanced_plan
    m, cl = model_preset("llama3-8b"), parse_cluster_arg("dgx-h100:1+dgx-a100-40gb:1")
    job = make_job(m, cl, Plan(tp=2, pp=2, mbs=1), global_batch=64)

    def fits(plan):
        j = make_job(m, cl, plan, global_batch=64)
        return all(b.total <= stage_hbm_bytes(j, s) for s, b in enumerate(memory_by_stage(j)))

    fast, capped = balanced_plan(job), balanced_plan(job, headroom=0.0)
    assert not fits(fast) and fits(capped)
    # the figures docs/heterogeneous.md quotes
    assert (fast.layers_per_stage, capped.layers_per_stage) == ((26, 6), (23, 9))
    over = memory_by_stage(make_job(m, cl, fast, global_batch=64))[0].total / 2**30
    assert round(over, 1) == 88.8
    assert capped.layers_per_stage[0] < fast.layers_per_stage[0]
    more = list(capped.layers_per_stage)           # one more layer on stage 0 overflows it
    more[0], more[1] = more[0] + 1, more[1] - 1
    assert not fits(replace_plan(capped, tuple(more)))


def replace_plan(plan, layers):
    from dataclasses import replace
    return replace(plan, layers_per_stage=layers)


def test_estimate_of_uneven_stages():
    """Stages that differ: the even analytic step with its free-communication compute
    makespan replaced by the real stages' (an even split on one GPU type changes nothing)."""
    from strategies.plan import parse_plan
    one = cluster_preset("dgx-a100", 2)
    even = estimate(_job(one, parse_plan("tp=2,pp=2"), gbs=32))
    same = estimate(_job(one, parse_plan("tp=2,pp=2,layers_per_stage=12/12"), gbs=32))
    assert same.step_time_s == pytest.approx(even.step_time_s, rel=1e-12)
    cl = parse_cluster_arg(MIXED)
    for text in ("tp=2,pp=2,layers_per_stage=17/7", "tp=2,pp=2",
                 "tp=1,pp=4,layers_per_stage=9/6/5/4"):
        job = _job(cl, parse_plan(text), gbs=32)
        e = estimate(job)
        assert sum(e.breakdown_s.values()) == pytest.approx(e.step_time_s, rel=1e-12)
        assert min(e.breakdown_s.values()) >= 0.0
        assert e.step_time_s == pytest.approx(simulate(job).step_time_s, rel=0.1), text


def test_split_microbatches_refuses_a_walk_too_long():
    from strategies.search.uneven import MAX_SPLITS, split_microbatches
    assert split_microbatches(MAX_SPLITS * 4, {0: 1, 1: 1, 2: 1}, {0: 1.0, 1: 2.0, 2: 3.0}) \
        is None
    assert split_microbatches(40, {0: 1, 1: 1}, {0: 1.0, 1: 3.0}) == {0: 30, 1: 10}


def test_leaf_uplinks_carry_each_groups_nics():
    """Two leaves of 2 nodes: the H100 leaf's uplink carries 2 x 400 Gb/s, the A100 leaf's
    2 x 200 Gb/s (per rail, full bisection)."""
    d = {"gpus_per_node": 8, "intra_node_GBps": 300, "nics_per_node": 8, "inter_node_gbps": 200,
         "nodes_per_leaf": 2,
         "node_groups": [{"gpu": "H100-SXM5-80GB", "nodes": 2, "inter_node_gbps": 400},
                         {"gpu": "A100-SXM4-80GB", "nodes": 2}]}
    g = build_graph(cluster_from_mapping(d))
    assert g.edges[("leaf", 0, 0), ("spine", 0, 0)]["bandwidth"] == 2 * 400e9 / 8
    assert g.edges[("leaf", 0, 1), ("spine", 0, 0)]["bandwidth"] == 2 * 200e9 / 8
