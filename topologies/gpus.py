"""GPU catalog from datasheets: dense peak FLOP/s per dtype, HBM capacity and bandwidth.

Units: FLOP/s, bytes, bytes/s. Peaks are *dense* (no 2:4 sparsity).

``matmul_efficiency`` is the fraction of the 16-bit peak that large, well-shaped GEMMs
*sustain* on the part: the maximum sustainable matmul FLOPS (MSMF, the rate once the chip sits
at its power limit, measured with every GPU of the node busy) over the datasheet peak, from
Stas Bekman's public ``mamf-finder`` measurements (ml-engineering, compute/accelerator).
``fp8_matmul_efficiency`` is the same for fp8 GEMMs (``None``: as for 16-bit).
``attention_efficiency`` is the fraction of the 16-bit peak a fused (Flash) attention kernel
reaches on long causal sequences. Each value is a property of the chip measured with
microbenchmarks, never a fit to a training run; docs/calibration.md gives every source.
``exp_rate``: the special-function units' exponential rate (``MUFU.EX2``, exponentials/s)
where the catalog's ``attention_efficiency`` was not measured on the chip itself but taken
from the Blackwell parts (``ATTN_EXP_REF_RATE``): the attention kernel's exposed exponentials
then run at this rate instead (``exp_seconds_offset``, ``strategies.cost.attention_time``); ``None``
elsewhere (the chip's own efficiency already holds its exponentials).
``block_formats``: the block-scaled tensor-core formats (``mxfp8``, ``mxfp4``, ``nvfp4``)
the chip runs natively; ``fp8_tn_only``: its fp8 tensor cores take both operands K-major
only ("TN"; Hopper), so per-tensor fp8 needs transposed copies for the gradient GEMMs
(``cast_copies``); ``tdp_w``: board power (W); ``source``: where the datasheet figures
come from. Training precisions (``--dtype``) map to rates in ``topologies.precision``.
``wave_tile``: the output tile (rows x columns) of the BLAS library's large-GEMM kernel on a
chip whose GEMM kernels launch one thread block per output tile, one block per SM at a time
(Volta/Ampere cuBLAS: 256x128, NVIDIA "Matrix Multiplication Background User's Guide"
§2.3, §3.2); a GEMM then runs in waves of ``sm_count`` tiles and the last one is partly
empty (``strategies.cost.gemm_kernel.wave_efficiency``); it is the largest tile of the kernel
configurations a GEMM is priced over (smaller tiles, split-K: ``gemm_kernel.gemm_configs``).
``None``: no wave quantisation is
modelled (Hopper and later run persistent kernels whose tile schedulers, stream-K among
them, balance the last wave; docs/calibration.md, "GEMM wave quantisation on Ampere").
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from topologies.errors import SpecError
from topologies.gpu_profile import GpuProfile, load_gpu_profile
from topologies.limits import (MAX_HBM_GIB, MAX_HBM_TBPS, MAX_TFLOPS, MIN_FRACTION, MIN_HBM_TBPS,
                               MIN_TFLOPS, check_name, check_number)
from topologies.precision import BLOCK_FORMATS, PRECISIONS

TERA = 1e12
MAX_TILE = 1024   # largest GEMM output tile side accepted in ``GPU.wave_tile`` (elements)
GIB = 1024**3
GB = 1e9

RATES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")  # keys of GPU.peak_flops
#: exponentials/s of the special-function units (SFU ``MUFU.EX2``) of the Blackwell parts
#: (B200, GB200) the catalog's Blackwell ``attention_efficiency`` (0.55, shared by B300 and
#: GB300) describes: 5 TeraExponentials/s, NVIDIA, "Inside NVIDIA Blackwell Ultra: The Chip
#: Powering the AI Factory Era" (developer.nvidia.com/blog, Aug 2025), per-GPU table
#: ("Attention acceleration (SFU EX2)": Blackwell 5, Blackwell Ultra 10.7); NVIDIA's
#: ``exp2`` microbenchmark ("Making Softmax More Efficient with NVIDIA Blackwell Ultra")
#: measures 4,943 Gop/s on GB200 and 10,024 on GB300 (FP32)
ATTN_EXP_REF_RATE = 5e12
BLACKWELL_ULTRA_EXP_RATE = 10.7e12   # the same table's Blackwell Ultra (B300, GB300) rate
MAX_EXP_RATE = 1e15                  # largest exponential rate accepted (exponentials/s)


@dataclass(frozen=True)
class GPU:
    """One accelerator. ``peak_flops`` maps a tensor-core rate (``RATES``) -> dense FLOP/s."""

    name: str
    peak_flops: Mapping[str, float]
    hbm_bytes: float
    hbm_bandwidth: float
    matmul_efficiency: float = 0.8
    attention_efficiency: float = 0.5
    vendor: str = "nvidia"
    aliases: tuple[str, ...] = field(default=(), compare=False)
    fp8_matmul_efficiency: float | None = None
    fa2_attention_efficiency: float | None = None
    sm_count: int | None = None
    block_formats: tuple[str, ...] = ()
    tdp_w: float | None = None
    source: str = field(default="", compare=False)
    #: measured kernel timings (``paraplan calibrate``) the cost model reads in place of the
    #: catalog's efficiencies where they cover a shape (``strategies.cost.measured``)
    profile: GpuProfile | None = None
    fp8_tn_only: bool = False
    wave_tile: tuple[int, int] | None = None
    exp_rate: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("gpu.name", self.name, "must be a non-empty string")
        for k, v in self.peak_flops.items():
            if k not in RATES:
                raise SpecError("gpu.peak_flops", k, f"dtype must be one of {', '.join(RATES)}")
            if not v > 0:
                raise SpecError(f"gpu.peak_flops.{k}", v, "must be > 0 FLOP/s")
        if "bf16" not in self.peak_flops:
            raise SpecError("gpu.peak_flops", dict(self.peak_flops), "must give a bf16 peak")
        for name in ("hbm_bytes", "hbm_bandwidth"):
            if not getattr(self, name) > 0:
                raise SpecError(f"gpu.{name}", getattr(self, name), "must be > 0")
        for name in ("matmul_efficiency", "attention_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise SpecError(f"gpu.{name}", getattr(self, name), "must be in (0, 1]")
        if self.fp8_matmul_efficiency is not None and not 0 < self.fp8_matmul_efficiency <= 1:
            raise SpecError("gpu.fp8_matmul_efficiency", self.fp8_matmul_efficiency,
                            "must be in (0, 1]")
        if self.sm_count is not None and not (isinstance(self.sm_count, int) and self.sm_count > 0):
            raise SpecError("gpu.sm_count", self.sm_count, "must be an integer > 0")
        if self.fa2_attention_efficiency is not None and not 0 < self.fa2_attention_efficiency <= 1:
            raise SpecError("gpu.fa2_attention_efficiency", self.fa2_attention_efficiency,
                            "must be in (0, 1]")
        for f in self.block_formats:
            if f not in BLOCK_FORMATS:
                raise SpecError("gpu.block_formats", f,
                                f"must be among {', '.join(BLOCK_FORMATS)}")
        if self.tdp_w is not None and not 0 < self.tdp_w <= 1e5:
            raise SpecError("gpu.tdp_w", self.tdp_w, "must be in (0, 100000] W")
        if self.exp_rate is not None and not (
                isinstance(self.exp_rate, (int, float)) and not isinstance(self.exp_rate, bool)
                and 0 < self.exp_rate <= MAX_EXP_RATE):
            raise SpecError("gpu.exp_rate", self.exp_rate,
                            f"must be in (0, {MAX_EXP_RATE:g}] exponentials/s")
        if self.wave_tile is not None:
            wt = self.wave_tile
            if not (isinstance(wt, tuple) and len(wt) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_TILE
                            for x in wt)):
                raise SpecError("gpu.wave_tile", wt, f"must be two integers in [1, {MAX_TILE}] "
                                "(output tile rows, columns)")
            if self.sm_count is None:
                raise SpecError("gpu.wave_tile", wt, "needs gpu.sm_count (a wave is one tile "
                                "per SM)")

    def rate_key(self, dtype: str) -> str:
        """The ``peak_flops`` key GEMMs of ``dtype`` (a rate key or a training precision of
        ``topologies.precision``) run at; refused, naming the GPU, the precision and the
        rule, when the chip lacks the tensor cores or the block-scaled format."""
        p = PRECISIONS.get(dtype)
        key = p.rate if p else dtype
        if p is not None and p.block_format and p.block_format not in self.block_formats:
            has = ", ".join(self.block_formats) or "none"
            raise SpecError("dtype", dtype, f"{self.name} has no {p.block_format} block-scaled "
                            f"tensor cores (block formats it has: {has}); "
                            f"{dtype} needs them")
        if key not in self.peak_flops:
            raise SpecError("dtype", dtype, f"{self.name} has no {key} tensor cores "
                            f"(has {', '.join(sorted(self.peak_flops))})")
        return key

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s (FLOP/s) the GEMMs of ``dtype`` run at (see ``rate_key``)."""
        return self.peak_flops[self.rate_key(dtype)]

    def supports(self, dtype: str) -> bool:
        """True when ``peak(dtype)`` would not be refused."""
        try:
            self.rate_key(dtype)
        except SpecError:
            return False
        return True

    def cast_copies(self, dtype: str) -> int:
        """Copies a tensor is quantised into for the GEMMs of ``dtype``: 2 (row-wise and
        column-wise) for block-scaled formats (the scales run along K, which is a different
        axis in the weight gradient) and for per-tensor fp8 on a TN-only chip
        (``fp8_tn_only``: the transposed copy); 1 for per-tensor fp8 elsewhere (Blackwell's
        tensor cores read either layout); 0 for 16-bit precisions (no cast)."""
        p = PRECISIONS.get(dtype)
        return 0 if p is None else p.copies(self.fp8_tn_only)

    def gemm_efficiency(self, dtype: str) -> float:
        """Sustained fraction of ``peak(dtype)`` that large GEMMs reach (see the module doc);
        fp4 GEMMs take the fp8 fraction (the one public sustained fp4 harness, Azure's, is
        compared, not adopted: docs/calibration.md §5.77)."""
        if self.rate_key(dtype) in ("fp8", "fp4") and self.fp8_matmul_efficiency is not None:
            return self.fp8_matmul_efficiency
        return self.matmul_efficiency

    def flash_efficiency(self, kernel: str = "native") -> float:
        """Fraction of the bf16 peak a fused attention kernel reaches: ``"native"`` (a kernel
        written for the chip's own tensor-core instructions: cuDNN / FlashAttention-3 on
        Hopper, FlashAttention-2 up to Ampere) or ``"fa2"`` (FlashAttention-2, which on Hopper
        runs the Ampere ``mma.sync`` path without wgmma/TMA; ``fa2_attention_efficiency``)."""
        if kernel == "fa2" and self.fa2_attention_efficiency is not None:
            return self.fa2_attention_efficiency
        return self.attention_efficiency

    def exp_seconds_offset(self) -> float:
        """Seconds per exponential this chip's special-function units take beyond the rate the
        Blackwell ``attention_efficiency`` describes: ``1/exp_rate - 1/ATTN_EXP_REF_RATE``
        (negative on a faster SFU: Blackwell Ultra -5.35e-14 s); 0.0 where ``exp_rate`` is
        unset or equal to the reference."""
        if self.exp_rate is None:
            return 0.0
        return 1.0 / self.exp_rate - 1.0 / ATTN_EXP_REF_RATE

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / GIB


