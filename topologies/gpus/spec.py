"""One accelerator's record (``GPU``): dense peak FLOP/s per dtype, HBM capacity and bandwidth.

Units: FLOP/s, bytes, bytes/s. Peaks are *dense* (no 2:4 sparsity).

``matmul_efficiency`` is the fraction of the 16-bit peak that large, well-shaped GEMMs
*sustain* on the part: the maximum sustainable matmul FLOPS (MSMF, the rate once the chip sits
at its power limit, measured with every GPU of the node busy) over the datasheet peak, from
Stas Bekman's public ``mamf-finder`` measurements (ml-engineering, compute/accelerator).
``fp8_matmul_efficiency`` is the same for fp8 GEMMs (``None``: as for 16-bit).
``fp4_matmul_efficiency`` is the same for fp4 GEMMs, where a sustained fp4 measurement gives it
(``None``: fp4 GEMMs take the fp8 fraction of the fp4 peak).
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

from dataclasses import dataclass, field
from typing import Mapping

from topologies.errors import SpecError
from topologies.gpu_profile import GpuProfile
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
MAX_HOST_LINK = 1e13                 # largest host link accepted (bytes/s per direction)


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
    fp4_matmul_efficiency: float | None = None
    #: bytes/s one GPU copies to or from host memory per direction (``topologies.gpus.
    #: host_link``; None: not known, activation offloading refused)
    host_link_bandwidth: float | None = None

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
        if self.fp4_matmul_efficiency is not None and not 0 < self.fp4_matmul_efficiency <= 1:
            raise SpecError("gpu.fp4_matmul_efficiency", self.fp4_matmul_efficiency,
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
        if self.host_link_bandwidth is not None and not (
                isinstance(self.host_link_bandwidth, (int, float))
                and not isinstance(self.host_link_bandwidth, bool)
                and 0 < self.host_link_bandwidth <= MAX_HOST_LINK):
            raise SpecError("gpu.host_link_bandwidth", self.host_link_bandwidth,
                            f"must be in (0, {MAX_HOST_LINK:g}] bytes/s per direction")
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
        """Sustained fraction of ``peak(dtype)`` that large GEMMs reach (see the module doc):
        fp4 GEMMs ``fp4_matmul_efficiency`` where set (the Blackwell Ultra parts: the fp8
        fraction times the sustained harness's fp4-over-fp8 fraction, docs/calibration.md
        §5.178), else the fp8 fraction; fp8 GEMMs ``fp8_matmul_efficiency`` where set; else
        ``matmul_efficiency``."""
        key = self.rate_key(dtype)
        if key == "fp4" and self.fp4_matmul_efficiency is not None:
            return self.fp4_matmul_efficiency
        if key in ("fp8", "fp4") and self.fp8_matmul_efficiency is not None:
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


def gpu_from_datasheet(name: str, fp32: float, tf32: float | None, bf16: float,
                       fp8: float | None, hbm_gib: float, hbm_tbps: float, eff: float,
                       attn: float, vendor: str = "nvidia", aliases: tuple[str, ...] = (),
                       fp8_eff: float | None = None, fa2: float | None = None,
                       sms: int | None = None, fp4: float | None = None,
                       blocks: tuple[str, ...] = (), tdp: float | None = None, src: str = "",
                       tn_only: bool = False, wave: tuple[int, int] | None = None,
                       exp: float | None = None, fp4_eff: float | None = None) -> GPU:
    """A GPU from datasheet units: dense peaks in TFLOP/s (``fp16`` = ``bf16``; ``tf32``,
    ``fp8`` and ``fp4`` left out when None or 0), ``hbm_gib`` GiB and ``hbm_tbps`` TB/s; the
    other arguments are ``GPU``'s fields under short names (``eff``: ``matmul_efficiency``,
    ``attn``: ``attention_efficiency``, ``fa2``: ``fa2_attention_efficiency``, ``sms``:
    ``sm_count``, ``blocks``: ``block_formats``, ``tdp``: ``tdp_w``, ``src``: ``source``,
    ``tn_only``: ``fp8_tn_only``, ``wave``: ``wave_tile``, ``exp``: ``exp_rate``,
    exponentials/s, ``fp4_eff``: ``fp4_matmul_efficiency``)."""
    peaks = {"fp32": fp32 * TERA, "bf16": bf16 * TERA, "fp16": bf16 * TERA}
    if tf32:
        peaks["tf32"] = tf32 * TERA
    if fp8:
        peaks["fp8"] = fp8 * TERA
    if fp4:
        peaks["fp4"] = fp4 * TERA
    return GPU(name, peaks, hbm_gib * GIB, hbm_tbps * 1e12, eff, attn, vendor, aliases, fp8_eff,
               fa2, sms, blocks, tdp, src, fp8_tn_only=tn_only, wave_tile=wave, exp_rate=exp,
               fp4_matmul_efficiency=fp4_eff)
