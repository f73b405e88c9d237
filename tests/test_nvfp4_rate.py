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


def test_te_before_2_14_reads_each_nvfp4_tensor_once_more():
    """``splits_rht_cast``: NVFP4 under Transformer Engine v2.8-v2.13 only (None: the newest
    rules); never for the per-tensor fp8 or MXFP8 recipes."""
    from strategies.cost.quantise import TE_FUSED_RHT_CAST, splits_rht_cast
    assert TE_FUSED_RHT_CAST == (2, 14)
    assert [splits_rht_cast("nvfp4", v) for v in (None, (2, 9), (2, 13), (2, 14), (2, 16))] \
        == [False, True, True, False, False]
    for d in ("bf16", "fp8", "fp8-current", "mxfp8", "fp8-blockwise"):
        assert not splits_rht_cast(d, (2, 9))


@pytest.mark.parametrize("preset", ["llama3-70b", "qwen3-30b-a3b", "deepseek-v3"])
def test_split_rht_cast_closed_form(preset):
    """The split costs 2 B per element of every cast but the routed experts' (whose grouped
    kernel was fused already): a dense model's whole cast elements, a MoE model's without its
    routed experts' (``layer_cast_elements(routed=False)``), to floating-point precision."""
    from strategies.cost import quantise
    from strategies.presets import model_preset
    m, g = model_preset(preset), get_gpu("GB300")
    b, tp, cp, sp = 1, 4, 1, True
    f0, b0 = quantise.layer_cast_bytes(m, b, tp, cp, sp, g, "nvfp4", True)
    f1, b1 = quantise.layer_cast_bytes(m, b, tp, cp, sp, g, "nvfp4", True, split_rht=True)
    (lf, lu), (lbf, lbu) = quantise.layer_cast_elements(m, b, tp, cp, sp, True, routed=False)
    assert f1 - f0 == pytest.approx(2.0 * (lf + lu), rel=1e-12)
    assert b1 - b0 == pytest.approx(2.0 * (lbf + lbu), rel=1e-12)
    (af, au), (abf, abu) = quantise.layer_cast_elements(m, b, tp, cp, sp, True)
    if m.layer_shares().get("moe", 0.0) == 0.0:
        assert (lf + lu, lbf + lbu) == pytest.approx((af + au, abf + abu), rel=1e-15)
    else:
        assert lf + lu < af + au and lbf + lbu < abf + abu


def test_cast_time_reads_the_stacks_te_release():
    """``cast_time`` prices the split on a stack whose Transformer Engine is before v2.14 and
    nowhere else: the difference is the closed form's bytes over the usable HBM rate."""
    from dataclasses import replace as rep
    from strategies.cost import elementwise_time, hbm_rate, quantise
    from strategies.framework import get_profile
    from strategies.presets import model_preset
    m, g = model_preset("llama3-70b"), get_gpu("GB300")
    fw = get_profile("megatron-core")
    old, new = rep(fw, te_version=(2, 13)), rep(fw, te_version=(2, 14))
    t_old = elementwise_time.cast_time(m, 1, 4, 1, True, g, "nvfp4", fw=old)
    t_new = elementwise_time.cast_time(m, 1, 4, 1, True, g, "nvfp4", fw=new)
    assert t_new == elementwise_time.cast_time(m, 1, 4, 1, True, g, "nvfp4",
                                               fw=rep(fw, te_version=None))
    (lf, lu), (lbf, lbu) = quantise.layer_cast_elements(m, 1, 4, 1, True, fw.grouped_mlp_casts,
                                                        fw.mlp_act_casts, routed=False)
    hbm = hbm_rate.usable_hbm(g)
    assert t_old[0] - t_new[0] == pytest.approx(2.0 * (lf + lu) / hbm, rel=1e-12)
    assert t_old[1] - t_new[1] == pytest.approx(2.0 * (lbf + lbu) / hbm, rel=1e-12)
    assert elementwise_time.cast_time(m, 1, 4, 1, True, g, "mxfp8", fw=old) == \
        elementwise_time.cast_time(m, 1, 4, 1, True, g, "mxfp8", fw=new)
