"""Seconds of one layer's attention core on one GPU: FlashAttention at
``peak(bf16) · GPU.flash_efficiency(kernel)``, the kernel the framework runs (FlashAttention-2
is slower on Hopper than cuDNN/FA3), times the kernel's grid factor at the layer's shape
(``attention_grid.rate_factors``: 1 at the shape the catalog's figure was benchmarked at, head
dim 128; each direction's rate by ``d_qk + d_v``, ``attention_grid.head_dim_factor``)
(forward; its backward does 2.5x the forward FLOPs at ``FLASH_BWD_EFFICIENCY`` of the
forward's rate, over its own grid's factor); the FlashAttention-1 class (kernel ``"fa1"``) at
its published bars by sequence, ``attention_fa1``, with no grid factor; or, without it, two
batched GEMMs with K = head_dim plus the memory-bound softmax/dropout traffic. Vectorised."""
from __future__ import annotations

import numpy as np

from strategies.cost import attention_counts, attention_fa1, attention_grid, cp_allgather, dsv4_cost
from strategies.cost import cp_a2a, cp_hier
from strategies.cost import fp8_attention as fp8a
from strategies.cost import measured
from strategies.cost import ring_attention as ring
from strategies.cost import window_kernel
from strategies.cost.gemm_kernel import side_factor
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU


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


