"""Sustained-over-burst GEMM clock ratios, from which the catalog's Blackwell efficiencies
derive (``topologies.gpus.catalog``): the power rule (``sustained_ratio``: a measured part's
ratio carried by the cube root of the power per SM), the sustained fp8 GEMM rates of one public
harness (``AZURE_FP8_SUSTAINED``, ``harness_ratio``), the sm_100 fp8 rule built on them
(``sm100_fp8_ratio``) and the same harness's NVFP4 runs (``AZURE_FP4_SUSTAINED``,
``fp4_over_fp8_fraction``: Blackwell Ultra's fp4 fraction). Ratios are dimensionless; rates
TFLOP/s. Sources: docs/calibration.md §3.1, §5.41, §5.77, §5.178.
"""
from __future__ import annotations

B200_SUSTAINED_RATIO = 1421 / 1745   # node MSMF / MAMF of 8 x B200 at 1000 W (148 SMs)


def sustained_ratio(tdp_w: float, sms: int, ref_ratio: float = B200_SUSTAINED_RATIO,
                    ref_tdp_w: float = 1000, ref_sms: int = 148) -> float:
    """Sustained-over-burst GEMM clock of a Blackwell part at ``tdp_w`` watts over ``sms`` SMs:
    a measured part's ratio (``ref_ratio`` at ``ref_tdp_w`` W over ``ref_sms`` SMs; default
    B200's bf16 node MSMF / MAMF at 1000 W, 148 SMs) times the cube root of the power per SM
    relative to that part's, at most 1 (the burst clock)."""
    return min(1.0, ref_ratio * (tdp_w / sms / (ref_tdp_w / ref_sms)) ** (1 / 3))


# Sustained fp8 GEMM rates of four parts measured with one harness (docs/calibration.md §5.41):
# Azure/AI-benchmarking-guide (github.com/Azure/AI-benchmarking-guide, Azure_Results/
# ND_H100_v5_results.md, ND_H200_v5_results.md, ND_GB200_v6_results.md, ND_GB300_v6_results.md):
# superbench's cublaslt_gemm (cuBLASLt), fp8 e4m3, random operands, 10,000 warm-up then 1,000
# timed back-to-back iterations on one GPU; TFLOP/s at m = n = k = 16384 and 32768 (about 33 s
# and 4.5 min of saturated work on GB200, so the clock the part holds at its power limit).
AZURE_FP8_SUSTAINED = {
    "H100-SXM5-80GB": (1377.3, 1382.2),   # CUDA 12.6, driver 560.35.03
    "H200-SXM-141GB": (1366.3, 1349.5),   # CUDA 12.6, driver 560.28.03
    "GB200": (2906.9, 2825.6),            # CUDA 12.8, driver 570.133.20
    "GB300": (3308.5, 3271.3),            # CUDA 13.0, driver 580.82.07
}
#: the Hopper parts' catalog fp8 fractions and dense fp8 peak (TFLOP/s), the harness's anchors
HOPPER_FP8 = {"H100-SXM5-80GB": 0.665, "H200-SXM-141GB": 0.66}
HOPPER_FP8_PEAK = 1978.9


def harness_ratio(part: str, burst_tflops: float) -> float:
    """Sustained-over-burst GEMM clock of ``part`` read from the Azure harness
    (``AZURE_FP8_SUSTAINED``): its rate over a Hopper part's at the same shape, times that
    part's catalog sustained fp8 rate, over ``part``'s mamf-finder burst (TFLOP/s); the mean over
    H100 and H200 and both shapes, so the harness's own kernel quality cancels."""
    vals = [a / b * eff * HOPPER_FP8_PEAK / burst_tflops
            for ref, eff in HOPPER_FP8.items()
            for a, b in zip(AZURE_FP8_SUSTAINED[part], AZURE_FP8_SUSTAINED[ref])]
    return sum(vals) / len(vals)


#: mamf-finder's fp8 burst of GB200 (the catalog's GB200 and GB300 fp8 fractions), TFLOP/s
GB200_FP8_MAMF = 3615.6
#: GB200's sustained/burst ratio in fp8, measured (the power rule gives 0.865 and is not used
#: for fp8); bf16 has no sustained measurement on a Grace-Blackwell part and keeps the rule
GB200_FP8_SUSTAINED_RATIO = harness_ratio("GB200", GB200_FP8_MAMF)
#: mamf-finder's fp8 burst of B200 (ml-engineering 744d01e, torch 2.7.1+cu128), TFLOP/s
B200_FP8_MAMF = 3432.5


