"""Interleaved, combined-1F1B (``ep_overlap``) and zero-bubble plans over MoE stages that
differ in layers and kinds (calibration §5.54): the scalar estimate against the
contention-free simulation. Interleaved plans price each chunk's own expert all-to-all
(``chunk_correction.a2a_shift``, as §5.52 does for 1F1B); ``ep_overlap`` and the zero-bubble orders
keep the even composition, which meets the simulation on the same seeded set."""
from __future__ import annotations

from dataclasses import replace

import pytest

from experiments.uneven_moe_schedules import cases, job_of
from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.reference.cases import case_from_entry, load_reference


def _error(dense: int, mtp: int, plan: str) -> float:
    job = job_of(dense, mtp, plan)
    return estimate(job).step_time_s / simulate(job, network="contention-free").step_time_s - 1


@pytest.mark.parametrize("schedule,tol", [("interleaved", 0.02), ("ep_overlap", 0.02),
                                          ("zb-v", 0.02), ("zb-h1", 0.025)])
def test_uneven_moe_estimate_meets_contention_free_simulation(schedule, tol):
    """DeepSeek-V3's layer at 16 layers, s 512, EP across two H100 nodes, 32 micro-batches
    (``python experiments/uneven_moe_schedules.py``; calibration §5.54). Interleaved (vpp 2)
    with each chunk's own all-to-all: -1.17 to +0.20 % (with the even composition -2.80 to -0.54 %);
    ``ep_overlap``: -1.54 to -0.27 %; ZB-V: -1.06 to +0.82 %; ZB-H1: -2.34 to +0.71 % (each
    stage's own all-to-all: -2.42 to +0.06 %, so neither within 2 %: the gap left)."""
    errs = [_error(*c) for c in cases(schedule)]
    assert max(map(abs, errs)) <= tol, errs


@pytest.mark.parametrize("dense,mtp", [(1, 1), (3, 0), (3, 1)])
def test_interleaved_vpp4_uneven_dense_first(dense, mtp):
    """vpp 4 over pp 2 with first/last stages of 4/12 layers: the chunks of dense first
    layers carry no all-to-all; within 1 % (-0.27 to -0.03 %; the even composition gave
    -2.53 to -1.88 %)."""
    err = _error(dense, mtp, "tp=1,pp=2,ep=8,mbs=1,gbs=256,schedule=interleaved,vpp=4,"
                             "first_stage_layers=4,last_stage_layers=12")
    assert abs(err) <= 0.01, err


@pytest.mark.parametrize("rid,tol", [("mbridge260401_deepseekv3_gb300_256_mxfp8", 0.005),
                                     ("mbridge260401_deepseekv3_gb200_256_mxfp8", 0.005),
                                     ("mbridge260401_qwen3235ba22b_gb300_256_mxfp8", 0.005),
                                     ("mbridge260401_qwen3235ba22b_gb200_256_mxfp8", 0.02)])
def test_megatron_bridge_interleaved_layout_rows_meet_their_simulation(rid, tol):
    """The Megatron Bridge 26.04 interleaved MoE rows whose layout string (embedding and loss
    slots, MTP) makes chunks uneven, at 1/8 of their batch: +0.02, +0.01, +0.07, -1.78 %
    (before §5.54: +0.18, +1.01, +0.65, -0.49 %; the Qwen3 pp8 row's estimate now carries
    the simulated expert all-to-all, the rest is its pipeline messages and bubble)."""
    rows = load_reference("strategies/reference/data/megatron_bridge_2604.json")
    job = case_from_entry(next(r for r in rows if r["id"] == rid), rows).job
    job = replace(job, plan=replace(job.plan, gbs=job.plan.gbs // 8))
    err = estimate(job).step_time_s / simulate(job, network="contention-free").step_time_s - 1
    assert abs(err) <= tol, err
