"""The per-lead seconds of experiments/mosaic_h100_leads.py (docs/calibration.md §5.96): the
optimizer loop's launch idle is its closed form, FSDP's traffic counts the gathers as the
sharding strategy runs them, and the implied HBM factor reproduces the measured step."""
from __future__ import annotations

from dataclasses import replace

import pytest

from experiments.mosaic_h100_leads import (ADAM_KERNELS, CLIP_KERNELS, fsdp_traffic_s,
                                           implied_hbm, optimizer_launch_s, with_hbm_scale)
from simulator.studies.validate import load_cases
from strategies.estimate.scalar import estimate

CASES = {c.id: c for c in load_cases(tiers=None) if c.id.startswith("mosaic_mpt1b_")}


def test_optimizer_loop_closed_form():
    job = CASES["mosaic_mpt1b_h100_8gpu_seq2048_mb14"].job
    # 24 blocks x (Wqkv, out_proj, up, down, two norms) + embedding + final norm, 10 kernels
    # each, at the stack's 3 us launch gap
    assert ADAM_KERNELS + CLIP_KERNELS == 10
    assert optimizer_launch_s(job) == pytest.approx(146 * 10 * 3e-6, rel=1e-12)


def test_fsdp_traffic_follows_the_sharding():
    full = CASES["mosaic_mpt1b_h100_8gpu_seq2048_mb14"].job       # FULL_SHARD
    grad = CASES["mosaic_mpt1b_h100ls_128gpu_seq2048_mb12"].job   # SHARD_GRAD_OP
    assert (full.plan.zero, grad.plan.zero) == (3, 2)
    # ZeRO-3 gathers before every forward and backward: all of it scales with micro-batches
    assert fsdp_traffic_s(full, 3) == pytest.approx(3 * fsdp_traffic_s(full, 1), rel=1e-12)
    # ZeRO-2 gathers once per step: each further micro-batch adds only its reduce-scatter
    d1 = fsdp_traffic_s(grad, 2) - fsdp_traffic_s(grad, 1)
    d2 = fsdp_traffic_s(grad, 3) - fsdp_traffic_s(grad, 2)
    assert d1 == pytest.approx(d2, rel=1e-12)
    assert 0 < d1 < fsdp_traffic_s(grad, 1)


def test_implied_hbm_reproduces_the_measured_step():
    case = CASES["mosaic_mpt1b_h100_8gpu_seq512_mb56"]
    x = implied_hbm(case.job, case.measured_step_s)
    assert x is not None and x < 1            # the H100 row is too fast: slower memory
    got = estimate(with_hbm_scale(case.job, x)).step_time_s
    assert got == pytest.approx(case.measured_step_s, rel=2e-3)
    # a target no factor in range reaches
    assert implied_hbm(case.job, 0.5 * estimate(replace(case.job)).step_time_s) is None
