"""Measured GPU profiles (``paraplan calibrate``, ``topologies.gpu_profile``) in the cost model.

A profile carries raw timings of shapes. The cost model reads each as a *ratio*: the measured
seconds over the seconds the catalog model gives for the same shape. The ratio is
interpolated linearly in the logarithm of the size (a GEMM's FLOPs, an attention kernel's
sequence length) and multiplies the catalog time of the shape asked; outside the measured
range of sizes it is 1 (the catalog's figure). At a measured shape the cost model therefore
gives exactly the measured time, whatever the catalog said, and between measured shapes it
keeps the catalog's shape dependence (the thin-shape penalty of ``gemm_kernel._gemm``) scaled by
the neighbouring measurements.

* GEMMs: per tensor-core rate (``GPU.rate_key``): a measured shape's own ratio, else over
  ``2·m·n·k`` FLOPs (the three passes of a weight share their FLOPs: averaged).
* Attention: per kernel (``"native"``, ``"fa2"``) and direction, over the sequence length a
  kernel call sees, among the points whose ``batch × heads`` (the kernel's grid of
  independent (sequence, head) problems) is nearest (in log) to the call's micro-batch
  sequences × heads per GPU: on an H200 a kernel's rate follows that product, not the heads
  alone (``docs/measurements/h200_2026-11-29/run2/probes.json``, docs/calibration.md §5.128).
* Memory-bound kernels: the profile's usable HBM bandwidth (``GpuProfile.hbm_bandwidth``)
  replaces the catalog's ``hbm_bandwidth · HBM_EFFICIENCY``.
* Launch gap: the profile's ``launch_gap_s`` replaces the framework's.
* Collectives: per NCCL op and GPU count, over the buffer's bytes (nccl-tests' count), for
  collectives whose group lies within one node (``strategies.cost.comm.measured_scale``;
  calibrate measures on one machine, so the network between nodes is never measured).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from strategies.cost.attention_counts import causal_fraction
from strategies.cost.token_counts import Num
from topologies.gpu_profile import AttentionPoint, GpuProfile
from topologies.gpus import GPU

GemmRatio = Callable[[Num, Num, Num], Num]


def attention_flops_fwd(batch: Num, heads: Num, seq: Num, head_dim: Num, causal: bool) -> Num:
    """FLOPs of a fused attention forward (QK^T and AV) over ``batch`` sequences of ``seq``
    tokens, ``heads`` heads of ``head_dim``: ``4·b·s²·heads·d``, times ``causal_fraction(s)``
    for a causal kernel (which skips the masked blocks)."""
    return 4.0 * batch * seq * seq * heads * head_dim * (causal_fraction(seq) if causal else 1.0)


def interp_log(xp: list[float], fp: list[float], x: Num) -> np.ndarray:
    """``fp`` interpolated linearly in ``log(xp)`` at ``x``; NaN outside ``[min xp, max xp]``.
    Values given at the same ``xp`` are averaged."""
    xs = np.asarray(xp, dtype=float)
    ys = np.asarray(fp, dtype=float)
    ux, inv = np.unique(xs, return_inverse=True)
    uy = np.bincount(inv, weights=ys) / np.bincount(inv)
    xa = np.asarray(x, dtype=float)
    inside = (xa >= ux[0] * (1 - 1e-12)) & (xa <= ux[-1] * (1 + 1e-12))
    y = np.interp(np.log(np.maximum(xa, 1e-300)), np.log(ux), uy)
    return np.where(inside, y, np.nan)


def _or_one(r: np.ndarray, like: Num) -> Num:
    out = np.where(np.isnan(r), 1.0, r)
    return float(out) if np.ndim(like) == 0 and np.ndim(out) == 0 else out


def gemm_ratio(gpu: GPU, dtype: str,
               catalog_seconds: Callable[[float, float, float], float]) -> GemmRatio | None:
    """Measured over catalog seconds of ``dtype`` GEMMs as a function ``(M, N, K) -> ratio``:
    a measured shape's own ratio, else the ratios interpolated over FLOPs (those measured at
    the same FLOPs averaged), 1 outside the measured range; None when ``gpu`` has no profile
    or no GEMM in that rate. ``catalog_seconds(M, N, K)``: the cost model's compute time of
    one GEMM (seconds)."""
    if gpu.profile is None:
        return None
    pts = gpu.profile.gemm_points(gpu.rate_key(dtype))
    if not pts:
        return None
    flops = [p.flops for p in pts]
    ratio = [p.seconds / float(catalog_seconds(p.m, p.n, p.k)) for p in pts]
    exact = {(p.m, p.n, p.k): r for p, r in zip(pts, ratio)}

    def at(M: Num, N: Num, K: Num) -> Num:
        shape = np.broadcast_arrays(np.asarray(M, float), np.asarray(N, float),
                                    np.asarray(K, float))
        r = interp_log(flops, ratio, 2.0 * shape[0] * shape[1] * shape[2])
        keys = np.stack([a.ravel() for a in shape], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        own = np.array([exact.get(tuple(u), np.nan) for u in uniq.tolist()])[inv.ravel()]
        r = np.where(np.isnan(own.reshape(r.shape)), r, own.reshape(r.shape))
        return _or_one(r, M if np.ndim(M) else N if np.ndim(N) else K)
    return at


def attention_ratios(gpu: GPU, kernel: str, catalog_fwd_seconds: Callable[[float], float],
                     bwd_over_fwd: float) -> tuple[Callable[[Num, Num], Num],
                                                   Callable[[Num, Num], Num]] | None:
    """(forward, backward) measured over catalog seconds of the fused attention ``kernel``,
    as functions of ``(seq, batch_heads)``: the tokens one kernel call's sequence has and its
    grid's ``batch × heads`` (micro-batch sequences × heads per GPU); the points of the
    measured ``batch·heads`` nearest in log, interpolated over ``seq`` (points of the same
    product and sequence averaged), 1 outside the measured sequence range. None without
    measured points. ``catalog_fwd_seconds(flops)``: the cost model's forward time of that
    many attention FLOPs; its backward takes ``bwd_over_fwd`` times as long."""
    if gpu.profile is None:
        return None
    pts = gpu.profile.attention_points(kernel)
    if not pts:
        return None

    def cat(p: AttentionPoint) -> float:
        return float(catalog_fwd_seconds(
            attention_flops_fwd(p.batch, p.heads, p.seq, p.head_dim, p.causal)))

    grids = sorted({p.batch * p.heads for p in pts})
    fwd = {g: ([p.seq for p in pts if p.batch * p.heads == g],
               [p.fwd_seconds / cat(p) for p in pts if p.batch * p.heads == g]) for g in grids}
    bwd = {g: ([p.seq for p in pts if p.batch * p.heads == g],
               [p.bwd_seconds / (bwd_over_fwd * cat(p)) for p in pts if p.batch * p.heads == g])
           for g in grids}

    def make(table: dict) -> Callable[[Num, Num], Num]:
        def ratio(seq: Num, batch_heads: Num) -> Num:
            seq_b, bh_b = np.broadcast_arrays(np.asarray(seq, float),
                                              np.asarray(batch_heads, float))
            pick = np.argmin(np.abs(np.log(bh_b)[..., None] - np.log(grids)), axis=-1)
            per = np.stack([interp_log(*table[g], seq_b) for g in grids], axis=-1)
            r = np.take_along_axis(per, pick[..., None], axis=-1)[..., 0]
            return _or_one(r, seq if np.ndim(seq) else batch_heads)
        return ratio
    return make(fwd), make(bwd)


def hbm_rate(gpu: GPU, efficiency: float) -> float:
    """Usable HBM bytes/s: the profile's measured bandwidth, else ``hbm_bandwidth ·
    efficiency`` (the catalog model)."""
    measured = gpu.profile.hbm_bandwidth if gpu.profile is not None else None
    return measured if measured is not None else gpu.hbm_bandwidth * efficiency


def launch_gap(gpu: GPU | None, default_s: float) -> float:
    """Seconds of GPU idle per kernel boundary: the profile's measured gap, else
    ``default_s`` (the framework's)."""
    if gpu is not None and gpu.profile is not None and gpu.profile.launch_gap_s is not None:
        return gpu.profile.launch_gap_s
    return default_s


# the profile's NCCL op names (``topologies.gpu_profile.COLLECTIVE_OPS``) as the cost model's
# collective kinds (``strategies.collectives.KINDS``)
COLLECTIVE_KINDS = {"all_reduce": "allreduce", "all_gather": "allgather",
                    "reduce_scatter": "reduce_scatter", "all_to_all": "alltoall"}

#: per ``(kind, gpus)``: the measured buffer sizes (bytes, nccl-tests' count) and the ratio
#: of measured over modelled seconds at each
CollectiveTable = dict[tuple[str, int], tuple[list[float], list[float]]]


def collective_table(profile: GpuProfile | None,
                     catalog_seconds: Callable[[str, float, int], float]
                     ) -> CollectiveTable | None:
    """Measured over modelled seconds of each of ``profile``'s collectives, grouped by
    kind and GPU count; None without a profile or collectives. ``catalog_seconds(kind,
    nbytes, gpus)``: the network model's seconds of that collective over ``gpus`` GPUs of
    one node (stride 1), ``nbytes`` as nccl-tests counts it (the model's count too:
    ``strategies.collectives.ring``)."""
    if profile is None or not profile.collectives:
        return None
    out: CollectiveTable = {}
    for p in profile.collectives:
        kind = COLLECTIVE_KINDS[p.op]
        xs, ys = out.setdefault((kind, p.gpus), ([], []))
        xs.append(float(p.bytes))
        ys.append(p.seconds / float(catalog_seconds(kind, float(p.bytes), p.gpus)))
    return out


def collective_ratio(table: CollectiveTable, kind: str, nbytes: Num, n: Num) -> Num:
    """Measured over modelled seconds of collective ``kind`` of ``nbytes`` over ``n`` GPUs
    of one node: the ratios measured on ``n`` GPUs interpolated linearly in ``log(nbytes)``
    (a measured size: its own ratio), 1 outside the measured sizes and for a GPU count not
    measured (the model's figure). Vectorised."""
    nb, na = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(n, dtype=float))
    r = np.ones(nb.shape)
    for (k, g), (xs, ys) in table.items():
        if k == kind and np.any(na == g):
            r = np.where(na == g, np.where(np.isnan(v := interp_log(xs, ys, nb)), 1.0, v), r)
    return r[()]
