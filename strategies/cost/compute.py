"""Compute time of one layer for one micro-batch on one GPU, from the cost model's FLOPs and bytes.

The efficiency model (every constant and its source: docs/calibration.md):

* Dense GEMMs run at ``peak(dtype) · gemm_efficiency(dtype) · M/(M+64) · N/(N+64) ·
  K/(K+k_knee) · wave_efficiency``: the chip's *sustained* large-GEMM efficiency (``topologies.gpus``: maximum
  sustainable matmul FLOPS over the datasheet peak) times a smooth penalty for thin shapes
  (tile quantisation: on average half of a 128-wide tile is wasted on an output dimension's
  edge; a tile's fixed prologue/epilogue amortised over K, whose knee ``k_knee`` grows with
  the chip's tensor-core rate per SM). On chips whose GEMM kernels launch one thread block
  per output tile (``GPU.wave_tile``: Volta/Ampere) a GEMM takes the fastest of a documented
  set of kernel configurations (``gemm_configs``: the guide's tiles at their L2-roofline
  efficiency, each with K split into ``s`` slices whose fp32 partial sums a reduction moves
  through HBM), each at the share of the SMs' tile slots its thread blocks keep busy over
  their waves. A GEMM is never faster than its operands' HBM traffic allows (roofline).
  Every GEMM kernel then pays a fixed time ``gemm_fixed_s`` (its launch on the GPU,
  prologue, epilogue and tail, as a kernel's own duration measures them: XLA's public
  matmul tables; the idle gap *between* kernels is ``framework.launch_gap_s``, apart).
  The backward runs the two GEMMs of each weight with their own shapes: data gradient
  ``(M, K, N)`` and weight gradient ``(K, N, M)`` whose output is the main gradient.
* With TP communication overlap (Transformer Engine userbuffers) the forward GEMMs and the
  data-gradient GEMMs of the row-parallel weights are split into ``tp`` pieces along M (each
  piece waits for its slice of the all-gather or feeds its slice of the reduce-scatter), so
  they run with ``M/tp`` rows.
* Attention core: FlashAttention at ``peak(bf16) · GPU.flash_efficiency(kernel)``, the kernel
  the framework runs (FlashAttention-2 is slower on Hopper than cuDNN/FA3) (forward; its backward
  does 2.5x the forward FLOPs at ``FLASH_BWD_EFFICIENCY`` of the forward's rate), or, without it, two batched GEMMs with K = head_dim plus the
  memory-bound softmax/dropout traffic.
* Memory-bound kernels (LayerNorm, dropout, activation, rotary, the unfused accumulation of a micro-batch's weight gradient into the main gradient, a sharded stack's passes over the unsharded gradient: ``sharded_grad_pass_time``) take bytes over
  ``HBM bandwidth · SystemConfig.hbm_efficiency``; the backward of an elementwise kernel moves
  twice its forward bytes.
* Low-precision casts (fp8, mxfp8, fp8-blockwise, nvfp4): the bytes ``strategies.cost.quantise``
  counts (each GEMM input in the forward, each incoming gradient in the backward, the
  weights once per step) at the same usable HBM bandwidth.
* Every kernel boundary costs ``framework.launch_gap_s`` (``strategies.framework``).
* A GPU with a measured profile (``paraplan calibrate``) replaces these figures where its
  measurements reach (``strategies.cost.measured``): GEMM and attention times scaled by the
  measured-over-model ratio at their size, the measured HBM bandwidth and launch gap.

Every function broadcasts over numpy arrays of plan fields.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from strategies.cost import async_tp
from strategies.cost import counts as costs
from strategies.cost import fp8_attention as fp8a
from strategies.cost import measured
from strategies.cost import quantise
from strategies.cost import recompute as rcp
from strategies.cost import ring_attention as ring
from strategies.cost.counts import Num
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.framework import DEFAULT
from strategies.stacks.comm_rules import uses_bf16_optimizer
from strategies.stacks.deepspeed import BF16_ACCUM_BYTES
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import runs_eager_clamp
from strategies.launch_blocking import HOST_PATH_S
from strategies.model import ModelSpec
from topologies.gpus import GPU
from topologies.precision import get_precision

#: The default system's achievable HBM fraction (``SystemConfig.hbm_efficiency``; an alias
#: for GPU profiles and reports that compare against the catalog, not a second constant).
HBM_EFFICIENCY = DEFAULT_SYSTEM.hbm_efficiency
SHAPE_SCALE = 64.0        # a GEMM dimension d runs at d/(d+64) of the large-shape rate
# The K loop's knee grows with the chip's tensor-core rate per SM: a CTA's fixed prologue and
# epilogue (pipeline fill, writing the C tile) take about the same time on every chip, so the
# depth of K that amortises them scales with how fast one SM eats K. SHAPE_SCALE holds for the
# reference rate, A100's bf16 312 TFLOP/s over 108 SMs; H100 bf16 (989.4/132) gets 166, fp8 332.
REF_SM_RATE = 312e12 / 108
FLASH_BWD_FACTOR = 2.5    # FlashAttention backward FLOPs / forward FLOPs (recomputes S = QK^T)
# The backward kernel reaches a lower fraction of peak than the forward (five GEMMs per tile
# against two, dQ accumulated with atomics): FlashAttention-2 on A100, head dim 128, causal,
# 50 % against 62 % of peak; FlashAttention-3 on H100 ~0.8x its forward (docs/calibration.md)
FLASH_BWD_EFFICIENCY = 0.8
# Exposed fraction of the fused attention kernel's exponential time (special-function units,
# ``MUFU.EX2``, ``GPU.exp_rate``), forward and backward: the share of the exponentials' time
# that is not hidden under the kernel's GEMMs. The forward's ping-pong pipeline (cuDNN,
# FlashAttention-4) runs one tile's softmax under the other tile's GEMMs; the backward
# recomputes P = exp(S - LSE) on the path to its dP/dS GEMMs. Measured from public kernel
# timings, the same cuDNN (9.22, cudnn-frontend 1.21.1) on GB200 (5 TeraExponentials/s) and
# GB300 (10.7): NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/*/gb{200,300}
# (bf16, 85 shapes, head dims 128, 192/128, 256; sequence 2k-75k): the time saved over the
# exponentials' time saved, (t200 - t300) / (n·(1/5e12 - 1/10.7e12)), median 0.505 forward
# (45 shapes, 0.30-1.15) and 1.06 backward (40 shapes, 0.37-2.30): docs/calibration.md §5.60
EXP_EXPOSED_FWD = 0.5
EXP_EXPOSED_BWD = 1.0
GRAD_BYTES_16 = 2.0       # a weight gradient as the GEMM writes it (bf16/fp16)
#: FSDP2's all-gather copy-out per unsharded parameter: ``foreach_all_gather_copy_out``
#: (torch/distributed/_composable/fsdp/_fsdp_collectives.py) splits the gathered bf16 buffer
#: into the parameters with ``torch.split_with_sizes_copy`` on the compute stream (read 2,
#: write 2)
GATHER_COPY_OUT_BYTES = 4.0
# SM clock while communication kernels run beside the compute, relative to the sustained
# clock of GEMMs alone: NVLink/NIC/HBM traffic shares the board power budget, so the power
# limiter lowers the SM clock. Public observation (deepseek-ai/DeepGEMM issue #120, H800 =
# GH100 at 700 W): overlapping communication with GEMMs drops the clock from 1980 to 1575 MHz;
# GEMMs alone sustain 1980 x 755/834 = 1792 MHz (H200 MSMF/MAMF, docs/calibration.md), so
# 1575/1792 = 0.88.
OVERLAP_CLOCK_RATIO = 0.88
# Host (CPU) seconds per local expert that Transformer Engine's grouped MLP block (fc1, SwiGLU,
# fc2 over the experts' token splits) spends issuing one micro-batch, (forward, backward):
# NVIDIA's measurement on GB200 with 64 experts and hidden size 128, so that the GPU work is
# negligible, forward ~1.2 ms and backward ~2.1 ms (TransformerEngine issue #2897, "Reduce CPU
# overhead in grouped MLP block", 2026-04-16: wgrad allocations, scale swizzles, tensor
# clean-up and quantizer set-up, each per expert), taken per expert (/64). The figure is of
# TE's fused grouped-MLP ops (``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8`` and its backward, TE
# PR #2769: one cuDNN grouped-GEMM kernel per fc), not of the unfused ``GroupedLinear`` module
# the 25.11 / 26.04 rows run (6-18 launches per local expert, docs/calibration.md §5.29)
EXPERT_HOST_S = (1.2e-3 / 64, 2.1e-3 / 64)
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


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one layer, one micro-batch, one GPU (compute only, no communication)."""

    fwd: Num
    bwd: Num
    recompute: Num   # extra forward work redone in the backward (selective or full)
    wgrad: Num = 0.0  # the weight-gradient part of ``bwd`` (its GEMMs + their accumulation)
    #: the data-gradient GEMMs each sequence-parallel re-gather of the backward overlaps
    #: (``regather_dgrad``): ``(share of the mean layer, seconds)`` per re-gather, the
    #: attention's one per column linear (``attention_column_widths``), then fc1's two
    regather: tuple = ()
    #: the weight-gradient GEMMs of the column-parallel linears (``column_wgrad``): seconds
    #: of the attention's (one per column linear), the dense fc1's and the shared experts'
    #: fc1's, each the window its data gradient's asynchronous reduction runs in (shares:
    #: ``regather``'s)
    col_wgrad: tuple = ()
    #: the attention block's weight-gradient GEMMs (every attention linear, ``attention_
    #: wgrad``): what Megatron-Core's ``delay_wgrad_compute`` defers from a combined pair's
    #: last backward layer (``strategies.schedules.combined.pair_message_hiding``)
    attn_wgrad: Num = 0.0
    #: the data-gradient GEMM seconds of MLA's down projections, ``(q, kv)`` (``down_dgrad``):
    #: what each one's backward re-gather runs beside where the stack makes them
    #: column-parallel (``FrameworkProfile.mla_down_proj``)
    down_dgrad: tuple = (0.0, 0.0)
    #: the weight-gradient GEMM seconds of MLA's down projections, ``(q, kv)``
    #: (``down_wgrad``): what each column-parallel one's input-gradient reduction runs
    #: beside (``tp_collectives.down_reduce_hidden``, §5.99)
    down_wgrad: tuple = (0.0, 0.0)


