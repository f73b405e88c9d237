"""Seconds of one GEMM kernel ``(M x K) @ (K x N)`` on one GPU (docs/calibration.md).

Dense GEMMs run at ``peak(dtype) · gemm_efficiency(dtype) · M/(M+64) · N/(N+64) ·
K/(K+k_knee) · wave_efficiency``: the chip's *sustained* large-GEMM efficiency
(``topologies.gpus``: maximum sustainable matmul FLOPS over the datasheet peak) times a smooth
penalty for thin shapes (tile quantisation: on average half of a 128-wide tile is wasted on an
output dimension's edge; a tile's fixed prologue/epilogue amortised over K, whose knee
``k_knee`` grows with the chip's tensor-core rate per SM). On chips whose GEMM kernels launch
one thread block per output tile (``GPU.wave_tile``: Volta/Ampere) a GEMM takes the fastest of
a documented set of kernel configurations (``gemm_configs``: the guide's tiles at their
L2-roofline efficiency, each with K split into ``s`` slices whose fp32 partial sums a
reduction moves through HBM), each at the share of the SMs' tile slots its thread blocks keep
busy over their waves. A GEMM is never faster than its operands' HBM traffic allows
(roofline). Every GEMM kernel then pays a fixed time ``gemm_fixed_s`` (its launch on the GPU,
prologue, epilogue and tail, as a kernel's own duration measures them: XLA's public matmul
tables; the idle gap *between* kernels is ``framework.launch_gap_s``, apart). A GPU with a
measured profile (``paraplan calibrate``) scales the time by the measured-over-model ratio at
its size (``strategies.cost.measured``). Every function broadcasts over numpy arrays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from strategies.cost import measured
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from topologies.gpus import GPU


SHAPE_SCALE = 64.0        # a GEMM dimension d runs at d/(d+64) of the large-shape rate
# The K loop's knee grows with the chip's tensor-core rate per SM: a CTA's fixed prologue and
# epilogue (pipeline fill, writing the C tile) take about the same time on every chip, so the
# depth of K that amortises them scales with how fast one SM eats K. SHAPE_SCALE holds for the
# reference rate, A100's bf16 312 TFLOP/s over 108 SMs; H100 bf16 (989.4/132) gets 166, fp8 332.
REF_SM_RATE = 312e12 / 108

#: Seconds every GEMM kernel takes beyond the catalog's rate and shape model, by GPU
#: generation (docs/calibration.md §5.37): the one free parameter of ``T = a·U + t0`` fitted
#: in relative error (``experiments/gemm_fixed_time.py``, ``fit_fixed``) to XLA's public matmul
#: tables (tensorflow a305421c, ``.../cost_model/matmul_interpolator_data.h``: one HLO ``dot``
#: per entry, the median CUPTI *kernel* time, so no launch gap between kernels), ``U`` the
#: model's time of the entry without this term and ``a`` the catalog's own sustained/burst
#: ratio (efficiency over mamf-finder's burst fraction). ``sm_90``: H100 bf16 (75 entries);
#: ``sm_100``: B200 bf16 and fp8 (46). Generations without a public table (Volta, Ampere,
#: AMD) get 0.
GEMM_FIXED_S = {"sm_90": 4.667235690559019e-06, "sm_100": 5.204273552009314e-06}
#: the catalog parts of each generation in ``GEMM_FIXED_S``
GEMM_GENERATION = {"H100-SXM5-80GB": "sm_90", "H800-SXM5-80GB": "sm_90",
                   "H100-PCIe-80GB": "sm_90", "H100-96GB-500W": "sm_90",
                   "H200-SXM-141GB": "sm_90", "B200-SXM-180GB": "sm_100",
                   "B300-SXM-288GB": "sm_100", "GB200": "sm_100", "GB300": "sm_100"}


def side_factor(d: Num) -> Num:
    return d / (d + SHAPE_SCALE)


def k_knee(gpu: GPU, dtype: str) -> float:
    """Depth of K at which a GEMM reaches half its large-shape rate on ``gpu`` (``SHAPE_SCALE``
    times the chip's dense ``dtype`` rate per SM over ``REF_SM_RATE``; ``SHAPE_SCALE`` when the
    SM count is unknown)."""
    if not gpu.sm_count:
        return SHAPE_SCALE
    return SHAPE_SCALE * gpu.peak(dtype) / gpu.sm_count / REF_SM_RATE


def gemm_fixed_s(gpu: GPU) -> float:
    """Fixed seconds of one GEMM kernel on ``gpu`` (``GEMM_FIXED_S`` of its generation,
    ``GEMM_GENERATION``; 0 for a part of no measured generation or a custom GPU)."""
    gen = GEMM_GENERATION.get(gpu.name)
    return GEMM_FIXED_S[gen] if gen is not None else 0.0


# The kernel configurations a Volta/Ampere BLAS chooses from for one GEMM (``gemm_configs``):
# the output tiles of NVIDIA's "Matrix Multiplication Background User's Guide" (DU-09799-001)
# §2.3, from the most efficient (256x128, 128x256) to the least (64x64), one thread block per
# SM (the guide's §3.2 wave count) ...
GEMM_TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128),
              (64, 64))
# ... each with K split into ``s`` slices run by separate thread blocks (split-K; CUTLASS
# "parallel" split-K, cuBLASLt's CUBLASLT_ALGO_CONFIG_SPLITK_NUM with the fp32
# CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE workspace): the factors NVIDIA's cuBLASLt sample
# LtSgemmCustomFind (CUDALibrarySamples) tries, {2, 3, 4, 5, 6, 8, 12, 16, 32}, and 1 (no split)
SPLIT_K = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32)
# Bytes per second an A100's L2 feeds the SMs per FMA/s its tensor cores do (16-bit dense):
# 5120 B/clk L2 read bandwidth over 108 SMs x 1024 FMA/clk (NVIDIA A100 Tensor Core GPU
# Architecture whitepaper: "5120 Bytes/clk" L2, 256 FP16 FMA/clk per tensor core, 4 per SM);
# V100's 2048 B/clk over 80 SMs x 512 FMA/clk is 0.050, the same to 8 %. A thread block's
# ``tm x tn`` tile takes ``2 (tm + tn)`` operand bytes per ``tm·tn`` FMAs of each K step.
L2_BYTES_PER_FMA = 5120 / (108 * 1024)
OPERAND_BYTES_16 = 2.0    # bytes of a 16-bit GEMM operand element (the tiles' feed)
SPLIT_K_PARTIAL_BYTES = 4.0   # bytes of a split-K partial sum element (fp32 workspace)


@dataclass(frozen=True)
class Waves:
    """How a chip's GEMM kernels fill it: ``slots`` output tiles run at once (one thread block
    per SM); ``tile_m x tile_n`` the library's largest, most efficient tile
    (``GPU.wave_tile``); ``hbm`` the usable HBM bandwidth (bytes/s) a split-K reduction moves
    its partial sums at (``usable_hbm``)."""

    slots: int
    tile_m: int
    tile_n: int
    hbm: float = float("inf")


def gemm_waves(gpu: GPU, system: SystemConfig = DEFAULT_SYSTEM) -> Waves | None:
    """The wave shape of ``gpu``'s GEMMs (``GPU.wave_tile`` over ``GPU.sm_count``, the usable
    HBM rate under ``system``), or None where no wave quantisation is modelled (persistent
    kernels, unknown chips)."""
    if gpu.wave_tile is None or not gpu.sm_count:
        return None
    return Waves(gpu.sm_count, gpu.wave_tile[0], gpu.wave_tile[1], usable_hbm(gpu, system))


def wave_efficiency(M: Num, N: Num, waves: Waves | None) -> Num:
    """Fraction of the SMs' tile slots an ``M x N`` GEMM output keeps busy with the
    ``waves.tile_m x waves.tile_n`` tile: ``tiles / (ceil(tiles / slots) · slots)`` with
    ``tiles = ceil(M/tile_m) · ceil(N/tile_n)`` (the last wave runs partly empty; NVIDIA
    "Matrix Multiplication Background User's Guide" §3.2); 1 without ``waves``. The waste
    *inside* an edge tile is ``side_factor``'s, not this."""
    if waves is None:
        return 1.0
    return _occupancy(np.ceil(M / waves.tile_m) * np.ceil(N / waves.tile_n), waves.slots)


