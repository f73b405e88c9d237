"""End to end: closed forms with free communication, the single GPU against the analytic
model, folded against full simulations, determinism, activation memory, the JSON."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.fold import fold_spec
from simulator.simulate import simulate, to_json
from strategies.cost.stage import stage_costs
from strategies.memory.activations import (activation_bytes_per_chunk, in_flight_microbatches,
                                           pending_weight_grads, wgrad_bytes_per_chunk)
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.schedules.analysis import simulate_free_comm
from topologies.cluster import NodeGroup, cluster_preset
from topologies.gpus import get_gpu

A100x2 = cluster_preset("dgx-a100", 2)


def _job(model="gpt-1.7b", cluster=A100x2, **plan):
    return make_job(model_preset(model), cluster, Plan(**plan))


def _balanced(job):
    """The job's costs with the embedding, the LM head, the optimizer and the per-step passes
    removed."""
    return replace(stage_costs(job), embedding_fwd=0.0, embedding_bwd=0.0, head_fwd=0.0,
                   head_bwd=0.0, optimizer_by_stage=(0.0,) * job.plan.pp,
                   passes_by_stage=(0.0,) * job.plan.pp)


FREE = [  # (schedule, tp, pp, vpp, gbs, group size)
    ("1f1b", 2, 4, 1, 32, None), ("1f1b", 2, 8, 1, 8, None), ("1f1b", 2, 4, 1, 8, None),
    ("gpipe", 4, 4, 1, 16, None), ("gpipe", 8, 2, 1, 2, None),
    ("interleaved", 2, 4, 2, 32, None), ("interleaved", 4, 2, 3, 10, 3),
    ("interleaved", 2, 4, 3, 48, None),
]


@pytest.mark.parametrize("sched,tp,pp,vpp,gbs,g", FREE)
def test_free_comm_closed_forms(sched, tp, pp, vpp, gbs, g):
    job = _job(tp=tp, pp=pp, schedule=sched, vpp=vpp, gbs=gbs, microbatch_group_size=g)
    costs = _balanced(job)
    res = simulate(job, free_comm=True, costs=costs)
    m, L = job.num_microbatches, job.model.num_layers // pp
    t_f, t_b = L * costs.layer_fwd, L * costs.layer_bwd
    closed = ((m + (pp - 1) / vpp) if sched == "interleaved" else (m + pp - 1)) * (t_f + t_b)
    assert res.step_time_s == pytest.approx(closed, rel=1e-9)
    assert res.step_time_s == pytest.approx(simulate_free_comm(sched, pp, m, vpp, t_f, t_b, g),
                                            rel=1e-9)
    assert res.metrics["bubble_fraction"] == pytest.approx((pp - 1) / (vpp * m + pp - 1), rel=1e-9)


def test_layer_granularity_same_closed_form():
    job = _job(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=2)
    costs = _balanced(job)
    a = simulate(job, free_comm=True, costs=costs)
    b = simulate(job, free_comm=True, costs=costs, granularity="layer")
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)


ONE_GPU = replace(cluster_preset("dgx-a100", 1), gpus_per_node=1)


@pytest.mark.parametrize("model,plan", [
    ("gpt-1.7b", dict(gbs=8)), ("gpt-1.7b", dict(gbs=4, recompute="full")),
    ("llama3-8b", dict(gbs=4, mbs=2, recompute="selective", flash_attn=False)),
    ("llama3-8b", dict(gbs=2, zero=1, overlap_grad_reduce=False)),
])
def test_single_gpu_equals_the_analytic_estimate(model, plan):
    job = _job(model, ONE_GPU, **plan)
    res, est = simulate(job), estimate(job)
    assert res.step_time_s == pytest.approx(est.step_time_s, rel=1e-9)
    for k in BREAKDOWN_KEYS:
        assert res.metrics["breakdown_s"][k] == pytest.approx(est.breakdown_s[k], rel=1e-9,
                                                              abs=1e-15)


FOLD = [
    ("gpt-1.7b", A100x2, dict(tp=2, pp=2, gbs=16)),
    ("gpt-1.7b", A100x2, dict(tp=8, pp=2, gbs=8)),
    ("gpt-1.7b", A100x2, dict(tp=4, pp=2, gbs=8, schedule="interleaved", vpp=2)),
    ("gpt-1.7b", A100x2, dict(tp=2, pp=4, gbs=16, zero=1, sp=True)),
    ("gpt-1.7b", A100x2, dict(tp=2, pp=1, gbs=16, zero=3)),
    ("llama3-8b", A100x2, dict(tp=4, pp=4, gbs=8, schedule="interleaved", vpp=2,
                               recompute="full")),
    ("llama3-8b", A100x2, dict(tp=8, pp=2, gbs=8, zero=1, tp_comm_overlap=True)),
    ("llama3-8b", A100x2, dict(tp=2, pp=2, gbs=16, recompute="selective",
                               overlap_grad_reduce=False)),
    ("llama3-8b", A100x2, dict(tp=2, pp=2, cp=2, gbs=8)),
    ("mixtral-8x7b", A100x2, dict(tp=2, pp=4, ep=2, gbs=8)),
    ("gpt-1.7b", replace(cluster_preset("dgx-a100", 4), nodes_per_leaf=1),
     dict(tp=2, pp=2, gbs=32)),
    ("gpt-1.7b", replace(cluster_preset("dgx-h100", 4), nodes_per_leaf=2,
                         inter_node_topology="fat_tree"), dict(tp=4, pp=4, gbs=16, zero=1)),
]


@pytest.mark.parametrize("model,cluster,plan", FOLD)
def test_folded_equals_full(model, cluster, plan):
    job = _job(model, cluster, **plan)
    folded, full = simulate(job), simulate(job, fold=False)
    assert folded.folded and not full.folded
    assert len(folded.simulated_ranks) < len(full.simulated_ranks)
    assert folded.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    for k in BREAKDOWN_KEYS:
        assert folded.metrics["breakdown_s"][k] == pytest.approx(
            full.metrics["breakdown_s"][k], rel=1e-9, abs=1e-12)
    ranks = sorted(r for group in folded.rank_map.values() for r in group)
    assert ranks == list(range(job.cluster.num_gpus))


@pytest.mark.parametrize("model", ["gpt-1.7b", "llama3-8b"])
@pytest.mark.parametrize("tp,pp", [(2, 2), (2, 4), (4, 2), (4, 4), (8, 2)])
@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
def test_folded_equals_full_grid(model, tp, pp, schedule):
    dp = 16 // (tp * pp)
    job = _job(model, tp=tp, pp=pp, schedule=schedule, vpp=2 if schedule == "interleaved" else 1,
               gbs=2 * pp * dp)
    assert simulate(job).step_time_s == pytest.approx(simulate(job, fold=False).step_time_s,
                                                      rel=1e-9)


@pytest.mark.parametrize("cluster,why", [
    (replace(cluster_preset("dgx-a100", 4), nodes_per_leaf=1, oversubscription=2.0),
     "oversubscription"),
    (cluster_preset("hgx-h100-pcie", 2), "NICs"),
    (replace(cluster_preset("dgx-a100", 2), inter_node_topology="torus"), "torus"),
])
def test_symmetry_breakers_fall_back(cluster, why):
    job = _job(cluster=cluster, tp=2, pp=2, gbs=8 * cluster.num_nodes)
    res = simulate(job)
    assert not res.folded and why in res.metrics["fold_note"]
    assert res.step_time_s == pytest.approx(simulate(job, fold=False).step_time_s, rel=1e-12)


def test_heterogeneous_nodes_fold_only_within_nodes():
    base = cluster_preset("dgx-a100", 2)
    cl = replace(base, groups=(NodeGroup(get_gpu("A100-SXM4-80GB"), 1),
                               NodeGroup(get_gpu("A100-SXM4-40GB"), 1)))
    job = _job(cluster=cl, tp=2, pp=2, gbs=16)
    spec = fold_spec(job)
    assert "heterogeneous" in spec.note and spec.steps["tp"] == 1
    assert simulate(job).step_time_s == pytest.approx(simulate(job, fold=False).step_time_s,
                                                      rel=1e-9)


def test_two_runs_are_identical():
    job = _job(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=2, zero=1)
    a, b = simulate(job), simulate(job)
    assert a.records == b.records and a.step_time_s == b.step_time_s
    assert a.metrics["link_utilisation"] == b.metrics["link_utilisation"]


@pytest.mark.parametrize("plan", [dict(tp=2, pp=4, gbs=16),
                                  dict(tp=2, pp=4, gbs=8, schedule="gpipe"),
                                  dict(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=3),
                                  dict(tp=2, pp=4, gbs=16, schedule="zb-h1"),
                                  dict(tp=2, pp=4, gbs=16, schedule="zb-h2"),
                                  dict(tp=2, pp=4, gbs=16, schedule="zb-v", vpp=2)])
def test_activation_peak_matches_memory_estimator(plan):
    """The simulated stash (and, with a split backward, the pending weight gradients) peaks
    where the memory model says, on every stage."""
    job = _job(**plan)
    res = simulate(job)
    for stage, peak in enumerate(res.metrics["peak_activation_bytes"]):
        want = (in_flight_microbatches(job, stage) * activation_bytes_per_chunk(job, stage)
                + pending_weight_grads(job, stage) * wgrad_bytes_per_chunk(job, stage))
        assert peak == pytest.approx(want, rel=1e-12)
    series = next(iter(res.metrics["activation_memory"].values()))
    assert series[-1][1] == pytest.approx(0.0, abs=1e-3)      # every stash released


def test_metrics_and_json():
    # interleaved: with one chunk a rank the critical rank 1 reduces its stage as one bucket
    # after its last backward (Megatron-Core, §5.92), so no communication overlaps there
    job = _job(tp=2, pp=2, gbs=16, zero=1, vpp=2, schedule="interleaved")
    res = simulate(job)
    m = res.metrics
    assert sum(m["breakdown_s"].values()) == pytest.approx(res.step_time_s, rel=1e-12)
    assert m["exposed_comm_s"] > 0 and m["overlapped_comm_s"] > 0
    assert len(m["bubble_fraction_by_stage"]) == 2
    assert m["bubble_fraction"] == min(m["bubble_fraction_by_stage"])     # the busiest stage's
    assert m["max_stage_bubble_fraction"] == max(m["bubble_fraction_by_stage"])
    assert 0 < len(m["link_utilisation"]) <= 10
    assert all(0 < row["utilisation"] <= 1 for row in m["link_utilisation"])
    out = to_json(res, job)
    est = estimate(job)
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction", "memory",
                "memory_by_stage", "fits", "breakdown_s", "inputs", "simulated",
                "exposed_comm_s", "overlapped_comm_s", "events", "wall_s"):
        assert key in out
    assert out["simulated"] is True and out["analytic_step_time_s"] == est.step_time_s
    assert out["mfu"] == pytest.approx(est.mfu * est.step_time_s / res.step_time_s)
    assert out["memory"] == est.to_json()["memory"]
