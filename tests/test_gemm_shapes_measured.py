"""experiments/gemm_shapes_measured.py: the public per-shape GEMM tables pinned to their
sources, and the comparison pinned to the model function the estimate reads
(docs/calibration.md §5.79)."""
from __future__ import annotations

import statistics

import pytest

from experiments import gemm_shapes_measured as gm
from experiments.calibration_ablation import patched
from strategies.cost import gemm_kernel, gemm_time
from topologies.gpus import get_gpu


def test_sources_as_transcribed():
    """Each table holds the points its source publishes, every one below its GPU's dense
    peak for the dtype; the tilelang tables' latencies give their rates (2·8192²·K / t)."""
    sizes = {s.name: len(s.points) for s in gm.SOURCES}
    assert sizes == {"xla-sm90-bf16": 75, "torchperf-h100-bf16": 5, "tilelang-h800-fp8-a": 7,
                     "tilelang-h800-fp8-b": 7, "deepgemm-h800-fp8": 18,
                     "deepgemm-pr86-h800-fp8": 5, "xla-sm100-bf16": 31, "xla-sm100-fp8": 15}
    for s in gm.SOURCES:
        peak = get_gpu(s.gpu).peak(s.dtype) / 1e12
        assert all(0 < p[4] < peak for p in s.points), s.name
    for table in (gm.TILELANG_H800_FP8_A, gm.TILELANG_H800_FP8_B):
        for k, ms, v in table:
            assert 2 * 8192 ** 2 * k / (ms * 1e-3) / 1e12 == pytest.approx(v, rel=6e-3)
    assert all(M == N == K for _, M, N, K, _ in gm.SOURCES[1].points)


def test_model_column_is_compute_gemms_time_fwd():
    """Every model rate is ``gemm_time.gemms_time_fwd`` of the point less ``b - 1`` fixed
    times, read at call time (a patched function moves the column)."""
    rs = gm.rows()
    for r in rs:
        gpu = get_gpu(r.gpu)
        t = gemm_time.gemms_time_fwd([(r.b, r.M, r.N, r.K, False)], 1, gpu, r.dtype) \
            - (r.b - 1) * gemm_kernel.gemm_fixed_s(gpu)
        assert r.model == 2.0 * r.b * r.M * r.N * r.K / float(t) / 1e12
    orig = gemm_time.gemms_time_fwd
    with patched(gemm_time, "gemms_time_fwd", lambda *a, **k: 2.0 * orig(*a, **k)):
        slow = gm.rows()
    assert all(b.model < a.model for a, b in zip(rs, slow))


def test_normalised_to_each_source_best_shape():
    """The best measured point of each source is the reference: both norms 1 there, and
    every measured norm at most 1."""
    rs = gm.rows()
    for s in gm.SOURCES:
        b, M, N, K, v = gm.best(s)
        mine = [r for r in rs if r.source == s.name]
        ref = next(r for r in mine if (r.b, r.M, r.N, r.K) == (b, M, N, K))
        assert ref.measured_norm == 1.0 and ref.model_norm == 1.0 and ref.norm_ratio == 1.0
        assert all(r.measured_norm <= 1.0 for r in mine)


def test_classes_and_waves_closed_forms():
    assert gm.shape_class(4096, 512, 8192) == "thin"
    assert gm.shape_class(4096, 4096, 512) == "short-K"
    assert gm.shape_class(4096, 1024, 1024) == "large"
    # 4096 x 256 on 132 SMs: 32 x 1 tiles of 128 x 256
    assert gm.waves(1, 4096, 256, 132) == pytest.approx(32 / 132, rel=1e-15)
    assert gm.waves(4, 4096, 512, 132) == pytest.approx(4 * 32 * 2 / 132, rel=1e-15)
    assert gm.wave_class(0.99) == "sub-wave" and gm.wave_class(1.0) == "1-2 waves"
    assert gm.wave_class(2.0) == ">= 2 waves"


def test_findings():
    """At one wave or more the model's shape dependence is within 5 % (median) of every
    GPU/dtype's measurement; below a wave the chips run slower than modelled (median norm
    ratio above the same GPU/dtype's one-wave-or-more median)."""
    rs = gm.rows()
    for key in {(r.gpu, r.dtype) for r in rs}:
        full = [r.norm_ratio for r in rs if (r.gpu, r.dtype) == key and r.waves >= 1]
        sub = [r.norm_ratio for r in rs if (r.gpu, r.dtype) == key and r.waves < 1]
        assert abs(statistics.median(full) - 1) < 0.05, key
        if sub:
            assert statistics.median(sub) > statistics.median(full) + 0.04, key


def test_fit_knee_recovers_the_model_knee():
    """Points the model itself generates (at the catalog knee) fit back to the grid knee
    next to the catalog's, with zero residual at the catalog's own knee."""
    src = next(s for s in gm.SOURCES if s.name == "tilelang-h800-fp8-b")
    pts = tuple((b, M, N, K, 2.0 * b * M * N * K / gm.model_seconds(src.gpu, src.dtype, b, M, N,
                                                                      K) / 1e12)
                for b, M, N, K, _ in src.points)
    synth = gm.Source("synthetic", src.gpu, src.dtype, "model", "-", pts)
    knee, rms, rms0, n = gm.fit_knee(synth)
    cat = gemm_kernel.k_knee(get_gpu(src.gpu), src.dtype)
    assert n == 7 and rms0 < 1e-12
    assert abs(knee - cat) <= 10
    measured = gm.fit_knee(src)
    assert measured[0] > cat and measured[1] < measured[2]


def test_deterministic(capsys):
    gm.main([])
    a = capsys.readouterr().out
    gm.main([])
    assert capsys.readouterr().out == a
    assert "Table 6" in a


def test_what_if_patches_inside_the_run_only():
    """The what-if prices every analytic row of a file three ways and leaves ``compute`` as
    it was; the knee what-if moves the H100 rows (NeMo 24.07, H100), the unpatched column
    is the estimate's own error."""
    import os

    from simulator.studies.validate import load_cases
    from strategies.estimate.scalar import estimate

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "strategies/reference/data/nemo_performance_2407.json")
    k0, c0, w0 = gemm_kernel.k_knee, gemm_kernel.gemm_compute, gemm_kernel.gemm_waves
    res = gm.what_if([path])
    assert gemm_kernel.k_knee is k0 and gemm_kernel.gemm_compute is c0 \
        and gemm_kernel.gemm_waves is w0
    cases = [c for c in load_cases(path, tiers=None)
             if c.job is not None and c.measured_step_s is not None]
    assert len(res) == len(cases) == 12
    for r, c in zip(res, cases):
        assert r[3] == 100 * (estimate(c.job).step_time_s / c.measured_step_s - 1)
    assert any(abs(r[4] - r[3]) > 0.01 for r in res)
    assert all(r[6] == r[3] == r[7] for r in res)   # H100 rows: the sm_100 rules leave them
