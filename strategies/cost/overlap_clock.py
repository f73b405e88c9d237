"""The SM clock while communication runs beside the compute: the factor on compute-bound
kernel time (``overlap_slowdown``) and when the data-parallel reduction overlaps a whole
step. Vectorised."""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num


# SM clock while communication kernels run beside the compute, relative to the sustained
# clock of GEMMs alone: NVLink/NIC/HBM traffic shares the board power budget, so the power
# limiter lowers the SM clock. Public observation (deepseek-ai/DeepGEMM issue #120, H800 =
# GH100 at 700 W): overlapping communication with GEMMs drops the clock from 1980 to 1575 MHz;
# GEMMs alone sustain 1980 x 755/834 = 1792 MHz (H200 MSMF/MAMF, docs/calibration.md), so
# 1575/1792 = 0.88.
OVERLAP_CLOCK_RATIO = 0.88


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
    busy = np.logical_and(tpo, tp > 1) | nccl_busy(cp, zero, dp_whole_step) \
        | np.asarray(ep_paired, dtype=bool)
    return np.where(busy, 1.0 / OVERLAP_CLOCK_RATIO, 1.0)


def nccl_busy(cp: Num, zero: Num, dp_whole_step: Num = False) -> Num:
    """True where a NCCL collective runs beside the compute for most of the step
    (``overlap_slowdown``'s cases apart from TP overlap and the expert dispatch): ring
    attention (``cp > 1``), ZeRO-2/3 (``zero >= 2``), a one-micro-batch step's overlapped
    data-parallel reduction (``dp_whole_step``)."""
    return (np.asarray(cp) > 1) | (np.asarray(zero) >= 2) \
        | np.asarray(dp_whole_step, dtype=bool)


def dp_overlaps_whole_step(dp: Num, mb: Num, ogr: Num) -> Num:
    """True where the data-parallel gradient reduction, overlapped with the backward
    (``ogr``), runs beside the compute for the whole step: one micro-batch per step
    (``mb == 1``), so every bucket's reduce-scatter overlaps *the* backward (and, with the
    distributed optimizer's overlapped parameter gather, the next forward), with ``dp > 1``."""
    return np.logical_and(ogr, (np.asarray(dp) > 1) & (np.asarray(mb) <= 1))
