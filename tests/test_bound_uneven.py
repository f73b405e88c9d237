"""The search's lower bound on uneven layouts (docs/search.md §2): at most the contention-free
simulation and the estimate of the rows ``experiments/uneven_tail_gaps.py`` found above them.
On a V (ZB-V, DualPipeV) the loss slot sits on rank 0 beside the embedding's
(``plan_arrays.rank_layers``), and a plan's bound reads its own ``ep_overlap``."""
from __future__ import annotations

from dataclasses import replace

import pytest

from experiments.uneven_tail_gaps import SLOTS, bound_of, job_of
from simulator.simulate import simulate
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.layout import build_layout
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays, rank_layers
from strategies.presets import model_preset


@pytest.mark.parametrize("schedule,pp,vpp", [("zb-v", 2, 2), ("zb-v", 4, 2),
                                             ("dualpipev", 2, 2), ("dualpipev", 4, 2),
                                             ("interleaved", 2, 2), ("interleaved", 4, 2),
                                             ("1f1b", 4, 1), ("zb-h1", 2, 1)])
def test_slot_layers_per_rank_are_the_layouts(schedule, pp, vpp):
    """With the embedding and the loss as slots, ``rank_layers``' rank 0, middle rank and
    rank ``pp-1`` hold what ``layout.build_layout`` places there (on a V, 6/8 over 14 layers
    at pp 2: the loss slot is rank 0's; the array rule said 7/7 for every schedule)."""
    layers = 4 * pp * vpp - 2              # four slots a chunk
    m = replace(model_preset("llama3-8b"), num_layers=layers)
    plan = parse_plan(f"pp={pp},dp=1,vpp={vpp},mbs=1,gbs=8,schedule={schedule},{SLOTS}")
    first, mid, last, _, uneven = rank_layers(layers, PlanArrays.from_plans([plan]))
    per_rank = build_layout(m, plan).layers_per_stage
    assert bool(uneven[0])
    assert (float(first[0]), float(last[0])) == (per_rank[0], per_rank[-1])
    if pp > 2:
        assert float(mid[0]) == per_rank[pp - 2]


#: (kind, cluster, plan): the V with slots (above the simulation by 8 % before), the
#: ep_overlap plan (its bound read without ep_overlap in the experiment)
ROWS = [("dense14", "dgx-h100:1", f"pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=zb-v,{SLOTS},zero=1"),
        ("dense14", "dgx-h100:1", f"pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=zb-v,{SLOTS},zero=2"),
        ("dense14", "dgx-h100:1", f"pp=4,dp=2,vpp=2,mbs=1,gbs=16,schedule=zb-v,{SLOTS},zero=2"),
        ("dense14", "dgx-h100:1",
         f"pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=dualpipev,{SLOTS},zero=1"),
        ("moe", "hgx-h800:2", "pp=2,dp=8,ep=8,mbs=1,gbs=32,vpp=2,schedule=interleaved,"
         "ep_overlap=true,first_stage_layers=2,last_stage_layers=6,zero=2")]


@pytest.mark.parametrize("kind,cluster,plan", ROWS)
def test_bound_below_simulation_and_estimate(kind, cluster, plan):
    """bound ≤ contention-free simulation and ≤ the estimate (bound/sim 1.0798, 1.0830,
    1.0841, 1.0819, 1.0629 before; 0.9724, 0.9739, 0.9034, 0.9721, 0.9304 then; 0.9728,
    0.9736, 0.8992, 0.9712, 0.9400 with §5.167's QKV-split copies and cat, of which the pp-4
    V's bound takes 0.66 of the simulation's 0.97 ms), and within 12 % of the simulation (the
    pp-4 V's 0.8817 with §5.202's norm barrier: its last rank's optimizer leaves its slack,
    0.2537 -> 0.2594 s simulated, and no path of the bound carries that; 0.8992 without)."""
    job = job_of(kind, cluster, plan)
    bound = bound_of(job)
    sim = simulate(job, network="contention-free").step_time_s
    assert bound <= sim and bound <= estimate(job).step_time_s
    assert bound >= 0.88 * sim


def test_bound_reads_the_plans_ep_overlap():
    """The plan's own arrays carry ``ep_overlap`` (the search's short columns leave it out
    unless ``--fix`` sets it): the overlapped pairs' all-to-all leaves the chain, so the
    bound falls below the same plan's without it."""
    job = job_of("moe", "hgx-h800:2", ROWS[-1][2])
    without = job_of("moe", "hgx-h800:2", ROWS[-1][2].replace("ep_overlap=true,", ""))
    got = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                      PlanArrays.from_plans([job.plan]))[0])
    assert got == bound_of(job) < bound_of(without)


#: expert-parallel ZeRO-2 plans of uneven stages: the bound is below the simulation, the
#: estimate below both (it charges rank 0's optimizer where rank pp-1, holding more layers,
#: ends last: the estimate's tail, docs/search.md §2)
EST_LOW = [("moe", "hgx-h800:2", "pp=2,dp=8,ep=8,mbs=1,gbs=32,first_stage_layers=3,"
            "last_stage_layers=5,zero=2"),
           ("mixtral", "dgx-h100:2", "pp=2,ep=4,mbs=1,gbs=64,first_stage_layers=2,"
            "last_stage_layers=6,zero=2")]


@pytest.mark.parametrize("kind,cluster,plan", EST_LOW)
def test_bound_below_simulation_where_the_estimate_is_low(kind, cluster, plan):
    """bound ≤ contention-free simulation (0.9685, 0.9954); the estimate is below the
    simulation (0.984, 0.988): the estimate is low, not the bound high. (Before §5.194 the
    estimate was below the bound too, bound/est 1.0086 and 1.0090, and below where the
    simulation's last rank ends its compute; with each stage's parameter gather on the fill
    path the MoE plan's estimate, 0.5035 → 0.5161 s, passes both, the simulation 0.5111 →
    0.5243 s.)"""
    job = job_of(kind, cluster, plan)
    sim = simulate(job, network="contention-free")
    assert bound_of(job) <= sim.step_time_s
    last = max(sim.simulated_ranks)
    end = max(r.end for r in sim.by_rank(last) if r.stream == "compute")
    assert end <= sim.step_time_s
    assert estimate(job).step_time_s < sim.step_time_s
