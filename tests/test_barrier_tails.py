"""The estimate's tails behind the gradient norm's barrier (``cost.norm_barrier``,
docs/calibration.md §5.203): ZeRO-2's stall without overlap and the split backward on uneven
stages carry each kind of rank's own reduction end into the barrier, so the step ends at the
latest reduction, the all-reduce, then the longest optimizer, as the simulator runs it. Two
pipeline ranks, closed forms to floating-point precision."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost.stage import stage_costs
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.estimate.stage_correction import stage_slack
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

from tests.norm_barrier_checks import barrier_s, without_barrier

LLAMA4 = replace(model_preset("llama3-8b"), num_layers=4, seq_length=1024, vocab_size=8192)


def _cluster(gpus: int):
    return replace(cluster_preset("dgx-h100", 1), gpus_per_node=gpus)


def _tail(r) -> float:
    """The tail after the pipeline in an estimate's figures: ``dp_comm`` + ``optimizer``."""
    return float(np.sum(r["dp_comm"])) + float(np.sum(r["optimizer"]))


def test_zero2_sync_tail_takes_the_longest_optimizer():
    """pp 2 × dp 2, ZeRO-2 without overlap, 1 + 3 layers (the search's columns): the stall's
    path ends at rank 0 (1F1B's way back) at ``Z``; each rank's own update follows at
    ``a_k`` (its optimizer and passes; rank 1's three layers the longer). Without the
    barrier the tail is ``Z + max(a_0, a_1 − s_1)``, ``s_1`` rank 1's slack; with it
    ``Z + t_AR + max(a_0, a_1)``: the difference to 1e-12 s, where the tail used to move by
    ``t_AR`` alone."""
    plan = parse_plan("pp=2,dp=2,mbs=1,gbs=16,zero=2,overlap_grad_reduce=false,"
                      "first_stage_layers=1,last_stage_layers=3")
    job = make_job(LLAMA4, _cluster(4), plan)
    P = PlanArrays.from_plans([plan])
    on = estimate_arrays(job.model, job.cluster, job.dtype, P, job.framework)
    off = estimate_arrays(job.model, job.cluster, job.dtype, P,
                          without_barrier(job).framework)
    sc = on["stage_costs"]
    a0 = float(np.sum(sc.optimizer_first + sc.passes_first))
    a1 = float(np.sum(sc.optimizer_last + sc.passes_last))
    s1 = float(np.sum(on["slack_last_s"]))
    assert a1 > a0 + 1e-4 and 0.0 < s1
    moved = _tail(on) - _tail(off)
    closed = barrier_s(job) + max(a0, a1) - max(a0, a1 - s1)
    assert moved == pytest.approx(closed, abs=1e-12)
    assert moved > barrier_s(job) + 1e-4


@pytest.mark.parametrize("first,last", [(1, 3), (3, 1)])
def test_split_tail_carries_each_ranks_own_end(first, last):
    """ZB-H1 on 2 GPUs (dp 1, nothing to reduce), ``first``/``last`` layers: each rank ends
    its compute ``s_k`` before the pipeline (the real stages' replay, ``stage_slack``; the
    heavier rank ends it, ``s = 0``), then updates for ``o_k``. Without the barrier the tail
    is ``max_k(o_k − s_k)``, with it ``t_AR + max_k o_k`` (the latest end is the
    pipeline's): 1e-12 s. The simulation's step moves by the same seconds (1e-9 s)."""
    job = make_job(LLAMA4, _cluster(2), parse_plan(
        f"pp=2,mbs=1,gbs=8,zero=0,schedule=zb-h1,first_stage_layers={first},"
        f"last_stage_layers={last}"))
    c = stage_costs(job)
    o = [float(c.optimizer_by_stage[s] + c.passes_by_stage[s]) for s in (0, 1)]
    s0, _, s1 = stage_slack(job)
    assert min(s0, s1) == 0.0 and max(s0, s1) > 0.0
    assert (s1 == 0.0) == (last > first)          # (a small vocabulary: the layers decide)
    plain = without_barrier(job)
    on, off = estimate(job).breakdown_s, estimate(plain).breakdown_s
    assert _tail(off) == pytest.approx(max(o[0] - s0, o[1] - s1), abs=1e-12)
    assert _tail(on) == pytest.approx(barrier_s(job) + max(o), abs=1e-12)
    move = (simulate(job, network="contention-free").step_time_s
            - simulate(plain, network="contention-free").step_time_s)
    assert _tail(on) - _tail(off) == pytest.approx(move, abs=1e-9)


#: §5.202's two rows that ran with the barrier off (its Left 6): DeepSeek-V3's 8-layer cut,
#: ZeRO-2 without overlap at pp 4, ep 2 on 2 × H800 (``test_zero_overlap``'s sync grid), and
#: ZB-H1 ZeRO-1 on 2/…/6 layers (``test_uneven_tail``'s split rows)
ROWS = [("moe", "hgx-h800:2", "pp=4,ep=2,mbs=1,gbs=32,zero=2,overlap_grad_reduce=false",
         "flows"),
        ("dense", "dgx-h100:1", "pp=4,dp=2,mbs=1,gbs=16,first_stage_layers=2,"
         "last_stage_layers=6,zero=1,schedule=zb-h1", "contention-free")]


@pytest.mark.parametrize("kind,cluster,plan,network", ROWS)
def test_barrier_moves_estimate_as_simulation(kind, cluster, plan, network):
    """The barrier moves the estimated and the simulated step by the same seconds (1e-12 s):
    51.83 ms on the ZeRO-2 row (the last rank's longer update after rank 0's later
    reduction; the estimate moved 38 µs before §5.203), 28 µs on the ZB-H1 row (the 6-layer
    rank reduces last and updates longest; the estimate moved 10.75 ms)."""
    from experiments.uneven_tail_gaps import job_of
    job = job_of(kind, cluster, plan)
    plain = without_barrier(job)
    est = estimate(job).step_time_s - estimate(plain).step_time_s
    sim = (simulate(job, network=network).step_time_s
           - simulate(plain, network=network).step_time_s)
    assert sim > 0 and est == pytest.approx(sim, abs=1e-12)
