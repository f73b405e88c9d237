"""GEMM wave quantisation (strategies.cost.gemm_kernel.wave_efficiency, GPU.wave_tile):
closed forms, the scalar and array forms agreeing, the chips it applies to, bad input."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import gemm_kernel, gemm_time, hbm_rate
from strategies.presets import model_preset
from topologies.errors import SpecError
from topologies.gpus import get_gpu, gpu_from_mapping, gpu_to_mapping

A100 = get_gpu("A100-SXM4-80GB")
H100 = get_gpu("H100-SXM5-80GB")


def test_a100_waves_are_256x128_tiles_one_per_sm():
    w = gemm_kernel.gemm_waves(A100)
    assert (w.slots, w.tile_m, w.tile_n) == (108, 256, 128)


def test_one_full_wave_then_one_tile_more():
    """108 tiles fill the 108 slots once (efficiency 1); one tile more needs a second wave
    that holds one tile: 109 / (2 x 108)."""
    w = gemm_kernel.gemm_waves(A100)
    assert gemm_kernel.wave_efficiency(256, 108 * 128, w) == 1.0
    assert gemm_kernel.wave_efficiency(256, 109 * 128, w) == 109 / (2 * 108)
    # 9 x 12 tiles = one wave; a 13th column of tiles: 117 tiles over 2 waves
    assert gemm_kernel.wave_efficiency(9 * 256, 12 * 128, w) == 1.0
    assert gemm_kernel.wave_efficiency(9 * 256, 13 * 128, w) == 117 / (2 * 108)


def test_partial_edge_tile_counts_as_a_tile():
    """A dimension one element past a tile edge opens a new row of tiles: 2 x 54 = 108 tiles
    (one wave) become 3 x 54 = 162 (two waves, 162/216)."""
    w = gemm_kernel.gemm_waves(A100)
    assert gemm_kernel.wave_efficiency(512, 54 * 128, w) == 1.0
    assert gemm_kernel.wave_efficiency(513, 54 * 128, w) == 162 / 216


def _only_the_wave_tile(monkeypatch):
    monkeypatch.setattr(gemm_kernel, "gemm_configs",
                        lambda w: (gemm_kernel.GemmConfig(w.tile_m, w.tile_n, 1, 1.0),))


def test_one_config_is_the_smooth_time_over_the_wave_efficiency(monkeypatch):
    """With the wave tile as the only configuration, the time is §3.15's first rule: the
    smooth time over the wave efficiency; with the full menu it is never slower."""
    w, kn = gemm_kernel.gemm_waves(A100), gemm_kernel.k_knee(A100, "bf16")
    rate = A100.peak("bf16") * A100.matmul_efficiency
    shapes = ((2048, 5376, 14336), (256, 109 * 128, 4096), (8192, 2304, 9216))
    full = [gemm_kernel.gemm_compute(M, N, K, rate, kn, w) for M, N, K in shapes]
    _only_the_wave_tile(monkeypatch)
    for (M, N, K), t in zip(shapes, full):
        smooth = gemm_kernel.gemm_compute(M, N, K, rate, kn)
        waved = gemm_kernel.gemm_compute(M, N, K, rate, kn, w)
        assert waved == pytest.approx(smooth / gemm_kernel.wave_efficiency(M, N, w), rel=1e-15)
        assert smooth <= t <= waved


def test_tile_efficiency_is_the_l2_roofline():
    """1 while A100's L2 (5120 B/clk over 108 SMs x 1024 FMA/clk) feeds the tile's
    2 (tm + tn) / (tm tn) bytes per FMA; below that the feed over the need."""
    feed = 5120 / (108 * 1024)
    for t in ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256)):
        assert gemm_kernel.tile_efficiency(*t) == 1.0
    assert gemm_kernel.tile_efficiency(128, 64) == feed / (2 * 192 / 8192)
    assert gemm_kernel.tile_efficiency(64, 64) == feed / (2 * 128 / 4096)
    assert gemm_kernel.tile_efficiency(64, 64) == pytest.approx(0.7407, abs=1e-4)


def test_menu_is_the_guides_tiles_times_the_split_factors():
    cf = gemm_kernel.gemm_configs(gemm_kernel.gemm_waves(A100))
    assert len(cf) == 8 * 10
    assert {(c.tile_m, c.tile_n) for c in cf} == set(gemm_kernel.GEMM_TILES)
    assert sorted({c.split for c in cf}) == [1, 2, 3, 4, 5, 6, 8, 12, 16, 32]


def test_split_k_reduction_bytes():
    """Each of s slices writes M x N fp32 partial sums and the reduction reads them back."""
    assert gemm_kernel.split_k_bytes(1024, 2048, 1) == 0.0
    assert gemm_kernel.split_k_bytes(1024, 2048, 4) == 2 * 4 * 1024 * 2048 * 4.0
    s = np.array([1.0, 2.0, 32.0])
    assert list(gemm_kernel.split_k_bytes(64.0, 128.0, s)) == [0.0, 2 * 2 * 64 * 128 * 4.0,
                                                               2 * 32 * 64 * 128 * 4.0]


def _config_time(M, N, K, rate, kn, w, tm, tn, s):
    ks = K / s
    units = np.ceil(M / tm) * np.ceil(N / tn) * s
    occ = units / (np.ceil(units / w.slots) * w.slots)
    return (2.0 * M * N * K / (rate * gemm_kernel.tile_efficiency(tm, tn) * gemm_kernel.side_factor(M)
                               * gemm_kernel.side_factor(N) * (ks / (ks + kn)) * occ)
            + gemm_kernel.split_k_bytes(M, N, s) / w.hbm)


def test_small_output_deep_k_splits_k_with_its_reduction():
    """1024 x 1024 x 8192 on A100: 32 tiles of 256x128 fill 32 of 108 SMs; split in 3 they
    are 96 blocks (96/108 busy) at K/3 = 2731 deep, plus 2·3·M·N·4 bytes at the usable HBM
    rate: 104.0 us, against 264.3 us without a choice."""
    w, kn = gemm_kernel.gemm_waves(A100), gemm_kernel.k_knee(A100, "bf16")
    rate = A100.peak("bf16") * A100.matmul_efficiency
    M, N, K = 1024.0, 1024.0, 8192.0
    ks = K / 3
    exact = (2 * M * N * K / (rate * gemm_kernel.side_factor(M) * gemm_kernel.side_factor(N)
                              * (ks / (ks + kn)) * (96 / 108))
             + 2 * 3 * M * N * 4 / w.hbm)
    t = gemm_kernel.gemm_compute(M, N, K, rate, kn, w)
    assert t == pytest.approx(exact, rel=1e-14)
    assert t == pytest.approx(104.0e-6, abs=0.05e-6)
    assert w.hbm == A100.hbm_bandwidth * hbm_rate.HBM_EFFICIENCY
    for c in gemm_kernel.gemm_configs(w):
        assert t <= _config_time(M, N, K, rate, kn, w, c.tile_m, c.tile_n, c.split) * (1 + 1e-15)
    # the unsplit wave tile: 32/108 busy
    assert _config_time(M, N, K, rate, kn, w, 256, 128, 1) == pytest.approx(264.3e-6, abs=0.05e-6)


def test_mid_output_picks_the_smaller_tile_not_a_split():
    """2048 x 1024 x 4096: 64 tiles of 256x128 (64/108 busy), 128 of 128x128 (two waves,
    128/216); 256 tiles of 128x64 are three waves, 256/324 busy, at the tile's L2-bound
    0.988: the fastest configuration, unsplit."""
    w, kn = gemm_kernel.gemm_waves(A100), gemm_kernel.k_knee(A100, "bf16")
    rate = A100.peak("bf16") * A100.matmul_efficiency
    M, N, K = 2048.0, 1024.0, 4096.0
    exact = 2 * M * N * K / (rate * gemm_kernel.tile_efficiency(128, 64) * gemm_kernel.side_factor(M)
                             * gemm_kernel.side_factor(N) * (K / (K + kn)) * (256 / 324))
    assert gemm_kernel.gemm_compute(M, N, K, rate, kn, w) == pytest.approx(exact, rel=1e-14)
    assert gemm_kernel.gemm_compute(M, N, K, rate, kn, w) < _config_time(M, N, K, rate, kn, w,
                                                                          256, 128, 1)


def test_reduction_traffic_is_charged(monkeypatch):
    """Without the reduction's bytes split-K could only be faster."""
    w, kn = gemm_kernel.gemm_waves(A100), gemm_kernel.k_knee(A100, "bf16")
    rate = A100.peak("bf16") * A100.matmul_efficiency
    t = gemm_kernel.gemm_compute(1024.0, 1024.0, 8192.0, rate, kn, w)
    monkeypatch.setattr(gemm_kernel, "split_k_bytes", lambda M, N, s: 0.0 * s)
    assert gemm_kernel.gemm_compute(1024.0, 1024.0, 8192.0, rate, kn, w) < t