def _g(name: str, fp32: float, tf32: float | None, bf16: float, fp8: float | None, hbm_gib: float,
       hbm_tbps: float, eff: float, attn: float, vendor: str = "nvidia",
       aliases: tuple[str, ...] = (), fp8_eff: float | None = None,
       fa2: float | None = None, sms: int | None = None, fp4: float | None = None,
       blocks: tuple[str, ...] = (), tdp: float | None = None, src: str = "",
       tn_only: bool = False, wave: tuple[int, int] | None = None,
       exp: float | None = None) -> GPU:
    peaks = {"fp32": fp32 * TERA, "bf16": bf16 * TERA, "fp16": bf16 * TERA}
    if tf32:
        peaks["tf32"] = tf32 * TERA
    if fp8:
        peaks["fp8"] = fp8 * TERA
    if fp4:
        peaks["fp4"] = fp4 * TERA
    return GPU(name, peaks, hbm_gib * GIB, hbm_tbps * 1e12, eff, attn, vendor, aliases, fp8_eff,
               fa2, sms, blocks, tdp, src, fp8_tn_only=tn_only, wave_tile=wave, exp_rate=exp)


# Datasheet values (dense). hbm_gib is the usable capacity the driver reports.
# matmul_efficiency (sustained large-GEMM TFLOP/s / datasheet peak), from mamf-finder
# (github.com/stas00/ml-engineering, compute/accelerator; details in docs/calibration.md):
#   A100 SXM   0.80  MAMF 271.2/312 = 0.869 at the 1410 MHz boost clock, times the clock A100
#                    sustains at its 400 W limit under dense tensor work (1305 MHz, NVIDIA's
#                    HPL Rpeak clock): 0.869 * 1305/1410 = 0.804
#   H100 SXM   0.75  node MSMF of 8 x H200 (same GH100 die, same 700 W): 727-755 TFLOP/s,
#                    slowest GPU 745 -> 745/989 = 0.753; fp8: MAMF 1402.6/1979 = 0.709 times
#                    the bf16 sustained/burst ratio 745/794.5 -> 0.665
#   H200       0.75  as H100 (measured directly: node MSMF 755, slowest 727-745);
#                    fp8 MAMF 1453.4/1979 = 0.734 * 745/834 -> 0.66
#   B200       0.63  node MSMF of 8 x B200: median 1439, slowest 1421 -> 1421/2250 = 0.632;
#                    fp8 MAMF 3432.5/4500 = 0.763 times GB200's measured fp8 ratio carried to
#                    1000 W by the power rule, 0.759 (1000/1200)^(1/3) = 0.714 -> 0.545
#                    (``sm100_fp8_ratio``, §5.77; until §5.77 the bf16 ratio 0.814 -> 0.62)
#   MI300X     0.51  MAMF 668.4/1307.4 = 0.511 (the card sits at its 750 W cap from the first
#                    kernel, so sustained = burst)
#   H100 PCIe  0.62  MAMF 499.5/756 = 0.661 (mag-/gpu_benchmark mamf table) * 745/794.5
#   H100 96GB 500 W (Grand Teton) 0.67: H100 SXM's 0.753 times the clock ratio at 500 W vs
#                    700 W under the cubic power-clock rule, (500/700)^(1/3) = 0.894
#   V100       0.80  not measured by mamf-finder; kept (V100 cuBLAS fp16 ~100 of 125 TFLOP/s)
# Blackwell parts without a node MSMF: their MAMF (burst) times the clock they sustain at their
# own power limit. B200's measured sustained/burst ratio, 1421/1745 = 0.814 at 1000 W over
# 148 SMs, scaled by the power each SM may draw: under DVFS dynamic power ~ f·V² ~ f³, so the
# sustained clock goes as (W per SM)^(1/3) (the rule H100-96GB-500W uses), capped at the burst
# clock (``_sustained_ratio``):
#   B300  (160 SMs, 1100 W): 0.814 (1.1 · 148/160)^(1/3) = 0.819; bf16 MAMF 1769.0/2250,
#         fp8 3353.3/4500 -> 0.64, 0.61
#   GB200 (148 SMs, 1200 W, liquid-cooled): bf16 the rule, 0.814 · 1.2^(1/3) = 0.865; fp8
#         measured instead (§5.41): 0.759, the sustained fp8 GEMM rate of one public harness
#         (AZURE_FP8_SUSTAINED) through H100 and H200 over MAMF (the rule is 14 % above it; the
#         harness ran fp8 only); bf16 MAMF 1822.0/2500, fp8 3615.6/5000 -> 0.63, 0.55
#   GB300 (160 SMs, 1400 W, liquid-cooled): 0.814 (1.4 · 148/160)^(1/3) = 0.887 (the same
#         harness gives 0.872: the rule is kept, 1.8 % above it); no MAMF published: GB200's
#         burst fractions (same 2.5/5 PFLOP/s datasheet rates) -> 0.65, 0.64
# AMD parts (sustained = burst, as MI300X), MAMF over the datasheet peak:
#   MI325X     784.9/1307.4 -> 0.60 (1000 W)
#   MI355X     1565.0/2516.6 -> 0.62 (datasheet 2.5 PFLOP/s = 256 CUs x 4096 FLOP/clk x 2.4 GHz)
# fp4 GEMMs have no public MAMF; they take the fp8 fraction (GPU.gemm_efficiency).
B200_SUSTAINED_RATIO = 1421 / 1745   # node MSMF / MAMF of 8 x B200 at 1000 W (148 SMs)


