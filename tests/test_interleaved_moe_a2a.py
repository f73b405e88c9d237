"""Interleaved, combined-1F1B (``ep_overlap``) and zero-bubble plans over MoE stages that
differ in layers and kinds (calibration §5.54): the scalar estimate against the
contention-free simulation. Interleaved plans price each chunk's own expert all-to-all
(``scalar._a2a_shift``, as §5.52 does for 1F1B); ``ep_overlap`` and the zero-bubble orders
keep the even composition, which meets the simulation on the same seeded set."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from topologies.cluster import cluster_preset

SCHEDULES = {"interleaved": "schedule=interleaved,vpp=2",
             "ep_overlap": "schedule=interleaved,vpp=2,ep_overlap=true",
             "zb-h1": "schedule=zb-h1", "zb-v": "schedule=zb-v"}


def _cases(schedule: str, n: int = 10, seed: int = 54) -> list[tuple[int, int, str]]:
    """Seeded (dense first layers 0-3, MTP modules 0/1, plan) of 16-layer MoE models: pp 2
    or 4 with uneven first/last stages (one in five even; a chunk's layers a multiple of
    vpp; ZB-V's V-shape only on the even split)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pp = rng.choice((2, 4))
        dense, mtp = rng.randint(0, 3), rng.randint(0, 1)
        split = ""
        if schedule != "zb-v" and rng.random() >= 0.2:
            q = 2 if schedule in ("interleaved", "ep_overlap") else 1
            mid = rng.choice((2, 4, 6) if q == 2 else (3, 4, 5)) if pp > 2 else 0
            first = q * rng.randint(1, (16 - (pp - 2) * mid - 2) // q)
            split = f",first_stage_layers={first},last_stage_layers={16 - (pp - 2) * mid - first}"
        dp = 16 // pp
        out.append((dense, mtp, f"tp=1,pp={pp},ep={dp},mbs=1,gbs={32 * dp},"
                                f"{SCHEDULES[schedule]}{split}"))
    return out


def _error(dense: int, mtp: int, plan: str) -> float:
    model = replace(model_preset("deepseek-v3"), name="ds-small", num_layers=16,
                    first_k_dense_replace=dense, num_nextn_predict_layers=mtp,
                    vocab_size=32000, seq_length=512)
    job = make_job(model, cluster_preset("dgx-h100", 2), parse_plan(plan))
    return estimate(job).step_time_s / simulate(job, network="contention-free").step_time_s - 1


@pytest.mark.parametrize("schedule,tol", [("interleaved", 0.02), ("ep_overlap", 0.02),
                                          ("zb-v", 0.02), ("zb-h1", 0.025)])
def test_uneven_moe_estimate_meets_contention_free_simulation(schedule, tol):
    """DeepSeek-V3's layer at 16 layers, s 512, EP across two H100 nodes, 32 micro-batches
    (the errors this test computes; docs/calibration.md §5.54). Interleaved (vpp 2) with each
    chunk's own all-to-all: -1.17 to +0.20 % (with the even composition -2.80 to -0.54 %);
    ``ep_overlap``: -1.54 to -0.27 %; ZB-V: -1.06 to +0.82 %; ZB-H1: -2.34 to +0.71 % (each
    stage's own all-to-all: -2.42 to +0.06 %, so neither within 2 %: the gap left)."""
    errs = [_error(*c) for c in _cases(schedule)]
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