def attention_column_widths(m: ModelSpec) -> tuple[float, ...]:
    """Input width of each column-parallel linear of one attention block, as a share of the
    hidden size: what its backward re-gathers under SP and what its data gradient reduces
    across tp is that input (``b·s·width·h`` elements). QKV (or MLA's ``linear_q_proj``)
    reads the hidden state, 1.0; MLA's up projections read the latents,
    ``q_lora_rank/h`` and ``kv_lora_rank/h`` (Megatron-Core ``transformer/
    multi_latent_attention.py``: the down projections are ``TELinear`` with
    ``parallel_mode="duplicated"``, the up projections column-parallel with
    ``gather_output=False``; docs/calibration.md §5.76)."""
    h = m.hidden_size
    return tuple(i / h for _, i, _, split in m.attention_linears() if split == "col")


def column_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                 slow: Num = 1.0) -> tuple[Num, ...]:
    """Seconds of the weight-gradient GEMMs of one layer's column-parallel linears:
    ``(attention's, dense fc1, shared experts' fc1)``, the attention's one per column
    linear (QKV; MLA's ``q_proj`` or ``q_up`` and ``kv_up``, ``attention_column_widths``),
    each fc1 one GEMM (its share of the layers is ``regather_dgrad``'s). Each runs while its
    linear's data gradient is reduced across tp (``cost.stage.dgrad_reduce_hidden``).
    ``parts``/``units``: as ``regather_dgrad``; ``slow``: the overlap clock factor."""
    linears = m.attention_linears()
    attn = []
    for (_, _, _, split), (_, g), u in zip(linears, parts, units):
        if split == "col":
            attn.append(slow * (g[0] * u[4]))
    dense, shared = 0.0, 0.0
    for (part, g), u in zip(parts[len(linears):], units[len(linears):]):
        if g[4] is False and part == "dense_mlp":
            dense = u[4]
        elif g[4] is False and part == "shared_mlp":
            shared = u[4]
    return (*attn, slow * dense, slow * shared)


def attention_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                    slow: Num = 1.0) -> Num:
    """Seconds of the weight-gradient GEMMs of one layer's attention block, every attention
    linear (``ModelSpec.attention_linears``: QKV or MLA's projections, the output
    projection): Megatron-Core's ``pre_dispatch_computation.backward_dw`` (the attention
    sub-module's TE linears with ``delay_wgrad_compute``; Megatron-LM d98e8a64
    ``models/common/model_chunk_schedule_plan.py``). The accumulation into the main gradient
    stays with the layer (``LayerTime.wgrad``). ``parts``/``units``: as ``column_wgrad``;
    ``slow``: the overlap clock factor."""
    t = 0.0
    for _, (_, g), u in zip(m.attention_linears(), parts, units):
        t = t + g[0] * u[4]
    return slow * t


def down_dgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
               slow: Num = 1.0) -> tuple[Num, Num]:
    """Seconds of the data-gradient GEMMs of MLA's down projections, ``(q, kv)`` (0 for one
    that does not exist: no MLA, no query latent): the attention linears
    ``ModelSpec.attention_linears`` marks ``"rep"``, priced as ``layer_gemm_parts`` prices
    them at the stack's shapes (``whole_split``: ``T`` rows at ``w/tp`` column-parallel,
    §5.99). Under SP a column-parallel down
    projection (Megatron-Core core_v0.12-v0.13) re-gathers its hidden-state input beside this
    GEMM (``tp_collectives.sp_regather_pieces``). ``parts``/``units``: as
    ``regather_dgrad``; ``slow``: the overlap clock factor."""
    rep = [slow * (g[0] * pieces * d)
           for (_, _, _, split), (_, g), (_, _, pieces, d, _)
           in zip(m.attention_linears(), parts, units) if split == "rep"]
    if not rep:
        return 0.0, 0.0
    return (rep[0], rep[1]) if len(rep) > 1 else (0.0, rep[0])


def down_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
               slow: Num = 1.0) -> tuple[Num, Num]:
    """Seconds of the weight-gradient GEMMs of MLA's down projections, ``(q, kv)``, at the
    shapes ``layer_gemm_parts`` gives them (0 for one that does not exist), as
    ``down_dgrad`` finds them. A column-parallel down projection (Megatron-Core
    core_v0.12-v0.13, ``TEColumnParallelLinear``) starts its input gradient's reduction
    before this GEMM and waits after it (``tp_collectives.down_reduce_hidden``, §5.99).
    ``slow``: the overlap clock factor."""
    rep = [slow * (g[0] * w)
           for (_, _, _, split), (_, g), (*_, w) in zip(m.attention_linears(), parts, units)
           if split == "rep"]
    if not rep:
        return 0.0, 0.0
    return (rep[0], rep[1]) if len(rep) > 1 else (0.0, rep[0])


def regather_dgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                   slow: Num = 1.0) -> tuple[tuple[Num, Num], ...]:
    """The data-gradient GEMMs the backward's sequence-parallel re-gathers overlap, one
    ``(share, seconds)`` per re-gather of the mean layer: the attention's (share 1 each: one
    per column-parallel linear, QKV, or MLA's ``q_proj``/``q_up`` and ``kv_up``, each
    re-gathering its own input, ``attention_column_widths``), the dense MLP's fc1 (share:
    the dense layers') and the shared experts' fc1 (the MoE layers' share when the model has
    shared experts). A re-gather of the routed experts'
    input does not exist: the token dispatcher gathers it (``gather_from_sequence_parallel_
    region``, whose backward is a reduce-scatter) and the experts keep the gathered tokens.
    ``parts``/``units``: ``counts.layer_gemm_parts`` and their ``gemm_units`` prices (the
    column-parallel data gradient runs as one GEMM: ``pieces`` 1); ``slow``: the overlap
    clock factor the layer's GEMMs run at (``overlap_slowdown``)."""
    linears = m.attention_linears()
    attn = []
    for (_, _, _, split), (_, g), (_, _, pieces, d, _) in zip(linears, parts, units):
        if split == "col":
            attn.append((1.0, slow * (g[0] * pieces * d)))
    dense, dense_n, shared, shared_n = 0.0, 0.0, 0.0, 0.0
    for (part, g), (_, _, pieces, d, _) in zip(parts[len(linears):], units[len(linears):]):
        if g[4] is False and part == "dense_mlp":
            dense, dense_n = pieces * d, g[0]
        elif g[4] is False and part == "shared_mlp":
            shared, shared_n = pieces * d, g[0]
    return (*attn, (dense_n, slow * dense), (shared_n, slow * shared))


def _shape(d: Num) -> Num:
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
    *inside* an edge tile is ``_shape``'s, not this."""
    if waves is None:
        return 1.0
    return _occupancy(np.ceil(M / waves.tile_m) * np.ceil(N / waves.tile_n), waves.slots)