def _sustained_ratio(tdp_w: float, sms: int, ref_ratio: float = B200_SUSTAINED_RATIO,
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


#: GB200's sustained/burst ratio in fp8, measured (the power rule gives 0.865 and is not used
#: for fp8); bf16 has no sustained measurement on a Grace-Blackwell part and keeps the rule
GB200_FP8_SUSTAINED_RATIO = harness_ratio("GB200", 3615.6)
#: mamf-finder's fp8 burst of B200 (ml-engineering 744d01e, torch 2.7.1+cu128), TFLOP/s
B200_FP8_MAMF = 3432.5


def sm100_fp8_ratio(tdp_w: float, sms: int) -> float:
    """Sustained-over-burst fp8 GEMM clock of a GB100-die (sm_100) part at ``tdp_w`` W over
    ``sms`` SMs: GB200's measured fp8 ratio (``GB200_FP8_SUSTAINED_RATIO``, 1200 W, 148 SMs)
    carried by the power rule (``_sustained_ratio``), docs/calibration.md §5.77. B200 (1000 W):
    0.759 · (1000/1200)^(1/3) = 0.714, not B200's bf16 ratio 0.814: the one sm_100 fp8
    measurement sits 12 % below the bf16 rule at 1200 W, and B200 is the same die and kernels
    at less power per SM, so its fp8 GEMMs cannot sustain more than GB200's."""
    return _sustained_ratio(tdp_w, sms, GB200_FP8_SUSTAINED_RATIO, 1200, 148)

#: B200's HBM3e bandwidth (TB/s): NVIDIA's Blackwell datasheet (nvdam.widen.net/s/wwnsxrhm2w/
#: blackwell-datasheet-3384703, "Individual Blackwell GPU Specifications", HGX B200 column)
#: gives 7.7, as read by ai-dynamo/aiconfigurator PR #1246 and pytorch/pytorch PR #194297
#: (``dram_bw_gbs=7700``); the DGX B200 datasheet's 64 TB/s per 8 GPUs (8.0) is the older figure.
#: The driver agrees: a 7680-bit bus (not 8 x 1024) at a 3996 MHz memory clock, double data
#: rate, 7680/8 · 3996e6 · 2 = 7.672e12 B/s (pytorch/ao PR #4002, ``cudaDeviceProp`` and
#: ``nvidia-smi clocks.max.mem``); docs/calibration.md §5.117
B200_HBM_TBPS = 7.7
B200_HBM_BUS_BITS = 7680        # memory bus width the driver reports (bits)
B200_HBM_CLOCK_HZ = 3996e6      # maximum memory clock nvidia-smi reports (Hz, DDR)

# hbm_gib of the 288 GB parts: usable capacity as reported on the part (270 GiB B300, 279 GiB
# GB300: Verda, "NVIDIA GB300 NVL72: GPU Architecture & Performance", per-GPU table); MI355X
# publishes no TF32 rate (left out).
# tdp_w: the board power of the part as sold in the preset's system (W).
# Sources (dense rates; "sparse" datasheet figures halved):
_NV_HGX = "NVIDIA HGX platform specifications (nvidia.com/en-us/data-center/hgx)"
_SRC = {
    "H100": "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100)",
    "H800": "NVIDIA H800 Tensor Core GPU (SXM5) specifications: H100 SXM5's dense rates, "
            "80 GB HBM3 at 3.35 TB/s, NVLink 400 GB/s (bidirectional), up to 700 W",
    "H200": "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200): "
            "141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s bf16, 1979 fp8, 700 W",
    "B200": "NVIDIA DGX B200 datasheet (resources.nvidia.com/en-us-dgx-systems/dgx-b200-"
            "datasheet): 72 PFLOP/s fp8 training, 144 PFLOP/s fp4 inference (sparse) per 8 "
            "GPUs, 1,440 GB; NVIDIA Blackwell datasheet (HGX B200): 7.7 TB/s HBM3e; "
            + _NV_HGX + ": 1000 W",
    "B300": "NVIDIA DGX B300 datasheet (resources.nvidia.com/en-us-dgx-systems/dgx-b300-"
            "datasheet) and " + _NV_HGX + ": HGX B300 36 PFLOP/s bf16, 72 fp8 (sparse), "
            "108 PFLOP/s dense fp4 per 8 GPUs, 2.3 TB (288 GB/GPU), 8 TB/s; 1100 W",
    "GB200": "NVIDIA GB200 NVL72 specifications (nvidia.com/en-us/data-center/gb200-nvl72): "
             "per 72 GPUs 360 PFLOP/s bf16, 720 fp8, 1,440 fp4 (sparse), up to 13.4 TB HBM3e "
             "(186 GB/GPU), 576 TB/s, NVLink 130 TB/s; 1200 W per GPU",
    "GB300": "NVIDIA GB300 NVL72 specifications (nvidia.com/en-us/data-center/gb300-nvl72): "
             "per 72 GPUs 1,080 PFLOP/s dense fp4, 720 fp8 and 360 bf16 (sparse), 20 TB HBM3e "
             "(288 GB/GPU), 576 TB/s, 800 Gb/s ConnectX-8 per GPU; 1400 W per GPU",
    "MI325X": "AMD Instinct MI325X specifications (amd.com/en/products/accelerators/instinct/"
              "mi300/mi325x.html): 1307.4 TFLOP/s bf16, 2614.9 fp8, 256 GB HBM3E, 6 TB/s, "
              "1000 W",
    "MI355X": "AMD Instinct MI355X specifications (amd.com/en/products/accelerators/instinct/"
              "mi350/mi355x.html): 2.5 PFLOP/s bf16, 5 fp8, 10 MXFP4 (dense), 288 GB HBM3E, "
              "8 TB/s, 1400 W",
}
_BW = ("mxfp8", "mxfp4", "nvfp4")   # Blackwell block-scaled MMA (tcgen05)
# The large-GEMM output tile of Volta/Ampere cuBLAS, one thread block per SM: NVIDIA "Matrix
# Multiplication Background User's Guide" (DU-09799-001), §2.3 (256x128 and 128x256 are the
# most efficient tiles) and §3.2 (A100: 108 SMs, 256x128 tiles, one block per SM, a wave of
# 108 tiles)
AMPERE_WAVE_TILE = (256, 128)
_CATALOG = [
    _g("V100-SXM2-32GB", 15.7, 15.7, 125, None, 32, 0.9, 0.80, 0.45, aliases=("V100",),
       sms=80, tdp=300, wave=AMPERE_WAVE_TILE),
    _g("A100-SXM4-40GB", 19.5, 156, 312, None, 40, 1.555, 0.80, 0.60, aliases=("A100-40GB",),
       sms=108, tdp=400, wave=AMPERE_WAVE_TILE),
    _g("A100-SXM4-80GB", 19.5, 156, 312, None, 80, 2.039, 0.80, 0.60,
       aliases=("A100", "A100-80GB", "A100-SXM-80GB"), sms=108, tdp=400,
       wave=AMPERE_WAVE_TILE),
    _g("H100-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H100", "H100-SXM", "H100-SXM-80GB", "H100-80GB"), fp8_eff=0.665, fa2=0.35,
       sms=132, tdp=700, src=_SRC["H100"], tn_only=True),
    # H800 SXM5: the export variant of H100 SXM5 (same GH100 die, clocks, tensor rates, HBM3
    # and 700 W), NVLink cut to 400 GB/s bidirectional and FP64 to 1 TFLOP/s; efficiencies
    # as H100 SXM (the GEMM path is unchanged)
    _g("H800-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H800", "H800-SXM"), fp8_eff=0.665, fa2=0.35, sms=132, tdp=700,
       src=_SRC["H800"], tn_only=True),
    _g("H100-PCIe-80GB", 51, 378, 756, 1513, 79.6, 2.0, 0.62, 0.50, aliases=("H100-PCIe",),
       fp8_eff=0.55, fa2=0.32, sms=114, tdp=350, src=_SRC["H100"], tn_only=True),
    _g("H100-96GB-500W", 67, 494.7, 989.4, 1978.9, 94.5, 2.4, 0.67, 0.45,
       aliases=("H100-96GB",), fp8_eff=0.595, fa2=0.29, sms=132, tdp=500, tn_only=True),
    _g("H200-SXM-141GB", 67, 494.7, 989.4, 1978.9, 140.0, 4.8, 0.75, 0.56, aliases=("H200",),
       fp8_eff=0.66, fa2=0.35, sms=132, tdp=700, src=_SRC["H200"], tn_only=True),
    _g("B200-SXM-180GB", 80, 1100, 2250, 4500, 180.0, B200_HBM_TBPS, 0.63, 0.55,
       aliases=("B200",),
       fp8_eff=B200_FP8_MAMF / 4500 * sm100_fp8_ratio(1000, 148), sms=148, fp4=9000, blocks=_BW, tdp=1000, src=_SRC["B200"],
       exp=ATTN_EXP_REF_RATE),
    _g("B300-SXM-288GB", 75, 1125, 2250, 4500, 270.0, 8.0,
       1769.0 / 2250 * _sustained_ratio(1100, 160), 0.55, aliases=("B300",),
       fp8_eff=3353.3 / 4500 * _sustained_ratio(1100, 160), sms=160, fp4=13500, blocks=_BW, tdp=1100, src=_SRC["B300"],
       exp=BLACKWELL_ULTRA_EXP_RATE),
    _g("GB200", 80, 1250, 2500, 5000, 186.0, 8.0, 1822.0 / 2500 * _sustained_ratio(1200, 148),
       0.55, aliases=("GB200-NVL72", "B200-NVL72"),
       fp8_eff=3615.6 / 5000 * GB200_FP8_SUSTAINED_RATIO, sms=148, fp4=10000, blocks=_BW,
       tdp=1200, src=_SRC["GB200"], exp=ATTN_EXP_REF_RATE),
    _g("GB300", 80, 1250, 2500, 5000, 279.0, 8.0, 1822.0 / 2500 * _sustained_ratio(1400, 160),
       0.55, aliases=("GB300-NVL72", "B300-NVL72"),
       fp8_eff=3615.6 / 5000 * _sustained_ratio(1400, 160), sms=160, fp4=15000, blocks=_BW,
       tdp=1400, src=_SRC["GB300"], exp=BLACKWELL_ULTRA_EXP_RATE),
    _g("MI300X", 163.4, 653.7, 1307.4, 2614.9, 192.0, 5.3, 0.51, 0.40, vendor="amd",
       aliases=("MI300X-192GB",), sms=304, tdp=750),
    _g("MI325X", 163.4, 653.7, 1307.4, 2614.9, 256.0, 6.0, 0.60, 0.40, vendor="amd",
       aliases=("MI325X-256GB",), sms=304, tdp=1000, src=_SRC["MI325X"]),
    _g("MI355X", 157.3, None, 2516.6, 5033.2, 288.0, 8.0, 0.62, 0.40, vendor="amd",
       aliases=("MI355X-288GB",), sms=256, fp4=10066.3, blocks=("mxfp8", "mxfp4"),
       tdp=1400, src=_SRC["MI355X"]),
]

