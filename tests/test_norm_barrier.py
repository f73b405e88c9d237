"""The gradient norm's barrier before the optimizer step (``cost.norm_barrier``,
docs/calibration.md §5.202): every rank of the grad-stats group updates after the latest
has its gradients reduced and the norm's all-reduce."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.norm_barrier import NORM_BYTES, barrier_on, barrier_step, barrier_time, \
    stats_group, unsynchronised_step
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)


def _fw(on: bool, name: str = "megatron-core"):
    p = get_profile(name)
    return replace(p, step=replace(p.step, norm_barrier=on))


def test_two_ranks_closed_form():
    """Rank 0 ready at 1.3 s with 0.2 s of optimizer, rank 1 ready at 1.0 s with 0.5 s: with
    the barrier (10 ms) the step ends at 1.3 + 0.01 + 0.5 = 1.81 s, without at
    max(1.5, 1.5) = 1.5 s (1e-12); arrays plan by plan; a missing rank (-inf) drops out."""
    ready, post = [1.3, 1.0], [0.2, 0.5]
    assert barrier_step(ready, post, 0.01) == pytest.approx(1.81, rel=1e-12)
    assert unsynchronised_step(ready, post) == pytest.approx(1.5, rel=1e-12)
    got = barrier_step([np.array([1.3, 2.0]), np.array([1.0, -np.inf])],
                       [np.array([0.2, 0.1]), np.array([0.5, -np.inf])], np.array([0.01, 0.0]))
    assert got == pytest.approx([1.81, 2.1], rel=1e-12)


def test_group_and_time():
    """The grad-stats group: every rank with the distributed optimizer, tp x pp without
    (stride cp·dp under pipelining); its all-reduce is one fp32 scalar's, 0 when off or a
    group of one."""
    assert [int(x) for x in stats_group(2, 4, 1, 8, 1)] == [64, 1]
    assert [int(x) for x in stats_group(2, 4, 2, 8, 0)] == [8, 16]
    assert [int(x) for x in stats_group(8, 1, 1, 8, 0)] == [8, 1]
    cl = cluster_preset("dgx-h100", 4)
    assert barrier_time(True, 2, 2, 1, 8, 1, cl) == pytest.approx(
        float(cm.small_allreduce_time(NORM_BYTES, 32, 1, cl)), rel=1e-12)
    # over several nodes NCCL's tree beats the ring's 2(n-1) latencies; in one node the ring
    big = cluster_preset("dgx-h100", 64)
    assert barrier_time(True, 8, 4, 1, 16, 1, big) < 0.1 * float(
        cm.collective_time("allreduce", NORM_BYTES, 512, 1, big))
    one = cluster_preset("dgx-h100", 1)
    assert barrier_time(True, 2, 1, 1, 4, 1, one) == pytest.approx(
        float(cm.collective_time("allreduce", NORM_BYTES, 8, 1, one)), rel=1e-12)
    assert barrier_time(False, 2, 2, 1, 8, 1, cl) == 0.0
    assert barrier_time(True, 1, 1, 1, 1, 0, cl) == 0.0
    t = barrier_time(np.array([True, True, False]), np.array([2, 1, 2]), np.array([2, 1, 2]),
                     1, np.array([8, 1, 8]), 1, cl)
    assert t[0] > 0 and t[1] == 0.0 and t[2] == 0.0
    # every stack in the repository clips by the global norm (their sources): the barrier is
    # on by default (§5.202), off by the switch, and a stack that does not clip keeps none
    for name in ("megatron-core", "nemo", "megatron-lm-2021", "torchtitan", "deepspeed",
                 "jax-xla", "pytorch-eager"):
        step = get_profile(name).step
        assert step.grad_norm and barrier_on(step)
        assert not barrier_on(replace(step, norm_barrier=False))
    assert not barrier_on(replace(get_profile("nemo").step, grad_norm=False, norm_barrier=True))


@pytest.mark.parametrize("plan,nodes", [
    ("tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true", 4),
    ("tp=1,pp=4,dp=2,mbs=1,gbs=16,zero=0", 1),
    ("tp=2,pp=1,dp=4,mbs=1,gbs=16,zero=1", 1)])
def test_simulated_barrier_and_estimate(plan, nodes):
    """Contention-free simulation: the norm's all-reduce ends at the same instant on every
    rank, its start on the latest is the latest reduction's end, it lasts the estimate's
    ``barrier_time`` and every rank's step passes start at its end (1e-12); the barrier
    moves the simulated and the estimated step by the same seconds (1e-9 of the step), and
    the two steps agree within 0.3 % with it as without it (the pp 1 plan's 0.24 %
    difference is there without the barrier)."""
    res, est = {}, {}
    for on in (False, True):
        j = make_job(SMALL, cluster_preset("dgx-h100", nodes), parse_plan(plan),
                     framework=_fw(on))
        res[on], est[on] = simulate(j, network="contention-free"), estimate(j).step_time_s
    s = res[True]
    p = parse_plan(plan)
    bar = [x for r in s.simulated_ranks for x in s.by_rank(r)
           if x.label == "grad norm all-reduce"]
    assert bar and not [x for r in res[False].simulated_ranks for x in res[False].by_rank(r)
                        if x.label == "grad norm all-reduce"]
    end = bar[0].end
    assert all(x.end == pytest.approx(end, rel=1e-12) for x in bar)
    t_bar = float(barrier_time(True, p.tp, p.pp, p.cp, p.dp, p.zero,
                               cluster_preset("dgx-h100", nodes)))
    assert end - max(x.start for x in bar) == pytest.approx(t_bar, rel=1e-9)
    for r in s.simulated_ranks:
        passes = [x for x in s.by_rank(r) if x.label == "step passes"]
        assert passes[0].start == pytest.approx(end, rel=1e-12)
    move_sim = s.step_time_s - res[False].step_time_s
    move_est = est[True] - est[False]
    assert move_sim > 0 and move_est == pytest.approx(move_sim, abs=1e-9 * s.step_time_s)
    for on in (False, True):
        assert est[on] == pytest.approx(res[on].step_time_s, rel=3e-3)


@pytest.mark.parametrize("kind,cluster,plan", [
    ("dense14", "dgx-h100:1", "pp=4,dp=2,vpp=2,mbs=1,gbs=16,schedule=zb-v,"
                              "account_embedding=true,account_loss=true,zero=2"),
    ("dense14", "dgx-h100:2", "tp=2,pp=2,dp=4,mbs=1,gbs=16,zero=1")])
def test_bound_with_barrier(kind, cluster, plan):
    """With the barrier the lower bound's stage paths take the longest kind's optimizer
    after each stage's reduction: the bound stays below the contention-free simulation and
    the estimate with the barrier, and is at least the bound without it."""
    from experiments.uneven_tail_gaps import job_of
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.plan_arrays import PlanArrays
    base = job_of(kind, cluster, plan)
    out = {}
    for on in (False, True):
        job = replace(base, framework=_fw(on))
        out[on] = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                              PlanArrays.from_plans([job.plan]),
                                              job.framework)[0])
    job = replace(base, framework=_fw(True))
    sim = simulate(job, network="contention-free").step_time_s
    assert out[False] <= out[True] <= sim and out[True] <= estimate(job).step_time_s
