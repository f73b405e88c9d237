"""Megatron-Core's expert-parallel communication overlap (plan ``ep_overlap``, the combined
1F1B of ``strategies.schedules.combined``): its order, its limits, and the simulated step
against the closed forms (a hidden all-to-all costs only the unpaired passes; one longer
than the partner's layer is exposed by exactly what outlasts it, ``pair_exposed``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.combined import (combined_actions, combined_steps, combined_warmup,
                                           ep_overlap_share, pair_exposed)
from strategies.search.plan_rows import columns_from_plans
from topologies.cluster import cluster_preset

from tests.norm_barrier_checks import barrier_s

MIXTRAL, H100 = model_preset("mixtral-8x7b"), cluster_preset("dgx-h100", 1)


# ------------------------------------------------------------------ order
@pytest.mark.parametrize("m", [1, 2, 5])
def test_no_pipelining_pairs_forward_i_with_backward_i_minus_1(m):
    """Megatron's combined_1f1b_schedule_for_no_pipelining: F0, then F(i)&B(i-1), then the
    last backward; every pass once; m-1 of the m forwards paired."""
    steps = combined_steps("1f1b", 0, 1, m)
    want = ["F0.c0"] + [x for i in range(1, m) for x in (f"F{i}.c0&", f"B{i - 1}.c0")] \
        + [f"B{m - 1}.c0"]
    assert [s.label for s in steps] == want
    assert ep_overlap_share("1f1b", 0, 1, m) == (m - 1) / m


@pytest.mark.parametrize("stage,pp,m,vpp", [(0, 2, 4, 2), (1, 2, 4, 2), (0, 4, 8, 2),
                                            (3, 4, 8, 3), (0, 4, 4, 2)])
def test_interleaved_combined_has_one_more_warmup_forward(stage, pp, m, vpp):
    """Interleaved: the plain order's warm-up plus one (Megatron's get_pp_rank_microbatches),
    then each steady forward linked to the backward after it; the passes are the plain
    order's; the paired share is (m·vpp - w)/(m·vpp)."""
    sched = get_schedule("interleaved")
    w = combined_warmup("interleaved", stage, pp, m, vpp)
    assert w == min(sched.num_warmup(stage, pp, m, vpp) + 1, m * vpp)
    steps = combined_steps("interleaved", stage, pp, m, vpp)
    plain = sched.steps(stage, pp, m, vpp)
    assert sorted((s.kind, s.microbatch, s.chunk) for s in steps) == \
        sorted((s.kind, s.microbatch, s.chunk) for s in plain)
    assert all(s.kind == "F" for s in steps[:w]) and not any(s.overlap for s in steps[:w])
    for a, b in zip(steps, steps[1:]):
        if a.overlap:
            assert (a.kind, b.kind, b.overlap) == ("F", "B", False)
    assert sum(s.overlap for s in steps) == m * vpp - w
    assert ep_overlap_share("interleaved", stage, pp, m, vpp) == pytest.approx(
        (m * vpp - w) / (m * vpp), rel=1e-15)
    # no exchange splits a pair
    acts = combined_actions("interleaved", stage, pp, m, vpp)
    for a, b in zip(acts, acts[1:]):
        if getattr(a, "overlap", False):
            assert getattr(b, "kind", None) == "B"


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("t,f,b,want", [(0.5, 1.0, 2.0, 0.0), (1.0, 1.0, 2.0, 0.0),
                                        (1.5, 1.0, 2.0, 0.5), (3.0, 1.0, 2.0, 3.0)])
def test_pair_exposed_is_what_outlasts_the_partner(t, f, b, want):
    assert pair_exposed(t, f, b) == want


def _job(plan="tp=1,pp=1,ep=8,mbs=1,zero=1,ep_overlap=true", gbs=32):
    return make_job(MIXTRAL, H100, parse_plan(plan), global_batch=gbs)