def _occupancy(units: Num, slots: int) -> Num:
    """Busy share of ``slots`` per wave over the waves ``units`` thread blocks take."""
    return units / (np.ceil(units / slots) * slots)


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
    own write is the GEMM's (``_gemm``'s roofline)."""
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
    t = 2.0 * Mx * Nx * Kx / (r * e * _shape(Mx) * _shape(Nx) * (ks / (ks + knee)) * occ)
    t = t + split_k_bytes(Mx, Nx, s) / waves.hbm
    return t.min(axis=-1)


def _gemm_compute(M: Num, N: Num, K: Num, rate: Num, knee: float,
                  waves: Waves | None = None) -> Num:
    """Compute seconds of one GEMM at the shape-penalised ``rate`` (FLOP/s): the smooth
    ``_shape`` of ``M`` and ``N`` and the K knee; on a chip with ``waves``, the fastest
    kernel configuration (``_gemm_configs_time``: tile, split-K, wave occupancy)."""
    if waves is None:
        return 2.0 * M * N * K / (rate * _shape(M) * _shape(N) * (K / (K + knee)))
    return _gemm_configs_time(M, N, K, rate, knee, waves)


def _gemm_ratio(gpu: GPU, dtype: str, rate: float, knee: float,
                system: SystemConfig = DEFAULT_SYSTEM) -> measured.GemmRatio | None:
    """The measured-over-model ratio of ``dtype`` GEMMs on a profiled ``gpu`` (else None)."""
    wv, t0 = gemm_waves(gpu, system), gemm_fixed_s(gpu)
    return measured.gemm_ratio(gpu, dtype,
                               lambda M, N, K: _gemm_compute(M, N, K, rate, knee, wv) + t0)


def _gemm(count: Num, M: Num, N: Num, K: Num, rate: Num, hbm: float, esize: float,
          c_bytes: Num | None = None, knee: float = SHAPE_SCALE,
          ratio: measured.GemmRatio | None = None, waves: Waves | None = None,
          fixed: float = 0.0) -> Num:
    """Seconds of ``count`` GEMMs ``(M x K) @ (K x N)``, ``count`` times ``_gemm_unit``."""
    return count * _gemm_unit(M, N, K, rate, hbm, esize, c_bytes, knee, ratio, waves, fixed)


def _gemm_unit(M: Num, N: Num, K: Num, rate: Num, hbm: float, esize: float,
               c_bytes: Num | None = None, knee: float = SHAPE_SCALE,
               ratio: measured.GemmRatio | None = None, waves: Waves | None = None,
               fixed: float = 0.0) -> Num:
    """Seconds of one GEMM ``(M x K) @ (K x N)``: the larger of the compute time at the
    shape-penalised rate (``knee``: the K depth of half rate, ``k_knee``; ``waves``: the
    chip's wave shape, ``gemm_waves``; ``ratio``: a measured profile's correction,
    ``_gemm_ratio``) and the HBM time of the operands (``esize`` bytes per input element,
    ``c_bytes`` per output element, default ``esize``). The compute time includes the
    kernel's ``fixed`` seconds (``gemm_fixed_s``: pipeline fill and drain, which a kernel
    streaming its operands at the HBM rate hides) and is what a measured ``ratio`` scales."""
    t_compute = _gemm_compute(M, N, K, rate, knee, waves) + fixed
    if ratio is not None:
        t_compute = t_compute * ratio(M, N, K)
    c = esize if c_bytes is None else c_bytes
    t_memory = (esize * (M * K + K * N) + c * M * N) / hbm
    return np.maximum(t_compute, t_memory)


def whole_split(tp: Num, sp: Num, fw: FrameworkProfile = DEFAULT) -> tuple[Num, Num]:
    """``counts.whole_gemm_split`` of stack ``fw`` (``FrameworkProfile.sp_shard_whole_gemms``,
    ``mla_down_proj``) at ``tp`` and ``sp``: the ``whole`` argument of
    ``counts.layer_gemm_parts`` every layer-time sum here passes (docs/calibration.md
    §5.99)."""
    return costs.whole_gemm_split(tp, sp, fw.sp_shard_whole_gemms,
                                  fw.mla_down_proj == "column")


def _linears(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, etp: Num | None = None,
             load: Num = 1.0) -> list[tuple]:
    """The GEMMs of the mean layer on one GPU (``costs.layer_gemms``): the routed experts'
    grouped GEMM as ``E/ep`` GEMMs of ``costs.expert_tokens`` rows (the hottest rank's,
    ``load``) and width ``F_e/etp``, each priced by its own shape (``_gemm``: small ``M``
    wastes tile rows and makes the weight read count, the roofline)."""
    return costs.layer_gemms(m, b, tp, cp, ep, etp=etp, load=load)


def usable_hbm(gpu: GPU, system: SystemConfig = DEFAULT_SYSTEM) -> float:
    """Usable HBM bandwidth of ``gpu`` (bytes/s): datasheet x ``system.hbm_efficiency``, or a
    GPU profile's measurement (``strategies.cost.measured``)."""
    return measured.hbm_rate(gpu, system.hbm_efficiency)


def _rates(gpu: GPU, dtype: str,
           system: SystemConfig = DEFAULT_SYSTEM) -> tuple[float, float, float]:
    """(GEMM FLOP/s before the shape penalty, usable HBM bytes/s, GEMM input element size)."""
    return (gpu.peak(dtype) * gpu.gemm_efficiency(dtype), usable_hbm(gpu, system),
            get_precision(dtype).operand_bytes)


def overlap_slowdown(tp: Num, tpo: Num, cp: Num, zero: Num, dp_whole_step: Num = False,
                     ep_paired: Num = False) -> Num:
    """Factor (>= 1) on compute-bound kernel time when communication runs beside the compute
    for most of the step: TP communication overlap (``tpo`` with ``tp > 1``), ring attention
    (``cp > 1``), ZeRO-2's reduce-scatter of every micro-batch's gradients or ZeRO-3's
    parameter gathers (``zero >= 2``), the data-parallel reduction of a step that is one
    micro-batch long (``dp_whole_step``, ``dp_overlaps_whole_step``), or the expert
    all-to-all of overlapped pairs (``ep_paired``: ``ep > 1`` with Megatron's combined 1F1B
    or a schedule that pairs, DualPipe's F&B). ``1/OVERLAP_CLOCK_RATIO`` then, else 1
    (gradient reduction overlapped with the last of several micro-batches only is too short
    to move the clock)."""
    busy = np.logical_and(tpo, tp > 1) | (np.asarray(cp) > 1) | (np.asarray(zero) >= 2) \
        | np.asarray(dp_whole_step, dtype=bool) | np.asarray(ep_paired, dtype=bool)
    return np.where(busy, 1.0 / OVERLAP_CLOCK_RATIO, 1.0)


def dp_overlaps_whole_step(dp: Num, mb: Num, ogr: Num) -> Num:
    """True where the data-parallel gradient reduction, overlapped with the backward
    (``ogr``), runs beside the compute for the whole step: one micro-batch per step
    (``mb == 1``), so every bucket's reduce-scatter overlaps *the* backward (and, with the
    distributed optimizer's overlapped parameter gather, the next forward), with ``dp > 1``."""
    return np.logical_and(ogr, (np.asarray(dp) > 1) & (np.asarray(mb) <= 1))


def accum_shard(dp: Num, zero: Num) -> Num:
    """Share of a weight gradient each GPU accumulates over micro-batches: all of it, except
    with sharded gradients (ZeRO-2, ZeRO-3/FSDP), where each micro-batch's gradient is
    reduce-scattered first and only the ``1/dp`` shard is accumulated (returns the divisor,
    ``dp`` or 1)."""
    return np.where(np.asarray(zero) >= 2, dp, 1.0)


def _tp_split(tp: Num, tpo: Num) -> Num:
    """Pieces a TP-overlapped GEMM is cut into along M (``tp`` with overlap, else 1)."""
    return np.where(np.logical_and(tpo, tp > 1), tp, 1.0)


def gemm_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, system: SystemConfig = DEFAULT_SYSTEM,
                  etp: Num | None = None, load: Num = 1.0,
                  fw: FrameworkProfile = DEFAULT, sp: Num = False) -> Num:
    """Forward time of the dense GEMMs of one layer (seconds); with TP overlap (``tpo``) each
    GEMM runs as ``tp`` pieces of ``M/tp`` rows; ``etp``, ``load``: ``_linears``; ``fw``: the
    stack's launches of the grouped expert GEMMs (``fixed_shares``) and, with ``sp``, its
    shapes of the GEMMs tensor parallelism leaves whole (``whole_split``)."""
    parts = costs.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    return gemms_time_fwd([g for _, g in parts], tp, gpu, dtype, tpo, system,
                          fixed_shares(parts, m, ep, fw))


def gemms_time_fwd(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
                   system: SystemConfig = DEFAULT_SYSTEM,
                   shares: list[Num] | None = None) -> Num:
    """Forward seconds of ``gemms``, ``(count, M, N, K, row_parallel, ...)`` as
    ``costs.layer_gemms`` lists them (``row_parallel`` None: the bf16 router), each priced
    by ``gemm_units`` (``shares``: its fixed-time shares, ``fixed_shares``; None: 1 each)."""
    return units_time_fwd([g[0] for g in gemms],
                          gemm_units(gemms, tp, gpu, dtype, tpo, system=system, backward=False,
                                     shares=shares))


def expert_fixed_share(m: ModelSpec, ep: Num, fw: FrameworkProfile = DEFAULT) -> Num:
    """Share of ``gemm_fixed_s`` one routed expert's GEMM pays on stack ``fw``: the fixed times
    a grouped GEMM over the ``k = E/ep`` local experts pays (``fw.expert_gemm_launch``,
    ``ExpertGemmLaunch.fixed_times``: ``k``, ``ceil(k/s)`` or 1) over ``k``, the GEMMs the
    model counts (``counts.layer_gemms``: ``E/ep`` per grouped GEMM); 1 for a dense model."""
    if not m.is_moe:
        return 1.0
    local = m.num_experts / np.asarray(ep, dtype=float)
    return (fw.expert_gemm_launch.fixed_times(local) / local)[()]