def test_gpt17b_tp2_layer_between_flat_and_one_tile(monkeypatch):
    """The small-GEMM case of §3.15: the choice of tile and split recovers most of the
    256x128-only loss but stays at or above the smooth (no waves) time."""
    m = model_preset("gpt-1.7b")
    flat = gemm_time.gemm_time_fwd(m, 1, 2, 1, 1, replace(A100, wave_tile=None), "bf16")
    full = gemm_time.gemm_time_fwd(m, 1, 2, 1, 1, A100, "bf16")
    _only_the_wave_tile(monkeypatch)
    one = gemm_time.gemm_time_fwd(m, 1, 2, 1, 1, A100, "bf16")
    assert flat <= full < one


def test_many_full_waves_cost_nothing_extra():
    w = gemm_kernel.gemm_waves(A100)
    # 32 x 54 = 1728 tiles = 16 waves of 108
    assert gemm_kernel.wave_efficiency(32 * 256, 54 * 128, w) == 1.0


def test_no_waves_on_hopper_or_without_a_tile():
    assert gemm_kernel.gemm_waves(H100) is None
    assert gemm_kernel.wave_efficiency(256, 109 * 128, None) == 1.0
    assert gemm_kernel.gemm_waves(replace(A100, wave_tile=None)) is None


def test_scalar_and_array_forms_agree():
    w = gemm_kernel.gemm_waves(A100)
    Ms = np.array([256.0, 2048.0, 2304.0, 4096.0, 8192.0 / 3])
    Ns = np.array([109 * 128.0, 5376.0, 1536.0, 14336.0, 7168.0])
    arr = gemm_kernel.wave_efficiency(Ms, Ns, w)
    assert [float(x) for x in arr] == [gemm_kernel.wave_efficiency(M, N, w) for M, N in zip(Ms, Ns)]
    m = model_preset("gpt-1.7b")
    b = np.array([1.0, 2.0, 4.0, 1.0])
    tp = np.array([1.0, 2.0, 8.0, 2.0])
    t = gemm_time.gemm_time_fwd(m, b, tp, 1.0, 1.0, A100, "bf16")
    assert [float(x) for x in t] == [gemm_time.gemm_time_fwd(m, bi, ti, 1.0, 1.0, A100, "bf16")
                                    for bi, ti in zip(b, tp)]
    tb = gemm_time.gemm_time_bwd(m, b, tp, 1.0, 1.0, A100, "bf16")
    assert [float(x) for x in tb] == [gemm_time.gemm_time_bwd(m, bi, ti, 1.0, 1.0, A100, "bf16")
                                     for bi, ti in zip(b, tp)]
    # the configuration choice itself, a split-K shape among them, and a 2-D array
    rate, kn = A100.peak("bf16") * A100.matmul_efficiency, gemm_kernel.k_knee(A100, "bf16")
    Ms = np.array([[1024.0, 2048.0], [256.0, 8192.0]])
    Ns = np.array([[1024.0, 1024.0], [256.0, 2304.0]])
    Ks = np.array([[8192.0, 4096.0], [16384.0, 9216.0]])
    arr = gemm_kernel.gemm_compute(Ms, Ns, Ks, rate, kn, w)
    assert arr.shape == (2, 2)
    assert gemm_kernel.gemm_compute(np.zeros((0,)), 1024.0, 1024.0, rate, kn, w).shape == (0,)
    # repeated shapes are priced once and given back in place
    rep = gemm_kernel.gemm_compute(np.array([1024.0, 2048.0, 1024.0]),
                                    np.array([1024.0, 1024.0, 1024.0]),
                                    np.array([8192.0, 4096.0, 8192.0]), rate, kn, w)
    assert rep[0] == rep[2] == gemm_kernel.gemm_compute(1024.0, 1024.0, 8192.0, rate, kn, w)
    assert rep[1] == gemm_kernel.gemm_compute(2048.0, 1024.0, 4096.0, rate, kn, w)
    assert [float(x) for x in arr.ravel()] == [
        float(gemm_kernel.gemm_compute(M, N, K, rate, kn, w))
        for M, N, K in zip(Ms.ravel(), Ns.ravel(), Ks.ravel())]


