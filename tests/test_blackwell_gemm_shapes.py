"""experiments/blackwell_gemm_shapes.py: public Blackwell GEMM measurements against the
catalog's GEMM rate (docs/calibration.md §5.35)."""
from __future__ import annotations

import pytest

from experiments import blackwell_gemm_shapes as bw
from topologies.gpus import get_gpu
from topologies.gpus.sustained import (B200_SUSTAINED_RATIO, GB200_FP8_SUSTAINED_RATIO,
                                       sm100_fp8_ratio, sustained_ratio)

SIZES = (256, 512, 1024, 2048, 4096)


def test_xla_points_are_the_declared_grid_below_peak():
    """The bf16 table holds the whole b = 1, m = 4096 block (25 distinct points) and six m = 2048
    points; bf16 and fp8 rates are below B200's dense peaks (a slipped digit would not be);
    at fixed (m, n) the rate never falls as K doubles."""
    pts = bw.XLA_SM100_BF16
    assert len({p[:4] for p in pts}) == len(pts) == 31
    assert {(n, k) for b, m, n, k, _ in pts if m == 4096} == {(n, k) for n in SIZES for k in SIZES}
    for table, dtype in ((bw.XLA_SM100_BF16, "bf16"), (bw.XLA_SM100_FP8, "fp8")):
        peak = get_gpu(bw.B200).peak(dtype) / 1e12
        assert all(0 < v < peak for *_, v in table)
        for b, m, n, k, v in table:
            nxt = [w for bb, mm, nn, kk, w in table if (bb, mm, nn, kk) == (b, m, n, 2 * k)]
            if nxt:
                assert nxt[0] >= v, (dtype, b, m, n, k)


def test_catalog_burst_fractions_are_the_mamf_rows():
    """Each Blackwell catalog efficiency is its mamf-finder burst fraction times its sustained
    ratio: to the digit for B300 (power rule) and GB200 (fp8 measured, §5.41; bf16 the rule), within the 2-digit
    rounding for B200 bf16 (0.63); B200 fp8 to the digit (GB200's fp8 ratio carried, §5.77)."""
    for g, dtype, *_rest, sus in bw.mamf_rows():
        if g.startswith("B300"):
            gpu = get_gpu(g)
            assert sus == pytest.approx(sustained_ratio(gpu.tdp_w, gpu.sm_count), rel=1e-12)
        elif g.startswith("GB200"):
            want = GB200_FP8_SUSTAINED_RATIO if dtype == "fp8" else sustained_ratio(1200, 148)
            assert sus == pytest.approx(want, rel=1e-12)
        elif g.startswith("B200") and dtype == "fp8":     # GB200's fp8 ratio carried, §5.77
            assert sus == pytest.approx(sm100_fp8_ratio(1000, 148), rel=1e-12)
        elif g.startswith("B200"):
            assert sus == pytest.approx(B200_SUSTAINED_RATIO, rel=0.005)


def test_b200_sustained_clock_matches_the_public_trace():
    """B200's sustained/burst ratio (node MSMF / MAMF) is within 2 % of flashinfer PR #2899's
    B200 clock trace (1580 of 1965 MHz at ~1000 W); its bf16 large-GEMM rate is within 2 % of
    MAMF times that clock ratio. The trace is of a bf16 kernel (FA4): fp8 reads GB200's measured
    fp8 ratio carried to 1000 W (§5.77), below it."""
    boost, held = bw.FLASHINFER_B200_CLOCKS
    assert B200_SUSTAINED_RATIO == pytest.approx(held / boost, rel=0.02)
    g = get_gpu(bw.B200)
    for gpu, dtype, _m, _n, _k, mamf, *_ in bw.MAMF_BEST:
        if gpu == bw.B200:
            rate = g.peak(dtype) * g.gemm_efficiency(dtype) / 1e12
            if dtype == "fp8":
                assert rate == pytest.approx(mamf * sm100_fp8_ratio(1000, 148), rel=1e-12)
                assert rate < mamf * held / boost
            else:
                assert rate == pytest.approx(mamf * held / boost, rel=0.02)