def fixed_shares(parts: list[tuple[str, tuple]], m: ModelSpec, ep: Num,
                 fw: FrameworkProfile = DEFAULT) -> list[Num]:
    """Per entry of ``parts`` (``counts.layer_gemm_parts``' or ``op_sac_gemm_parts``'), the
    share of ``gemm_fixed_s`` each of its GEMMs pays (``gemm_units``' ``shares``): the routed
    experts' ``expert_fixed_share``, every other GEMM (the router too) 1."""
    share = expert_fixed_share(m, ep, fw)
    return [share if part == "routed_mlp" and g[4] is not None else 1.0 for part, g in parts]


def gemm_units(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
               fw: FrameworkProfile = DEFAULT, system: SystemConfig = DEFAULT_SYSTEM,
               backward: bool = True, shares: list[Num] | None = None) -> list[tuple]:
    """The price of one GEMM of each shape of ``gemms`` (``costs.layer_gemms``' tuples), apart
    from its ``count``: ``(pieces, fwd, dgrad_pieces, dgrad, wgrad)``: the forward runs as
    ``pieces`` GEMMs of ``fwd`` seconds (``tp`` pieces of ``M/tp`` rows under TP overlap; the
    bf16 router is not split), the data gradient ``(M, K, N)`` as ``dgrad_pieces`` of
    ``dgrad`` seconds (the row-parallel weights split under TP overlap) and the weight
    gradient ``(K, N, M)`` as one of ``wgrad`` seconds, whose output is the main gradient:
    read and written in fp32 when the framework fuses the accumulation into the GEMM, else
    written once in 16 bits (the separate add is ``grad_accum_time``). ``backward`` False:
    the forward's alone (``dgrad``, ``wgrad`` None). ``shares``: per entry, the share of the
    kernel's fixed time ``gemm_fixed_s`` each GEMM pays (``fixed_shares``: a grouped expert
    GEMM's launches over its experts); None: 1 each. The one pricing of a layer's GEMMs that
    ``units_time_fwd``/``units_time_bwd`` sum for any count."""
    rate, hbm, es = _rates(gpu, dtype, system)
    kn, kn16 = k_knee(gpu, dtype), k_knee(gpu, "bf16")
    r16 = gpu.peak("bf16") * gpu.matmul_efficiency
    q, q16 = (_gemm_ratio(gpu, dtype, rate, kn, system),
               _gemm_ratio(gpu, "bf16", r16, kn16, system))
    wv, t0 = gemm_waves(gpu, system), gemm_fixed_s(gpu)
    split = _tp_split(tp, tpo)
    c_w = 2 * system.main_grad_bytes(dtype) if fw.grad_accum_fusion else GRAD_BYTES_16
    out = []
    for i, (_, M, N, K, row, *_) in enumerate(gemms):
        f0 = t0 if shares is None else t0 * shares[i]
        if row is None:                                   # MoE router: bf16, not split
            r_kw = dict(knee=kn16, ratio=q16, waves=wv, fixed=t0)
            f = _gemm_unit(M, N, K, r16, hbm, 2.0, **r_kw)
            if not backward:
                out.append((1.0, f, 1.0, None, None))
                continue
            out.append((1.0, f, 1.0, _gemm_unit(M, K, N, r16, hbm, 2.0, **r_kw),
                        _gemm_unit(K, N, M, r16, hbm, 2.0, **r_kw)))
            continue
        f = _gemm_unit(M / split, N, K, rate, hbm, es, knee=kn, ratio=q, waves=wv, fixed=f0)
        if not backward:
            out.append((split, f, 1.0, None, None))
            continue
        s = split if row else 1.0
        out.append((split, f, s,
                    _gemm_unit(M / s, K, N, rate, hbm, es, knee=kn, ratio=q, waves=wv, fixed=f0),
                    _gemm_unit(K, N, M, rate, hbm, es, c_w, knee=kn, ratio=q, waves=wv, fixed=f0)))
    return out


def units_time_fwd(counts: list[Num], units: list[tuple]) -> Num:
    """Forward seconds of ``counts[i]`` GEMMs priced ``units[i]`` (``gemm_units``)."""
    t = 0.0
    for count, (pieces, f, *_) in zip(counts, units):
        t = t + (count * pieces) * f
    return t


def units_time_bwd(counts: list[Num], units: list[tuple]) -> tuple[Num, Num]:
    """(all, weight-gradient) backward seconds of ``counts[i]`` GEMMs priced ``units[i]``
    (``gemm_units``): data and weight gradients summed GEMM by GEMM, then the weight
    gradients alone."""
    t, t_w = 0.0, 0.0
    for count, (_, _, pieces, d, w) in zip(counts, units):
        w = count * w
        t = t + (count * pieces) * d
        t = t + w
        t_w = t_w + w
    return t, t_w


def gemm_time_bwd_split(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                        tpo: Num = False, fw: FrameworkProfile = DEFAULT,
                        system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
                        load: Num = 1.0, sp: Num = False) -> tuple[Num, Num]:
    """(all, weight-gradient) backward seconds of the dense GEMMs of one layer: the data
    gradient ``(M, K, N)`` (split into ``tp`` pieces for the row-parallel weights under TP
    overlap, whose incoming gradient is all-gathered piece by piece) and the weight gradient
    ``(K, N, M)``, whose output is the main gradient: read and written in fp32 when the
    framework fuses the accumulation into the GEMM, else written once in 16 bits (the
    separate add is ``grad_accum_time``). The first element is both GEMMs summed in the
    order ``gemm_time_bwd`` always summed them; the second the weight-gradient GEMMs alone
    (the ``W`` pass of a schedule that splits the backward). ``sp``: ``whole_split``."""
    parts = costs.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    return gemms_time_bwd_split([g for _, g in parts], tp, gpu, dtype, tpo, fw, system,
                                fixed_shares(parts, m, ep, fw))


def gemms_time_bwd_split(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
                         fw: FrameworkProfile = DEFAULT,
                         system: SystemConfig = DEFAULT_SYSTEM,
                         shares: list[Num] | None = None) -> tuple[Num, Num]:
    """(all, weight-gradient) backward seconds of ``gemms`` (``costs.layer_gemms``' tuples),
    each priced as ``gemm_time_bwd_split`` describes (``gemm_units``; ``shares``: its
    fixed-time shares, ``fixed_shares``; None: 1 each)."""
    return units_time_bwd([g[0] for g in gemms], gemm_units(gemms, tp, gpu, dtype, tpo, fw,
                                                            system, shares=shares))


def gemm_time_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, fw: FrameworkProfile = DEFAULT,
                  system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Backward seconds of the dense GEMMs of one layer, data and weight gradient
    (``gemm_time_bwd_split``)."""
    return gemm_time_bwd_split(m, b, tp, cp, ep, gpu, dtype, tpo, fw, system)[0]


def grad_accum_time(params: Num, gpu: GPU, dtype: str, fw: FrameworkProfile = DEFAULT,
                    system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds to add one micro-batch's weight gradients of ``params`` parameters into the
    main gradient with a separate kernel (read the main gradient, read the 16-bit gradient,
    write the main gradient; DeepSpeed's BF16_Optimizer casts first:
    ``framework.BF16_ACCUM_BYTES``); 0 when the framework fuses it into the weight-gradient
    GEMM."""
    if fw.grad_accum_fusion:
        return 0.0 * params
    if uses_bf16_optimizer(fw, dtype):
        return params * BF16_ACCUM_BYTES / usable_hbm(gpu, system)
    gb = system.main_grad_bytes(dtype)
    return params * (2 * gb + GRAD_BYTES_16) / usable_hbm(gpu, system)


def sharded_grad_pass_bytes(fw: FrameworkProfile, dtype: str,
                            system: SystemConfig = DEFAULT_SYSTEM) -> float:
    """HBM bytes per unsharded gradient element and micro-batch of the passes the stack's
    sharded data parallelism runs besides the reduce-scatter (``fw.sharded_grad_passes``,
    ``framework.SHARDED_GRAD_PASSES``), with ``a`` = ``GRAD_BYTES_16`` the gradient as the
    GEMM writes it and ``g`` = ``system.main_grad_bytes(dtype)`` the reduce dtype's element:
    ``flat_grad_cat`` 2a, ``reduce_cast`` a + g (0 when g == a), ``predivide`` 2g,
    ``reduce_copy_in`` a + g. FSDP1 under Composer's DEFAULT in bf16: 4 + 6 + 8 = 18."""
    a, g = GRAD_BYTES_16, system.main_grad_bytes(dtype)
    per = {"flat_grad_cat": 2 * a, "reduce_cast": a + g if g != a else 0.0,
           "predivide": 2 * g, "reduce_copy_in": a + g}
    return float(sum(per[name] for name in fw.sharded_grad_passes))