def _occupancy(units: Num, slots: int) -> Num:
    """Busy share of ``slots`` per wave over the waves ``units`` thread blocks take."""
    return units / (np.ceil(units / slots) * slots)


def grouped_occupancy(groups: Num, rows: Num, cols: Num, tile_m: Num, tile_n: Num,
                      cluster_m: int, slots: int) -> Num:
    """Busy share of a persistent grouped GEMM kernel's ``slots`` (one thread block per SM)
    over its waves when ``groups`` groups each write a ``rows x cols`` output in
    ``tile_m x tile_n`` tiles, every group's tiles in one queue (a group's row tiles rounded up
    to ``cluster_m``, the thread-block cluster along M): ``_occupancy`` of ``groups ·
    roundup(ceil(rows/tile_m), cluster_m) · ceil(cols/tile_n)`` tiles (docs/calibration.md
    §5.123). Vectorised."""
    mt = np.ceil(np.ceil(np.asarray(rows, dtype=float) / tile_m) / cluster_m) * cluster_m
    return _occupancy(groups * mt * np.ceil(np.asarray(cols, dtype=float) / tile_n), slots)


def tile_efficiency(tile_m: int, tile_n: int) -> float:
    """Sustained fraction of the large-GEMM rate a ``tile_m x tile_n`` thread block keeps: 1
    while the L2 feeds its operands (``OPERAND_BYTES_16 · (tm + tn) / (tm · tn)`` bytes per
    FMA) as fast as the tensor cores use them, else the L2 rate over that need (roofline on
    ``L2_BYTES_PER_FMA``): 256x128, 128x128 and 256x64 1, 128x64 0.988, 64x64 0.741."""
    need = OPERAND_BYTES_16 * (tile_m + tile_n) / (tile_m * tile_n)
    return min(1.0, L2_BYTES_PER_FMA / need)


