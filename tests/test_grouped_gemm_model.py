"""torch._grouped_mm's waves (docs/calibration.md §5.123): the tiles of every local expert share
one persistent kernel's waves on sm_90; closed forms, the profiles that run it, and the model
against the H200 measurements (``experiments/grouped_gemm_model.py``)."""
from __future__ import annotations

import math
import os
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import grouped_gemm_model as ggm  # noqa: E402
from strategies.cost import gemm_kernel, gemm_time  # noqa: E402
from strategies.cost.layer_time import layer_time  # noqa: E402
from strategies.errors import SpecError  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from strategies.hf_config import load_model_arg  # noqa: E402
from strategies.stacks.expert_gemm import (TORCH_GROUPED_MM, ExpertGemmLaunch,  # noqa: E402
                                           GroupedTiles)
from topologies.gpus import get_gpu  # noqa: E402

H200 = get_gpu("H200-SXM-141GB")
TILES = TORCH_GROUPED_MM.tiles


def test_occupancy_closed_forms() -> None:
    """Tiles of all groups in one queue over 132 slots, row tiles rounded up to the cluster."""
    # one group 128 x 6144 (Mixtral fc2 forward at 128 tokens): 64x128 tiles, 2 x 48 = 96
    assert gemm_kernel.grouped_occupancy(1, 128, 6144, 64, 128, 2, 132) == 96 / 132
    # 16 groups 512 x 768 (Qwen3-30B-A3B fc2 data gradient): 128x256, 4 x 3 x 16 = 192 tiles
    assert gemm_kernel.grouped_occupancy(16, 512, 768, 128, 256, 2, 132) == 192 / 264
    # one 128-row tile per group rounds up to the 2-CTA cluster: 3 groups x 2 x 1 = 6
    assert gemm_kernel.grouped_occupancy(3, 100, 200, 128, 256, 2, 132) == 6 / 132
    assert gemm_kernel.grouped_occupancy(3, 100, 200, 128, 256, 1, 132) == 3 / 132
    # full waves: 11 groups x 2 x 6 = 132 tiles over 132 slots; 2 x 8 x 8 = 128 of them
    assert gemm_kernel.grouped_occupancy(11, 256, 1536, 128, 256, 2, 132) == 1.0
    assert gemm_kernel.grouped_occupancy(2, 1024, 2048, 128, 256, 2, 132) == 128 / 132
    # arrays equal scalars
    rows = np.array([128.0, 512.0, 2048.0])
    got = gemm_kernel.grouped_occupancy(16, rows, 768, 128, 256, 2, 132)
    for i, r in enumerate(rows):
        assert got[i] == gemm_kernel.grouped_occupancy(16, r, 768, 128, 256, 2, 132)


def test_tile_dispatch() -> None:
    """GroupMM.cu: 64x128 when the per-group M or N is at most 128, else 128x256."""
    assert tuple(map(int, TILES.tile_of(128, 4096))) == (64, 128)
    assert tuple(map(int, TILES.tile_of(4096, 128))) == (64, 128)
    assert tuple(map(int, TILES.tile_of(129, 4096))) == (128, 256)


def test_unit_closed_form() -> None:
    """Mixtral fc2 forward at 128 tokens under torchtitan on H200: compute · 132/96 + t0."""
    m = load_model_arg("mixtral-8x22b")
    fw = get_profile("torchtitan")
    gemm = (1.0, 128.0, float(m.hidden_size), float(m.moe_ffn_hidden_size or m.ffn_hidden_size),
            True)
    sh = gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8, fw)
    assert isinstance(sh[0], gemm_time.GroupedShare)
    f = gemm_time.gemm_units([gemm], 1, H200, "bf16", fw=fw, shares=sh, backward=False)[0][1]
    rate, hbm, es = gemm_time._rates(H200, "bf16")
    u = gemm_kernel.gemm_compute(128.0, gemm[2], gemm[3], rate, gemm_kernel.k_knee(H200, "bf16"))
    expect = u / (96 / 132) + gemm_kernel.gemm_fixed_s(H200)
    mem = (es * (128 * gemm[3] + gemm[3] * gemm[2]) + es * 128 * gemm[2]) / hbm
    assert mem < expect
    assert f == pytest.approx(expect, rel=1e-12)