def gather_copy_out_time(params: Num, gathered: Num, gpu: GPU, fw: FrameworkProfile = DEFAULT,
                         system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds of one all-gather's copy-out of ``params`` unsharded parameters on the compute
    stream (``GATHER_COPY_OUT_BYTES`` each at the usable HBM bandwidth) where the stack copies
    them out (``fw.gather_copy_out``: FSDP2) and the plan gathers them (``gathered``: ZeRO-3
    with dp > 1); 0 elsewhere (FSDP1 and Megatron gather into the parameters' own buffer)."""
    on = np.logical_and(fw.gather_copy_out, gathered)
    return params * GATHER_COPY_OUT_BYTES / usable_hbm(gpu, system) * on


def tp_layout_copy_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, tpo: Num,
                        pairs: Num, gpu: GPU, dtype: str, fw: FrameworkProfile = DEFAULT,
                        system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num, Num, Num]:
    """(forward, backward, op rerun, full rerun) seconds per layer and micro-batch of the
    full-tensor copies a stack whose sequence-parallel collectives run along the sequence
    dim of ``[b, s, h]`` (``fw.tp_seq_dim_copies``: torchtitan's ``Shard(1)`` plan) runs on
    the compute stream, at the usable HBM bandwidth: PyTorch's functional collectives
    gather along dim 0 and ``torch.cat(torch.chunk(out, tp, dim=0), dim=1)`` the result, and
    ``torch.cat(torch.chunk(x, tp, dim=1))`` a reduce-scatter's input first, each a read and
    a write of the gathered tensor (``counts.tp_comm_bytes_fwd``; an all-gather's at its
    element size, ``quantise.tp_allgather_bytes_factor``: torchao's float8 TP gathers fp8).
    ``pairs`` all-gather + reduce-scatter pairs per pass (``stage.tp_collectives_per_layer``).
    Forward: each pair's two copies; backward: the gradients' all-gathers' copies, and the
    data gradients' reduce-scatters' only eager (compiled, the ``cat`` of the dgrads' sum
    is that sum's own pointwise kernel, ``fw.elementwise_kernels == "compiled"``). Op-level
    recomputation reruns the forward's all-gathers' copies (its save list keeps the
    reduce-scatters' outputs); full recomputation the forward's, less the MLP's
    reduce-scatter (``pairs - 1`` of them) where the checkpoint stops early
    (``fw.recompute_early_stop``: nothing the backward needs reads that output). 0 without
    SP, tp = 1, on other stacks, and under async TP (``tpo``: Inductor's micro-pipeline
    pass lays the fused matmuls' operands out for the gather/scatter dim,
    ``restride_A_shard_for_fused_all_gather_matmul``).
    docs/calibration.md §5.80."""
    on = (np.asarray(tp) > 1) & np.asarray(sp, dtype=bool) \
        & ~np.asarray(tpo, dtype=bool) & fw.tp_seq_dim_copies
    x = 2.0 * costs.tp_comm_bytes_fwd(m, b, cp) / usable_hbm(gpu, system)   # read + write
    ag = x * quantise.tp_allgather_bytes_factor(dtype, sp) * on       # one copy each
    rs = x * on
    last = rcp.stopped_collectives(pairs, fw.recompute_early_stop)
    fwd = pairs * (ag + rs)
    return (fwd, pairs * ag + (0.0 if fw.elementwise_kernels == "compiled" else pairs * rs),
            pairs * ag, fwd - last * rs)


def sharded_grad_pass_time(params: Num, shard: Num, gpu: GPU, dtype: str,
                           fw: FrameworkProfile = DEFAULT,
                           system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds per micro-batch of the stack's passes over the unsharded gradient of ``params``
    weights (``sharded_grad_pass_bytes`` each over the usable HBM bandwidth) where the
    gradient is sharded (``shard > 1``: ZeRO >= 2 with dp > 1, ``accum_shard``); 0 elsewhere.
    FSDP1 runs the cast and the pre-divide on its post-backward stream, beside the next
    unit's backward: charged in full, on the assumption that they take SM time the compute
    stream's kernels would use (a large GEMM's CTAs occupy every SM); an upper bound if the
    kernels overlap."""
    per = sharded_grad_pass_bytes(fw, dtype, system)
    return params * per / usable_hbm(gpu, system) * (np.asarray(shard) > 1)


def bf16_optimizer_launch_time(m: ModelSpec, fw: FrameworkProfile, dtype: str,
                               gpu: GPU | None = None) -> float:
    """GPU idle seconds per layer and micro-batch from the kernels DeepSpeed's BF16_Optimizer
    launches after each backward (``update_hp_grads``: per parameter tensor a cast to fp32
    and an add, ``costs.layer_param_tensors``), one launch gap each; 0 for other stacks."""
    if fw.grad_accum_fusion or not uses_bf16_optimizer(fw, dtype):
        return 0.0
    return 2 * len(costs.layer_param_tensors(m)) * measured.launch_gap(gpu, fw.launch_gap_s)


def attention_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num, gpu: GPU,
                       slow: Num = 1.0, fw: FrameworkProfile = DEFAULT,
                       system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """(forward, backward) seconds of the attention core of one layer (``slow``: factor on the
    compute-bound parts, ``overlap_slowdown``; ``fw``: which fused attention kernel the stack
    runs, ``GPU.flash_efficiency``; on a chip whose special-function units run exponentials
    at another rate than the one its efficiency describes, ``GPU.exp_seconds_offset``, the
    fused kernel's exposed exponentials, ``EXP_EXPOSED_FWD``/``_BWD`` of
    ``costs.attn_exponentials_fwd``, at the chip's own rate; and with PyTorch's context
    parallelism the HBM passes around each ring step, ``ring_attention.merge_bytes_fwd``/
    ``accum_bytes_bwd``; under ``fw.fp8_attention`` the fused kernel in MXFP8,
    ``fp8_attention.time_factors``, and its casts, ``fp8_attention.cast_bytes``)."""
    peak = gpu.peak("bf16")
    hbm = usable_hbm(gpu, system)
    f_flash = costs.attn_core_flops_fwd(m, b, tp, cp, True)
    flash_rate = peak * gpu.flash_efficiency(fw.attention_kernel)
    t_flash = slow * f_flash / flash_rate
    t_flash_b = FLASH_BWD_FACTOR / FLASH_BWD_EFFICIENCY * t_flash
    q = measured.attention_ratios(gpu, fw.attention_kernel, lambda f: f / flash_rate,
                                  FLASH_BWD_FACTOR / FLASH_BWD_EFFICIENCY)
    if q is not None:   # a measured profile: its time over the model's at this kernel length
        seq, heads = m.seq_length / cp, m.num_attention_heads / tp
        t_flash, t_flash_b = t_flash * q[0](seq, heads), t_flash_b * q[1](seq, heads)
    elif gpu.exp_seconds_offset():   # SFU faster/slower than the efficiency's reference
        t_exp = slow * costs.attn_exponentials_fwd(m, b, tp, cp) * gpu.exp_seconds_offset()
        t_flash = t_flash + EXP_EXPOSED_FWD * t_exp
        t_flash_b = t_flash_b + EXP_EXPOSED_BWD * t_exp
    if fw.fp8_attention:   # TE's MXFP8 fused attention: cuDNN's measured ratios, its casts
        k_f, k_b = fp8a.time_factors(m, gpu, m.seq_length / cp)
        c_f, c_b = fp8a.cast_bytes(m, b, tp, cp)
        t_flash, t_flash_b = t_flash * k_f + c_f / hbm, t_flash_b * k_b + c_b / hbm
    f_full = costs.attn_core_flops_fwd(m, b, tp, cp, False, windows=False)
    # unfused: two batched GEMMs with K = head_dim (QK^T) and N = head_dim (AV) over the whole
    # score square (a window only masks it)
    d = m.head_dim
    s = m.seq_length
    rate = peak * gpu.matmul_efficiency * _shape(d) * _shape(s / cp) * _shape(s)
    bias = fw.alibi_score_bytes if m.position_embedding == "alibi" else 0.0
    soft = costs.softmax_bytes_fwd(m, b, tp, cp, False, bias) / hbm
    soft_b = costs.softmax_bytes_bwd(m, b, tp, cp, False) / hbm
    t_plain_f = slow * f_full / rate + soft
    t_plain_b = slow * 2 * f_full / rate + soft_b
    fwd = np.where(flash, t_flash, t_plain_f)
    bwd = np.where(flash, t_flash_b, t_plain_b)
    if fw.cp_impl == "torch":   # PyTorch's ring: fp32 merges and accumulators per step
        fwd = fwd + ring.merge_bytes_fwd(m, b, tp, cp, fw.cp_kv_heads) / hbm
        bwd = bwd + ring.accum_bytes_bwd(m, b, tp, cp, fw.cp_kv_heads) / hbm
    return fwd, bwd


def elementwise_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU,
                         dtype: str, system: SystemConfig = DEFAULT_SYSTEM,
                         kernels: str = "fused") -> Num:
    """Forward seconds of the memory-bound kernels of one layer: ``costs.elementwise_bytes_fwd``
    (``kernels``: ``FrameworkProfile.elementwise_kernels``) and, with a quantised precision,
    the forward casts (``cast_time``) at the usable HBM bandwidth."""
    plain = costs.elementwise_bytes_fwd(m, b, tp, cp, sp, kernels) / usable_hbm(gpu, system)
    return plain + cast_time(m, b, tp, cp, sp, gpu, dtype, system)[0]


def cast_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU, dtype: str,
              system: SystemConfig = DEFAULT_SYSTEM, fw: FrameworkProfile = DEFAULT
              ) -> tuple[Num, Num]:
    """(forward, backward) seconds of one layer's quantisation per micro-batch
    (``quantise.layer_cast_bytes`` over the usable HBM bandwidth, the routed experts'
    activation casts in passes of their own where the stack runs Transformer Engine's
    ``GroupedLinear``, ``fw.grouped_mlp_casts``; torchao's float8 TP transposing its gathered
    fp8 tensors in the backward, ``fw.torchao_float8_tp``); 0 in 16 bits."""
    f, bw = quantise.layer_cast_bytes(m, b, tp, cp, sp, gpu, dtype, fw.grouped_mlp_casts,
                                      fw.torchao_float8_tp)
    hbm = usable_hbm(gpu, system)
    return f / hbm, bw / hbm


def weight_cast_time(weights: Num, gpu: GPU, dtype: str,
                     system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds to quantise ``weights`` GEMM weights once per step
    (``quantise.weight_cast_bytes`` over the usable HBM bandwidth); 0 in 16 bits."""
    return quantise.weight_cast_bytes(weights, gpu, dtype) / usable_hbm(gpu, system)


def launch_time(fw: FrameworkProfile = DEFAULT, gpu: GPU | None = None) -> float:
    """GPU idle seconds per layer forward from kernel boundaries (the backward: twice); the
    gap per boundary is ``gpu``'s measured one where its profile has it."""
    return fw.kernels_per_layer * measured.launch_gap(gpu, fw.launch_gap_s)


def moe_permute_time(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU,
                     load: Num = 1.0, dispatcher: Num = 0, dedup: Num = 1.0,
                     system: SystemConfig = DEFAULT_SYSTEM,
                     etp: Num | None = None,
                     dispatch_bytes: float = costs.ACT_BYTES) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's MoE token permutations on one GPU:
    ``costs.moe_permute_bytes`` over the usable HBM bandwidth (0 for a dense model)."""
    f, bw = costs.moe_permute_bytes(m, b, tp, cp, ep, load, dispatcher, dedup, etp,
                                    dispatch_bytes)
    hbm = usable_hbm(gpu, system)
    return f / hbm, bw / hbm


def expert_pad_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                    load: Num = 1.0, etp: Num | None = None, fw: FrameworkProfile = DEFAULT,
                    system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's quantisation padding of the routed
    tokens (``costs.expert_pad_bytes`` over the usable HBM bandwidth) where the stack pads
    (``fw.quant_padding``) and ``dtype`` is quantised; 0 otherwise."""
    if not (fw.quant_padding and get_precision(dtype).quantised):
        z = 0.0 * np.asarray(b, dtype=float)
        return z[()], z[()]
    f, bw = costs.expert_pad_bytes(m, b, tp, cp, load, etp)
    hbm = usable_hbm(gpu, system)
    return f / hbm, bw / hbm


def expert_quantise_time(m: ModelSpec, ep: Num, gpu: GPU, dtype: str,
                         fw: FrameworkProfile = DEFAULT) -> tuple[Num, Num]:
    """GPU idle seconds ``(forward, backward)`` of the mean layer's per-expert quantisation
    launches (``quantise.expert_quantise_kernels`` on a stack that runs Transformer Engine's
    ``GroupedLinear``, ``fw.grouped_mlp_casts``) at one launch gap each; their bytes are
    ``cast_time``'s."""
    k_f, k_b = quantise.expert_quantise_kernels(m, ep, dtype, fw.grouped_mlp_casts)
    gap = measured.launch_gap(gpu, fw.launch_gap_s)
    return k_f * gap, k_b * gap


def expert_bias_time(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU,
                     load: Num = 1.0, etp: Num | None = None, fw: FrameworkProfile = DEFAULT,
                     system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's routed-expert output bias as
    Megatron-Core applies it, one local expert at a time (``costs.expert_bias_bytes`` over
    the usable HBM bandwidth, plus ``costs.expert_bias_kernels`` launch gaps); 0 for experts
    without biases."""
    f, bw = costs.expert_bias_bytes(m, b, tp, cp, load, etp)
    kf, kb = costs.expert_bias_kernels(m, ep)
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    return f / hbm + kf * gap, bw / hbm + kb * gap


def eager_variant_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, load: Num = 1.0,
                       fw: FrameworkProfile = DEFAULT,
                       system: SystemConfig = DEFAULT_SYSTEM,
                       rope: bool = True) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's eager kernels that Megatron-Core
    runs for gpt-oss's variants where the stack runs its model code (``fw.eager_variants``):
    the activation clamp (``costs.clamp_bytes``) and the unfused YaRN RoPE
    (``costs.rope_unfused_bytes``) over the usable HBM bandwidth, plus a launch gap per
    kernel (``costs.eager_variant_kernels``); 0 for a model with neither, or another stack.
    ``rope`` False: the clamp's alone (what a selective recomputation of the routed
    activation reruns, ``selective_time``). The clamp is not charged where the stack runs it
    inside Transformer Engine's fused grouped MLP (``framework.runs_eager_clamp``)."""
    cf, cb = costs.clamp_bytes(m, b, tp, cp, load)
    rf, rb = costs.rope_unfused_bytes(m, b, tp, cp) if rope else (0.0, 0.0)
    kf, kb = costs.eager_variant_kernels(m, rope)
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    on = 1.0 if fw.eager_variants else 0.0
    if on and not runs_eager_clamp(fw):         # the RoPE's alone
        cl_f, cl_b = costs.eager_variant_kernels(m, False)
        return rf / hbm + (kf - cl_f) * gap, rb / hbm + (kb - cl_b) * gap
    return on * ((cf + rf) / hbm + kf * gap), on * ((cb + rb) / hbm + kb * gap)


def moe_sync_time(m: ModelSpec, fw: FrameworkProfile = DEFAULT, gpu: GPU | None = None,
                  dispatcher: Num = 0) -> Num:
    """GPU idle seconds per mean-layer forward from the token dispatcher's device-to-host
    synchronisations (``costs.MOE_SYNCS_FWD`` per MoE layer): the host waits until the GPU
    has drained its queue, so the GPU then waits, serially, for everything the host runs up
    to its next launch: the launch gap, plus ``HOST_PATH_S`` (the host's path of one operator,
    ``strategies.launch_blocking``) per Python operator the ``dispatcher`` (``plan.DISPATCHERS``
    code) runs before it (``costs.MOE_SYNC_HOST_OPS``), i.e. ``SYNC_LAUNCH_GAP_S`` for the
    alltoall dispatcher, as under ``CUDA_LAUNCH_BLOCKING``. 0 for a dense model. Vectorised
    over ``dispatcher``."""
    code = np.asarray(dispatcher).astype(int)
    if not m.is_moe:
        return (0.0 * code)[()]
    share = m.layer_shares().get("moe", 0.0)
    ops = np.asarray(costs.MOE_SYNC_HOST_OPS, dtype=float)[code]
    gap = measured.launch_gap(gpu, fw.launch_gap_s)
    return (share * costs.MOE_SYNCS_FWD * (gap + ops * HOST_PATH_S))[()]


def moe_host_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, slow: Num = 1.0, fw: FrameworkProfile = DEFAULT,
                  system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
                  load: Num = 1.0, permute: tuple[Num, Num] = (0.0, 0.0),
                  bias: tuple[Num, Num] = (0.0, 0.0), graphed: Num = False,
                  priced: tuple[list, list] | None = None) -> tuple[Num, Num]:
    """GPU idle seconds ``(forward, backward)`` of the mean layer while the host issues an MoE
    layer's expert path (0 for a dense model, and under a full-iteration CUDA graph,
    ``graphed``, which replays the step with no host work in it).

    The dispatcher's device-to-host synchronisation (``moe_sync_time``) empties the GPU's
    queue before the experts, so their host work shows wherever it exceeds the GPU time of
    the same kernels. Host seconds per MoE layer and pass: ``EXPERT_HOST_S`` per local expert
    (``E/ep``) and, for experts with biases, ``HOST_PATH_S`` per operator of Megatron-Core's
    per-expert bias loop (``costs.expert_bias_kernels``). GPU seconds ``G``: the routed
    experts' GEMMs (``slow`` times; backward data and weight gradients), the permutations
    ``permute`` and the bias path ``bias`` (both as the mean layer's ``moe_permute_time``/
    ``expert_bias_time`` give them). Exposed per MoE layer ``max(0, host - G)``, times the
    MoE layers' share of the layers. ``priced``: the caller's ``layer_gemm_parts`` of the
    mean layer and their ``gemm_units`` (``layer_time``), whose routed experts' GEMMs have
    the MoE layer's shapes; None: priced here. Vectorised."""
    share = m.layer_shares().get("moe", 0.0) if m.is_moe else 0.0
    if share == 0.0:
        z = 0.0 * np.asarray(b, dtype=float)
        return z[()], z[()]
    local = m.num_experts / np.asarray(ep, dtype=float)
    k_f, k_b = costs.expert_bias_kernels(m, ep)
    h_f = local * EXPERT_HOST_S[0] + k_f / share * HOST_PATH_S
    h_b = local * EXPERT_HOST_S[1] + k_b / share * HOST_PATH_S

    def routed(parts):
        return [i for i, (part, g) in enumerate(parts)
                if part == "routed_mlp" and g[4] is not None]

    # one MoE layer's routed expert GEMMs: its counts, the mean layer's shapes and prices
    own = costs.layer_gemm_parts(m, b, tp, cp, ep, "moe", etp, load)
    counts = [own[i][1][0] for i in routed(own)]
    if priced is None:
        sh = fixed_shares(own, m, ep, fw)
        units = gemm_units([own[i][1] for i in routed(own)], tp, gpu, dtype, tpo, fw, system,
                           shares=[sh[i] for i in routed(own)])
    else:
        units = [priced[1][i] for i in routed(priced[0])]
    g_f = slow * units_time_fwd(counts, units) + (permute[0] + bias[0]) / share
    g_b = slow * units_time_bwd(counts, units)[0] + (permute[1] + bias[1]) / share
    on = np.logical_not(graphed)
    fwd = share * np.maximum(h_f - g_f, 0.0) * on
    bwd = share * np.maximum(h_b - g_b, 0.0) * on
    return np.asarray(fwd)[()], np.asarray(bwd)[()]


def layer_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, sp: Num, flash: Num,
               recompute: Num, gpu: GPU, dtype: str, tpo: Num = False,
               fw: FrameworkProfile = DEFAULT, slow: Num = 1.0, shard: Num = 1.0,
               system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
               load: Num = 1.0, modules: Num = 0, dispatcher: Num = 0,
               dedup: Num = 1.0, graphed: Num = False, gathered: Num = False,
               tp_pairs: Num = 2.0) -> LayerTime:
    """Compute seconds of one layer: forward, backward and recomputation (keyword-only).

    ``recompute`` is 0 (none), 1 (selective: the attention core is recomputed), 2 (full: the
    whole forward is recomputed) or 3 (op: torchtitan's op-level policy, the unsaved GEMMs of
    ``costs.op_sac_gemms`` and the elementwise kernels). ``tpo``: TP communication overlap (GEMMs split along M).
    ``fw``: the framework profile (gradient accumulation, kernel launches). ``slow``: factor
    on the compute-bound kernels (GEMMs, attention), ``overlap_slowdown``. ``shard``: the
    gradient is accumulated over ``1/shard`` of the layer's parameters (``accum_shard``).
    ``wgrad`` is the weight-gradient part of ``bwd`` (``W`` of a split backward): the
    weight-gradient GEMMs and the separate accumulation into the main gradient; the rest
    (data-gradient GEMMs, attention and elementwise backward, launch gaps) is ``B``.
    ``etp``: expert tensor-parallel size (default tp); ``load``: the hottest expert-parallel
    rank's routed tokens over the mean (``costs.moe_load``), the pace of its expert GEMMs.
    ``dispatcher`` (``plan.DISPATCHERS`` code) and ``dedup`` (``costs.ep_dedup``'s byte
    scale): the MoE token permutations (``moe_permute_time``) and the dispatcher's host
    synchronisation (``moe_sync_time``), in ``B`` for the backward. ``graphed``: the step runs
    as one full-iteration CUDA graph (plan ``cuda_graph``): no host launches or
    synchronisations left (``moe_host_time``, ``moe_sync_time`` 0); else the expert path's
    host launches (``moe_host_time``), in ``B`` for the backward. ``gathered``: ZeRO-3 with
    dp > 1 gathers the layer before its forward and its backward, each gather's copy-out
    (``gather_copy_out_time``) in the pass, in ``B`` for the backward. ``tp_pairs``: the
    layer's tensor-parallel collective pairs per pass (``stage.tp_collectives_per_layer``),
    whose sequence-dim layout copies (``tp_layout_copy_time``), or under async TP the fused
    ops' own HBM passes (``async_tp.fused_pass_time``), run in the pass, in ``B``."""
    # the mean layer's GEMMs (``_linears``) at the stack's shapes of the GEMMs tensor
    # parallelism leaves whole (``whole_split``), each shape priced once for every sum below
    parts = costs.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    units = gemm_units([g for _, g in parts], tp, gpu, dtype, tpo, fw, system,
                       shares=fixed_shares(parts, m, ep, fw))
    counts = [g[0] for _, g in parts]
    g_f = slow * units_time_fwd(counts, units)
    g_b, g_w = units_time_bwd(counts, units)
    g_b, g_w = slow * g_b, slow * g_w
    a_f, a_b = attention_time_fwd(m, b, tp, cp, flash, gpu, slow, fw, system)
    c_f, c_b = cast_time(m, b, tp, cp, sp, gpu, dtype, system, fw)
    e_plain = costs.elementwise_bytes_fwd(m, b, tp, cp, sp, fw.elementwise_kernels) \
        / usable_hbm(gpu, system)
    e = e_plain + c_f
    layer_w = costs.layer_params_per_gpu(m, tp, ep, etp)
    acc = grad_accum_time(layer_w / shard, gpu, dtype, fw, system) \
        + bf16_optimizer_launch_time(m, fw, dtype, gpu) \
        + sharded_grad_pass_time(layer_w, shard, gpu, dtype, fw, system)
    launch = launch_time(fw, gpu=gpu)
    # ZeRO-3 gathers the layer before its forward and again before its backward
    gco = gather_copy_out_time(layer_w, gathered, gpu, fw, system)
    # the sequence-dim collectives' layout copies (torchtitan's Shard(1) plan)
    y_f, y_b, y_op, y_full = tp_layout_copy_time(m, b, tp, cp, sp, tpo, tp_pairs, gpu,
                                                 dtype, fw, system)
    # async TP's own passes in their place (the shard's copy-in, the partial sums)
    z_f, z_b, z_op, z_full = async_tp.fused_pass_time(m, b, tp, cp, sp, tpo, tp_pairs, dtype,
                                                      fw, usable_hbm(gpu, system))
    y_f, y_b, y_op, y_full = y_f + z_f, y_b + z_b, y_op + z_op, y_full + z_full
    p_f, p_b = moe_permute_time(m, b, tp, cp, ep, gpu, load, dispatcher, dedup, system, etp,
                                costs.dispatch_element_bytes(fw.fp8_dispatch, dtype))
    # the experts' quantisation padding: HBM copies on the expert path, priced with the
    # permutations (the same record, the same host comparison)
    q_f, q_b = expert_pad_time(m, b, tp, cp, gpu, dtype, load, etp, fw, system)
    # and TE's per-expert quantisation launches (split_quantize), with them for the same reason
    k_f, k_b = expert_quantise_time(m, ep, gpu, dtype, fw)
    p_f, p_b = p_f + q_f + k_f, p_b + q_b + k_b
    x_f, x_b = expert_bias_time(m, b, tp, cp, ep, gpu, load, etp, fw, system)
    v_f, v_b = eager_variant_time(m, b, tp, cp, gpu, load, fw, system)
    sync = moe_sync_time(m, fw, gpu, dispatcher) * np.logical_not(graphed)
    bwd0 = g_b + a_b + 2 * e_plain + c_b + acc + 2 * launch + p_b + x_b + v_b + gco + y_b
    h_f, h_b = moe_host_time(m, b=b, tp=tp, cp=cp, ep=ep, gpu=gpu, dtype=dtype, tpo=tpo,
                             slow=slow, fw=fw, system=system, etp=etp, load=load,
                             permute=(p_f, p_b), bias=(x_f, x_b), graphed=graphed,
                             priced=(parts, units))
    fwd = g_f + a_f + e + launch + p_f + x_f + v_f + sync + h_f + gco + y_f
    bwd = bwd0 + h_b
    # the last GEMM an early-stopping checkpoint does not rerun: priced once, read by the
    # selective and the full recomputation below
    stop = early_stop_saving(m, b, tp, cp, ep, gpu, dtype, tpo, fw, slow, system, etp, load)
    sel = selective_time(m, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash, a_f=a_f,
                         modules=modules, gpu=gpu, dtype=dtype, tpo=tpo, slow=slow,
                         system=system, etp=etp, load=load, fw=fw, priced=(parts, units),
                         stop=stop)
    # op (torchtitan's SAC): the GEMMs its policy does not save and every memory-bound kernel
    # between them (norms, rotary, activation function, residual adds), each relaunched; the
    # saved GEMMs and the attention kernel are not rerun
    op_parts = costs.op_sac_gemm_parts(m, b, tp, cp, ep, etp=etp, load=load)
    rerun = [(p, g) for p, g in op_parts if not g[-1]]
    kernels = max(fw.kernels_per_layer - (len(op_parts) - len(rerun)) - 1, 0)
    op = (slow * gemms_time_fwd([g for _, g in rerun], tp, gpu, dtype, tpo, system,
                                fixed_shares(rerun, m, ep, fw)) + e + y_op
          + kernels * measured.launch_gap(gpu, fw.launch_gap_s))
    # full: the whole forward again, less the last GEMM when the stack's checkpoint stops early
    full = fwd - gco - stop - (y_f - y_full)
    rc = np.where(recompute == 2, full, np.where(recompute == 1, sel,
                                                np.where(recompute == 3, op, 0.0)))
    return LayerTime(fwd, bwd, rc, g_w + acc, regather_dgrad(m, parts, units, slow),
                     column_wgrad(m, parts, units, slow), attention_wgrad(m, parts, units, slow),
                     down_dgrad(m, parts, units, slow), down_wgrad(m, parts, units, slow))