def sm100_fp8_ratio(tdp_w: float, sms: int) -> float:
    """Sustained-over-burst fp8 GEMM clock of a GB100-die (sm_100) part at ``tdp_w`` W over
    ``sms`` SMs: GB200's measured fp8 ratio (``GB200_FP8_SUSTAINED_RATIO``, 1200 W, 148 SMs)
    carried by the power rule (``sustained_ratio``), docs/calibration.md §5.77. B200 (1000 W):
    0.759 · (1000/1200)^(1/3) = 0.714, not B200's bf16 ratio 0.814: the one sm_100 fp8
    measurement sits 12 % below the bf16 rule at 1200 W, and B200 is the same die and kernels
    at less power per SM, so its fp8 GEMMs cannot sustain more than GB200's."""
    return sustained_ratio(tdp_w, sms, GB200_FP8_SUSTAINED_RATIO, 1200, 148)


# The same harness's fp4 runs (docs/calibration.md §5.178), same files, drivers, warm-up and
# timed loop as ``AZURE_FP8_SUSTAINED``: ``cublaslt_gemm -t fp4e2m1`` of the superbench fork
# the harness builds (github.com/gitaumark/superbenchmark, 1089cfc of 2025-06-18,
# ``superbench/benchmarks/micro_benchmarks/cublaslt_gemm/cublaslt_utils.cc``
# ``cublasLtGemm::Setup``): A and B ``CUDA_R_4F_E2M1`` with
# ``CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3`` block scales (NVFP4: an E4M3 scale per 16
# elements), D written as NVFP4 with its block scales computed in the epilogue
# (``D_OUT_SCALE_MODE`` VEC16_UE4M3), fp32 accumulation, fast accumulation on as for fp8;
# TFLOP/s at m = n = k = 16384 and 32768.
AZURE_FP4_SUSTAINED = {
    "GB200": (7627.6, 7487.2),            # CUDA 12.8, driver 570.133.20
    "GB300": (8640.3, 8555.1),            # CUDA 13.0, driver 580.82.07
}
#: GB300's datasheet dense peaks (TFLOP/s), fp8 and fp4: its catalog row reads them here
GB300_FP8_PEAK, GB300_FP4_PEAK = 5000.0, 15000.0


def fp4_over_fp8_fraction(part: str, fp8_peak: float, fp4_peak: float) -> float:
    """The fraction of its fp4 peak ``part`` sustains in the harness's NVFP4 runs over the
    fraction of its fp8 peak it sustains in the fp8 runs of the same file (``fp8_peak``,
    ``fp4_peak``: the part's dense peaks, TFLOP/s), mean of the two shapes. Read on one part
    and one harness, the kernel quality and clock the harness holds on that part cancel only
    to the extent fp4 and fp8 share them: it is the measured fp4 rate relative to fp8's."""
    vals = [(a / fp4_peak) / (b / fp8_peak)
            for a, b in zip(AZURE_FP4_SUSTAINED[part], AZURE_FP8_SUSTAINED[part])]
    return sum(vals) / len(vals)


#: Blackwell Ultra (sm_103: GB300, B300): fp4's sustained fraction of its peak over fp8's, from
#: GB300's harness runs, 0.871 (fp4 runs 2.61x fp8 where the datasheet peaks are 3x); the
#: catalog's GB300 and B300 ``fp4_matmul_efficiency`` = fp8 efficiency x this (§5.178). sm_100
#: (B200, GB200) keeps fp4 = the fp8 fraction: GB200's runs give 1.32 (fp4 2.64x fp8 where the
#: peaks are 2x) against 0.76-0.83 from B200's public burst MXF4 GEMMs (DeepGEMM PR #348), so
#: the sm_100 sources disagree and neither is adopted
SM103_FP4_OVER_FP8 = fp4_over_fp8_fraction("GB300", GB300_FP8_PEAK, GB300_FP4_PEAK)
