"""The SMs overlapped communication kernels hold (``strategies.cost.sm_share``,
docs/calibration.md §5.152, §5.156): the closed forms (the rate on ``sm − k`` SMs, a
window's extra seconds), the copy engine's zero, the switch's default (off), and the
estimate's charge per window with the bound unchanged."""
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


@pytest.mark.parametrize("c,w,sm,k", [(1.0, 4.0, 132, 16), (4.0, 4.0, 132, 20),
                                     (4.4, 4.0, 132, 32), (9.0, 4.0, 148, 32),
                                     (0.0, 4.0, 132, 16), (1.0, 0.0, 132, 16)])
def test_overlap_extra_closed_form(c, w, sm, k):
    """A collective of ``c`` seconds holding ``k`` SMs beside ``w`` seconds of compute: the
    compute runs at ``(sm − k)/sm`` while it is in flight, so it ends at
    ``w + min(c·k/sm, w·k/(sm − k))`` (= ``w`` + the GEMM work done beside the collective
    times ``k/(sm − k)``); the window's end over ``w + max(c − w, 0)`` is the extra."""
    done = min(c * (sm - k) / sm, w)           # GEMM seconds of work done beside it
    end = done * sm / (sm - k) + (w - done)    # the compute's end
    want = max(c, end) - max(c, w)
    got = float(sm_share.overlap_extra(c, w, sm, k))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert got == pytest.approx(max(done * k / (sm - k) - max(c - w, 0.0), 0.0), rel=1e-12,
                                abs=1e-15)


def test_copy_engine_collective_costs_nothing():
    """Async TP's peer copies run on the copy engine: no SM held (``tp`` 0), no extra second
    even with the switch on; Transformer Engine's userbuffers hold ``TE_UB_SMS``."""
    ce = sm_share.window_sms(True, 132, "sm_90", "async-tp", np.array([0]))
    assert ce.tp == 0.0 and float(np.ravel(ce.extra(1.0, 4.0, ce.tp))[0]) == 0.0
    ub = sm_share.window_sms(True, 132, "sm_90", "userbuffers", np.array([0]), 0.1)
    assert ub.tp == sm_share.TE_UB_SMS and ub.ub == pytest.approx(0.3, rel=1e-12)
    assert float(np.ravel(ub.extra(1.0, 4.0, ub.tp))[0]) == pytest.approx(16 / 132, rel=1e-12)
    assert sm_share.window_sms(False, 132, "sm_90", "userbuffers", 0) is sm_share.NO_SMS


def test_dispatchers_and_generations_differ():
    """The expert dispatch at its dispatcher's SMs (NCCL's for alltoall, DeepEP 20,
    HybridEP 32); NCCL's by generation (16 on Hopper, 32 on Blackwell)."""
    s = sm_share.window_sms(True, 132, "sm_90", "userbuffers", np.array([2, 0, 1]))
    assert list(s.ep) == [sm_share.HYBRIDEP_SMS, 16, sm_share.DEEPEP_SMS] and s.nccl == 16
    assert sm_share.window_sms(True, 148, "sm_100", "userbuffers", 0).nccl == 32


def test_bad_sm_count_is_a_clear_error():
    with pytest.raises(SpecError, match="comm SMs"):
        sm_share.sm_factor(16, 16)
    with pytest.raises(SpecError, match="sm_count"):
        sm_share.sm_factor(0, 1)
    with pytest.raises(SpecError, match="comm SMs"):
        sm_share.overlap_extra(1.0, 1.0, 132, 132)
    with pytest.raises(SpecError, match="sm_count"):
        sm_share.overlap_extra(1.0, 1.0, 0, 1)


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


def test_switch_on_leaves_the_stage_record_alone():
    """The charge is per window in the estimate: the stage record's factor stays the
    clock's with the switch on."""
    assert _slow("zero=3,mbs=1,gbs=16", ON) == _slow("zero=3,mbs=1,gbs=16")


@pytest.mark.parametrize("plan", ["zero=3,gbs=32", "tp=2,zero=3,gbs=32",
                                  "tp=4,sp=true,tp_comm_overlap=true,gbs=32", "cp=2,gbs=32",
                                  "zero=1,gbs=32"])
def test_switch_on_charges_the_estimate_and_not_the_bound(plan):
    """With the switch on the estimate is dearer (each window's SMs) by less than the whole
    step's compute at ``sm/(sm − 16)`` would make it, and within 3 % of the contention-free
    simulation, which charges the same SMs; the lower bound (which charges no SM) is
    unchanged and stays below the simulation, off and on."""
    cl = cluster_preset("dgx-h100", 1)
    p = parse_plan(plan)
    on, off = make_job(LLAMA8, cl, p, system=ON), make_job(LLAMA8, cl, p)
    est_on, est_off = estimate(on).step_time_s, estimate(off).step_time_s
    assert est_off < est_on < est_off * 132 / (132 - 16)
    P = PlanArrays.from_plans([on.plan])
    bound = float(step_time_lower_bound(LLAMA8, cl, "bf16", P, system=ON)[0])
    assert bound == float(step_time_lower_bound(LLAMA8, cl, "bf16", P)[0])
    assert bound <= simulate(off).step_time_s * (1 + 1e-9)
    # the simulator charges the same SMs (``simulator.engine.sm_hold``, §5.159): the
    # estimate stays within 3 % of the contention-free simulation, the bound below it
    sim_on = simulate(on, network="contention-free").step_time_s
    assert est_on == pytest.approx(sim_on, rel=0.03)
    assert bound <= sim_on


def test_switch_on_expert_pair_matches_the_simulation():
    """DeepEP's dispatch and combine in overlapped pairs (20 SMs each): with the switch on
    the estimate and the contention-free simulation are both dearer than off and within
    2 % of each other."""
    cl = cluster_preset("dgx-h100", 1)
    mix = replace(model_preset("mixtral-8x7b"), num_layers=4, seq_length=2048)
    p = parse_plan("ep=8,ep_overlap=true,moe_dispatcher=deepep,gbs=32")
    on, off = make_job(mix, cl, p, system=ON), make_job(mix, cl, p)
    est = [estimate(j).step_time_s for j in (off, on)]
    sim = [simulate(j, network="contention-free").step_time_s for j in (off, on)]
    assert est[0] < est[1] and sim[0] < sim[1]
    assert est[1] == pytest.approx(sim[1], rel=0.02)


def test_async_tp_overlap_is_not_charged():
    """torchtitan's async TP (copy engine): a TP-overlapped plan without data-parallel
    traffic costs the same with the switch on."""
    cl = cluster_preset("dgx-h100", 1)
    p = parse_plan("tp=8,sp=true,tp_comm_overlap=true,gbs=8")
    jobs = [make_job(LLAMA8, cl, p, system=s, framework="torchtitan") for s in (ON, None)]
    assert estimate(jobs[0]).step_time_s == estimate(jobs[1]).step_time_s


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_share_out_of_range_names_the_field(value):
    with pytest.raises(SpecError, match="comm_sm_share"):
        SystemConfig(comm_sm_share=value)
