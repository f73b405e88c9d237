"""A fixed time per GEMM kernel (docs/calibration.md §5.37): the constant is the fit of XLA's
public matmul tables beside the catalog's rate and shape model, and every GEMM pays it."""
from __future__ import annotations

import dataclasses

import pytest

from experiments import gemm_fixed_time as gf
from strategies.cost import gemm_kernel, gemm_time
from topologies.gpus import get_gpu


@pytest.mark.parametrize("gen", ["sm_90", "sm_100"])
def test_constant_is_the_table_fit(gen):
    """``GEMM_FIXED_S`` reproduces ``fit_fixed`` on the generation's XLA entries to 1e-9."""
    t0 = gf.fit_fixed(gf.points(gen))
    assert gemm_kernel.GEMM_FIXED_S[gen] == pytest.approx(t0, rel=1e-9)


@pytest.mark.parametrize("gen", ["sm_90", "sm_100"])
def test_fixed_time_explains_the_small_kernels(gen):
    """With the fixed time the tables' relative residual falls below a third of the rate-and-
    shape model's alone (the term is real, not noise: 0.36 -> 0.10, 0.44 -> 0.08)."""
    pts = gf.points(gen)
    rms0, rms1 = gf.residual(pts, 0.0)[0], gf.residual(pts, gemm_kernel.GEMM_FIXED_S[gen])[0]
    assert rms1 < rms0 / 3
    assert 1e-6 < gemm_kernel.GEMM_FIXED_S[gen] < 2e-5


def test_fit_is_the_least_squares_minimum():
    """``fit_fixed``'s closed form is the minimum: a step either side raises the residual."""
    pts = gf.points("sm_90")
    t0 = gf.fit_fixed(pts)

    def ss(t):
        return sum(((a * U + t) / T - 1) ** 2 for T, U, a in pts)
    assert ss(t0) < ss(t0 * 1.01) and ss(t0) < ss(t0 * 0.99)


def test_generations():
    """Hopper parts take sm_90's time, Blackwell sm_100's; parts without a public table 0."""
    assert gemm_kernel.gemm_fixed_s(get_gpu("H100-SXM5-80GB")) == gemm_kernel.GEMM_FIXED_S["sm_90"]
    assert gemm_kernel.gemm_fixed_s(get_gpu("H200-SXM-141GB")) == gemm_kernel.GEMM_FIXED_S["sm_90"]
    assert gemm_kernel.gemm_fixed_s(get_gpu("GB200")) == gemm_kernel.GEMM_FIXED_S["sm_100"]
    assert gemm_kernel.gemm_fixed_s(get_gpu("A100-SXM4-80GB")) == 0.0
    assert gemm_kernel.gemm_fixed_s(get_gpu("MI300X")) == 0.0


def test_every_gemm_pays_it_once():
    """A GEMM's time is the rate-and-shape time plus exactly ``gemm_fixed_s``: on H100 against
    the same part renamed out of the generation table (bit for bit in the difference up to
    floating-point rounding), and ``count`` GEMMs pay it ``count`` times."""
    h = get_gpu("H100-SXM5-80GB")
    bare = dataclasses.replace(h, name="H100-no-table")
    g = [(3, 4096, 1024, 8192, False)]
    t = gemm_time.gemms_time_fwd(g, 1, h, "bf16")
    t_bare = gemm_time.gemms_time_fwd(g, 1, bare, "bf16")
    assert t - t_bare == pytest.approx(3 * gemm_kernel.GEMM_FIXED_S["sm_90"], rel=1e-9)
    # TP overlap cuts a forward GEMM into tp pieces: each piece is a kernel
    t4, t4_bare = (gemm_time.gemms_time_fwd(g, 4, h, "bf16", tpo=True),
                   gemm_time.gemms_time_fwd(g, 4, bare, "bf16", tpo=True))
    assert t4 - t4_bare == pytest.approx(12 * gemm_kernel.GEMM_FIXED_S["sm_90"], rel=1e-9)
