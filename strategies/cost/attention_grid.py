"""The fused causal attention kernel's grid: how well its thread blocks (CTAs) fill the GPU at
a shape, as a factor on the catalog's rate (``GPU.flash_efficiency``). docs/calibration.md §5.130.

Physics. A fused (flash) attention kernel launches one CTA per (batch, head, 128-row tile):
the forward one per query tile, the backward one per key tile. Under a causal mask the CTA of
query tile ``i`` (0-based) visits ``i + 1`` key tiles (the diagonal one in full, the
convention of ``attention_counts.score_elements`` "kernel"), and the backward's CTA of key
tile ``j`` visits the ``n - j`` query tiles at or below it; each CTA also pays a fixed cost of
``fixed_tiles`` tile-equivalents (the forward loads Q, fills the pipeline, normalises and
writes O and the log-sum-exp; the backward loads K and V and writes dK and dV). The GPU runs
the CTAs ``ctas_per_sm`` at a time on each of ``GPU.sm_count`` SMs, each one taken, when a
slot frees, in the kernel's order (a list schedule: the hardware block scheduler of a
non-persistent grid, or a persistent kernel's atomic tile counter). The grid factor is the
ideal time (the useful tiles spread evenly over every slot) over that schedule's makespan:
1 for a full, balanced grid; ``ideal/longest CTA`` when every CTA has its own slot.

Kernels (``GridKernel``; tile sizes and orders from the public sources, the fixed costs from
the one H200 measurement, docs/measurements/h200_2026-11-29, least squares over its kernel
points in ``experiments/attention_grid_fit.py``, which prints the residual of every point):

* cuDNN (``"native"`` on Hopper and later; closed source): 128-row tiles, one CTA per SM,
  taken in the tile index's order, the order the H200 points select among ``ORDERS``: the
  forward per head from the shortest query tile ('head_asc'; per head longest first times
  16,384 tokens x 4 heads 0.15-0.20 short in log time; FlashAttention-3's global longest-first
  ``DynamicPersistentTileScheduler``, hopper/tile_scheduler.hpp, fits all the points 2.7x
  worse), the backward per head from key tile 0, the longest ('head_desc'). The fit script
  prints every order's fit (``--orders``).
* FlashAttention-2 (``"fa2"``, and ``"native"`` up to Ampere): Dao-AILab/flash-attention
  ``csrc/flash_attn/src/flash_fwd_launch_template.h`` ``run_mha_fwd_hdim128`` (128 x 64
  tiles, 4 warps; grid ``(num_m_block, b, h)``, ``m_block = blockIdx.x``: per head, the
  shortest query tile first, 'head_asc') and ``flash_bwd_launch_template.h``
  ``run_mha_bwd_hdim128`` (64 x 128, one key tile of 128 a CTA, grid ``(num_n_block, b, h)``:
  per head the longest first, 'head_desc'). One CTA per SM at a time fits the points better
  than two (printed by the fit script) and is used.

The catalog's figure stays the rate at the shape it was measured at (``REF_SEQ`` tokens,
``REF_GROUPS`` batch x heads: the FlashAttention-2/-3 papers' benchmark, batch·sequence 16k,
hidden 2048, head dim 128, here at 16k tokens); ``rate_factors`` is the grid factor at a shape
over the one there, so only the shape dependence is new and it carries to another chip
through its SM count. Vectorised over the plan fields (one schedule per distinct shape,
cached). With context parallelism a rank's attention is the ring's steps (``ring_factor``) or,
under Transformer Engine's all-gather (plan ``cp_comm=all_gather``), its two chunk kernels
against the gathered keys on two streams (``allgather_factor``, docs/calibration.md §5.134).

Head dims (``head_dim_factor``, docs/calibration.md §5.131, §5.132). A tile's time is its
GEMMs, whose FLOPs scale with ``D = d_qk + d_v``, plus work that does not (the softmax over the
tile's scores: exponentials, max/sum, rescale; in the backward the recomputed ``P`` and
``dS = P∘(dP - rowsum(dO∘O))``): time per tile ∝ ``D + s0`` (``GridKernel.head_dim_s0``), so
the fraction of the peak is ``D/(D + s0)`` up to a constant. The backward also holds its key
tile's dK and dV accumulators (``Bn × D`` fp32) in registers for the CTA's life, so above
``GridKernel.tile_dims`` its key tile shrinks as ``tile_dims/D`` (Dao-AILab/flash-attention
``hopper/flash_bwd_launch_template.h``, sm90: 128 keys at head dims 64 and 128, 96 at 192, 80
at 256), while a visited query tile's traffic (Q and dO in, the LSE rows, the fp32 dQ
accumulation) does not shrink with it: the rate falls as ``min(1, tile_dims/D)``. Both
normalised to 1 at head dim 128 (``REF_DIMS``, the catalog's and the fit's), within the head
dims measured (``DIMS_RANGE``). cuDNN's forward: ``s0`` 138 from its H200 points at head dims 64
and 192 (rms of log time 0.232 -> 0.097); its backward: ``tile_dims`` 256 (the register rule)
and ``s0`` from the same points with it (``experiments/attention_grid_fit.py --held-out``).
The backward's grid also takes its key tile by head dim (``at_head_dim``, ``BWD_KEY_ROWS``,
§5.183): FlashAttention-3's sm90 ``kBlockN`` at the larger of d_qk and d_v (128 rows up to head
dim 128, 96 at 192, 80 at 256), more and shorter CTAs, each paying the same fixed time.
FlashAttention-2 keeps head dim 128's rate and tile (not measured at other head dims)."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from strategies.cost.attention_counts import window_share
from strategies.cost.token_counts import Num
from strategies.errors import SpecError
from strategies.model import ModelSpec
from strategies.distinct_rows import distinct_rows
from topologies.gpus import GPU

TILE = 128          # rows of a query (forward) or key (backward) tile: every kernel below
ORDERS = ("head_desc", "head_asc", "lpt")
#: the shape the catalog's ``flash_efficiency`` figures were benchmarked at: causal, head dim
#: 128, batch·sequence 16k over 16 heads (hidden 2048) at the longest sequence, 16k (Dao 2023,
#: FlashAttention-2 §4.1; Shah et al. 2024, FlashAttention-3 §4.1; docs/calibration.md §3.1)
REF_SEQ = 16384
REF_GROUPS = 16
#: jobs (CTAs) scheduled one by one; a larger grid takes the schedule of its first
#: ``MAX_JOBS // tiles`` (batch, head) groups plus the rest's work spread evenly (the
#: steady state adds work/slots to the makespan)
MAX_JOBS = 40_000
#: d_qk + d_v of the shape the grid and the catalog's rate were measured at (head dim 128)
REF_DIMS = 256
#: d_qk + d_v the head-dim rate was measured over (head dims 64 and 192, run 4); outside it
#: the nearest end's factor (no extrapolation)
DIMS_RANGE = (128, 384)
#: cuDNN backward's head-dim constant (units of d_qk + d_v), with its register rule
#: (``tile_dims``) and its key tile by head dim (``BWD_KEY_ROWS``); docs/calibration.md §5.132,
#: §5.183
BWD_S0 = 74.0
#: the backward's key tile (rows a CTA owns) by head dim, ``(largest head dim, rows)``:
#: FlashAttention-3's sm90 ``kBlockN`` (Dao-AILab/flash-attention @0251105,
#: hopper/flash_bwd_launch_template.h ``run_mha_bwd_hdim64/96/128/192/256``: 128 up to head
#: dim 128, 96 at 192, 80 at 256), the head dim being the larger of d_qk and d_v (hopper/
#: flash_api.cpp ``mha_bwd`` rounds both to it: MLA's 192/128 runs the 192 kernel);
#: docs/calibration.md §5.183
BWD_KEY_ROWS = ((128, 128), (192, 96), (256, 80))


@dataclass(frozen=True)
class GridKernel:
    """One fused attention kernel's grid (and its rate by head dim). ``order``: the order CTAs are taken in, 'head_desc'
    (per (batch, head), the longest tile first), 'head_asc' (the shortest first) or 'lpt'
    (every head's tiles, longest first); ``ctas_per_sm``: CTAs one SM runs at a time (each at
    that share of the SM's rate); ``fixed_tiles``: a CTA's fixed cost, in tile-equivalents
    (the time of one 128 x 128 score tile at the kernel's full rate); ``head_dim_s0``: a
    tile's time that does not scale with the head dims, in units of ``d_qk + d_v`` (the
    softmax over its scores; ``head_dim_factor``; 0: the rate is head dim 128's at every
    head dim); ``tile_dims``: the ``d_qk + d_v`` above which the CTA's key tile, held in
    registers, shrinks as ``tile_dims/D`` and the rate with it (the backward's dK/dV
    accumulators; 0: no such limit); ``rows``: the tile's rows (a query tile's in the forward,
    a key tile's in the backward; the grid's unit is a ``rows`` x ``rows`` tile and
    ``fixed_tiles`` counts in it); ``key_rows``: ``(largest head dim, rows)`` pairs, ascending,
    the tile by head dim (``at_head_dim``; empty: ``rows`` at every head dim)."""

    name: str
    order: str
    ctas_per_sm: int
    fixed_tiles: float
    head_dim_s0: float = 0.0
    tile_dims: float = 0.0
    rows: int = TILE
    key_rows: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise SpecError("GridKernel.order", self.order, f"must be one of {', '.join(ORDERS)}")
        if not (isinstance(self.ctas_per_sm, int) and self.ctas_per_sm >= 1):
            raise SpecError("GridKernel.ctas_per_sm", self.ctas_per_sm, "must be an integer >= 1")
        if not 0.0 <= self.fixed_tiles <= 1000.0:
            raise SpecError("GridKernel.fixed_tiles", self.fixed_tiles,
                            "must be in [0, 1000] tile-equivalents")
        if not 0.0 <= self.head_dim_s0 <= 4096.0:
            raise SpecError("GridKernel.head_dim_s0", self.head_dim_s0,
                            "must be in [0, 4096] (units of d_qk + d_v)")
        if not (self.tile_dims == 0.0 or 64.0 <= self.tile_dims <= 4096.0):
            raise SpecError("GridKernel.tile_dims", self.tile_dims,
                            "must be 0 (no limit) or in [64, 4096] (d_qk + d_v)")
        if not (isinstance(self.rows, int) and 16 <= self.rows <= 256):
            raise SpecError("GridKernel.rows", self.rows, "must be an integer in [16, 256]")
        bounds = [hd for hd, _ in self.key_rows]
        if bounds != sorted(set(bounds)) or any(
                not (isinstance(r, int) and 16 <= r <= 256 and hd >= 1)
                for hd, r in self.key_rows):
            raise SpecError("GridKernel.key_rows", self.key_rows,
                            "must be (head dim >= 1, rows in [16, 256]) pairs, head dims "
                            "strictly ascending")


# Fixed costs: experiments/attention_grid_fit.py on the H200 points (run 1 and 2 sweeps and
# run 2's probes; least squares of log time, grid 0.25 apart; docs/calibration.md §5.130).
# cuDNN's s0: the same script's ``--held-out`` on run 4's head dims 64 and 192 (least squares
# of log time, grid 2 apart, c0/E/host as fitted at 128; forward §5.131, backward §5.132 with
# its register rule, ``tile_dims`` = REF_DIMS: FlashAttention-3's sm90 backward keeps 128 keys
# up to head dim 128, hopper/flash_bwd_launch_template.h)
CUDNN_FWD = GridKernel("cudnn-fwd", "head_asc", 1, 1.75, 138.0)
CUDNN_BWD = GridKernel("cudnn-bwd", "head_desc", 1, 2.75, BWD_S0, 256.0,
                       key_rows=BWD_KEY_ROWS)
FA2_FWD = GridKernel("fa2-fwd", "head_asc", 1, 1.0)
FA2_BWD = GridKernel("fa2-bwd", "head_desc", 1, 3.25)


def _lengths(order: str, tiles: int, cap: int) -> list[int]:
    """Useful tiles of one (batch, head)'s CTAs in the order taken: ``min(i, cap)`` for
    ``i = 1 .. tiles`` (a query tile's key tiles; the backward's key tiles mirror them),
    ascending for 'head_asc', else descending."""
    one = [min(i, cap) for i in range(1, tiles + 1)]
    return one if order == "head_asc" else one[::-1]


def cta_times(lengths: list[int], k: int, c0: float) -> np.ndarray:
    """Each CTA's time in tile-times, ``k·(x + c0)`` for ``x`` in ``lengths`` (useful tiles,
    in the order taken; ``ctas_per_sm`` ``k``, fixed cost ``c0``): the floats
    ``list_schedule`` adds."""
    return k * (np.asarray(lengths, dtype=np.int64) + c0)


def list_schedule(jobs: np.ndarray, slots: int) -> float:
    """Makespan (the largest load) of the list schedule that puts each job (``jobs``, times
    in order) on the least loaded of ``slots`` identical slots, all at 0 to start. Bit for
    bit the one-job-at-a-time heap (``heapreplace(heap, heap[0] + time)``): the same float
    additions on the same loads, several at once. A run of ``>= slots`` equal jobs ``t``
    whose loads' spread is at most ``t`` (``max <= min + t``) goes in rounds, one job per
    slot in sorted order (rounding is monotone, so ``fl(L_i + t) >= fl(L_0 + t) >= max``:
    the order and the spread bound survive each round); other jobs in batches
    (``_batches``)."""
    w = np.asarray(jobs, dtype=float)
    starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
    ends = np.r_[starts[1:], len(w)]
    long = ends - starts >= slots
    loads = np.zeros(slots)
    i = 0
    for a, b in zip(starts[long].tolist(), ends[long].tolist()):
        loads = _batches(loads, w[i:a])
        i = a
        t = w[a]
        if loads[-1] <= loads[0] + t:
            rounds, extra = divmod(b - a, slots)
            for _ in range(rounds):
                loads += t
            loads[:extra] += t
            loads.sort()
            i = b
    return float(_batches(loads, w[i:])[-1])


def _batches(loads: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Sorted ``loads`` after the list schedule of the job times ``w`` (``list_schedule``):
    the next ``m <= slots`` jobs go one each to the ``m`` least loaded slots in order for as
    long as every load they made is at least the next slot's (job ``i`` then finds the
    sorted ``loads[i]`` the least, as the heap would); where fewer than 8 go so, the next
    ``slots`` jobs go one at a time through a heap."""
    slots = len(loads)
    i, n = 0, len(w)
    while i < n:
        m = min(slots, n - i)
        new = loads[:m] + w[i:i + m]
        if m == 1 or new[:-1].min() >= loads[m - 1]:
            p = m
        else:
            p = int(np.argmax(np.minimum.accumulate(new[:-1]) < loads[1:m])) + 1
        if p < 8 < m:
            heap = loads.tolist()           # a sorted list is a heap
            for t in w[i:i + slots].tolist():
                heapq.heapreplace(heap, heap[0] + t)
            loads = np.sort(np.array(heap))
            i += slots
            continue
        loads[:p] = new[:p]
        loads.sort()
        i += p
    return loads