GPUS: dict[str, GPU] = {g.name: g for g in _CATALOG}
_ALIASES: dict[str, str] = {a.lower(): g.name for g in _CATALOG for a in (g.name, *g.aliases)}


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias (case-insensitive)."""
    key = str(name).strip().lower()
    if key not in _ALIASES:
        raise SpecError("gpu", name, f"unknown GPU; known: {', '.join(GPUS)}")
    return GPUS[_ALIASES[key]]


def gpu_from_mapping(d: Mapping, base_dir: str | None = None) -> GPU:
    """A custom GPU from a YAML mapping: name, bf16_tflops, [fp8_tflops, fp4_tflops,
    fp32_tflops, tf32_tflops], hbm_gib, hbm_tbps, [matmul_efficiency, attention_efficiency,
    fp8_matmul_efficiency, fa2_attention_efficiency, sm_count, vendor, block_formats, tdp_w,
    fp8_tn_only, wave_tile, exp_tera_per_s (the SFU exponential rate, TeraExponentials/s;
    ``GPU.exp_rate``)].

    With ``profile: FILE`` (a ``topologies.gpu_profile`` file, relative to ``base_dir``): the
    GPU named by ``name`` (a catalog name), by the profile's own ``gpu:`` when ``name`` is
    absent, or the custom GPU the other keys describe, carrying the measured profile."""
    if "profile" in d:
        return _with_profile(d, base_dir)
    allowed = {"name", "bf16_tflops", "fp8_tflops", "fp4_tflops", "fp32_tflops", "tf32_tflops",
               "hbm_gib", "hbm_tbps", "matmul_efficiency", "attention_efficiency",
               "fp8_matmul_efficiency", "fa2_attention_efficiency", "sm_count", "vendor",
               "block_formats", "tdp_w", "fp8_tn_only", "wave_tile", "exp_tera_per_s"}
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise SpecError("gpu", unknown[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for req in ("name", "bf16_tflops", "hbm_gib", "hbm_tbps"):
        if req not in d:
            raise SpecError(f"gpu.{req}", None, "is required for a custom GPU")
    hi = {"hbm_gib": MAX_HBM_GIB, "hbm_tbps": MAX_HBM_TBPS, "matmul_efficiency": 1.0,
          "attention_efficiency": 1.0, "fp8_matmul_efficiency": 1.0,
          "fa2_attention_efficiency": 1.0, "sm_count": 4096, "tdp_w": 1e5,
          "exp_tera_per_s": MAX_EXP_RATE / TERA}
    # sanity floors on the rates whose reciprocals the cost model takes (a TFLOP/s, TB/s or
    # efficiency of 5e-324 made a step of NaN seconds)
    floor = {"hbm_tbps": MIN_HBM_TBPS, "matmul_efficiency": MIN_FRACTION,
             "attention_efficiency": MIN_FRACTION, "fp8_matmul_efficiency": MIN_FRACTION,
             "fa2_attention_efficiency": MIN_FRACTION, "exp_tera_per_s": MIN_TFLOPS,
             **{k: MIN_TFLOPS for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops",
                                        "fp32_tflops", "tf32_tflops")}}
    nums = {}
    for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops", "fp32_tflops", "tf32_tflops",
              "hbm_gib", "hbm_tbps", "matmul_efficiency", "attention_efficiency",
              "fp8_matmul_efficiency", "fa2_attention_efficiency", "sm_count", "tdp_w",
              "exp_tera_per_s"):
        if k in d:
            nums[k] = check_number(f"gpu.{k}", d[k], 0.0, hi.get(k, MAX_TFLOPS), lo_open=True,
                                   sane_lo=floor.get(k))
    if "sm_count" in nums and not float(nums["sm_count"]).is_integer():
        raise SpecError("gpu.sm_count", d["sm_count"], "must be an integer > 0")
    blocks = d.get("block_formats", [])
    if not isinstance(blocks, (list, tuple)):
        raise SpecError("gpu.block_formats", blocks,
                        f"must be a list among {', '.join(BLOCK_FORMATS)}")
    blocks = tuple(check_name("gpu.block_formats", b) for b in blocks)
    tn_only = d.get("fp8_tn_only", False)
    if not isinstance(tn_only, bool):
        raise SpecError("gpu.fp8_tn_only", tn_only, "must be true or false")
    wave = d.get("wave_tile")
    if wave is not None:
        if not (isinstance(wave, (list, tuple)) and len(wave) == 2):
            raise SpecError("gpu.wave_tile", wave, "must be a list of two integers (output "
                            "tile rows, columns)")
        sides = [check_number("gpu.wave_tile", x, 1, MAX_TILE) for x in wave]
        if not all(x.is_integer() for x in sides):
            raise SpecError("gpu.wave_tile", wave, "must be two integers (output tile rows, "
                            "columns)")
        wave = (int(sides[0]), int(sides[1]))
    bf16 = nums["bf16_tflops"]
    return _g(check_name("gpu.name", d["name"]), nums.get("fp32_tflops", bf16 / 16),
              nums.get("tf32_tflops", bf16 / 2),
              bf16, nums.get("fp8_tflops"), nums["hbm_gib"], nums["hbm_tbps"],
              nums.get("matmul_efficiency", 0.8), nums.get("attention_efficiency", 0.5),
              check_name("gpu.vendor", d.get("vendor", "custom")),
              fp8_eff=nums.get("fp8_matmul_efficiency"),
              fa2=nums.get("fa2_attention_efficiency"),
              sms=int(nums["sm_count"]) if "sm_count" in nums else None,
              fp4=nums.get("fp4_tflops"), blocks=blocks, tdp=nums.get("tdp_w"),
              tn_only=tn_only, wave=wave,
              exp=nums["exp_tera_per_s"] * TERA if "exp_tera_per_s" in nums else None)


def _with_profile(d: Mapping, base_dir: str | None) -> GPU:
    prof = load_gpu_profile(d["profile"], base_dir)
    rest = {k: v for k, v in d.items() if k != "profile"}
    if set(rest) <= {"name"}:
        name = rest.get("name", prof.gpu)
        if name is None:
            raise SpecError("gpu.profile", prof.path, "names no GPU (no gpu: key in the file); "
                            "give gpu: {name: GPU, profile: FILE}")
        try:
            base = get_gpu(check_name("gpu.name", name))
        except SpecError as e:
            if "name" in rest:
                raise
            raise SpecError("gpu.profile", prof.path, f"names gpu: {prof.gpu}, not a catalog "
                            f"GPU ({e.rule}); give gpu: {{name: GPU, profile: FILE}}") from None
        if "name" in rest and prof.gpu is not None and prof.gpu.lower() in _ALIASES \
                and GPUS[_ALIASES[prof.gpu.lower()]].name != base.name:
            raise SpecError("gpu.profile", prof.path, f"was measured on {prof.gpu}, not on "
                            f"{base.name} (a profile applies to the GPU it measured)")
    else:
        base = gpu_from_mapping(rest)
    check_profile_peaks(prof, base)
    return replace(base, profile=prof)


def check_profile_peaks(prof: Any, gpu: GPU, field: str = "gpu.profile") -> None:
    """Refuse a profile GEMM that ran faster than ``gpu``'s dense peak for its precision
    (``2·m·n·k / seconds > peak``): a datasheet peak is the tensor cores' rate at the highest
    clock, which no measurement exceeds (a 10^-12 s GEMM made the compute time vanish and
    went unnoticed). Points in a precision the GPU lacks are not read (``gemm_ratio``).
    Likewise the usable HBM bandwidth the memory kernels give (``GpuProfile.hbm_bandwidth``,
    the one the cost model reads) above the datasheet's: no copy outruns the DRAM."""
    bw = prof.hbm_bandwidth
    if bw is not None and bw > gpu.hbm_bandwidth:
        raise SpecError(f"{field}.memory", f"{bw / 1e12:.4g} TB/s",
                        f"the memory kernels' usable HBM bandwidth (median of the large "
                        f"copies) is above {gpu.name}'s datasheet {gpu.hbm_bandwidth / 1e12:.4g} "
                        "TB/s (no measurement beats it)")
    for i, p in enumerate(prof.gemm):
        if not gpu.supports(p.dtype):
            continue
        peak = gpu.peak(p.dtype)
        if p.flops / p.seconds > peak:
            raise SpecError(f"{field}.gemm[{i}].seconds", p.seconds,
                            f"a {p.dtype} GEMM {p.m}x{p.n}x{p.k} in that time runs "
                            f"{p.flops / p.seconds / 1e12:.4g} TFLOP/s, above {gpu.name}'s "
                            f"dense peak {peak / 1e12:.4g} TFLOP/s (no measurement beats it)")