def early_stop_saving(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                      tpo: Num = False, fw: FrameworkProfile = DEFAULT, slow: Num = 1.0,
                      system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
                      load: Num = 1.0) -> Num:
    """Seconds per layer and micro-batch that full recomputation does not rerun on a stack
    whose checkpoint stops early: the forward of ``counts.early_stop_gemms`` (``slow``: the
    overlap clock factor, as on the forward); 0 on a stack that reruns the whole forward."""
    if not fw.recompute_early_stop:
        return 0.0 * np.asarray(b, dtype=float)
    return slow * gemms_time_fwd(costs.early_stop_gemms(m, b, tp, cp, ep, etp, load), tp, gpu,
                                 dtype, tpo, system)


def selective_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, sp: Num, flash: Num,
                   a_f: Num, modules: Num, gpu: GPU, dtype: str, tpo: Num = False,
                   slow: Num = 1.0, system: SystemConfig = DEFAULT_SYSTEM,
                   etp: Num | None = None, load: Num = 1.0,
                   fw: FrameworkProfile = DEFAULT,
                   priced: tuple[list, list] | None = None, stop: Num | None = None) -> Num:
    """Seconds one layer's selective recomputation of the modules in ``modules`` (a
    ``strategies.cost.recompute`` mask, 0: ``core_attn``) redoes in its backward, the sum
    of its parts (``MODULE_PARTS``, each once): the attention core ``a_f`` (0 under
    FlashAttention, whose backward already recomputes the scores, unless the stack reruns
    the fused kernel's forward, ``FrameworkProfile.recompute_flash_fwd``), the norms' and the
    activation functions' HBM traffic (``counts.norm_bytes_fwd``,
    ``counts.activation_fn_bytes_fwd`` over each part's width; the routed activation with
    its eager clamp where the stack runs one, ``eager_variant_time`` without the RoPE), and
    the forward of each part's GEMMs (``counts.layer_gemm_parts``; ``priced``: those and
    their ``gemm_units`` as the caller has them, ``layer_time``; None: priced here), the
    dense MLP's less its down projection on a stack whose recomputation never reruns the
    layer's last GEMM (``early_stop_saving``; ``stop``: that saving as the caller priced it
    with the same arguments, ``layer_time``; None: priced here)."""
    hbm = usable_hbm(gpu, system)
    widths = costs.mlp_part_widths(m)
    if priced is None:
        gemms = costs.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load,
                                       whole_split(tp, sp, fw))
        units = gemm_units([x for _, x in gemms], tp, gpu, dtype, tpo, system=system,
                           backward=False, shares=fixed_shares(gemms, m, ep, fw))
    else:
        gemms, units = priced

    def g(part):
        sel = [i for i, (p, _) in enumerate(gemms) if p == part]
        return slow * units_time_fwd([gemms[i][1][0] for i in sel],
                                     [units[i] for i in sel]) if sel else 0.0

    def act(part):
        return costs.activation_fn_bytes_fwd(m, b, tp, cp, widths[part]) / hbm

    clamp = eager_variant_time(m, b, tp, cp, gpu, load, fw, system, rope=False)[0]
    if stop is None:
        stop = early_stop_saving(m, b, tp, cp, ep, gpu, dtype, tpo, fw, slow, system, etp,
                                 load)
    work = {"scores": np.where(np.logical_and(flash, not fw.recompute_flash_fwd), 0.0, a_f),
            "norm_outputs": costs.norm_bytes_fwd(m, b, tp, cp, sp) / hbm,
            "dense_mlp": g("dense_mlp") - stop + act("dense_mlp"),
            "routed_act": act("routed_mlp") + clamp,
            "routed_mlp": g("routed_mlp"),
            "shared_mlp": g("shared_mlp") + act("shared_mlp"),
            "mla_up": g("mla_up")}
    return sum(np.where(rcp.part_selected(1, modules, part), t, 0.0) for part, t in work.items())