def test_xla_sm100_long_kernels_have_the_model_shape_dependence():
    """bf16 GEMMs in the training regime (a wave of tiles, K >= 1024) whose kernel runs 40 µs or
    more: the model's normalised rate is within 5 % of XLA's (§3.26's H100 criterion)."""
    sms = get_gpu(bw.B200).sm_count
    long_ = [r for r in bw.xla_rows(bw.XLA_SM100_BF16, "bf16")
             if bw.in_regime(r[0], r[1], r[2], r[3], sms)
             and 2 * r[0] * r[1] * r[2] * r[3] / (r[4] * 1e12) >= 40e-6]
    assert len(long_) >= 3
    assert all(abs(r[8] - 1) <= 0.05 for r in long_)


def test_measured_knee_at_most_the_catalogs():
    """Knee and fixed time per kernel fitted together: the measured K knee is at most the
    catalog's (bf16 and fp8) and the fixed time is a few µs, as on H100 (5.8 µs)."""
    for dtype, n, knee, t0_us, rate, cat in bw.knee_fixed_rows():
        assert n == 7
        assert knee <= cat, dtype
        assert 1.0 < t0_us < 10.0
        assert rate < get_gpu(bw.B200).peak(dtype) / 1e12


def test_fit_recovers_a_synthetic_law():
    """fit_knee_fixed, fed points generated from its own law, returns the knee and fixed time
    it was given (guards the comparison machinery on Blackwell-sized numbers)."""
    from experiments.h100_gemm_shapes import fit_knee_fixed, shape_factor
    rate, knee, t0 = 1.6e15, 400, 5e-6
    pts = []
    for m, k in ((4096, 256), (4096, 512), (4096, 1024), (4096, 2048), (4096, 4096),
                 (2048, 2048), (2048, 4096)):
        t = 2.0 * m * 4096 * k / (rate * shape_factor(m, 4096, k, knee)) + t0
        pts.append((1, m, 4096, k, 2.0 * m * 4096 * k / t / 1e12))
    fk, ft0, fr = fit_knee_fixed(pts)
    assert fk == knee
    assert ft0 == pytest.approx(t0, rel=1e-6)
    assert fr == pytest.approx(rate, rel=1e-6)


def test_power_rule_parts_are_the_unmeasured_link():
    """The power rule's ratios (GB200 0.865, GB300 0.888), the link §5.35 could not check; the
    catalog's GB200 fp8 now reads the measured 0.759 instead (§5.41)."""
    rows = {p.split(" (")[0]: (r, s) for p, r, s in bw.clock_rows()}
    assert rows["GB200"][0] == pytest.approx(B200_SUSTAINED_RATIO * 1.2 ** (1 / 3), rel=1e-12)
    assert rows["GB200 fp8, catalog"] == (GB200_FP8_SUSTAINED_RATIO, "measured: sustained GEMM")
    assert all(s == "power rule (not measured)" for k, (r, s) in rows.items()
               if k in ("GB200", "GB300", "B300-SXM-288GB"))


def test_gb200_rows_are_in_the_measured_regime():
    """The dense GB200 rows of NeMo 25.x and DGX Cloud 25.05 spend at most 0.2 % of their GEMM
    FLOPs outside the regime Table 2 measures (DeepSeek-V3's expert GEMMs excepted), so the
    shape comparison speaks for them; for those dense rows the fixed time per kernel adds at most
    8 % of GEMM time."""
    rows = bw.run_rows()
    assert len(rows) >= 40
    for f, run, dtype, outside, sf, err, fixed in rows:
        if "deepseek" not in run:
            assert outside <= 0.002, run
            assert 0 < fixed < 0.08, run
        assert 0.8 < sf < 1.0, run
