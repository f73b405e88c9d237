"""Seconds of a layer's GEMMs on one GPU, each priced by ``gemm_kernel``: the forward, the
data gradient ``(M, K, N)`` and the weight gradient ``(K, N, M)`` of each weight with their own
shapes, the grouped expert GEMMs' share of the fixed kernel time, and the stack's shapes of
the GEMMs tensor parallelism leaves whole. With TP communication overlap (Transformer Engine
userbuffers) the forward GEMMs and the data-gradient GEMMs of the row-parallel weights are
split into ``tp`` pieces along M (each piece waits for its slice of the all-gather or feeds
its slice of the reduce-scatter), so they run with ``M/tp`` rows. Vectorised."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strategies.cost import gemm_shapes
from strategies.cost.gemm_kernel import (GEMM_GENERATION, gemm_ratio, gemm_unit, gemm_fixed_s,
                                         gemm_waves, grouped_occupancy, k_knee)
from strategies.cost.dsv4_cost import DetachedInput
from strategies.cost.grad_time import GRAD_BYTES_16
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.quant_scope import scope_formats
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.expert_gemm import GroupedTiles
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU
from topologies.precision import get_precision


def whole_split(tp: Num, sp: Num, fw: FrameworkProfile = DEFAULT) -> tuple[Num, Num]:
    """``gemm_shapes.whole_gemm_split`` of stack ``fw`` (``FrameworkProfile.sp_shard_whole_gemms``,
    ``mla_down_proj``) at ``tp`` and ``sp``: the ``whole`` argument of
    ``gemm_shapes.layer_gemm_parts`` every layer-time sum here passes (docs/calibration.md
    §5.99)."""
    return gemm_shapes.whole_gemm_split(tp, sp, fw.sp_shard_whole_gemms,
                                        fw.mla_down_proj == "column")


def linear_shapes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, etp: Num | None = None,
             load: Num = 1.0) -> list[tuple]:
    """The GEMMs of the mean layer on one GPU (``gemm_shapes.layer_gemms``): the routed experts'
    grouped GEMM as ``E/ep`` GEMMs of ``token_counts.expert_tokens`` rows (the hottest rank's,
    ``load``) and width ``F_e/etp``, each priced by its own shape (``gemm_count_time``: small ``M``
    wastes tile rows and makes the weight read count, the roofline)."""
    return gemm_shapes.layer_gemms(m, b, tp, cp, ep, etp=etp, load=load)


def _rates(gpu: GPU, dtype: str,
           system: SystemConfig = DEFAULT_SYSTEM) -> tuple[float, float, float]:
    """(GEMM FLOP/s before the shape penalty, usable HBM bytes/s, GEMM input element size)."""
    return (gpu.peak(dtype) * gpu.gemm_efficiency(dtype), usable_hbm(gpu, system),
            get_precision(dtype).operand_bytes)


def _tp_split(tp: Num, tpo: Num) -> Num:
    """Pieces a TP-overlapped GEMM is cut into along M (``tp`` with overlap, else 1)."""
    return np.where(np.logical_and(tpo, tp > 1), tp, 1.0)


def gemm_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, system: SystemConfig = DEFAULT_SYSTEM,
                  etp: Num | None = None, load: Num = 1.0,
                  fw: FrameworkProfile = DEFAULT, sp: Num = False) -> Num:
    """Forward time of the dense GEMMs of one layer (seconds); with TP overlap (``tpo``) each
    GEMM runs as ``tp`` pieces of ``M/tp`` rows; ``etp``, ``load``: ``linear_shapes``; ``fw``: the
    stack's launches of the grouped expert GEMMs (``fixed_shares``) and, with ``sp``, its
    shapes of the GEMMs tensor parallelism leaves whole (``whole_split``)."""
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    return gemms_time_fwd([g for _, g in parts], tp, gpu, dtype, tpo, system,
                          fixed_shares(parts, m, ep, fw),
                          scope_formats(parts, m, system.quant_scope, dtype))


def gemms_time_fwd(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
                   system: SystemConfig = DEFAULT_SYSTEM,
                   shares: list[Num] | None = None,
                   formats: list[dict[str, float]] | None = None) -> Num:
    """Forward seconds of ``gemms``, ``(count, M, N, K, row_parallel, ...)`` as
    ``gemm_shapes.layer_gemms`` lists them (``row_parallel`` None: the bf16 router), each priced
    by ``gemm_units`` (``shares``: its fixed-time shares, ``fixed_shares``; None: 1 each;
    ``formats``: ``gemm_units``')."""
    return units_time_fwd([g[0] for g in gemms],
                          gemm_units(gemms, tp, gpu, dtype, tpo, system=system, backward=False,
                                     shares=shares, formats=formats))


def expert_fixed_share(m: ModelSpec, ep: Num, fw: FrameworkProfile = DEFAULT) -> Num:
    """Share of ``gemm_fixed_s`` one routed expert's GEMM pays on stack ``fw``: the fixed times
    a grouped GEMM over the ``k = E/ep`` local experts pays (``fw.expert_gemm_launch``,
    ``ExpertGemmLaunch.fixed_times``: ``k``, ``ceil(k/s)`` or 1) over ``k``, the GEMMs the
    model counts (``gemm_shapes.layer_gemms``: ``E/ep`` per grouped GEMM); 1 for a dense model."""
    if not m.is_moe:
        return 1.0
    local = m.num_experts / np.asarray(ep, dtype=float)
    return (fw.expert_gemm_launch.fixed_times(local) / local)[()]


@dataclass(frozen=True)
class GroupedShare:
    """A routed expert GEMM run as one group of a grouped kernel whose tiles share its waves
    (``ExpertGemmLaunch.tiles``): ``share`` of ``gemm_fixed_s`` it pays
    (``expert_fixed_share``), the kernel's ``groups`` (``E/ep`` local experts) and its
    ``tiles`` (docs/calibration.md §5.123)."""

    share: Num
    groups: Num
    tiles: GroupedTiles


def fixed_shares(parts: list[tuple[str, tuple]], m: ModelSpec, ep: Num,
                 fw: FrameworkProfile = DEFAULT) -> list[Num | GroupedShare]:
    """Per entry of ``parts`` (``gemm_shapes.layer_gemm_parts``' or ``op_sac_gemm_parts``'), the
    share of ``gemm_fixed_s`` each of its GEMMs pays (``gemm_units``' ``shares``): the routed
    experts' ``expert_fixed_share`` (a ``GroupedShare`` with it where the stack's grouped
    kernel has ``tiles``), every other GEMM (the router too) 1."""
    share = expert_fixed_share(m, ep, fw)
    tiles = fw.expert_gemm_launch.tiles
    if tiles is not None and m.is_moe:
        share = GroupedShare(share, m.num_experts / np.asarray(ep, dtype=float), tiles)
    return [share if part == "routed_mlp" and g[4] is not None else 1.0 for part, g in parts]


def grouped_share_occupancy(share: Num | GroupedShare, rows: Num, cols: Num, gpu: GPU,
                            dtype: str) -> Num:
    """Busy share of the SMs a GEMM with output ``rows x cols`` keeps under ``share``
    (``fixed_shares``): ``gemm_kernel.grouped_occupancy`` of its grouped kernel's tiles where
    ``share`` is a ``GroupedShare`` whose tiles were read for ``gpu``'s generation
    (``gemm_kernel.GEMM_GENERATION``) and ``dtype``, over ``gpu.sm_count`` slots; else 1."""
    if not isinstance(share, GroupedShare):
        return 1.0
    t = share.tiles
    if t.dtype != dtype or GEMM_GENERATION.get(gpu.name) != t.generation or not gpu.sm_count:
        return 1.0
    tm, tn = t.tile_of(rows, cols)
    return grouped_occupancy(share.groups, rows, cols, tm, tn, t.cluster_m, gpu.sm_count)


def gemm_units(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
               fw: FrameworkProfile = DEFAULT, system: SystemConfig = DEFAULT_SYSTEM,
               backward: bool = True, shares: list[Num] | None = None,
               formats: list[dict[str, float]] | None = None) -> list[tuple]:
    """``units_in`` of ``gemms`` in ``dtype``; with ``formats`` (per GEMM, the share of its
    layers run in each format: ``quant_scope.scope_formats``) each GEMM's seconds are the
    shares' sum of its price in each format (the pieces do not depend on the format)."""
    if formats is None:
        return units_in(gemms, tp, gpu, dtype, tpo, fw, system, backward, shares)
    priced = {d: units_in(gemms, tp, gpu, d, tpo, fw, system, backward, shares)
              for d in sorted({d for f in formats for d in f})}
    out = []
    for i, f in enumerate(formats):
        pieces, _, d_pieces, *_ = priced[next(iter(f))][i]
        f_s = sum(s * priced[d][i][1] for d, s in f.items())
        if not backward:
            out.append((pieces, f_s, d_pieces, None, None))
            continue
        out.append((pieces, f_s, d_pieces, sum(s * priced[d][i][3] for d, s in f.items()),
                    sum(s * priced[d][i][4] for d, s in f.items())))
    return out


def units_in(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
             fw: FrameworkProfile = DEFAULT, system: SystemConfig = DEFAULT_SYSTEM,
             backward: bool = True, shares: list[Num] | None = None) -> list[tuple]:
    """The price of one GEMM of each shape of ``gemms`` (``gemm_shapes.layer_gemms``' tuples), apart
    from its ``count``: ``(pieces, fwd, dgrad_pieces, dgrad, wgrad)``: the forward runs as
    ``pieces`` GEMMs of ``fwd`` seconds (``tp`` pieces of ``M/tp`` rows under TP overlap; the
    bf16 router is not split), the data gradient ``(M, K, N)`` as ``dgrad_pieces`` of
    ``dgrad`` seconds (the row-parallel weights split under TP overlap; 0 pieces for a
    ``dsv4_cost.DetachedInput``, whose input takes no gradient) and the weight
    gradient ``(K, N, M)`` as one of ``wgrad`` seconds, whose output is the main gradient:
    read and written in fp32 when the framework fuses the accumulation into the GEMM, else
    written once in 16 bits (the separate add is ``grad_accum_time``). ``backward`` False:
    the forward's alone (``dgrad``, ``wgrad`` None). ``shares``: per entry, the share of the
    kernel's fixed time ``gemm_fixed_s`` each GEMM pays (``fixed_shares``: a grouped expert
    GEMM's launches over its experts; a ``GroupedShare`` also divides the GEMM's compute by
    the busy share of the SMs its grouped kernel's waves keep, ``grouped_share_occupancy``);
    None: 1 each. The one pricing of a layer's GEMMs that ``units_time_fwd``/``units_time_bwd``
    sum for any count."""
    rate, hbm, es = _rates(gpu, dtype, system)
    kn, kn16 = k_knee(gpu, dtype), k_knee(gpu, "bf16")
    r16 = gpu.peak("bf16") * gpu.matmul_efficiency
    q, q16 = (gemm_ratio(gpu, dtype, rate, kn, system),
               gemm_ratio(gpu, "bf16", r16, kn16, system))
    wv, t0 = gemm_waves(gpu, system), gemm_fixed_s(gpu)
    split = _tp_split(tp, tpo)
    c_w = 2 * system.main_grad_bytes(dtype) if fw.grad_accum_fusion else GRAD_BYTES_16
    out = []
    for i, (_, M, N, K, row, *_) in enumerate(gemms):
        sh = 1.0 if shares is None else shares[i]
        f0 = t0 * (sh.share if isinstance(sh, GroupedShare) else sh)

        def occ(rows: Num, cols: Num) -> Num:
            return grouped_share_occupancy(sh, rows, cols, gpu, dtype)
        dg = 0.0 if isinstance(gemms[i], DetachedInput) else 1.0   # no data gradient
        if row is None:                                   # MoE router: bf16, not split
            r_kw = dict(knee=kn16, ratio=q16, waves=wv, fixed=t0)
            f = gemm_unit(M, N, K, r16, hbm, 2.0, **r_kw)
            if not backward:
                out.append((1.0, f, 1.0, None, None))
                continue
            out.append((1.0, f, dg, gemm_unit(M, K, N, r16, hbm, 2.0, **r_kw),
                        gemm_unit(K, N, M, r16, hbm, 2.0, **r_kw)))
            continue
        f = gemm_unit(M / split, N, K, rate, hbm, es, knee=kn, ratio=q, waves=wv, fixed=f0,
                      occupancy=occ(M / split, N))
        if not backward:
            out.append((split, f, 1.0, None, None))
            continue
        s = split if row else 1.0
        out.append((split, f, dg * s,
                    gemm_unit(M / s, K, N, rate, hbm, es, knee=kn, ratio=q, waves=wv, fixed=f0,
                              occupancy=occ(M / s, K)),
                    gemm_unit(K, N, M, rate, hbm, es, c_w, knee=kn, ratio=q, waves=wv, fixed=f0,
                              occupancy=occ(K, N))))
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
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    return gemms_time_bwd_split([g for _, g in parts], tp, gpu, dtype, tpo, fw, system,
                                fixed_shares(parts, m, ep, fw),
                                scope_formats(parts, m, system.quant_scope, dtype))


def gemms_time_bwd_split(gemms: list[tuple], tp: Num, gpu: GPU, dtype: str, tpo: Num = False,
                         fw: FrameworkProfile = DEFAULT,
                         system: SystemConfig = DEFAULT_SYSTEM,
                         shares: list[Num] | None = None,
                         formats: list[dict[str, float]] | None = None) -> tuple[Num, Num]:
    """(all, weight-gradient) backward seconds of ``gemms`` (``gemm_shapes.layer_gemms``' tuples),
    each priced as ``gemm_time_bwd_split`` describes (``gemm_units``; ``shares``: its
    fixed-time shares, ``fixed_shares``; None: 1 each)."""
    return units_time_bwd([g[0] for g in gemms], gemm_units(gemms, tp, gpu, dtype, tpo, fw,
                                                            system, shares=shares,
                                                            formats=formats))


def gemm_time_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, fw: FrameworkProfile = DEFAULT,
                  system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Backward seconds of the dense GEMMs of one layer, data and weight gradient
    (``gemm_time_bwd_split``)."""
    return gemm_time_bwd_split(m, b, tp, cp, ep, gpu, dtype, tpo, fw, system)[0]