def test_elsewhere_unchanged() -> None:
    """No waves off sm_90, in another precision or on another stack: the plain share."""
    m = load_model_arg("qwen3-30b-a3b")
    fw = get_profile("torchtitan")
    plain = replace(fw, expert_gemm_launch=replace(TORCH_GROUPED_MM, tiles=None))
    gemm = (16.0, 512.0, 768.0, 2048.0, True)
    for gpu, dtype in ((get_gpu("B200-SXM-180GB"), "bf16"), (H200, "fp8"),
                       (get_gpu("A100-SXM4-80GB"), "bf16")):
        a = gemm_time.gemm_units([gemm], 1, gpu, dtype, fw=fw,
                                 shares=gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8, fw))
        b = gemm_time.gemm_units([gemm], 1, gpu, dtype, fw=plain,
                                 shares=gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8,
                                                               plain))
        assert a == b
    for name in ("megatron-core", "nemo", "automodel", "hai-llm"):
        shares = gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8, get_profile(name))
        assert not isinstance(shares[0], gemm_time.GroupedShare)
    # the grouped kernel's waves only slow a GEMM down, on sm_90 in bf16
    a = gemm_time.gemm_units([gemm], 1, H200, "bf16", fw=fw,
                             shares=gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8, fw))
    b = gemm_time.gemm_units([gemm], 1, H200, "bf16", fw=plain,
                             shares=gemm_time.fixed_shares([("routed_mlp", gemm)], m, 8, plain))
    # dgrad 16 x 512 x 2048 output: 16·4·8 = 512 tiles, 4 waves of 132 at 0.97; wgrad
    # 2048 x 768: 16·16·3 = 768 tiles, 6 waves at 0.97
    assert all(x >= y for x, y in zip(a[0][1:], b[0][1:]) if x is not None)
    assert a[0][1] > b[0][1]


def test_layer_time_arrays_equal_scalars() -> None:
    """layer_time over an ep array under torchtitan equals each scalar, bit for bit."""
    m = load_model_arg("qwen3-30b-a3b")
    fw = get_profile("torchtitan")
    eps = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    arr = layer_time(m, b=1, tp=1, cp=1, ep=eps, sp=False, flash=True, recompute=0,
                     gpu=H200, dtype="bf16", fw=fw)
    for i, e in enumerate(eps):
        one = layer_time(m, b=1, tp=1, cp=1, ep=e, sp=False, flash=True, recompute=0,
                         gpu=H200, dtype="bf16", fw=fw)
        assert arr.fwd[i] == one.fwd and arr.bwd[i] == one.bwd


def test_bad_tiles_named() -> None:
    with pytest.raises(SpecError, match="tiles.tile"):
        GroupedTiles("sm_90", "bf16", (128, 0), (64, 128), 128)
    with pytest.raises(SpecError, match="cluster_m"):
        GroupedTiles("sm_90", "bf16", (128, 256), (64, 128), 128, 0)
    with pytest.raises(SpecError, match="expert_gemm_launch.tiles"):
        ExpertGemmLaunch("multi_stream", 4, tiles=TILES)


@pytest.mark.parametrize("run", ggm.RUNS)
def test_model_tracks_measured_grouped_kernel(run: str) -> None:
    """On both H200 runs: every record's model/grouped within the measured band 0.69-1.25
    (asserted as [0.65, 1.30]), the geometric mean 0.976-0.980 (asserted in [0.95, 1.0]), the
    waves' mean |ln| below the no-waves rule's (0.109 < 0.118, 0.113 < 0.120); against one
    cuBLAS GEMM of the same rows (the dense model's own error divided out) the waves' mean
    |ln| 0.123-0.126 against 0.153-0.154, and each of the six records whose tiles fill under
    80 % of their waves closer with the waves than without."""
    rs = ggm.rows(run)
    now, before = ggm.ratios(rs, "grouped"), ggm.ratios(rs, "fused_no_waves")
    assert len(now) == 90
    assert 0.65 <= min(now) and max(now) <= 1.30
    gm, err = ggm.log_error(now)
    gm0, err0 = ggm.log_error(before)
    assert 0.95 <= gm <= 1.0
    assert err < err0
    rel, rel0 = ggm.over_dense_errors(rs, "grouped"), ggm.over_dense_errors(rs, "fused_no_waves")
    assert sum(rel) / len(rel) < 0.13 < 0.15 < sum(rel0) / len(rel0)
    low = [r for r in rs if r.dense_s and ggm.occupancy(r) < 0.8]
    assert len(low) == 6
    for x, y in zip(ggm.over_dense_errors(low, "grouped"),
                    ggm.over_dense_errors(low, "fused_no_waves")):
        assert x < y


def test_one_group_against_cublas() -> None:
    """Mixtral (one local expert): where the grouped kernel's tiles fill 96 of 132 slots, the
    measured grouped/dense ratio (cuBLAS on the same GEMM) is 1.24-1.35, near 132/96 = 1.375;
    where they fill 97 % it is 0.90-1.23."""
    for run in ggm.RUNS:
        for r in ggm.rows(run):
            if r.model != "mixtral-8x22b" or r.dense_s is None:
                continue
            occ = ggm.occupancy(r)
            ratio = r.grouped_s / r.dense_s
            if occ < 0.8:
                assert 1.2 < ratio < 1.4
            else:
                assert ratio < 1.25