def _measured_window(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, slow: Num,
                     fw: FrameworkProfile, t_flash: Num, t_flash_b: Num,
                     win: tuple[Num, Num], peak: float) -> tuple[Num, Num]:
    """(forward, backward) seconds of the fused kernel where its sliding-window layers run at
    the rate cuDNN measures for them (``window_kernel.window_efficiency``, ``win``: forward
    and backward fractions of ``peak``): the full layers' share of the catalog-rate times
    ``t_flash``/``t_flash_b`` (``1 - attention_counts.window_share``) with their exposed
    exponentials (§5.60; the measured windowed times hold the chip's own), the windowed share
    of the forward FLOPs at ``peak·win[0]`` and ``FLASH_BWD_FACTOR`` of them at ``peak·win[1]``
    (under the all-gather the slowest rank's, ``attention_grid.allgather_window_excess``);
    under ``fw.fp8_attention`` each kind over its MXFP8 ratio (``fp8_attention.kind_ratios``)."""
    w = attention_counts.window_share(m)
    f_win = w * attention_counts.attn_core_flops_fwd(m, b, tp, cp, True)
    if fw.cp_impl == "allgather" and m.window_kind == "sliding":   # the slowest rank (§5.196)
        cap = -(-(m.sliding_window - 1) // attention_grid.TILE) + 1
        f_win = f_win * np.vectorize(lambda c: attention_grid.allgather_window_excess(
            m.seq_length, int(round(c)), cap), otypes=[float])(cp)[()]
    full_f, full_b = (1.0 - w) * t_flash, (1.0 - w) * t_flash_b
    if gpu.exp_seconds_offset():
        t_exp = slow * (1.0 - w) * attention_counts.attn_exponentials_fwd(m, b, tp, cp) \
            * gpu.exp_seconds_offset()
        full_f, full_b = full_f + EXP_EXPOSED_FWD * t_exp, full_b + EXP_EXPOSED_BWD * t_exp
    win_f = slow * f_win / (peak * win[0])
    win_b = slow * FLASH_BWD_FACTOR * f_win / (peak * win[1])
    if fw.fp8_attention:
        (r_f, r_b), (rw_f, rw_b) = fp8a.kind_ratios(m, gpu, m.seq_length / cp)
        full_f, full_b, win_f, win_b = full_f / r_f, full_b / r_b, win_f / rw_f, win_b / rw_b
    return full_f + win_f, full_b + win_b


def attention_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num, gpu: GPU,
                       slow: Num = 1.0, fw: FrameworkProfile = DEFAULT,
                       system: SystemConfig = DEFAULT_SYSTEM, a2a_size: Num = 1.0
                       ) -> tuple[Num, Num]:
    """(forward, backward) seconds of the attention core of one layer (``slow``: factor on the
    compute-bound parts, ``overlap_slowdown``; ``fw``: which fused attention kernel the stack
    runs, ``GPU.flash_efficiency``; on a chip whose special-function units run exponentials
    at another rate than the one its efficiency describes, ``GPU.exp_seconds_offset``, the
    fused kernel's exposed exponentials, ``EXP_EXPOSED_FWD``/``_BWD`` of
    ``attention_counts.attn_exponentials_fwd``, at the chip's own rate; and with PyTorch's context
    parallelism the HBM passes around each ring step, ``ring_attention.merge_bytes_fwd``/
    ``accum_bytes_bwd``; under ``fw.fp8_attention`` the fused kernel in MXFP8,
    ``fp8_attention.time_factors``, and its casts, ``fp8_attention.cast_bytes``; with
Transformer Engine's all-gather context parallelism its kernels' grid,
``attention_grid.allgather_factor``, and its reorders and accumulations,
``cp_allgather.copy_bytes_fwd``/``_bwd``; with its all-to-all context parallelism the
core of the whole sequence over ``a/(t·c)`` heads and the exchange's copies,
``cp_a2a.copy_bytes``, and with Megatron-Core's ``a2a+p2p`` the ring's core at
``cp_hier.ring_sizes`` (``a2a_size``: the plan's ``hierarchical_cp``) plus the same copies; the
    sliding-window layers of a shape cuDNN times on the chip at its measured rate,
    ``window_kernel``, ``_measured_window``; for DeepSeek-V4 the indexer's and its loss's
    kernels in the forward, ``dsv4_cost.dsa_time_fwd``, and the sparse core's backward at
    cuDNN's measured rate, ``dsv4_cost.core_time_bwd``)."""
    a2a, hier = fw.cp_impl == "a2a", fw.cp_impl == "a2a+p2p"
    if a2a or hier:   # TE's all-to-all's copies, the backward's with the output's again
        # where the release sends it (``cp_a2a``, ``cp_hier.bwd_out_tensors``, §5.185/§5.191)
        on = np.asarray(cp) > 1
        copies = np.where(on, cp_a2a.copy_bytes(m, b, tp, cp), 0.0)
        copies_b = copies + np.where(on, cp_hier.bwd_copy_extra(
            m, b, tp, cp, cp_hier.bwd_out_tensors(fw.cp_impl, fw.te_version)), 0.0)
    if a2a:   # TE's all-to-all CP: the core over the whole sequence on a/(t·c) heads
        tp, cp = tp * cp, 1
    if hier:   # a2a+p2p: the ring's core at (t·k, c/k) (``cp_hier``, §5.189)
        tp, cp = cp_hier.ring_sizes(tp, cp, a2a_size)
    peak = gpu.peak("bf16")
    hbm = usable_hbm(gpu, system)
    f_flash = attention_counts.attn_core_flops_fwd(m, b, tp, cp, True)
    flash_rate = peak * gpu.flash_efficiency(fw.attention_kernel)
    t_flash = slow * f_flash / flash_rate
    fa1 = fw.attention_kernel == "fa1"
    if fa1:   # FlashAttention-1 class at its published bars, their own grid (§5.140)
        t_flash = slow * f_flash / attention_fa1.forward_rate(gpu, m.seq_length / cp,
                                                              FLASH_BWD_FACTOR,
                                                              FLASH_BWD_EFFICIENCY)
    t_flash_b = FLASH_BWD_FACTOR / FLASH_BWD_EFFICIENCY * t_flash
    q = None if fa1 else measured.attention_ratios(gpu, fw.attention_kernel,
                                                   lambda f: f / flash_rate,
                                                   FLASH_BWD_FACTOR / FLASH_BWD_EFFICIENCY)
    win = None if q is not None or fa1 else window_kernel.window_efficiency(m, gpu,
                                                                            m.seq_length / cp)
    if q is None and not fa1:   # the catalog's rate is its benchmark shape's: its grid (§5.130)
        g_f, g_b = attention_grid.rate_factors(m, b, tp, cp, gpu, fw.attention_kernel, win is None,
                                               fw.cp_impl == "allgather")
        t_flash, t_flash_b = t_flash / g_f, t_flash_b / g_b
    if win is not None:   # a short window cuDNN times on this chip: those layers at its rate
        t_flash, t_flash_b = _measured_window(m, b, tp, cp, gpu, slow, fw, t_flash, t_flash_b,
                                              win, peak)
    elif q is not None:   # a measured profile: its time over the model's at this kernel
        # length and grid (micro-batch sequences x heads per GPU)
        seq, grid = m.seq_length / cp, b * (m.num_attention_heads / tp)
        t_flash, t_flash_b = t_flash * q[0](seq, grid), t_flash_b * q[1](seq, grid)
    elif gpu.exp_seconds_offset() and not fa1:   # SFU faster/slower than the efficiency's reference
        t_exp = slow * attention_counts.attn_exponentials_fwd(m, b, tp, cp) \
            * gpu.exp_seconds_offset()
        t_flash = t_flash + EXP_EXPOSED_FWD * t_exp
        t_flash_b = t_flash_b + EXP_EXPOSED_BWD * t_exp
    if m.is_dsv4:   # the indexer's and its loss's DSA kernels, in the forward only (§5.158)
        t_flash = t_flash + dsv4_cost.dsa_time_fwd(m, b, tp, cp, f_flash, t_flash, hbm)
        # the sparse core's backward: cuDNN's DSA kernel at its measured rate (§5.164)
        t_dsa = dsv4_cost.core_time_bwd(m, b, tp, gpu)
        t_flash_b = t_flash_b if t_dsa is None else slow * t_dsa
    if fw.fp8_attention:   # TE's MXFP8 fused attention: cuDNN's measured ratios, its casts
        k_f, k_b = (1.0, 1.0) if win is not None else fp8a.time_factors(m, gpu,
                                                                         m.seq_length / cp)
        c_f, c_b = fp8a.cast_bytes(m, b, tp, cp)
        t_flash, t_flash_b = t_flash * k_f + c_f / hbm, t_flash_b * k_b + c_b / hbm
    f_full = attention_counts.attn_core_flops_fwd(m, b, tp, cp, False, windows=False)
    # unfused: two batched GEMMs with K = head_dim (QK^T) and N = head_dim (AV) over the whole
    # score square (a window only masks it)
    d = m.head_dim
    s = m.seq_length
    rate = peak * gpu.matmul_efficiency * side_factor(d) * side_factor(s / cp) * side_factor(s)
    bias = fw.alibi_score_bytes if m.position_embedding == "alibi" else 0.0
    soft = attention_counts.softmax_bytes_fwd(m, b, tp, cp, False, bias) / hbm
    soft_b = attention_counts.softmax_bytes_bwd(m, b, tp, cp, False) / hbm
    # the causal mask the stack rebuilds per call, one for all heads and sequences (§5.135)
    mask = fw.unfused_mask_bytes * (s / cp) ** 2 / hbm
    t_plain_f = slow * f_full / rate + soft + mask
    t_plain_b = slow * 2 * f_full / rate + soft_b
    fwd = np.where(flash, t_flash, t_plain_f)
    bwd = np.where(flash, t_flash_b, t_plain_b)
    if fw.cp_impl == "torch":   # PyTorch's ring: fp32 merges and accumulators per step
        fwd = fwd + ring.merge_bytes_fwd(m, b, tp, cp, fw.cp_kv_heads) / hbm
        bwd = bwd + ring.accum_bytes_bwd(m, b, tp, cp, fw.cp_kv_heads, fw.attention_kernel) / hbm
    if fw.cp_impl == "allgather":   # TE's all-gather path: K/V reordered, dK/dV accumulated
        on = np.asarray(cp) > 1
        fwd = fwd + np.where(on, cp_allgather.copy_bytes_fwd(m, b, tp, cp), 0.0) / hbm
        bwd = bwd + np.where(on, cp_allgather.copy_bytes_bwd(m, b, tp, cp), 0.0) / hbm
    if a2a or hier:
        fwd, bwd = fwd + copies / hbm, bwd + copies_b / hbm
    return fwd, bwd