def lm_head_time_split(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                       fw: FrameworkProfile = DEFAULT, slow: Num = 1.0, shard: Num = 1.0,
                       system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num, Num]:
    """(forward, backward, weight-gradient part of the backward) seconds of the output layer
    and the cross-entropy on the last stage. The logits GEMM stays in 16 bits; the backward
    is its data- and weight-gradient GEMMs, the cross-entropy's backward passes over the fp32
    logits (both directions' passes: ``fw.loss``, bytes per logit element) and the gradient
    accumulation of the output weight; its weight-gradient part is
    the weight-gradient GEMM and that accumulation. ``slow``: factor on the GEMMs
    (``overlap_slowdown``)."""
    T = costs.tokens_per_gpu(b, m.seq_length, cp)
    rate = gpu.peak("bf16") * gpu.matmul_efficiency
    hbm = usable_hbm(gpu, system)
    V, h = m.vocab_size / tp, m.hidden_size
    c_w = 2 * system.main_grad_bytes(dtype) if fw.grad_accum_fusion else GRAD_BYTES_16
    kn = k_knee(gpu, "bf16")
    q, wv = _gemm_ratio(gpu, "bf16", rate, kn, system), gemm_waves(gpu, system)
    t0 = gemm_fixed_s(gpu)
    g_f = slow * _gemm(1, T, V, h, rate, hbm, 2.0, knee=kn, ratio=q, waves=wv, fixed=t0)
    w = _gemm(1, h, V, T, rate, hbm, 2.0, c_w, knee=kn, ratio=q, waves=wv, fixed=t0)
    g_b = slow * (_gemm(1, T, h, V, rate, hbm, 2.0, knee=kn, ratio=q, waves=wv, fixed=t0) + w)
    # the softmax cross-entropy's memory-bound passes over the logits, as the stack runs them
    # (``FrameworkProfile.loss``, ``framework.LossPasses``)
    ce_f, ce_b = (fw.loss.fwd_bytes * T * V / hbm, fw.loss.bwd_bytes * T * V / hbm)
    # a tied head's weight is the embedding's tensor: its sharded-gradient passes are the
    # embedding's (``embedding_time_bwd``)
    acc = grad_accum_time(V * h / shard, gpu, dtype, fw, system) + sharded_grad_pass_time(
        0.0 if m.tie_word_embeddings else V * h, shard, gpu, dtype, fw, system)
    return g_f + ce_f, g_b + ce_b + acc, slow * w + acc