def _free_costs(job, f=1e-3, b=2e-3):
    """The job's costs with layers of ``f``/``b`` seconds, no embedding, head, optimizer
    (nor its passes over the gradient buffer), TP or data-parallel traffic (free other
    communication)."""
    c = stage_costs(job)
    return replace(c, embedding_fwd=0.0, embedding_bwd=0.0, embedding_wgrad=0.0,
                   head_fwd=0.0, head_bwd=0.0, head_wgrad=0.0,
                   optimizer_by_stage=(0.0,) * job.plan.pp,
                   passes_by_stage=(0.0,) * job.plan.pp, grad_bytes=0.0, param_bytes=0.0,
                   gather_by_stage=(0.0,) * job.plan.pp,
                   layer_fwd=f, layer_bwd=b, layer_recompute=0.0, layer_wgrad=0.0,
                   tp_bytes=0.0)


def test_hidden_all_to_all_adds_only_the_unpaired_passes():
    """All-to-all shorter than both layers: the pairs hide it entirely; the step grows by the
    lone first forward's and last backward's all-to-alls, 2·L·t, whatever m, while without
    the overlap every pass exposes it (2·m·L·t)."""
    job = _job()
    c = _free_costs(job)
    L, m = job.layers_of_stage(0), job.num_microbatches
    free = simulate(job, costs=replace(c, ep_bytes=0.0)).step_time_s
    # and the gradient norm's all-reduce before the optimizer (§5.202)
    assert free == pytest.approx(m * L * 3e-3 + barrier_s(job), rel=1e-12)
    for scale in (0.05, 1.0, 2.0):
        nb = c.ep_bytes * scale
        t = float(cm.collective_time("alltoall", nb, 8, 1, H100, c.ep_remote_scale))
        assert t < 1e-3
        s = simulate(job, costs=replace(c, ep_bytes=nb)).step_time_s
        assert s - free == pytest.approx(2 * L * t, rel=1e-9)
    plain = _job("tp=1,pp=1,ep=8,mbs=1,zero=1")
    nb = c.ep_bytes
    t = float(cm.collective_time("alltoall", nb, 8, 1, H100, c.ep_remote_scale))
    s0 = simulate(plain, costs=replace(c, ep_bytes=0.0)).step_time_s
    s1 = simulate(plain, costs=replace(c, ep_bytes=nb)).step_time_s
    assert s1 - s0 == pytest.approx(2 * m * L * t, rel=1e-9)


def test_longer_all_to_all_is_exposed_by_exactly_the_difference():
    """All-to-all longer than both layers (free other communication): each pair's layer
    exposes ``pair_exposed(t, f, b) = 2t - f - b``, the unpaired passes ``t`` per layer:
    the step is ``free + 2·L·t + (m-1)·L·pair_exposed``, the estimate's
    ``m·L·[(1-q)·2t + q·pair_exposed]`` with no edge term (Megatron's sub-layer order: a
    pair's backward layer's all-to-all runs ahead of its compute, beside the forward
    layer's, so no pass ends on one of its own; the loss waits for the forward's last
    all-to-all; docs/calibration.md §5.82), and each extra second of all-to-all costs
    ``2·L·m`` seconds."""
    job = _job()
    f, b = 1e-3, 2e-3
    c = _free_costs(job, f, b)
    L, m = job.layers_of_stage(0), job.num_microbatches
    free = simulate(job, costs=replace(c, ep_bytes=0.0)).step_time_s
    out = []
    for scale in (10.0, 20.0):
        nb = c.ep_bytes * scale
        t = float(cm.collective_time("alltoall", nb, 8, 1, H100, c.ep_remote_scale))
        assert t > b
        s = simulate(job, costs=replace(c, ep_bytes=nb)).step_time_s
        want = 2 * L * t + (m - 1) * L * pair_exposed(t, f, b)
        assert s - free == pytest.approx(want, rel=1e-9)
        out.append((t, s))
    (t1, s1), (t2, s2) = out
    assert s2 - s1 == pytest.approx(2 * L * m * (t2 - t1), rel=1e-9)