@dataclass(frozen=True)
class GemmConfig:
    """One kernel configuration: a ``tile_m x tile_n`` output tile at ``efficiency``
    (``tile_efficiency``), K cut into ``split`` slices."""

    tile_m: int
    tile_n: int
    split: int
    efficiency: float


def gemm_configs(waves: Waves) -> tuple[GemmConfig, ...]:
    """The configurations a GEMM on a chip of ``waves`` is priced over: every ``GEMM_TILES``
    tile no larger (in area) than the chip's ``wave_tile``, times every ``SPLIT_K`` factor."""
    area = waves.tile_m * waves.tile_n
    tiles = [t for t in GEMM_TILES if t[0] * t[1] <= area]
    if (waves.tile_m, waves.tile_n) not in tiles:
        tiles.insert(0, (waves.tile_m, waves.tile_n))
    return tuple(GemmConfig(tm, tn, s, tile_efficiency(tm, tn))
                 for tm, tn in tiles for s in SPLIT_K)


def split_k_bytes(M: Num, N: Num, split: Num) -> Num:
    """Extra HBM bytes of a GEMM whose K is cut into ``split`` slices: each slice writes its
    ``M x N`` partial sums in fp32 to a workspace and the reduction kernel reads them back
    (``2 · split · M · N · SPLIT_K_PARTIAL_BYTES``; 0 without a split). The reduced output's
    own write is the GEMM's (``gemm_count_time``'s roofline)."""
    return np.where(np.asarray(split) > 1, 2.0 * split * M * N * SPLIT_K_PARTIAL_BYTES, 0.0)


def _config_arrays(waves: Waves) -> tuple[np.ndarray, ...]:
    """(tile_m, tile_n, split, efficiency) of ``gemm_configs(waves)`` as arrays (cached on
    everything they are built from)."""
    return _config_arrays_of(waves, gemm_configs, GEMM_TILES, SPLIT_K, tile_efficiency)


@functools.lru_cache(maxsize=64)
def _config_arrays_of(waves: Waves, configs, tiles, splits, eff) -> tuple[np.ndarray, ...]:
    cf = configs(waves)
    out = tuple(np.array([getattr(c, k) for c in cf], dtype=float)
                for k in ("tile_m", "tile_n", "split", "efficiency"))
    for a in out:
        a.flags.writeable = False
    return out


def _gemm_configs_time(M: Num, N: Num, K: Num, rate: Num, knee: float, waves: Waves) -> Num:
    """Seconds of one GEMM on a chip of ``waves``: the fastest of ``gemm_configs``, each its
    compute time at the tile's efficiency and its own wave occupancy (``ceil(M/tm) ·
    ceil(N/tn) · s`` thread blocks over ``waves.slots``), the K knee on the slice depth
    ``K/s``, plus the split-K reduction's bytes (``split_k_bytes``) at ``waves.hbm``. Arrays
    are priced once per distinct ``(M, N, K, rate)``."""
    if np.ndim(M) == np.ndim(N) == np.ndim(K) == np.ndim(rate) == 0:
        return _configs_min(M, N, K, rate, knee, waves)
    shape = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (M, N, K, rate)))
    if shape[0].size == 0:
        return np.empty(shape[0].shape)
    first, inv = _distinct_rows([a.ravel() for a in shape])
    t = _configs_min(*(a.ravel()[first] for a in shape), knee, waves)
    return t[inv].reshape(shape[0].shape)