@lru_cache(maxsize=4096)
def makespan(kernel: GridKernel, groups: int, tiles: int, sms: int, cap: int = 0) -> float:
    """Tile-times (of one SM) the kernel's list schedule takes: ``groups`` (batch x heads) of
    ``tiles`` CTAs of ``_lengths`` useful tiles (each reaching back at most ``cap`` tiles, a
    sliding window; 0: no window) plus ``kernel.fixed_tiles``, taken in ``kernel.order`` by
    ``sms·ctas_per_sm`` slots that each run at ``1/ctas_per_sm`` of the SM's rate."""
    if groups < 1 or tiles < 1 or sms < 1:
        raise SpecError("attention_grid.makespan", (groups, tiles, sms),
                        "groups, tiles and sms must be >= 1")
    k = kernel.ctas_per_sm
    slots = sms * k
    one = _lengths(kernel.order, tiles, cap or tiles)
    c0 = kernel.fixed_tiles
    per_group = sum(one) + c0 * tiles
    run = min(groups, max(1, MAX_JOBS // tiles))
    if kernel.order == "lpt":
        jobs = np.repeat(cta_times(sorted(one, reverse=True), k, c0), run)
    else:
        jobs = np.tile(cta_times(one, k, c0), run)
    return list_schedule(jobs, min(slots, run * tiles)) + (groups - run) * per_group / sms


@lru_cache(maxsize=4096)
def grid_factor(kernel: GridKernel, groups: int, tiles: int, sms: int, cap: int = 0) -> float:
    """Ideal time over the kernel's makespan (``makespan``): the useful tiles over all SMs,
    ``groups·Σ min(i, cap) / sms``, divided by it; 1 for a balanced full grid with no fixed
    cost, ``Σ/(sms·longest)`` when every CTA has a slot of its own (one CTA per SM)."""
    useful = groups * sum(_lengths(kernel.order, tiles, cap or tiles))
    return useful / sms / makespan(kernel, groups, tiles, sms, cap)


def _rate_at(kernel: GridKernel, d: float) -> float:
    """The kernel's fraction of its asymptote at ``d = d_qk + d_v``, up to a constant:
    ``d/(d + s0)`` times ``min(1, tile_dims/d)`` where ``tile_dims`` is set."""
    r = d / (d + kernel.head_dim_s0)
    return r * min(1.0, kernel.tile_dims / d) if kernel.tile_dims else r


def head_dim_factor(kernel: GridKernel, dims: int) -> float:
    """Factor on the kernel's head-dim-128 rate at ``dims = d_qk + d_v`` (MLA: 192 + 128):
    ``_rate_at(D) / _rate_at(REF_DIMS)``, i.e. ``(D/(D + s0)) / (REF_DIMS/(REF_DIMS + s0))``
    with ``s0 = kernel.head_dim_s0``, times ``min(1, tile_dims/D) / min(1, tile_dims/REF_DIMS)``
    with a ``kernel.tile_dims``; ``D`` held within ``DIMS_RANGE``; exactly 1.0 at ``REF_DIMS``
    or with neither constant."""
    if dims < 1:
        raise SpecError("attention_grid.head_dim_factor", dims, "d_qk + d_v must be >= 1")
    if not (kernel.head_dim_s0 or kernel.tile_dims) or dims == REF_DIMS:
        return 1.0
    d = min(max(float(dims), DIMS_RANGE[0]), DIMS_RANGE[1])
    return _rate_at(kernel, d) / _rate_at(kernel, float(REF_DIMS))


def at_head_dim(kernel: GridKernel, head_dim: int) -> GridKernel:
    """``kernel``'s grid at head dim ``head_dim`` (the larger of d_qk and d_v): its tile of
    ``key_rows`` (the first pair whose head dim is >= ``head_dim``; above the last, the last's
    rows), with the fixed cost a CTA pays unchanged in time, i.e. ``fixed_tiles`` times
    ``(rows/new rows)²`` in the new tile's units; ``kernel`` itself where the rows do not
    change (no ``key_rows``, or the same rows), so head dim 128 is bit for bit unchanged."""
    if not (isinstance(head_dim, (int, np.integer)) and head_dim >= 1):
        raise SpecError("attention_grid.at_head_dim", head_dim, "head dim must be an integer >= 1")
    if not kernel.key_rows:
        return kernel
    rows = next((r for hd, r in kernel.key_rows if head_dim <= hd), kernel.key_rows[-1][1])
    if rows == kernel.rows:
        return kernel
    return replace(kernel, rows=rows, key_rows=(),
                   fixed_tiles=kernel.fixed_tiles * (kernel.rows / rows) ** 2)


def kernels(gpu: GPU, kernel: str) -> tuple[GridKernel, GridKernel] | None:
    """(forward, backward) grids of the fused kernel ``kernel`` ("native" or "fa2", as
    ``GPU.flash_efficiency``) on ``gpu``: FlashAttention-2's for "fa2" and for "native" before
    Hopper (no fp8 tensor cores), cuDNN's for "native" from Hopper on; None on a chip without
    ``sm_count`` or not NVIDIA's (no public grid for AMD's kernels is modelled)."""
    if gpu.vendor != "nvidia" or not gpu.sm_count:
        return None
    if kernel == "fa2" or "fp8" not in gpu.peak_flops:
        return FA2_FWD, FA2_BWD
    return CUDNN_FWD, CUDNN_BWD


def shape_factors(gpu: GPU, kernel: str, groups: int, seq: int,
                  dims: int = REF_DIMS, head_dim: int | None = None) -> tuple[float, float]:
    """(forward, backward) factor on the catalog's rate of one full causal attention of
    ``groups`` (batch x heads) sequences of ``seq`` tokens with ``dims = d_qk + d_v``:
    ``grid_factor`` of the kernel at its tile for ``head_dim`` (``at_head_dim``; the larger of
    d_qk and d_v, default ``ceil(dims/2)``) there over the one at (``REF_GROUPS``,
    ``REF_SEQ``) at its own tile, times ``head_dim_factor``; 1.0 where ``kernels`` has no grid
    for the chip."""
    ks = kernels(gpu, kernel)
    if ks is None:
        return 1.0, 1.0
    hd = -(-int(dims) // 2) if head_dim is None else head_dim
    f, b = (grid_factor(g, max(1, int(groups)), max(1, -(-int(seq) // g.rows)), gpu.sm_count)
            / grid_factor(k, REF_GROUPS, REF_SEQ // k.rows, gpu.sm_count)
            * head_dim_factor(k, dims) for k, g in ((k, at_head_dim(k, hd)) for k in ks))
    return f, b


def ring_factor(kernel: GridKernel, groups: int, seq: int, cp: int, sms: int) -> float:
    """Grid factor of one rank's attention under load-balanced ring context parallelism
    (``cp`` ranks, each holding two chunks of ``c = seq/(2·cp)`` tokens; Transformer Engine's
    ``AttnFuncWithCPAndKVP2P``, PyTorch's ring in ``torch.distributed.tensor.experimental``):
    step 0 is a causal kernel over the ``2c`` local tokens (``makespan``); each of the
    ``cp - 1`` later steps a kernel without a mask, on the ranks up to the step all ``2c``
    queries over the first ``c`` keys received, on the others the last ``c`` queries over all
    ``2c`` (half the steps each, on average over ranks): equal CTAs, ``ceil(CTAs/slots)``
    waves of ``ctas_per_sm·(tiles + c0)``. The useful tiles of every step over ``sms`` times
    the summed makespans; ``grid_factor`` at ``cp`` 1."""
    n = max(1, -(-int(seq) // (cp * kernel.rows)))
    if cp <= 1:
        return grid_factor(kernel, groups, n, sms)
    c = max(1, -(-int(seq) // (2 * cp * kernel.rows)))
    k, c0 = kernel.ctas_per_sm, kernel.fixed_tiles
    slots = sms * k

    def uniform(ctas: int, tiles: int) -> float:
        return -(-ctas // slots) * k * (tiles + c0)
    steps = (cp - 1) * (uniform(groups * n, c) + uniform(groups * c, n)) / 2.0
    useful = groups * (n * (n + 1) / 2.0 + (cp - 1) * n * c)
    return useful / sms / (makespan(kernel, groups, n, sms) + steps)


def _gather_lengths(order: str, q: int, j: int, fwd: bool, cap: int = 0) -> list[int]:
    """Useful tiles of one (batch, head)'s CTAs in the all-gather step of query chunk ``j``
    (``q`` query tiles at tiles ``j·q .. (j+1)·q - 1`` against keys ``0 .. (j+1)·q - 1``, the
    causal mask aligned bottom-right), in the order taken: the forward one CTA per query tile,
    ``j·q + i`` key tiles for ``i = 1 .. q``; the backward one per key tile, ``q`` query tiles
    for each of the ``j·q`` keys before the chunk and ``q - u`` for its ``u``-th own key tile.
    With a sliding window reaching back ``cap`` tiles (0: none) query tile ``T`` sees key tiles
    ``max(0, T - cap + 1) .. T`` (Transformer Engine slices the gathered K/V to the chunk's
    window, ``get_kv_seq_info_after_all_gather``): the forward ``min(j·q + i, cap)``, the
    backward the chunk's query tiles that see each key tile of that range.
    'head_asc' the shortest first, else the longest first ('lpt' sorts the whole grid)."""
    if not cap:
        one = ([j * q + i for i in range(1, q + 1)] if fwd
               else [q] * (j * q) + [q - u for u in range(q)])
    elif fwd:
        one = [min(j * q + i, cap) for i in range(1, q + 1)]
    else:       # key tile k is seen by the chunk's query tiles T with k <= T <= k + cap - 1
        lo, hi = j * q, (j + 1) * q - 1
        one = [min(hi, k + cap - 1) - max(lo, k) + 1 for k in range(max(0, lo - cap + 1), hi + 1)]
    return sorted(one, reverse=order != "head_asc")


def _window_total(n: int, cap: int) -> int:
    """Useful tiles of one (batch, head) over the whole sequence of ``n`` query tiles, each
    reaching back ``cap`` tiles (0: the causal triangle): ``Σ min(i, cap)``, ``i = 1 .. n``."""
    return sum(min(i, cap or n) for i in range(1, n + 1))


@lru_cache(maxsize=1024)
def allgather_factor(kernel: GridKernel, groups: int, seq: int, cp: int, sms: int,
                     fwd: bool, cap: int = 0) -> float:
    """Grid factor of the slowest rank's attention under all-gather context parallelism
    (Transformer Engine's ``AttnFuncWithCPAndKVAllGather``, Llama 3's CP: ``cp`` ranks, rank
    ``r`` holding query chunks ``r`` and ``2·cp - 1 - r`` of ``c = seq/(2·cp)`` tokens, K/V
    gathered whole): one kernel per local chunk against the keys up to its end
    (``_gather_lengths``, ``get_kv_seq_info_after_all_gather``), the two launched on two
    streams "to resolve wave quantization" (the current stream the first chunk's, ``cp_stream``
    the second's), so one list schedule takes the first kernel's CTAs, then the second's.
    The ideal is the mean rank's useful tiles, ``_window_total(2·cp·q, cap)/cp`` per (batch,
    head) with ``q = ceil(c/128)`` (causal: every rank's, ``(2·cp - 1)·q² + q·(q + 1)``; a
    sliding window of ``cap`` tiles: rank 0's first chunk has the sequence's short start, the
    others the whole band, so the slowest rank computes more than the mean), over ``sms``,
    over the slowest rank's makespan (``makespan``'s slots, fixed cost and truncation of large
    grids); ``grid_factor`` at ``cp`` 1. ``fwd``: the forward's grid (one CTA per query
    tile), else the backward's (one per key tile). docs/calibration.md §5.134, §5.196."""
    if cp <= 1:
        return grid_factor(kernel, groups, max(1, -(-int(seq) // kernel.rows)), sms, cap)
    q = max(1, -(-int(seq) // (2 * cp * kernel.rows)))
    k, c0 = kernel.ctas_per_sm, kernel.fixed_tiles
    slots = sms * k
    useful = groups * _window_total(2 * cp * q, cap) / cp
    worst = 0.0
    seen: dict[bytes, float] = {}  # a schedule's jobs -> its makespan: ranks with the same
    for r in range(cp):             # jobs (one-tile chunks, a sliding window's band) share it
        one = [_gather_lengths(kernel.order, q, j, fwd, cap) for j in (r, 2 * cp - 1 - r)]
        run = min(groups, max(1, MAX_JOBS // sum(map(len, one))))
        # the first chunk's kernel, then the second's
        jobs = np.concatenate([np.tile(cta_times(x, k, c0), run) for x in one])
        rest = (groups - run) * sum(sum(x) + c0 * len(x) for x in one) / sms
        key = jobs.tobytes()
        t = seen.get(key)
        if t is None:
            t = seen[key] = list_schedule(jobs, slots)
        worst = max(worst, t + rest)
    return useful / sms / worst


@lru_cache(maxsize=1024)
def allgather_window_excess(seq: int, cp: int, cap: int) -> float:
    """The slowest rank's sliding-window score tiles over the mean rank's under all-gather
    context parallelism (``_gather_lengths`` forward, 128-row tiles, a window reaching back
    ``cap`` tiles): ``max_r Σ`` over rank ``r``'s two chunks ``/ (_window_total / cp)``; 1 at
    ``cp`` 1 or without a window. The factor on the windowed layers' FLOPs where their time is
    a measured rate, not a grid (``attention_time._measured_window``)."""
    if cp <= 1 or not cap:
        return 1.0
    q = max(1, -(-int(seq) // (2 * cp * TILE)))
    most = max(sum(sum(_gather_lengths("head_asc", q, j, True, cap)) for j in (r, 2 * cp - 1 - r))
               for r in range(cp))
    return most * cp / _window_total(2 * cp * q, cap)


def _factor_at(gk: GridKernel, groups: int, n: int, sms: int, m: ModelSpec,
               windows: bool, cp: int = 1, gather: int = 0) -> float:
    """Grid factor of ``m``'s mean layer at ``groups`` x ``n`` tiles: full layers at
    ``ring_factor`` (``grid_factor`` without context parallelism), and with ``windows`` the
    windowed ones at theirs (a sliding window's reach capped at ``ceil((W-1)/128) + 1``
    tiles, as ``attention_counts.score_elements``; chunked attention as groups of one chunk's
    tiles; both on the rank's ``n`` tiles whatever ``cp``, but a sliding window under the
    all-gather: its two chunk kernels, ``allgather_factor`` with the window's reach), combined by their share of the
    kernel's score blocks (times add: the harmonic mean weighted by
    ``attention_counts.window_share``). ``gather``: 0 the ring's steps, 1 (forward) or 2
    (backward) the all-gather's kernels for the full layers (``allgather_factor``)."""
    full = (allgather_factor(gk, groups, m.seq_length, cp, sms, gather == 1) if gather
            else ring_factor(gk, groups, m.seq_length, cp, sms))
    w = window_share(m) if windows else 0.0
    r = gk.rows
    # under the all-gather the window runs against the gathered sequence (§5.196)
    reach = m.seq_length if gather and cp > 1 else n * r
    if not w or m.sliding_window is None or m.sliding_window >= reach:
        return full
    if gather and cp > 1 and m.window_kind == "sliding":   # the two chunk kernels (§5.196)
        win = allgather_factor(gk, groups, m.seq_length, cp, sms, gather == 1,
                               -(-(m.sliding_window - 1) // r) + 1)
    elif m.window_kind == "chunked":
        c = max(1, -(-m.sliding_window // r))
        win = grid_factor(gk, groups * max(1, n // c), min(c, n), sms)
    else:
        win = grid_factor(gk, groups, n, sms, -(-(m.sliding_window - 1) // r) + 1)
    return 1.0 / ((1.0 - w) / full + w / win)


def _tiles(seq: int, cp: int, rows: int) -> int:
    """A rank's tiles of ``rows`` along ``seq`` tokens over ``cp`` ranks (as ``rate_factors``
    counts 128-row ones)."""
    return max(1, math.ceil(seq / cp / rows - 1e-9))


def rate_factors(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, kernel: str,
                 windows: bool = True, allgather: bool = False) -> tuple[Num, Num]:
    """(forward, backward) factor on the catalog's fused-attention rate at this shape: the
    grid factor of the mean layer (``_factor_at``; ``windows`` False: the full layers' only)
    at ``b·a/tp`` groups (micro-batch ``b``, ``a`` query heads) of ``ceil(s/(cp·rows))`` tiles
    of the kernel's tile at the model's head dim (``at_head_dim`` at the larger of ``head_dim``
    and ``v_dim``; 128 rows but the backward's above head dim 128) (with ``cp > 1`` the ring's steps, ``ring_factor``, or with ``allgather`` the all-gather's
    two kernels, ``allgather_factor``) over the one at the catalog's benchmark
    shape (``REF_SEQ``, ``REF_GROUPS``), times ``head_dim_factor`` at the model's
    ``head_dim + v_dim``; 1.0 where ``kernels`` has no grid for the chip.
    Vectorised over ``b``, ``tp``, ``cp`` (one schedule per distinct shape)."""
    ks = kernels(gpu, kernel)
    if ks is None:
        return 1.0, 1.0
    sms = gpu.sm_count
    groups = np.maximum(1, np.ceil(np.asarray(b, dtype=float) * m.num_attention_heads
                                   / np.asarray(tp, dtype=float) - 1e-9)).astype(np.int64)
    cps = np.maximum(1, np.round(np.asarray(cp, dtype=float))).astype(np.int64)
    tiles = np.maximum(1, np.ceil(m.seq_length / cps / TILE - 1e-9)).astype(np.int64)
    # the distinct (groups, tiles, cp) shapes, once for both kernels (a 1-D unique of one
    # int64 key per row: several times faster than ``np.unique(axis=1)`` on the search's rows)
    keys, inv, shape = distinct_rows(groups, tiles, cps)
    out = []
    hd = max(m.head_dim, m.v_dim)
    for d, gk in enumerate(ks):
        ref = grid_factor(gk, REF_GROUPS, REF_SEQ // gk.rows, sms) \
            / head_dim_factor(gk, m.head_dim + m.v_dim)
        at = at_head_dim(gk, hd)        # the kernel's tile at the model's head dim
        vals = np.array([_factor_at(at, g, n if at is gk else _tiles(m.seq_length, c, at.rows),
                                    sms, m, windows, c, (1 + d) * bool(allgather))
                         / ref for g, n, c in keys])
        f = vals[inv].reshape(shape)
        out.append(float(f) if f.ndim == 0 else f)
    return out[0], out[1]