def test_estimate_counts_the_paired_share_on_the_same_order():
    """The estimate's exposed expert communication: m·L·[(1-q)·2t + q·pair_exposed] with q
    the order's paired share ((m-1)/m without pipelining), far below the plain order's."""
    on, off = _job(), _job("tp=1,pp=1,ep=8,mbs=1,zero=1")
    e_on, e_off = estimate(on), estimate(off)
    L, m = on.layers_of_stage(0), on.num_microbatches
    sc = stage_costs(on)
    t = float(cm.collective_time("alltoall", sc.ep_bytes, 8, 1, H100, sc.ep_remote_scale))
    q = (m - 1) / m
    want = m * L * ((1 - q) * 2 * t + q * pair_exposed(t, sc.layer_fwd,
                                                       sc.layer_bwd + sc.layer_recompute))
    assert e_on.breakdown_s["ep_comm"] == pytest.approx(want, rel=1e-9)
    assert e_on.breakdown_s["ep_comm"] < 0.5 * e_off.breakdown_s["ep_comm"]


@pytest.mark.parametrize("plan,gbs", [("tp=1,pp=1,ep=8,mbs=1,zero=1,ep_overlap=true", 32),
                                      ("tp=1,pp=2,ep=4,mbs=1,schedule=interleaved,vpp=2,"
                                       "ep_overlap=true", 16)])
def test_bound_never_beats_the_simulation(plan, gbs):
    job = _job(plan, gbs)
    (bound,) = step_time_lower_bound(MIXTRAL, H100, "bf16", columns_from_plans([job.plan]))
    t = simulate(job).step_time_s
    assert 0 < bound <= t


def test_interleaved_combined_simulates_and_hides_the_all_to_all():
    """pp=2 interleaved with the combined order runs to completion (no deadlock in its
    exchanges) and exposes less expert communication than the plain order."""
    on = _job("tp=1,pp=2,ep=4,mbs=1,schedule=interleaved,vpp=2,ep_overlap=true", 16)
    off = _job("tp=1,pp=2,ep=4,mbs=1,schedule=interleaved,vpp=2", 16)
    cost = {}
    for j in (on, off):
        c = stage_costs(j)
        cost[j.plan.ep_overlap] = (simulate(j, costs=c).step_time_s
                                   - simulate(j, costs=replace(c, ep_bytes=0.0)).step_time_s)
    assert 0 < cost[True] < cost[False]


# ------------------------------------------------------------------ limits and exports
@pytest.mark.parametrize("plan,words", [
    ("ep=1,ep_overlap=true,gbs=16", ["ep_overlap", "ep > 1"]),
    ("pp=2,ep=4,schedule=1f1b,ep_overlap=true,gbs=16", ["ep_overlap", "interleaved"]),
    ("ep=8,recompute=full,ep_overlap=true,gbs=16", ["ep_overlap", "full recomputation"]),
    ("ep=8,ep_overlap=maybe,gbs=16", ["ep_overlap", "true or false"]),
])
def test_bad_overlap_plans_exit_2(capsys, plan, words):
    rc = main(["estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100:2",
               "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    for w in words:
        assert w in err


def test_stack_without_the_overlap_refuses_it():
    with pytest.raises(SpecError, match="ep_overlap"):
        make_job(MIXTRAL, cluster_preset("dgx-h100", 2),
                 parse_plan("pp=2,ep=4,schedule=1f1b,ep_overlap=true"), global_batch=16,
                 framework="hai-llm")


def test_megatron_export_names_the_flag():
    args, _ = megatron_args(_job())
    assert "--overlap-moe-expert-parallel-comm" in args
    assert "--moe-token-dispatcher-type alltoall" in args
    plain, _ = megatron_args(_job("tp=1,pp=1,ep=8,mbs=1,zero=1"))
    assert "--overlap-moe-expert-parallel-comm" not in plain
