"""The fused attention kernel's grid factor (strategies/cost/attention_grid.py) and its fit to
the H200 kernel points (experiments/attention_grid_fit.py; docs/calibration.md §5.130)."""
from __future__ import annotations

import dataclasses
import importlib.util
import os

import numpy as np
import pytest

from strategies.cost import attention_grid as ag
from strategies.cost import attention_time
from strategies.errors import SpecError
from strategies.presets import model_preset
from topologies.gpus import get_gpu

_PATH = os.path.join(os.path.dirname(__file__), "..", "experiments", "attention_grid_fit.py")
_spec = importlib.util.spec_from_file_location("attention_grid_fit", _PATH)
fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fit)

KERNELS = (ag.CUDNN_FWD, ag.CUDNN_BWD, ag.FA2_FWD, ag.FA2_BWD)


@pytest.mark.parametrize("k", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("groups,tiles", [(1, 1), (4, 8), (16, 8), (1, 132), (33, 4)])
def test_one_cta_per_slot_is_ideal_over_the_longest(k, groups, tiles):
    """When every CTA has a slot of its own (groups·tiles <= SMs·CTAs per SM) the makespan is
    the longest CTA, ``ctas_per_sm·(tiles + c0)``, and the factor ``Σ/(sms·that)``, with
    ``Σ = groups·tiles·(tiles+1)/2`` the useful tiles."""
    sms = 132
    assert groups * tiles <= sms * k.ctas_per_sm
    useful = groups * tiles * (tiles + 1) / 2
    want = useful / (sms * k.ctas_per_sm * (tiles + k.fixed_tiles))
    assert ag.grid_factor(k, groups, tiles, sms) == pytest.approx(want, rel=1e-12)


def test_balanced_full_grid_closed_forms():
    """Equal CTAs filling every slot exactly: factor 1/(1 + c0) per CTA of one tile; two CTAs
    per SM at half the SM's rate each give the same; a second wave of one CTA doubles the
    makespan."""
    for c0 in (0.0, 1.5):
        for cps in (1, 2):
            k = ag.GridKernel("t", "lpt", cps, c0)
            assert ag.grid_factor(k, 132 * cps, 1, 132) == pytest.approx(1 / (1 + c0), rel=1e-12)
        k = ag.GridKernel("t", "head_desc", 1, c0)
        assert ag.grid_factor(k, 133, 1, 132) == pytest.approx(133 / (132 * 2 * (1 + c0)),
                                                               rel=1e-12)


def test_orders_schedule_as_stated():
    """Two heads of two tiles on three SMs, no fixed cost: per head longest first runs
    (2, 1, 2) then the last 1 on the SM freed first (at 1): makespan 2; shortest first runs
    (1, 2, 1) then the last 2 on the SM freed at 1: makespan 3; longest-first over all heads
    runs (2, 2, 1) then 1 at 1: 2."""
    for order, want in (("head_desc", 2.0), ("head_asc", 3.0), ("lpt", 2.0)):
        assert ag.makespan(ag.GridKernel("t", order, 1, 0.0), 2, 2, 3) == want


@pytest.mark.parametrize("gpu", ["H100", "H200", "A100-SXM4-80GB", "B200", "GB300"])
@pytest.mark.parametrize("kernel", ["native", "fa2"])
def test_one_at_the_catalog_benchmark_shape(gpu, kernel):
    g = get_gpu(gpu)
    assert ag.shape_factors(g, kernel, ag.REF_GROUPS, ag.REF_SEQ) == (1.0, 1.0)
    m = dataclasses.replace(model_preset("llama3-8b"), seq_length=ag.REF_SEQ,
                            num_attention_heads=ag.REF_GROUPS, kv_channels=128)
    assert ag.rate_factors(m, 1, 1, 1, g, kernel) == (1.0, 1.0)


@pytest.mark.parametrize("kernel", ["native", "fa2"])
def test_monotone_in_sequence_and_batch_heads(kernel):
    """The factor rises with the sequence at fixed batch x heads and with batch x heads at a
    fixed sequence (powers of two, H100's 132 SMs and A100's 108), forward and backward;
    at or below the benchmark's shape it is at most 1."""
    for name in ("H100", "A100-SXM4-80GB"):
        g = get_gpu(name)
        seqs = [512 * 2 ** i for i in range(7)]
        groups = [2 ** i for i in range(9)]
        f = np.array([[ag.shape_factors(g, kernel, gr, s) for s in seqs] for gr in groups])
        assert (np.diff(f, axis=0) >= 0).all() and (np.diff(f, axis=1) >= 0).all()
        assert (f[:5, :6] <= 1 + 1e-12).all()   # at most 16 x 16,384: not above the benchmark
        assert (f[0, 0] < 0.05).all() and (0.9 < f[-1, -1]).all() and (f[-1, -1] < 1.1).all()


def test_arrays_equal_scalars_and_the_time_divides_by_them():
    m = model_preset("llama3-70b")
    g = get_gpu("H100")
    b, tp, cp = np.array([1, 2, 1, 4]), np.array([8, 8, 4, 2]), np.array([1, 2, 1, 1])
    fa, ba = ag.rate_factors(m, b, tp, cp, g, "native")
    ta, tba = attention_time.attention_time_fwd(m, b, tp, cp, True, g)
    for i in range(len(b)):
        f, bw = ag.rate_factors(m, int(b[i]), int(tp[i]), int(cp[i]), g, "native")
        assert (fa[i], ba[i]) == (f, bw)
        t, tb = attention_time.attention_time_fwd(m, int(b[i]), int(tp[i]), int(cp[i]), True, g)
        assert (ta[i], tba[i]) == (float(t), float(tb))
    # batch x heads is what counts: 2 x (64/8) = 1 x (64/4)
    assert ag.rate_factors(m, 2, 8, 1, g, "native") == ag.rate_factors(m, 1, 4, 1, g, "native")


def test_no_grid_without_sms_or_on_amd():
    m = model_preset("llama3-8b")
    for g in (get_gpu("MI300X"), dataclasses.replace(get_gpu("H100"), sm_count=None)):
        assert ag.kernels(g, "native") is None
        assert ag.rate_factors(m, 1, 1, 1, g, "native") == (1.0, 1.0)
    assert ag.kernels(get_gpu("A100-SXM4-80GB"), "native") == (ag.FA2_FWD, ag.FA2_BWD)
    assert ag.kernels(get_gpu("H100"), "native") == (ag.CUDNN_FWD, ag.CUDNN_BWD)
    assert ag.kernels(get_gpu("H100"), "fa2") == (ag.FA2_FWD, ag.FA2_BWD)


def test_large_grids_extrapolate_the_steady_state(monkeypatch):
    """Past ``MAX_JOBS`` CTAs the schedule of the first groups plus the rest's work over the
    SMs is within 0.1 % of the whole list schedule."""
    k = ag.CUDNN_FWD
    approx = ag.makespan.__wrapped__(k, 512, 128, 132)
    monkeypatch.setattr(ag, "MAX_JOBS", 10 ** 7)
    exact = ag.makespan.__wrapped__(k, 512, 128, 132)
    assert approx == pytest.approx(exact, rel=1e-3)


def test_windowed_layers_take_their_own_grid():
    """A sliding window caps each CTA's reach: gpt-oss's 128-token windows on H100 (no
    measured window class there) make the mean layer's factor the share-weighted harmonic
    mean of the full and the windowed grids, times the head-dim factor (head dim 64)."""
    from strategies.cost.attention_counts import window_share
    m = model_preset("gpt-oss-120b")
    g = get_gpu("H100")
    n = m.seq_length // ag.TILE
    ref = ag.grid_factor(ag.CUDNN_FWD, ag.REF_GROUPS, ag.REF_SEQ // ag.TILE, 132) \
        / ag.head_dim_factor(ag.CUDNN_FWD, 128)
    full = ag.grid_factor(ag.CUDNN_FWD, 64, n, 132) / ref
    win = ag.grid_factor(ag.CUDNN_FWD, 64, n, 132, 2) / ref
    w = window_share(m)
    f, _ = ag.rate_factors(m, 1, 1, 1, g, "native")
    assert f == pytest.approx(1 / ((1 - w) / full + w / win), rel=1e-12)
    assert ag.rate_factors(m, 1, 1, 1, g, "native", windows=False)[0] == pytest.approx(full)


def test_bad_kernel_fields_are_refused_by_name():
    with pytest.raises(SpecError, match="GridKernel.order"):
        ag.GridKernel("t", "random", 1, 0.0)
    with pytest.raises(SpecError, match="GridKernel.ctas_per_sm"):
        ag.GridKernel("t", "lpt", 0, 0.0)
    with pytest.raises(SpecError, match="GridKernel.fixed_tiles"):
        ag.GridKernel("t", "lpt", 1, -1.0)
    with pytest.raises(SpecError, match="makespan"):
        ag.makespan(ag.CUDNN_FWD, 0, 4, 132)


# --- the fit: kernel constants from the H200 microbenchmark, residuals within the band -------

#: (rms of log time over every point, largest |log residual| of a kernel-bound point), as
#: ``python experiments/attention_grid_fit.py`` prints them (rounded up)
BAND = {("native", "fwd"): (0.056, 0.16), ("native", "bwd"): (0.076, 0.14),
        ("fa2", "fwd"): (0.097, 0.40), ("fa2", "bwd"): (0.060, 0.41)}


@pytest.mark.parametrize("kernel,direction", list(BAND), ids=str)
def test_fit_residuals_within_the_measured_band(kernel, direction):
    """The module's constants fit the H200 points within the band the fit script prints, and
    each fixed cost is the least-squares one on the script's 0.25 grid (its neighbours fit
    worse)."""
    gk = fit.KERNELS[(kernel, direction)]
    f = fit.fit_at(kernel, direction, gk)
    rms, worst = BAND[(kernel, direction)]
    assert f.rms <= rms
    kb = f.kernel_bound()
    assert len(kb) >= 100 and max(abs(r) for r in kb) <= worst
    for c in (gk.fixed_tiles - 0.25, gk.fixed_tiles + 0.25):
        other = fit.fit_at(kernel, direction, dataclasses.replace(gk, fixed_tiles=c))
        assert other.rms > f.rms


def test_fit_selects_cudnn_forward_order():
    """cuDNN's forward points select its order: FlashAttention-3's global longest-first
    schedule fits over twice as badly as the tile index's order (rms of log time), and per
    head longest first misses 16,384 tokens x 4 heads by 15-20 % (log time, runs 1 and 2)
    where the tile order fits it within 7 %."""
    lpt = fit.fit("native", "fwd", "lpt", 1, tuple(i * 0.5 for i in range(13)))
    own = fit.fit_at("native", "fwd", ag.CUDNN_FWD)
    assert lpt.rms > 2 * own.rms
    desc = fit.fit_at("native", "fwd", dataclasses.replace(ag.CUDNN_FWD, order="head_desc",
                                                           fixed_tiles=1.5))
    assert desc.rms > own.rms

    def at(f):
        return [r for p, r, _ in f.residuals if (p.seq, p.batch * p.heads) == (16384, 4)]
    assert all(abs(r) < 0.07 for r in at(own)) and all(r < -0.15 for r in at(desc))


@pytest.mark.parametrize("k", KERNELS, ids=lambda k: k.name)
def test_ring_context_parallelism_closed_form(k):
    """cp = 2, one head of 256 tokens a rank (two chunks of one tile): the causal step takes
    its longest CTA, 2 + c0 (x CTAs per SM); the later step half the ranks' two CTAs of one
    tile, half the one CTA of two: ((1 + c0) + (2 + c0))/2; the useful tiles 3 + 2.
    cp = 1 is ``grid_factor``."""
    c0, cps = k.fixed_tiles, k.ctas_per_sm
    want = 5 / 132 / (cps * (2 + c0) + cps * ((1 + c0) + (2 + c0)) / 2)
    assert ag.ring_factor(k, 1, 512, 2, 132) == pytest.approx(want, rel=1e-12)
    assert ag.ring_factor(k, 8, 8192, 1, 132) == ag.grid_factor(k, 8, 64, 132)
    m = dataclasses.replace(model_preset("llama3-8b"), seq_length=8192)
    ref = ag.grid_factor(ag.CUDNN_FWD, ag.REF_GROUPS, ag.REF_SEQ // ag.TILE, 132)
    f, _ = ag.rate_factors(m, 1, 1, np.array([1, 2]), get_gpu("H100"), "native")
    assert f[1] == pytest.approx(ag.ring_factor(ag.CUDNN_FWD, 32, 8192, 2, 132) / ref, rel=1e-12)
    assert ag.ring_factor(ag.CUDNN_FWD, 32, 8192, 2, 132) > ag.grid_factor(ag.CUDNN_FWD, 32, 32,
                                                                           132)


@pytest.mark.parametrize("direction, band", [("fwd", 0.07), ("bwd", 0.05)])
def test_cudnn_grid_holds_out_of_sample(direction, band):
    """The dense table measured after the fit (run4: 512-32,768 tokens × 1-128 heads, head dim
    128) read with the in-sample constants: cuDNN's kernel-bound points within ``band`` rms of
    log time (measured 0.056 forward, 0.032 backward); at head dim 64 head dim 128's rate
    (s0 0) is not (-0.33 forward, -0.22 backward: §5.130's addendum)."""
    f = fit.fit("native", direction)
    res = fit.held_out_residuals(f, "native", direction, fit.held_out_points(128))
    kb = [r for _, r, host in res if not host]
    assert len(res) == 72 and len(kb) >= 50
    assert float(np.sqrt(np.mean(np.square(kb)))) < band
    assert res == fit.held_out_residuals(fit.with_s0(f, 0.0), "native", direction,
                                         fit.held_out_points(128))   # s0 moves no 128 point
    low = [r for _, r, host in fit.held_out_residuals(
        fit.with_s0(f, 0.0), "native", direction, fit.held_out_points(64)) if not host]
    assert max(low) < -0.15         # head dim 64 runs slower than the 128 rate says


# --- the rate by head dim (head_dim_factor, docs/calibration.md §5.131) ----------------------

def test_head_dim_factor_closed_form():
    """``(D/(D+s0)) / (256/(256+s0))`` at ``D = d_qk + d_v``, exactly 1 at head dim 128 and
    for the kernels without an ``s0``; held within the measured 128..384."""
    s0 = ag.CUDNN_FWD.head_dim_s0
    assert s0 == 138.0
    for k in KERNELS:
        assert ag.head_dim_factor(k, 256) == 1.0
    for k in (ag.CUDNN_BWD, ag.FA2_FWD, ag.FA2_BWD):
        assert ag.head_dim_factor(k, 128) == 1.0 and ag.head_dim_factor(k, 384) == 1.0
    want = (128 / (128 + s0)) / (256 / (256 + s0))
    assert ag.head_dim_factor(ag.CUDNN_FWD, 128) == pytest.approx(want, rel=1e-12)
    assert 0.70 < want < 0.78                                 # head dim 64: ~1.35x the time
    assert ag.head_dim_factor(ag.CUDNN_FWD, 64) == ag.head_dim_factor(ag.CUDNN_FWD, 128)
    assert ag.head_dim_factor(ag.CUDNN_FWD, 1024) == ag.head_dim_factor(ag.CUDNN_FWD, 384)
    assert ag.head_dim_factor(ag.CUDNN_FWD, 320) == pytest.approx(
        (320 / (320 + s0)) / (256 / (256 + s0)), rel=1e-12)     # MLA: 192 + 128
    with pytest.raises(SpecError, match="head_dim_factor"):
        ag.head_dim_factor(ag.CUDNN_FWD, 0)
    with pytest.raises(SpecError, match="GridKernel.head_dim_s0"):
        ag.GridKernel("t", "lpt", 1, 0.0, -1.0)


@pytest.mark.parametrize("name", ["llama3-8b", "gpt-oss-120b", "deepseek-v3", "nemotron4-340b"])
def test_attention_time_takes_the_head_dim_factor(monkeypatch, name):
    """The estimate's fused-attention seconds with the head-dim rate over those at head dim
    128's rate (``CUDNN_FWD`` without ``s0``): the forward divides by ``head_dim_factor`` at
    the model's ``head_dim + v_dim`` (1 to 1e-12 at head dim 128; gpt-oss's 64, DeepSeek-V3's
    192 + 128, Nemotron-4's 192), the backward is unchanged."""
    m = dataclasses.replace(model_preset(name), seq_length=4096)
    g = get_gpu("H100")
    b, tp, cp = np.array([1, 2, 4]), np.array([1, 2, 8]), np.array([1, 1, 2])
    after = attention_time.attention_time_fwd(m, b, tp, cp, True, g)
    monkeypatch.setattr(ag, "CUDNN_FWD", dataclasses.replace(ag.CUDNN_FWD, head_dim_s0=0.0))
    before = attention_time.attention_time_fwd(m, b, tp, cp, True, g)
    h = ag.head_dim_factor(ag.GridKernel("x", "head_asc", 1, 1.75, 138.0), m.head_dim + m.v_dim)
    assert (m.head_dim + m.v_dim == 256) == (h == 1.0)
    np.testing.assert_allclose(after[0], before[0] / h, rtol=1e-12)
    np.testing.assert_allclose(after[1], before[1], rtol=1e-12)


def test_head_dim_constant_is_the_fit_and_separates_from_noise():
    """cuDNN forward's ``s0`` is the least-squares one on the fit script's grid over run 4's
    head dims 64 and 192 (its neighbours fit worse) and more than halves the rms of log time
    of having none (0.232 -> 0.097); head dim 64's kernel-bound points then within 0.06 (from
    0.347). The backward's best single ``s0`` explains nothing (rms within 0.005 of none),
    which is why the backward keeps head dim 128's rate."""
    f = fit.fit("native", "fwd")
    s0, rms = fit.fit_s0(f, "native", "fwd", (64, 192))
    assert s0 == ag.CUDNN_FWD.head_dim_s0
    assert fit.rms_at(fit.with_s0(f, 0.0), "native", "fwd", (64, 192)) > 2 * rms
    kb = [r for _, r, host in fit.held_out_residuals(f, "native", "fwd",
                                                      fit.held_out_points(64)) if not host]
    assert len(kb) >= 6 and float(np.sqrt(np.mean(np.square(kb)))) < 0.06
    fb = fit.fit("native", "bwd")
    _, rms_b = fit.fit_s0(fb, "native", "bwd", (64, 192))
    assert fit.rms_at(fb, "native", "bwd", (64, 192)) - rms_b < 0.005
    assert ag.CUDNN_BWD.head_dim_s0 == 0.0
