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
                     ep_paired: Num = False, dp_duty: Num | None = None) -> Num:
    """Factor (>= 1) on compute-bound kernel time when communication runs beside the compute
    for most of the step: TP communication overlap (``tpo`` with ``tp > 1``), ring attention
    (``cp > 1``), ZeRO-2's reduce-scatter of every micro-batch's gradients or ZeRO-3's
    parameter gathers (``zero >= 2``), the data-parallel reduction of a step that is one
    micro-batch long (``dp_whole_step``, ``dp_overlaps_whole_step``), or the expert
    all-to-all of overlapped pairs (``ep_paired``: ``ep > 1`` with Megatron's combined 1F1B
    or a schedule that pairs, DualPipe's F&B). ``1/OVERLAP_CLOCK_RATIO`` then, else 1
    (gradient reduction overlapped with the last of several micro-batches only is too short
    to move the clock). ``dp_duty``: where the one-micro-batch reduction is the only case,
    its factor instead (``duty_cycle_factor``; None: ``1/OVERLAP_CLOCK_RATIO``)."""
    other = np.logical_and(tpo, tp > 1) | nccl_busy(cp, zero) \
        | np.asarray(ep_paired, dtype=bool)
    whole = np.asarray(dp_whole_step, dtype=bool)
    if dp_duty is None:
        return np.where(other | whole, 1.0 / OVERLAP_CLOCK_RATIO, 1.0)
    return np.where(other, 1.0 / OVERLAP_CLOCK_RATIO, np.where(whole, dp_duty, 1.0))


def duty_cycle_factor(t_comm: Num, compute: Num, ratio: float = OVERLAP_CLOCK_RATIO) -> Num:
    """Factor (>= 1) on compute-bound kernel time when overlapped collectives keep the links
    busy ``t_comm`` seconds of a compute window that takes ``compute`` seconds at the full
    clock: inside the window the compute runs at ``ratio`` of its rate (the power limiter's
    clock, ``OVERLAP_CLOCK_RATIO``), outside at its full rate. Work conservation: while
    ``ratio·t_comm <= compute`` the window does ``ratio·t_comm`` of the work and the rest
    runs after it, ``C' = t_comm + compute − ratio·t_comm = compute + (1 − ratio)·t_comm``;
    a collective that outlasts the slowed compute slows all of it, ``C' = compute/ratio``.
    So ``1 + (1 − ratio)·min(t_comm, compute/ratio)/compute``: 1 at ``t_comm = 0``,
    ``1/ratio`` from ``t_comm = compute/ratio`` on (1 where ``compute`` is 0). Vectorised;
    seconds."""
    t = np.maximum(np.asarray(t_comm, dtype=float), 0.0)
    c = np.asarray(compute, dtype=float)
    pos = c > 0
    c_safe = np.where(pos, c, 1.0)
    f = 1.0 + (1.0 - ratio) * np.minimum(t, c_safe / ratio) / c_safe
    return np.where(pos, f, 1.0)[()]


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
