"""The SMs overlapped communication kernels hold (``strategies.cost.sm_share``,
docs/calibration.md §5.152): the closed forms, the copy engine's zero, the switch's default
(off), and the estimate, the lower bound and the simulation reading the one factor."""
from dataclasses import replace
import math

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import overlap_clock, sm_share
from strategies.cost.stage import stage_cost_arrays
from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ON = SystemConfig(comm_sm_share=1.0)
LLAMA8 = replace(model_preset("llama3-8b"), num_layers=4, seq_length=2048)


@pytest.mark.parametrize("sm,k,share", [(132, 16, 1.0), (132, 20, 0.37), (108, 16, 1.0),
                                        (148, 32, 0.5)])
def test_sm_factor_closed_form(sm, k, share):
    """A persistent kernel's tiles over ``sm − k`` SMs for ``share`` of its time."""
    want = 1.0 + share * (sm / (sm - k) - 1.0)
    assert float(sm_share.sm_factor(sm, k, share)) == pytest.approx(want, rel=1e-12, abs=0)
    assert float(sm_share.sm_factor(sm, 0, share)) == 1.0


@pytest.mark.parametrize("tiles,sm,k", [(300, 132, 20), (132, 132, 16), (116, 132, 16),
                                        (1000, 108, 16), (7, 132, 16)])
def test_wave_occupancy_on_the_sms_left(tiles, sm, k):
    """One CTA per tile on ``sm − k`` slots: ``tiles / (ceil(tiles/(sm−k))·(sm−k))``; the
    time ratio to all SMs is the ratio of the wave counts."""
    free = sm - k
    occ = float(sm_share.wave_occupancy_on(tiles, sm, k))
    assert occ == pytest.approx(tiles / (math.ceil(tiles / free) * free), rel=1e-12, abs=0)
    ratio = (tiles / (free * occ)) / (tiles / (sm * float(sm_share.wave_occupancy_on(tiles, sm,
                                                                                     0))))
    assert ratio == pytest.approx(math.ceil(tiles / free) / math.ceil(tiles / sm), rel=1e-12)


def test_many_waves_tend_to_the_persistent_factor():
    """Many waves: the wave count's ratio tends to ``sm/(sm−k)``, ``sm_factor`` at share 1."""
    sm, k, tiles = 132, 16, 116 * 132 * 1000
    free_occ = float(sm_share.wave_occupancy_on(tiles, sm, k))
    all_occ = float(sm_share.wave_occupancy_on(tiles, sm, 0))
    ratio = (sm * all_occ) / ((sm - k) * free_occ)
    assert ratio == pytest.approx(float(sm_share.sm_factor(sm, k)), rel=1e-12)


def test_copy_engine_collective_costs_nothing():
    """Async TP's peer copies run on the copy engine: no SM, factor exactly 1 even with the
    switch on; Transformer Engine's userbuffers on the same plan charge their SMs."""
    args = dict(tp=np.array([8.0]), tpo=np.array([True]), ub=0.4,
                nccl_busy=np.array([False]), ep_paired=np.array([False]),
                dispatcher=np.array([0]))
    ce = sm_share.comm_sm_slowdown(132, "sm_90", 1.0, tp_impl="async-tp", **args)
    assert float(np.ravel(ce)[0]) == 1.0
    ub = sm_share.comm_sm_slowdown(132, "sm_90", 1.0, tp_impl="userbuffers", **args)
    want = 1.0 + 0.4 * (132 / (132 - sm_share.TE_UB_SMS) - 1.0)
    assert float(np.ravel(ub)[0]) == pytest.approx(want, rel=1e-12)


def test_largest_overlap_wins_and_dispatchers_differ():
    """Per plan the largest of the overlaps' factors; the expert dispatch at its
    dispatcher's SMs (NCCL's for alltoall, DeepEP 20, HybridEP 32)."""
    f = sm_share.comm_sm_slowdown(132, "sm_90", 1.0, np.ones(4), np.zeros(4, bool),
                                  "userbuffers", 0.0, np.array([True, False, False, False]),
                                  np.array([True, True, True, False]), np.array([2, 0, 1, 2]))
    k = [sm_share.HYBRIDEP_SMS, sm_share.NCCL_SMS["sm_90"], sm_share.DEEPEP_SMS]
    want = [132 / (132 - x) for x in k] + [1.0]
    assert np.allclose(f, want, rtol=1e-12, atol=0)