def lm_head_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                 fw: FrameworkProfile = DEFAULT, slow: Num = 1.0,
                 shard: Num = 1.0, system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """(forward, backward) seconds of the output layer and the cross-entropy on the last
    stage (``lm_head_time_split``)."""
    return lm_head_time_split(m, b, tp, cp, gpu, dtype, fw, slow, shard, system)[:2]


def embedding_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU,
                   system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Forward seconds of the embedding lookup (+ position add, dropout) on the first stage."""
    T = costs.tokens_per_gpu(b, m.seq_length, cp)
    return 4 * 2.0 * T * m.hidden_size / usable_hbm(gpu, system)


def embedding_time_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                       fw: FrameworkProfile = DEFAULT, shard: Num = 1.0,
                       system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Backward seconds of the embedding on the first stage: the scatter-add of the token
    gradients (twice the forward's bytes) and the accumulation of the word embedding's
    gradient into the main gradient (``grad_accum_time``) and, with sharded gradients, the
    stack's passes over the embedding's unsharded gradient (``sharded_grad_pass_time``)."""
    emb_w = costs.embedding_params_per_gpu(m, tp)
    return 2 * embedding_time(m, b, tp, cp, gpu, system) + grad_accum_time(
        emb_w / shard, gpu, dtype, fw, system) + sharded_grad_pass_time(emb_w, shard, gpu,
                                                                        dtype, fw, system)


def optimizer_time(params_on_gpu: Num, gpu: GPU, system: SystemConfig = DEFAULT_SYSTEM,
                   fw: FrameworkProfile = DEFAULT) -> Num:
    """Adam step over the parameters this GPU updates at the usable bandwidth (seconds): one
    fused kernel, ``system.adam_step_bytes`` (28) HBM bytes per parameter (fp32 master, m and
    v read and written, the fp32 gradient read), or the stack's chain of unfused kernels,
    ``fw.step.adam_elements`` fp32 elements (4 bytes each) per parameter; the 16-bit weight
    copy is a per-step pass of the stack (``strategies.cost.step``)."""
    per = 4.0 * fw.step.adam_elements if fw.step.adam_elements else system.adam_step_bytes
    return per * params_on_gpu / usable_hbm(gpu, system)
