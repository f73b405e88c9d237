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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from topologies.errors import SpecError
from topologies.limits import MAX_HBM_GIB, MAX_HBM_TBPS, MAX_TFLOPS, check_name, check_number

TERA = 1e12
GIB = 1024**3
GB = 1e9

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class GPU:
    """One accelerator. ``peak_flops`` maps dtype -> dense FLOP/s."""

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

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("gpu.name", self.name, "must be a non-empty string")
        for k, v in self.peak_flops.items():
            if k not in DTYPES:
                raise SpecError("gpu.peak_flops", k, f"dtype must be one of {', '.join(DTYPES)}")
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

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; fp8 on a chip without it is refused."""
        if dtype not in self.peak_flops:
            raise SpecError("dtype", dtype, f"{self.name} has no {dtype} tensor cores "
                            f"(has {', '.join(sorted(self.peak_flops))})")
        return self.peak_flops[dtype]

    def gemm_efficiency(self, dtype: str) -> float:
        """Sustained fraction of ``peak(dtype)`` that large GEMMs reach (see the module doc)."""
        if dtype == "fp8" and self.fp8_matmul_efficiency is not None:
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

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / GIB


def _g(name: str, fp32: float, tf32: float, bf16: float, fp8: float | None, hbm_gib: float,
       hbm_tbps: float, eff: float, attn: float, vendor: str = "nvidia",
       aliases: tuple[str, ...] = (), fp8_eff: float | None = None,
       fa2: float | None = None, sms: int | None = None) -> GPU:
    peaks = {"fp32": fp32 * TERA, "tf32": tf32 * TERA, "bf16": bf16 * TERA, "fp16": bf16 * TERA}
    if fp8:
        peaks["fp8"] = fp8 * TERA
    return GPU(name, peaks, hbm_gib * GIB, hbm_tbps * 1e12, eff, attn, vendor, aliases, fp8_eff,
               fa2, sms)


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
#                    fp8 MAMF 3432.5/4500 = 0.763 * 1421/1745 -> 0.62
#   MI300X     0.51  MAMF 668.4/1307.4 = 0.511 (the card sits at its 750 W cap from the first
#                    kernel, so sustained = burst)
#   H100 PCIe  0.62  MAMF 499.5/756 = 0.661 (mag-/gpu_benchmark mamf table) * 745/794.5
#   H100 96GB 500 W (Grand Teton) 0.67: H100 SXM's 0.753 times the clock ratio at 500 W vs
#                    700 W under the cubic power-clock rule, (500/700)^(1/3) = 0.894
#   V100       0.80  not measured by mamf-finder; kept (V100 cuBLAS fp16 ~100 of 125 TFLOP/s)
_CATALOG = [
    _g("V100-SXM2-32GB", 15.7, 15.7, 125, None, 32, 0.9, 0.80, 0.45, aliases=("V100",),
       sms=80),
    _g("A100-SXM4-40GB", 19.5, 156, 312, None, 40, 1.555, 0.80, 0.60, aliases=("A100-40GB",),
       sms=108),
    _g("A100-SXM4-80GB", 19.5, 156, 312, None, 80, 2.039, 0.80, 0.60,
       aliases=("A100", "A100-80GB", "A100-SXM-80GB"), sms=108),
    _g("H100-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H100", "H100-SXM", "H100-SXM-80GB", "H100-80GB"), fp8_eff=0.665, fa2=0.35,
       sms=132),
    # H800 SXM5: the export variant of H100 SXM5 (same GH100 die, clocks, tensor rates, HBM3
    # and 700 W), NVLink cut to 400 GB/s bidirectional and FP64 to 1 TFLOP/s; efficiencies
    # as H100 SXM (the GEMM path is unchanged)
    _g("H800-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H800", "H800-SXM"), fp8_eff=0.665, fa2=0.35, sms=132),
    _g("H100-PCIe-80GB", 51, 378, 756, 1513, 79.6, 2.0, 0.62, 0.50, aliases=("H100-PCIe",),
       fp8_eff=0.55, fa2=0.32, sms=114),
    _g("H100-96GB-500W", 67, 494.7, 989.4, 1978.9, 94.5, 2.4, 0.67, 0.45,
       aliases=("H100-96GB",), fp8_eff=0.595, fa2=0.29, sms=132),
    _g("H200-SXM-141GB", 67, 494.7, 989.4, 1978.9, 140.0, 4.8, 0.75, 0.56, aliases=("H200",),
       fp8_eff=0.66, fa2=0.35, sms=132),
    _g("B200-SXM-180GB", 80, 1100, 2250, 4500, 180.0, 8.0, 0.63, 0.55, aliases=("B200",),
       fp8_eff=0.62, sms=148),
    _g("MI300X", 163.4, 653.7, 1307.4, 2614.9, 192.0, 5.3, 0.51, 0.40, vendor="amd",
       aliases=("MI300X-192GB",), sms=304),
]

GPUS: dict[str, GPU] = {g.name: g for g in _CATALOG}
_ALIASES: dict[str, str] = {a.lower(): g.name for g in _CATALOG for a in (g.name, *g.aliases)}


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias (case-insensitive)."""
    key = str(name).strip().lower()
    if key not in _ALIASES:
        raise SpecError("gpu", name, f"unknown GPU; known: {', '.join(GPUS)}")
    return GPUS[_ALIASES[key]]