def test_a100_layer_is_slower_with_waves_and_h100_unchanged():
    m = model_preset("gpt-1.7b")
    flat = replace(A100, wave_tile=None)
    assert gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, A100, "bf16") > \
        gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, flat, "bf16")
    assert gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, H100, "bf16") == \
        gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, replace(H100, wave_tile=None), "bf16")


@pytest.mark.parametrize("tile, rule", [
    ((0, 128), "two integers"), ((256,), "two integers"), ((256, 2048), "two integers"),
    ((256.0, 128), "two integers"),
])
def test_bad_wave_tile_is_refused(tile, rule):
    with pytest.raises(SpecError, match=rule) as e:
        replace(A100, wave_tile=tile)
    assert "gpu.wave_tile" in str(e.value)


def test_wave_tile_needs_an_sm_count():
    with pytest.raises(SpecError, match="sm_count"):
        replace(A100, sm_count=None)


BASE = {"name": "custom-ampere", "bf16_tflops": 312, "hbm_gib": 80, "hbm_tbps": 2.0,
        "sm_count": 108}


def test_yaml_wave_tile_round_trips():
    g = gpu_from_mapping({**BASE, "wave_tile": [256, 128]})
    assert g.wave_tile == (256, 128)
    d = gpu_to_mapping(g)
    assert d["wave_tile"] == [256, 128]
    assert gpu_from_mapping(d) == g
    assert gpu_from_mapping(BASE).wave_tile is None


@pytest.mark.parametrize("value", [[256], [256, 0], [256, 12.5], "256x128", [256, 4096],
                                   [True, 128]])
def test_yaml_bad_wave_tile_names_the_field(value):
    with pytest.raises(SpecError) as e:
        gpu_from_mapping({**BASE, "wave_tile": value})
    assert "gpu.wave_tile" in str(e.value)
