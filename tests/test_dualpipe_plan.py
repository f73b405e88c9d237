"""DualPipe and DualPipeV planned through the whole stack (compiler, engine, estimate, bound,
memory, compare, search): the overlapped pairs (``Step.overlap``) run their compute in turn
with each pass's expert all-to-all beside the partner's compute; the free-communication
simulation against the order's makespan and, in the region, the closed forms (ours and
DeepSeek's published one) to floating-point precision; DualPipe's two parameter copies and
their gradient all-reduce between mirror ranks."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.analysis import simulate_free_comm
from strategies.schedules.dual import deepseek_bubble, span_excess
from strategies.search.plan_rows import columns_from_plans
from topologies.cluster import cluster_preset
from tests.schedule_checks import balanced_costs

DV = get_schedule("dualpipev")
DP = get_schedule("dualpipe")
#: (schedule, vpp, chunks a micro-batch crosses on one rank, ranks per half)
KINDS = [("dualpipev", 2, 2, lambda p: p), ("dualpipe", 1, 1, lambda p: p // 2)]
A100x2 = cluster_preset("dgx-a100", 2)


@pytest.mark.parametrize("kind", KINDS, ids=[k[0] for k in KINDS])
@pytest.mark.parametrize("model,tp,pp,gbs,extra", [
    ("gpt-1.7b", 2, 4, 32, {}), ("gpt-1.7b", 2, 2, 16, {}), ("gpt-1.7b", 2, 4, 16, {}),
    ("llama3-8b", 2, 4, 16, {"recompute": "selective"}), ("llama3-8b", 1, 8, 32, {})])
def test_free_comm_simulation_equals_the_closed_form(kind, model, tp, pp, gbs, extra):
    """The whole simulator with free communication and balanced ranks runs the order's
    makespan (``analysis.simulate_free_comm``, pairs as ``F + B`` ending together); in the
    region (``T_F = T_B``, ``T_W <= T_F``, ``m >= 2pp``) it is ``m·T + span_excess(pp, f,
    w)`` in chunk times, the estimate's ``pipeline_span`` equals it, and at ``T_W = T_F``
    (and at ``T_W = 0``, the order alone) so does DeepSeek's ``(PP/2-1)(F&B + B - 3W)``
    with ``PP`` stages (``2pp`` for DualPipeV), ``F&B = F + B``."""
    name, vpp, k, half = kind
    sched = get_schedule(name)
    job = make_job(model_preset(model), A100x2,
                   Plan(tp=tp, pp=pp, vpp=vpp, gbs=gbs, schedule=name, **extra))
    m, L = job.num_microbatches, job.model.num_layers // pp
    for region in ("", "fb", "fbw"):
        costs = balanced_costs(job, region)
        res = simulate(job, free_comm=True, costs=costs)
        t_f, t_w = L * costs.layer_fwd, L * costs.layer_wgrad
        t_b = L * (costs.layer_bwd + costs.layer_recompute)       # B + W, rank-level
        assert 0 < t_w <= t_f
        order = simulate_free_comm(name, pp, m, vpp, t_f, t_b, t_w=t_w)
        assert res.step_time_s == pytest.approx(order, rel=1e-9)
        if not region:
            continue
        assert t_b - t_w == pytest.approx(t_f, rel=1e-12)
        t = t_f + t_b
        closed = m * t + float(span_excess(half(pp), t_f / k, t_w / k))
        assert res.step_time_s == pytest.approx(closed, rel=1e-9)
        assert float(sched.pipeline_span(m, t, pp * t, vpp, t_w / t, t_f / t, pp)) == \
            pytest.approx(closed, rel=1e-12)
        if region == "fbw":
            published = m * t + deepseek_bubble(k * pp, t / k, t_b / k, t_w / k)
            assert res.step_time_s == pytest.approx(published, rel=1e-9)
    # W = 0 (DeepSeek's other exact point), through the order
    for p in (2, 4, 8):
        assert simulate_free_comm(name, p, 2 * p, vpp, 2.0, 2.0, t_w=0.0) == \
            pytest.approx(2 * p * 4.0 + deepseek_bubble(k * p, 4.0 / k, 2.0 / k, 0.0),
                          rel=1e-12)


def test_outside_the_region_the_published_form_is_an_upper_bound_only():
    """At ``0 < W < F`` the order's makespan is below DeepSeek's form by one ``W`` (the
    published form is exact only at ``W = 0`` and ``W = F``)."""
    p, m, f, w = 4, 8, 1.0, 0.5
    t = 2 * (2 * f + w)
    order = simulate_free_comm("dualpipev", p, m, 2, 2 * f, 2 * (f + w), t_w=2 * w)
    assert order == pytest.approx(m * t + float(span_excess(p, f, w)), rel=1e-12)
    assert order == pytest.approx(m * t + deepseek_bubble(2 * p, 2 * f + w, f + w, w) - w,
                                  rel=1e-12)


def test_span_when_the_head_rank_is_the_bottleneck():
    """Rank 0 (the V's head) slow enough never to idle: the makespan is its work alone,
    which ``pipeline_span`` gives (the larger of ``m·t_max`` and the others' makespan)."""
    p, m, f, w = 8, 16, 1.0, 0.6
    t = 2 * (2 * f + w)
    slow = [1.5] + [1.0] * (p - 1)
    order = simulate_free_comm("dualpipev", p, m, 2, 2 * f, 2 * (f + w), t_w=2 * w,
                               slowdown=slow)
    span = DV.pipeline_span(m, 1.5 * t, (p - 1 + 1.5) * t, 2, w / (t / 2), f / (t / 2), p)
    assert order == pytest.approx(m * 1.5 * t, rel=1e-12)
    assert float(span) == pytest.approx(order, rel=1e-12)


def _mixtral_job(plan="tp=2,pp=4,ep=2,mbs=1", gbs=16):
    mod, cl = model_preset("mixtral-8x7b"), cluster_preset("dgx-h100", 2)
    return make_job(mod, cl, parse_plan(plan + ",vpp=2,schedule=dualpipev"), global_batch=gbs)


def test_paired_all_to_all_hides_under_the_partner_and_shows_when_longer():
    """The pair's expert all-to-all runs beside the partner's compute on the contended
    network (tp=1: no TP collective to hide it anyway): it costs DualPipeV less than ZB-V
    (whose all-to-all blocks every pass), and one 40 times longer, far longer than the
    partner's layer, shows up in DualPipeV's step too (exposed by what outlasts it)."""
    job = _mixtral_job("tp=1,pp=4,ep=4,mbs=1", 32)
    zbv = make_job(job.model, job.cluster, replace(job.plan, schedule="zb-v"), global_batch=32)
    cost, big = {}, {}
    for j in (job, zbv):
        c = stage_costs(j)
        assert c.ep_bytes > 0
        without = simulate(j, costs=replace(c, ep_bytes=0.0)).step_time_s
        cost[j.plan.schedule] = simulate(j, costs=c).step_time_s - without
        big[j.plan.schedule] = simulate(j, costs=replace(c, ep_bytes=40 * c.ep_bytes)
                                        ).step_time_s - without
    assert 0 < cost["dualpipev"] < 0.8 * cost["zb-v"], cost
    assert 10 * cost["dualpipev"] < big["dualpipev"] < 0.8 * big["zb-v"], big


def test_estimate_hides_the_paired_all_to_all():
    """The estimate's exposed all-to-all under DualPipeV: the unpaired share of the order at
    full cost, the paired share only beyond the partner's layer (less than ZB-V's)."""
    from strategies.estimate import estimate
    job = _mixtral_job("tp=1,pp=4,ep=4,mbs=1", 32)
    zbv = make_job(job.model, job.cluster, replace(job.plan, schedule="zb-v"), global_batch=32)
    e, z = estimate(job), estimate(zbv)
    assert 0 <= e.breakdown_s["ep_comm"] < 0.8 * z.breakdown_s["ep_comm"]
    q = DV.overlapped_share(0, 4, job.num_microbatches, 2)
    assert 0 < q < 1


BOUND = [("llama3-8b", "dgx-a100", 1, "tp=1,pp=8,mbs=1", 16),
         ("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=4,mbs=1,zero=1", 64),
         ("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=2,mbs=1,cp=2,recompute=full", 32),
         ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=4,ep=2,mbs=1", 16),
         ("mixtral-8x7b", "dgx-h100", 2, "tp=1,pp=4,ep=4,mbs=1", 32)]


@pytest.mark.parametrize("sched", ["dualpipev", "dualpipe"])
@pytest.mark.parametrize("name,cl_name,nodes,plan,gbs", BOUND)
def test_bound_never_beats_the_simulation(sched, name, cl_name, nodes, plan, gbs):
    """The search's lower bound holds (DualPipe: each rank's first micro-batch enters at its
    nearer end, both ends hold the embedding and the head)."""
    mod, cl = model_preset(name), cluster_preset(cl_name, nodes)
    vpp = ",vpp=2" if sched == "dualpipev" else ""
    job = make_job(mod, cl, parse_plan(f"{plan}{vpp},schedule={sched}"), global_batch=gbs)
    (b,) = step_time_lower_bound(mod, cl, "bf16", columns_from_plans([job.plan]))
    t = simulate(job).step_time_s
    assert 0 < b <= t, (b, t)


def test_memory_pp_plus_one_on_the_turning_rank():
    """Activations: ``2p`` chunks stashed on ranks ``0..p-2``, ``2p + 1`` on rank ``p - 1``
    (DeepSeek's ``PP + 1``); parameters as ZB-V's (one copy of two chunks, head on rank 0)."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8)
    plan = "tp=8,pp=8,vpp=2,mbs=1,schedule="
    job = make_job(m, cl, parse_plan(plan + "dualpipev"), global_batch=16)
    zbv = make_job(m, cl, parse_plan(plan + "zb-v"), global_batch=16)
    by, bz = memory_by_stage(job), memory_by_stage(zbv)
    assert [DV.in_flight(r, 8, 16, 2) for r in range(8)] == [16] * 7 + [17]
    assert [b.params for b in by] == [b.params for b in bz]
    assert by[7].activations > by[6].activations
    assert all(by[r].activations == by[1].activations for r in range(2, 7))


def test_compare_gpt3_175b(capsys):
    """``compare`` on GPT-3 175B with 8 stages: DualPipe and DualPipeV valid with less bubble
    than 1F1B; DualPipeV's step at or below 1F1B's; DualPipe's peak memory above 1F1B's (two
    parameter copies; their gradient all-reduce between mirror ranks crosses nodes here, so
    its step is not claimed below 1F1B's)."""
    assert main(["compare", "--json", "--model", "gpt3-175b", "--cluster", "dgx-a100:8",
                 "--plan", "tp=8,pp=8,mbs=1,gbs=16",
                 "--schedules", "1f1b,zb-v,dualpipe,dualpipev"]) == 0
    rows = {r["schedule"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for name in ("dualpipev:2", "dualpipe"):
        assert rows[name]["valid"], rows[name]
        assert rows[name]["bubble_fraction"] < rows["1f1b"]["bubble_fraction"]
    assert rows["dualpipev:2"]["step_time_s"] <= rows["1f1b"]["step_time_s"]
    assert rows["dualpipe"]["memory"]["peak_gib"] > rows["1f1b"]["memory"]["peak_gib"]


@pytest.mark.slow
@pytest.mark.parametrize("name,vpp", [("dualpipev", 2), ("dualpipe", 1)])
def test_search_with_the_schedule_fixed_equals_exhaustive(name, vpp):
    """``search --fix schedule=dualpipe|dualpipev`` enumerates it (two chunks on the V; the
    default search leaves both out) and the bound-ordered search returns the exhaustive
    search's top plans."""
    from simulator.search.run import SearchConfig, run_search
    from strategies.schedules import schedule_code
    from strategies.search.space import SpaceOptions, enumerate_space
    mod, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    opts = SpaceOptions(max_mbs=1, fixed={"schedule": name})
    sp = enumerate_space(mod, cl, 16, opts)
    assert sp.size and (sp.cols["sched"] == schedule_code(name)).all()
    assert (sp.cols["vpp"] == vpp).all()
    assert not (enumerate_space(mod, cl, 16, SpaceOptions(max_mbs=1)).cols["sched"]
                == schedule_code(name)).any()
    cfg = dict(model=mod, cluster=cl, gbs=16, options=opts, workers=2, k=5)
    pruned = run_search(SearchConfig(**cfg))
    full = run_search(SearchConfig(exhaustive=True, **cfg))
    assert [p["key"] for p in pruned["plans"]] == [p["key"] for p in full["plans"]]
    assert [p["step_time_s"] for p in pruned["plans"]] == \
        [p["step_time_s"] for p in full["plans"]]
    assert full["plans"] and all(f"schedule={name}" in p["key"] for p in full["plans"])


@pytest.mark.parametrize("plan,gbs,words", [
    ("tp=8,pp=8,vpp=3,schedule=dualpipev", 64, ["vpp", "3", "vpp=2"]),
    ("tp=8,pp=8,vpp=2,schedule=dualpipev", 8, ["num_microbatches", "8", "2*pp=16"]),
    ("tp=8,pp=3,schedule=dualpipe", 64, ["pp", "3", "even pp"]),
])
def test_bad_input_exits_2_naming_field_value_and_rule(capsys, plan, gbs, words):
    rc = main(["estimate", "--model", "gpt3-175b", "--cluster", "dgx-a100:8",
               "--plan", plan, "--global-batch", str(gbs)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_dualpipe_two_parameter_copies_and_their_all_reduce():
    """DualPipe: rank ``r`` holds stages ``r`` and ``p-1-r`` (twice 1F1B's layers, the
    embedding and the LM head on both end ranks) with their gradients and optimizer states;
    the simulated step all-reduces each rank's gradients with its mirror's before the
    optimizer, and the estimate charges the same all-reduce (within 2 %)."""
    mod, cl = model_preset("llama3-8b"), cluster_preset("dgx-a100", 1)
    job = make_job(mod, cl, parse_plan("tp=1,pp=8,mbs=1,schedule=dualpipe"), global_batch=16)
    one = make_job(mod, cl, parse_plan("tp=1,pp=8,mbs=1"), global_batch=16)
    c, c1 = stage_costs(job), stage_costs(one)
    mid, emb, head = c1.params_by_stage[3], c1.embedding_params, c1.head_params
    assert c.params_by_stage[3] == pytest.approx(2 * mid, rel=1e-12)
    assert c.params_by_stage[0] == c.params_by_stage[7] == pytest.approx(
        2 * mid + emb + head, rel=1e-12)
    by, by1 = memory_by_stage(job), memory_by_stage(one)
    for kind in ("params", "grads", "optimizer"):
        assert getattr(by[3], kind) == pytest.approx(2 * getattr(by1[3], kind), rel=1e-12)
        assert getattr(by[0], kind) == pytest.approx(getattr(by[7], kind), rel=1e-12)
    assert [DP.in_flight(r, 8, 16) for r in range(8)] == [8, 8, 8, 9, 9, 8, 8, 8]
    res = simulate(job)
    mirror = [r for r in res.records if r.label == "AR mirror copies"]
    assert len(mirror) == 8 and all(r.nbytes == pytest.approx(
        c.grad_bytes * c.params_by_stage[r.stage], rel=1e-12) for r in mirror)
    from strategies.estimate import estimate
    est = estimate(job)
    assert est.step_time_s == pytest.approx(res.step_time_s, rel=0.02)


def test_export_says_megatron_has_none():
    from strategies.launch import megatron_args
    job = make_job(model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8),
                   parse_plan("tp=8,pp=8,vpp=2,mbs=1,schedule=dualpipev"), global_batch=16)
    _, notes = megatron_args(job)
    assert any("no DualPipeV" in n and "DualPipeV" in n.split("pipeline_parallel_schedule=")[1]
               for n in notes), notes


@pytest.mark.parametrize("plan", ["tp=2,pp=4,vpp=2,schedule=dualpipev",
                                  "tp=2,pp=4,schedule=dualpipe"])
def test_simulated_activation_peak_matches_the_memory_model(plan):
    """The simulated stash and pending weight gradients peak where the memory model says on
    every stage (an overlapped pair counted at its end: DeepSeek's ``PP + 1``)."""
    from strategies.memory.activations import (activation_bytes_per_chunk,
                                               in_flight_microbatches, pending_weight_grads,
                                               wgrad_bytes_per_chunk)
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                   parse_plan(plan + ",mbs=1"), global_batch=16)
    res = simulate(job)
    for stage, peak in enumerate(res.metrics["peak_activation_bytes"]):
        want = (in_flight_microbatches(job, stage) * activation_bytes_per_chunk(job, stage)
                + pending_weight_grads(job, stage) * wgrad_bytes_per_chunk(job, stage))
        assert peak == pytest.approx(want, rel=1e-12), stage
