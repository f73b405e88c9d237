"""GPU catalog from datasheets: dense peak FLOP/s per dtype, HBM capacity and bandwidth.

Units: FLOP/s, bytes, bytes/s. Peaks are *dense* (no 2:4 sparsity). ``matmul_efficiency`` is
the fraction of the bf16 peak that large, well-shaped GEMMs reach on the part in public
cuBLAS/hipBLASLt benchmarks (clock and power limits); it is a property of the chip, not a
fit to any training run (see docs/calibration.md).
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

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; fp8 on a chip without it is refused."""
        if dtype not in self.peak_flops:
            raise SpecError("dtype", dtype, f"{self.name} has no {dtype} tensor cores "
                            f"(has {', '.join(sorted(self.peak_flops))})")
        return self.peak_flops[dtype]

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / GIB


def _g(name: str, fp32: float, tf32: float, bf16: float, fp8: float | None, hbm_gib: float,
       hbm_tbps: float, eff: float, attn: float, vendor: str = "nvidia",
       aliases: tuple[str, ...] = ()) -> GPU:
    peaks = {"fp32": fp32 * TERA, "tf32": tf32 * TERA, "bf16": bf16 * TERA, "fp16": bf16 * TERA}
    if fp8:
        peaks["fp8"] = fp8 * TERA
    return GPU(name, peaks, hbm_gib * GIB, hbm_tbps * 1e12, eff, attn, vendor, aliases)


# Datasheet values (dense). hbm_gib is the usable capacity the driver reports.
_CATALOG = [
    _g("V100-SXM2-32GB", 15.7, 15.7, 125, None, 32, 0.9, 0.80, 0.45, aliases=("V100",)),
    _g("A100-SXM4-40GB", 19.5, 156, 312, None, 40, 1.555, 0.88, 0.60, aliases=("A100-40GB",)),
    _g("A100-SXM4-80GB", 19.5, 156, 312, None, 80, 2.039, 0.88, 0.60,
       aliases=("A100", "A100-80GB", "A100-SXM-80GB")),
    _g("H100-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H100", "H100-SXM", "H100-SXM-80GB", "H100-80GB")),
    _g("H100-PCIe-80GB", 51, 378, 756, 1513, 79.6, 2.0, 0.75, 0.55, aliases=("H100-PCIe",)),
    _g("H100-96GB-500W", 67, 494.7, 989.4, 1978.9, 94.5, 2.4, 0.62, 0.45,
       aliases=("H100-96GB",)),
    _g("H200-SXM-141GB", 67, 494.7, 989.4, 1978.9, 140.0, 4.8, 0.77, 0.56, aliases=("H200",)),
    _g("B200-SXM-180GB", 80, 1100, 2250, 4500, 180.0, 8.0, 0.75, 0.55, aliases=("B200",)),
    _g("MI300X", 163.4, 653.7, 1307.4, 2614.9, 192.0, 5.3, 0.55, 0.40, vendor="amd",
       aliases=("MI300X-192GB",)),
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
    tf32_tflops], hbm_gib, hbm_tbps, [matmul_efficiency]."""
    allowed = {"name", "bf16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops", "hbm_gib",
               "hbm_tbps", "matmul_efficiency", "attention_efficiency", "vendor"}
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise SpecError("gpu", unknown[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for req in ("name", "bf16_tflops", "hbm_gib", "hbm_tbps"):
        if req not in d:
            raise SpecError(f"gpu.{req}", None, "is required for a custom GPU")
    hi = {"hbm_gib": MAX_HBM_GIB, "hbm_tbps": MAX_HBM_TBPS, "matmul_efficiency": 1.0,
          "attention_efficiency": 1.0}
    nums = {}
    for k in ("bf16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops", "hbm_gib", "hbm_tbps",
              "matmul_efficiency", "attention_efficiency"):
        if k in d:
            nums[k] = check_number(f"gpu.{k}", d[k], 0.0, hi.get(k, MAX_TFLOPS), lo_open=True)
    bf16 = nums["bf16_tflops"]
    return _g(check_name("gpu.name", d["name"]), nums.get("fp32_tflops", bf16 / 16),
              nums.get("tf32_tflops", bf16 / 2),
              bf16, nums.get("fp8_tflops"), nums["hbm_gib"], nums["hbm_tbps"],
              nums.get("matmul_efficiency", 0.8), nums.get("attention_efficiency", 0.5),
              check_name("gpu.vendor", d.get("vendor", "custom")))


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
    return d