def _distinct_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(index of one row per distinct row, each row's distinct-row number) of equal-length
    columns, by combining the columns' own distinct codes pairwise (1-D sorts only)."""
    code = np.unique(cols[0], return_inverse=True)[1].ravel()
    for c in cols[1:]:
        ci = np.unique(c, return_inverse=True)[1].ravel()
        code = np.unique(code * (int(ci.max()) + 1) + ci, return_inverse=True)[1].ravel()
    first = np.zeros(int(code.max()) + 1, dtype=np.intp)
    first[code[::-1]] = np.arange(len(code) - 1, -1, -1)
    return first, code


def _configs_min(M: Num, N: Num, K: Num, rate: Num, knee: float, waves: Waves) -> Num:
    """``_gemm_configs_time`` over every configuration at once (a last axis of configs)."""
    tm, tn, s, e = _config_arrays(waves)
    Mx, Nx, Kx, r = (np.asarray(x, dtype=float)[..., None] for x in (M, N, K, rate))
    ks = Kx / s
    occ = _occupancy(np.ceil(Mx / tm) * np.ceil(Nx / tn) * s, waves.slots)
    t = 2.0 * Mx * Nx * Kx / (r * e * side_factor(Mx) * side_factor(Nx) * (ks / (ks + knee)) * occ)
    t = t + split_k_bytes(Mx, Nx, s) / waves.hbm
    return t.min(axis=-1)


def gemm_compute(M: Num, N: Num, K: Num, rate: Num, knee: float,
                  waves: Waves | None = None) -> Num:
    """Compute seconds of one GEMM at the shape-penalised ``rate`` (FLOP/s): the smooth
    ``side_factor`` of ``M`` and ``N`` and the K knee; on a chip with ``waves``, the fastest
    kernel configuration (``_gemm_configs_time``: tile, split-K, wave occupancy)."""
    if waves is None:
        return 2.0 * M * N * K / (rate * side_factor(M) * side_factor(N) * (K / (K + knee)))
    return _gemm_configs_time(M, N, K, rate, knee, waves)


def gemm_ratio(gpu: GPU, dtype: str, rate: float, knee: float,
                system: SystemConfig = DEFAULT_SYSTEM) -> measured.GemmRatio | None:
    """The measured-over-model ratio of ``dtype`` GEMMs on a profiled ``gpu`` (else None)."""
    wv, t0 = gemm_waves(gpu, system), gemm_fixed_s(gpu)
    return measured.gemm_ratio(gpu, dtype,
                               lambda M, N, K: gemm_compute(M, N, K, rate, knee, wv) + t0)


def gemm_count_time(count: Num, M: Num, N: Num, K: Num, rate: Num, hbm: float, esize: float,
          c_bytes: Num | None = None, knee: float = SHAPE_SCALE,
          ratio: measured.GemmRatio | None = None, waves: Waves | None = None,
          fixed: float = 0.0) -> Num:
    """Seconds of ``count`` GEMMs ``(M x K) @ (K x N)``, ``count`` times ``gemm_unit``."""
    return count * gemm_unit(M, N, K, rate, hbm, esize, c_bytes, knee, ratio, waves, fixed)


def gemm_unit(M: Num, N: Num, K: Num, rate: Num, hbm: float, esize: float,
               c_bytes: Num | None = None, knee: float = SHAPE_SCALE,
               ratio: measured.GemmRatio | None = None, waves: Waves | None = None,
               fixed: float = 0.0, occupancy: Num = 1.0) -> Num:
    """Seconds of one GEMM ``(M x K) @ (K x N)``: the larger of the compute time at the
    shape-penalised rate (``knee``: the K depth of half rate, ``k_knee``; ``waves``: the
    chip's wave shape, ``gemm_waves``; ``ratio``: a measured profile's correction,
    ``gemm_ratio``) and the HBM time of the operands (``esize`` bytes per input element,
    ``c_bytes`` per output element, default ``esize``). The compute time includes the
    kernel's ``fixed`` seconds (``gemm_fixed_s``: pipeline fill and drain, which a kernel
    streaming its operands at the HBM rate hides) and is what a measured ``ratio`` scales.
    ``occupancy``: the busy share of the SMs when the GEMM is one group of a grouped kernel
    whose waves it shares (``grouped_occupancy``), dividing its compute; 1 alone."""
    t_compute = gemm_compute(M, N, K, rate, knee, waves) / occupancy + fixed
    if ratio is not None:
        t_compute = t_compute * ratio(M, N, K)
    c = esize if c_bytes is None else c_bytes
    t_memory = (esize * (M * K + K * N) + c * M * N) / hbm
    return np.maximum(t_compute, t_memory)
