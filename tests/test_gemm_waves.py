"""GEMM wave quantisation (strategies.cost.compute.wave_efficiency, GPU.wave_tile):
closed forms, the scalar and array forms agreeing, the chips it applies to, bad input."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import compute as ct
from strategies.presets import model_preset
from topologies.errors import SpecError
from topologies.gpus import get_gpu, gpu_from_mapping, gpu_to_mapping

A100 = get_gpu("A100-SXM4-80GB")
H100 = get_gpu("H100-SXM5-80GB")


def test_a100_waves_are_256x128_tiles_one_per_sm():
    w = ct.gemm_waves(A100)
    assert (w.slots, w.tile_m, w.tile_n) == (108, 256, 128)


def test_one_full_wave_then_one_tile_more():
    """108 tiles fill the 108 slots once (efficiency 1); one tile more needs a second wave
    that holds one tile: 109 / (2 x 108)."""
    w = ct.gemm_waves(A100)
    assert ct.wave_efficiency(256, 108 * 128, w) == 1.0
    assert ct.wave_efficiency(256, 109 * 128, w) == 109 / (2 * 108)
    # 9 x 12 tiles = one wave; a 13th column of tiles: 117 tiles over 2 waves
    assert ct.wave_efficiency(9 * 256, 12 * 128, w) == 1.0
    assert ct.wave_efficiency(9 * 256, 13 * 128, w) == 117 / (2 * 108)


def test_partial_edge_tile_counts_as_a_tile():
    """A dimension one element past a tile edge opens a new row of tiles: 2 x 54 = 108 tiles
    (one wave) become 3 x 54 = 162 (two waves, 162/216)."""
    w = ct.gemm_waves(A100)
    assert ct.wave_efficiency(512, 54 * 128, w) == 1.0
    assert ct.wave_efficiency(513, 54 * 128, w) == 162 / 216


def test_compute_time_is_the_smooth_time_over_the_wave_efficiency():
    w, kn = ct.gemm_waves(A100), ct.k_knee(A100, "bf16")
    rate = A100.peak("bf16") * A100.matmul_efficiency
    for M, N, K in ((2048, 5376, 14336), (256, 109 * 128, 4096), (8192, 2304, 9216)):
        smooth = ct._gemm_compute(M, N, K, rate, kn)
        waved = ct._gemm_compute(M, N, K, rate, kn, w)
        assert waved == pytest.approx(smooth / ct.wave_efficiency(M, N, w), rel=1e-15)
        assert waved >= smooth


def test_many_full_waves_cost_nothing_extra():
    w = ct.gemm_waves(A100)
    # 32 x 54 = 1728 tiles = 16 waves of 108
    assert ct.wave_efficiency(32 * 256, 54 * 128, w) == 1.0


def test_no_waves_on_hopper_or_without_a_tile():
    assert ct.gemm_waves(H100) is None
    assert ct.wave_efficiency(256, 109 * 128, None) == 1.0
    assert ct.gemm_waves(replace(A100, wave_tile=None)) is None


def test_scalar_and_array_forms_agree():
    w = ct.gemm_waves(A100)
    Ms = np.array([256.0, 2048.0, 2304.0, 4096.0, 8192.0 / 3])
    Ns = np.array([109 * 128.0, 5376.0, 1536.0, 14336.0, 7168.0])
    arr = ct.wave_efficiency(Ms, Ns, w)
    assert [float(x) for x in arr] == [ct.wave_efficiency(M, N, w) for M, N in zip(Ms, Ns)]
    m = model_preset("gpt-1.7b")
    b = np.array([1.0, 2.0, 4.0])
    tp = np.array([1.0, 2.0, 8.0])
    t = ct.gemm_time_fwd(m, b, tp, 1.0, 1.0, A100, "bf16")
    assert [float(x) for x in t] == [ct.gemm_time_fwd(m, bi, ti, 1.0, 1.0, A100, "bf16")
                                    for bi, ti in zip(b, tp)]


def test_a100_layer_is_slower_with_waves_and_h100_unchanged():
    m = model_preset("gpt-1.7b")
    flat = replace(A100, wave_tile=None)
    assert ct.gemm_time_fwd(m, 1, 1, 1, 1, A100, "bf16") > \
        ct.gemm_time_fwd(m, 1, 1, 1, 1, flat, "bf16")
    assert ct.gemm_time_fwd(m, 1, 1, 1, 1, H100, "bf16") == \
        ct.gemm_time_fwd(m, 1, 1, 1, 1, replace(H100, wave_tile=None), "bf16")


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