def test_bad_sm_count_is_a_clear_error():
    with pytest.raises(SpecError, match="comm SMs"):
        sm_share.sm_factor(16, 16)
    with pytest.raises(SpecError, match="sm_count"):
        sm_share.sm_factor(0, 1)


def test_ub_share_is_the_row_parallel_forward():
    """One dense layer: the row-parallel forward GEMMs' FLOPs over three passes of all."""
    parts = [("attn", (1, 10, 30, 10, False)), ("attn", (1, 10, 10, 10, True)),
             ("dense_mlp", (1, 10, 80, 10, False)), ("dense_mlp", (1, 10, 10, 40, True)),
             ("routed_mlp", (2, 5, 10, 10, True))]
    f = [2 * c * M * N * K for _, (c, M, N, K, _) in parts]
    assert sm_share.ub_share(parts) == pytest.approx((f[1] + f[3]) / (3 * sum(f)), rel=1e-12)
    assert sm_share.ub_share([]) == 0.0


def _slow(plan: str, system: SystemConfig | None = None) -> float:
    """``StageCostArrays.slowdown`` of one plan of ``LLAMA8`` on one DGX H100 node."""
    cl = cluster_preset("dgx-h100", 1)
    P = PlanArrays.from_plans([make_job(LLAMA8, cl, parse_plan(plan)).plan])
    return float(np.ravel(stage_cost_arrays(LLAMA8, cl, "bf16", P, system=system).slowdown)[0])


def test_switch_is_off_by_default():
    """The default ``comm_sm_share`` is 0: a ZeRO-3 job's factor is the clock's alone."""
    assert SystemConfig().comm_sm_share == 0.0
    assert _slow("zero=3,mbs=1,gbs=16") == pytest.approx(
        1.0 / overlap_clock.OVERLAP_CLOCK_RATIO, rel=1e-12)


def test_switch_on_multiplies_the_one_factor():
    """On, a ZeRO-3 job on H100 (132 SMs) runs its compute at the clock's factor times
    ``132/(132 − 16)``; a plan with no overlap stays at 1."""
    want = (1.0 / overlap_clock.OVERLAP_CLOCK_RATIO) * 132 / (132 - 16)
    assert _slow("zero=3,mbs=1,gbs=16", ON) == pytest.approx(want, rel=1e-12)
    assert _slow("zero=1,mbs=1,gbs=16", ON) == 1.0


@pytest.mark.parametrize("plan,tol", [("zero=3,gbs=32", 0.02), ("tp=2,zero=3,gbs=32", 0.02),
                                      ("tp=4,sp=true,tp_comm_overlap=true,gbs=32", 0.02),
                                      ("cp=2,gbs=32", 0.03)])
def test_estimate_bound_and_simulation_read_the_same_factor(plan, tol):
    """With the switch on, the estimate still agrees with the contention-free simulation,
    the lower bound stays below it, and both moved from the switch off by the compute's
    share of the factor (the three read ``StageCosts.slowdown``)."""
    cl = cluster_preset("dgx-h100", 1)
    p = parse_plan(plan)
    on, off = make_job(LLAMA8, cl, p, system=ON), make_job(LLAMA8, cl, p)
    est, sim = estimate(on).step_time_s, simulate(on).step_time_s
    assert abs(est / sim - 1) <= tol, (plan, est, sim)
    P = PlanArrays.from_plans([on.plan])
    bound = float(step_time_lower_bound(LLAMA8, cl, "bf16", P, system=ON)[0])
    assert bound <= sim * (1 + 1e-9)
    assert est > estimate(off).step_time_s and sim > simulate(off).step_time_s
    assert bound > float(step_time_lower_bound(LLAMA8, cl, "bf16", P)[0])


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_share_out_of_range_names_the_field(value):
    with pytest.raises(SpecError, match="comm_sm_share"):
        SystemConfig(comm_sm_share=value)
