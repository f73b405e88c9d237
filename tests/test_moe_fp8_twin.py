"""What the model credits FP8 with on the MoE rows (docs/calibration.md §5.137,
``experiments/moe_fp8_twin.py``): the Qwen3-30B-A3B H100 A/B split into precision and
dispatcher, the bf16 twin, HybridEP's published pace and the H200 fp8 GEMM points."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from experiments import moe_fp8_twin as t
from experiments import qwen3_h100_residual as q
from strategies.cost.stage import stage_costs
from strategies.estimate import estimate
from strategies.reference.cases import case_from_entry


@functools.lru_cache(maxsize=1)
def grid():
    return t.ab_grid()


@functools.lru_cache(maxsize=1)
def fp8_job():
    return case_from_entry(q._entry(*q.ROWS[0])).job


def test_ab_split_sums_to_the_change():
    g = grid()
    p, d, x = t.ab_split(g)
    total = g[("fp8-current", "hybridep")] - g[("bf16", "alltoall")]
    assert p + d + x == pytest.approx(total, rel=1e-12, abs=1e-12)
    # the grid's diagonal is the row and NVIDIA's eager twin as the residual script prices them
    mb, mf, eb, ef, _, _ = q.ab_table()
    assert g[("fp8-current", "hybridep")] == pytest.approx(ef, rel=1e-12)
    assert g[("bf16", "alltoall")] == pytest.approx(eb, rel=1e-12)


def test_interaction_is_the_padding_copies_alltoall_alone_pays():
    """TE's quantisation padding copies run only in a quantised precision and only where the
    dispatcher does not pad (§5.114): the interaction is minus their step time, exactly."""
    job = t.with_dispatcher(fp8_job(), "alltoall")
    with q.recording() as r:
        stage_costs(job)
    pad = sum(q._s(v) for v in r["expert_pad_time"])
    est = estimate(job)
    n = est.num_microbatches * job.model.num_moe_layers / job.plan.pp
    assert pad > 0
    assert t.ab_split(grid())[2] == pytest.approx(-pad * n, rel=1e-9)


def test_bf16_twin_changes_only_the_precision():
    job = fp8_job()
    tw = t.bf16_twin(job)
    assert tw.dtype == "bf16" and not tw.plan.fp8_attention
    assert dataclasses.replace(tw.plan, fp8_attention=job.plan.fp8_attention) == job.plan
    assert tw.system.param_gather_bytes == 0.0 and job.system.param_gather_bytes == 1.0
    assert dataclasses.replace(tw, dtype=job.dtype, plan=job.plan, system=job.system) == job
    b = t.precision_parts(tw)
    assert b["casts (bytes)"] == 0 and b["per-expert quantise launches"] == 0


def test_finding_fp8_saves_nothing_on_the_h100_row():
    """Finding: the GEMM saving is spent on the casts and the per-expert quantise launches, so
    the model's fp8/bf16 on this layout is within 1 % of 1 (the A/B's 0.57 is the
    dispatcher's); could be false if a term moved."""
    f, b = t.precision_parts(fp8_job()), t.precision_parts(t.bf16_twin(fp8_job()))
    assert f["GEMMs"] < 0.7 * b["GEMMs"]
    assert abs(sum(f.values()) - sum(b.values())) < 0.05      # ms per MoE layer and mb
    g = grid()
    assert 0.99 < g[("fp8-current", "hybridep")] / g[("bf16", "hybridep")] < 1.0
    p, d, x = t.ab_split(g)
    assert abs(p + x) < 0.01 * abs(d)


def test_precision_room_closed_form_and_finding():
    g = grid()
    meas = 29.257142857142856 - q.EAGER_BF16_ALLTOALL_S
    rows = t.precision_room(g, meas, 1.5, 3072)
    _, d, _ = t.ab_split(g)
    assert rows[0] == ("model", d, meas - d)
    ratios = [r for r in q.hybrid_h100_ratios() if r[0] != "dispatch (FP8)"]
    for (pace, dd, room), i in zip(rows[1:], (1, 2)):
        k = np.mean([1 / r[i] for r in ratios])
        assert dd == pytest.approx(d + (k - 1) * 1.5e-3 * 3072, rel=1e-12)
        assert room == pytest.approx(meas - dd, rel=1e-12)
    # finding: at HybridEP's published pace the measured change leaves -0.2..+1.4 s for the
    # precision, the model's precision part and interaction (-0.07 s) inside it
    row = q.row_table()[0]
    a2a = dict(q.parts(q._entry(*q.ROWS[0]))[0])[
        "expert all-to-all (HybridEP: 2 dispatch + 2 combine)"]
    n = round(row[3] / (row[6] * 1e-3))
    assert n == 48 * 64
    real = t.precision_room(g, row[3] - q.EAGER_BF16_ALLTOALL_S, a2a, n)
    lo, hi = real[2][2], real[1][2]
    p, _, x = t.ab_split(g)
    assert lo < p + x < hi
    assert hi < 1.5 and real[0][2] > 2.5


def test_h200_fp8_gemm_points_at_expert_sizes():
    """Finding: the one measured Hopper fp8 rate (H200, no fast accumulation) gives the
    model's fp8/bf16 within 10 % at 3.4e10-1.1e11 FLOPs with a side of 512-2048."""
    rows = t.gemm_pairs()
    assert len(rows) >= 15
    for f, M, N, K, me, mo in rows:
        assert f == 2.0 * M * N * K <= t.SMALL_FLOPS and min(M, N, K) <= 2048
        assert 0.9 < me / mo < 1.1
    assert abs(np.exp(np.mean([np.log(me / mo) for *_, me, mo in rows])) - 1) < 0.02
    assert t.gemm_pairs(max_flops=1e10) == []