def gpu_to_mapping(gpu: GPU) -> str | dict:
    """The file form of ``gpu``: its catalog name, or for a custom GPU the mapping that
    ``gpu_from_mapping`` reads back (so a resolved cluster can be given again as input);
    a profiled GPU adds ``profile:`` (the absolute path of its file)."""
    if gpu.profile is not None:
        plain = gpu_to_mapping(replace(gpu, profile=None))
        out = {"name": plain} if isinstance(plain, str) else dict(plain)
        out["profile"] = gpu.profile.path
        return out
    if GPUS.get(gpu.name) == gpu:
        return gpu.name
    d: dict = {"name": gpu.name}
    for dtype in ("bf16", "fp8", "fp4", "fp32", "tf32"):
        if dtype in gpu.peak_flops:
            d[f"{dtype}_tflops"] = gpu.peak_flops[dtype] / TERA
    d.update(hbm_gib=gpu.hbm_bytes / GIB, hbm_tbps=gpu.hbm_bandwidth / 1e12,
             matmul_efficiency=gpu.matmul_efficiency,
             attention_efficiency=gpu.attention_efficiency, vendor=gpu.vendor)
    if gpu.fp8_matmul_efficiency is not None:
        d["fp8_matmul_efficiency"] = gpu.fp8_matmul_efficiency
    if gpu.fa2_attention_efficiency is not None:
        d["fa2_attention_efficiency"] = gpu.fa2_attention_efficiency
    if gpu.sm_count is not None:
        d["sm_count"] = gpu.sm_count
    if gpu.block_formats:
        d["block_formats"] = list(gpu.block_formats)
    if gpu.tdp_w is not None:
        d["tdp_w"] = gpu.tdp_w
    if gpu.fp8_tn_only:
        d["fp8_tn_only"] = True
    if gpu.wave_tile is not None:
        d["wave_tile"] = list(gpu.wave_tile)
    if gpu.exp_rate is not None:
        d["exp_tera_per_s"] = gpu.exp_rate / TERA
    return d
