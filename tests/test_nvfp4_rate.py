"""The fp4 GEMM rate of the Blackwell parts (docs/calibration.md §5.178): on Blackwell Ultra
(B300, GB300) the fp8 efficiency times GB300's sustained NVFP4-over-fp8 fraction on the Azure
harness; on B200 and GB200 the fp8 fraction; ``fp4_matmul_efficiency`` validated and carried by
a custom GPU's mapping."""
from dataclasses import replace

import pytest

from topologies.errors import SpecError
from topologies.gpus import get_gpu, gpu_from_mapping, gpu_to_mapping
from topologies.gpus.sustained import (AZURE_FP4_SUSTAINED, AZURE_FP8_SUSTAINED, GB300_FP4_PEAK,
                                       GB300_FP8_PEAK, SM103_FP4_OVER_FP8,
                                       fp4_over_fp8_fraction)


def test_sm103_ratio_closed_form():
    """(fp4 rate / 15000) / (fp8 rate / 5000) of GB300's two long runs, averaged: 0.871."""
    want = ((8640.3 / 15000) / (3308.5 / 5000) + (8555.1 / 15000) / (3271.3 / 5000)) / 2
    assert SM103_FP4_OVER_FP8 == pytest.approx(want, rel=1e-12)
    assert SM103_FP4_OVER_FP8 == pytest.approx(0.8711, abs=1e-4)
    assert AZURE_FP4_SUSTAINED["GB300"] == (8640.3, 8555.1)
    g = get_gpu("GB300")
    assert (GB300_FP8_PEAK, GB300_FP4_PEAK) == (g.peak("fp8") / 1e12, g.peak("fp4") / 1e12)


def test_blackwell_ultra_fp4_is_fp8_fraction_times_the_ratio():
    """GB300 and B300: nvfp4 GEMMs (the fp4 rate) run at fp8 efficiency x 0.871 of the fp4 peak, so
    GB300's sustained fp4 rate over its fp8 rate is the harness's own 2.613 (not the peaks' 3)."""
    for name in ("GB300", "B300"):
        g = get_gpu(name)
        want = g.fp8_matmul_efficiency * SM103_FP4_OVER_FP8
        assert g.fp4_matmul_efficiency == pytest.approx(want, rel=1e-12)
        assert g.gemm_efficiency("nvfp4") == g.gemm_efficiency("fp4")
        assert g.gemm_efficiency("nvfp4") == pytest.approx(want, rel=1e-12)
        assert g.gemm_efficiency("fp8") == g.gemm_efficiency("mxfp8") == g.fp8_matmul_efficiency
    g = get_gpu("GB300")
    catalog = g.peak("fp4") * g.gemm_efficiency("fp4") / (g.peak("fp8") * g.gemm_efficiency("fp8"))
    harness = sum(a / b for a, b in zip(AZURE_FP4_SUSTAINED["GB300"],
                                        AZURE_FP8_SUSTAINED["GB300"])) / 2
    assert catalog == pytest.approx(harness, rel=1e-12)
    assert catalog == pytest.approx(2.613, abs=1e-3)


def test_sm100_keeps_the_fp8_fraction():
    """B200 and GB200 set no fp4 efficiency: fp4 runs at the fp8 fraction; GB200's own harness
    runs would give 1.32 (fp4 2.64x fp8 on 2x peaks), the sm_100 conflict that keeps it so."""
    for name in ("B200", "GB200"):
        g = get_gpu(name)
        assert g.fp4_matmul_efficiency is None
        assert g.gemm_efficiency("nvfp4") == g.fp8_matmul_efficiency
    assert fp4_over_fp8_fraction("GB200", 5000, 10000) == pytest.approx(1.318, abs=1e-3)


def test_unset_fp4_efficiency_falls_back():
    """Without ``fp4_matmul_efficiency`` a GPU's fp4 GEMMs take its fp8 efficiency, and without
    that its matmul efficiency (a custom GPU giving only the 16-bit one)."""
    g = replace(get_gpu("GB300"), fp4_matmul_efficiency=None)
    assert g.gemm_efficiency("nvfp4") == g.fp8_matmul_efficiency
    g = replace(g, fp8_matmul_efficiency=None)
    assert g.gemm_efficiency("nvfp4") == g.matmul_efficiency


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_bad_fp4_efficiency_refused(bad):
    with pytest.raises(SpecError, match="fp4_matmul_efficiency"):
        replace(get_gpu("GB300"), fp4_matmul_efficiency=bad)
    d = gpu_to_mapping(replace(get_gpu("GB300"), name="my-gb300"))
    d["fp4_matmul_efficiency"] = bad
    with pytest.raises(SpecError, match="fp4_matmul_efficiency"):
        gpu_from_mapping(d)


def test_custom_gpu_round_trips_the_fp4_efficiency():
    g = replace(get_gpu("GB300"), name="my-gb300")
    d = gpu_to_mapping(g)
    assert d["fp4_matmul_efficiency"] == g.fp4_matmul_efficiency
    assert gpu_from_mapping(d) == g
    assert "fp4_matmul_efficiency" not in gpu_to_mapping(replace(get_gpu("GB200"), name="x"))