def gpu_from_mapping(d: Mapping) -> GPU:
    """A custom GPU from a YAML mapping: name, bf16_tflops, [fp8_tflops, fp32_tflops,
    tf32_tflops], hbm_gib, hbm_tbps, [matmul_efficiency, attention_efficiency,
    fp8_matmul_efficiency, fa2_attention_efficiency, sm_count, vendor]."""
    allowed = {"name", "bf16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops", "hbm_gib",
               "hbm_tbps", "matmul_efficiency", "attention_efficiency", "fp8_matmul_efficiency",
               "fa2_attention_efficiency", "sm_count", "vendor"}
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise SpecError("gpu", unknown[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for req in ("name", "bf16_tflops", "hbm_gib", "hbm_tbps"):
        if req not in d:
            raise SpecError(f"gpu.{req}", None, "is required for a custom GPU")
    hi = {"hbm_gib": MAX_HBM_GIB, "hbm_tbps": MAX_HBM_TBPS, "matmul_efficiency": 1.0,
          "attention_efficiency": 1.0, "fp8_matmul_efficiency": 1.0,
          "fa2_attention_efficiency": 1.0, "sm_count": 4096}
    nums = {}
    for k in ("bf16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops", "hbm_gib", "hbm_tbps",
              "matmul_efficiency", "attention_efficiency", "fp8_matmul_efficiency",
              "fa2_attention_efficiency", "sm_count"):
        if k in d:
            nums[k] = check_number(f"gpu.{k}", d[k], 0.0, hi.get(k, MAX_TFLOPS), lo_open=True)
    if "sm_count" in nums and not float(nums["sm_count"]).is_integer():
        raise SpecError("gpu.sm_count", d["sm_count"], "must be an integer > 0")
    bf16 = nums["bf16_tflops"]
    return _g(check_name("gpu.name", d["name"]), nums.get("fp32_tflops", bf16 / 16),
              nums.get("tf32_tflops", bf16 / 2),
              bf16, nums.get("fp8_tflops"), nums["hbm_gib"], nums["hbm_tbps"],
              nums.get("matmul_efficiency", 0.8), nums.get("attention_efficiency", 0.5),
              check_name("gpu.vendor", d.get("vendor", "custom")),
              fp8_eff=nums.get("fp8_matmul_efficiency"),
              fa2=nums.get("fa2_attention_efficiency"),
              sms=int(nums["sm_count"]) if "sm_count" in nums else None)


def gpu_to_mapping(gpu: GPU) -> str | dict:
    """The file form of ``gpu``: its catalog name, or for a custom GPU the mapping that
    ``gpu_from_mapping`` reads back (so a resolved cluster can be given again as input)."""
    if GPUS.get(gpu.name) == gpu:
        return gpu.name
    d: dict = {"name": gpu.name}
    for dtype in ("bf16", "fp8", "fp32", "tf32"):
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
    return d
