"""The fused attention kernel's grid constants from the one H200 measurement: a calibration
against a microbenchmark (kernel timings of ``paraplan calibrate``), never a training row
(docs/calibration.md §5.130; ``strategies.cost.attention_grid``).

Points: every ``attention:`` entry of docs/measurements/h200_2026-11-29 ``run1|run2/
default.yaml`` and ``rows.yaml`` (batch 1, heads 4-96, 1,024-16,384 tokens) and ``run2/
probes.json`` (batch 1, 2, 4), head dim 128, causal, cuDNN (``native``) and PyTorch's bundled
FlashAttention-2 (``fa2``). FLOPs in the catalog's convention (``attention_counts``: the causal
kernel's 128 x 128 blocks, ``2·b·a·(d_qk + d_v)`` per element; backward ``FLASH_BWD_FACTOR``
times the forward).

Model of a measured time: ``max(F / (peak · E · grid_factor), host)``, ``E`` the kernel's
asymptotic fraction of the bf16 peak and ``host`` the floor of calibrate's back-to-back loop
(PyTorch's eager dispatch of SDPA, and of ``autograd.grad`` for the backward, is slower than
the GPU at the smallest shapes; a measurement artefact, not charged by the cost model). For
each kernel and direction, ``E`` and ``host`` are fitted (least squares of log time) at each
fixed cost ``c0`` of a 0.25 grid, and the best ``c0`` kept: it is the constant
``attention_grid`` holds. The per-point table flags the host-bound points (no information on
the kernel). The order comparison fits the three CTA orders (and two CTAs per SM for
FlashAttention-2) the same way.

``--held-out`` reads the dense table measured after the fit (run 4) with those constants, by
head dim before (head dim 128's rate everywhere) and after ``attention_grid.head_dim_factor``,
and fits each cuDNN direction's ``s0`` (the tile time that does not scale with ``d_qk +
d_v``; docs/calibration.md §5.131) on head dims 64 and 192, each alone and together, c0, E and
host as fitted at 128, the backward with its register rule ``tile_dims`` (§5.132; head dim
128's points do not move with either).

``--tiles`` sets the backward's time per FLOP by head dim (one free factor a head dim, the
grid at its key tile) beside what a tile model of sums on FlashAttention-3's sm90 tiles can
give at most (§5.183).

    python experiments/attention_grid_fit.py [--orders] [--points] [--held-out] [--tiles]
        [--shapes GPU]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_grid as ag  # noqa: E402
from strategies.cost.attention_counts import causal_fraction  # noqa: E402
from strategies.cost.attention_time import FLASH_BWD_FACTOR  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAS = os.path.join(ROOT, "docs", "measurements", "h200_2026-11-29")
FILES = ("run1/default.yaml", "run2/default.yaml", "run1/rows.yaml", "run2/rows.yaml",
         "run2/probes.json")
GPU = get_gpu("H200")
C0_GRID = tuple(i * 0.25 for i in range(0, 41))
KERNELS = {("native", "fwd"): ag.CUDNN_FWD, ("native", "bwd"): ag.CUDNN_BWD,
           ("fa2", "fwd"): ag.FA2_FWD, ("fa2", "bwd"): ag.FA2_BWD}


class Point(NamedTuple):
    source: str
    kernel: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    fwd_s: float
    bwd_s: float


class Fit(NamedTuple):
    kernel: ag.GridKernel
    asymptote: float                         # E, fraction of the bf16 peak
    host_s: float                            # the loop's floor, seconds
    rms: float                               # of log(model / measured) over all points
    residuals: tuple[tuple[Point, float, bool], ...]   # (point, log residual, host-bound)

    def kernel_bound(self) -> list[float]:
        """Log residuals of the points the model times as the kernel's, not the host's."""
        return [r for _, r, host in self.residuals if not host]


@lru_cache(maxsize=1)
def points() -> tuple[Point, ...]:
    """Every causal head-dim-128 attention point of the measurement's files."""
    out = []
    for f in FILES:
        with open(os.path.join(MEAS, f)) as fh:
            d = json.load(fh) if f.endswith(".json") else yaml.safe_load(fh)
        for a in d["attention"]:
            if a["causal"] and a["head_dim"] == 128:
                out.append(Point(f, a["kernel"], a["batch"], a["heads"], a["seq"],
                                 a["head_dim"], a["fwd_seconds"], a["bwd_seconds"]))
    return tuple(out)


def flops(p: Point, direction: str) -> float:
    """The catalog convention's FLOPs of the point (forward, or backward = 2.5x)."""
    f = 2.0 * p.batch * p.heads * 2 * p.head_dim * p.seq ** 2 * causal_fraction(p.seq)
    return f * (FLASH_BWD_FACTOR if direction == "bwd" else 1.0)


def _fit_e_host(ideal: list[float], meas: list[float]) -> tuple[float, float, float]:
    """(E, host, rms): least squares of ``log(max(ideal/E, host)/meas)`` over E and host
    (host on a grid 0.25 % apart from 1.5x the smallest time down; for each, E the optimum over
    the points the kernel bounds, iterated to a fixed point)."""
    x, t = np.asarray(ideal), np.asarray(meas)
    host = 1.5 * t.min() * (1.0 - 0.0025 * np.arange(400))[:, None]
    e = np.full((len(host), 1), 0.6)
    lx, lt = np.log(x), np.log(t)
    for _ in range(30):
        kb = x / e > host
        n = np.maximum(kb.sum(axis=1, keepdims=True), 1)
        e = np.exp(((lx - lt) * kb).sum(axis=1, keepdims=True) / n)
    res = np.log(np.maximum(x / e, host)) - lt
    rms = np.sqrt((res ** 2).mean(axis=1))
    i = int(np.argmin(rms))
    return float(e[i, 0]), float(host[i, 0]), float(rms[i])


def fit_at(kernel: str, direction: str, gk: ag.GridKernel) -> Fit:
    """E and host fitted with ``gk``'s grid (its order, CTAs per SM and fixed cost)."""
    pts = [p for p in points() if p.kernel == kernel]
    peak = GPU.peak("bf16")
    ideal = [flops(p, direction) / (peak * ag.grid_factor(
        gk, p.batch * p.heads, -(-p.seq // ag.TILE), GPU.sm_count)) for p in pts]
    meas = [p.fwd_s if direction == "fwd" else p.bwd_s for p in pts]
    e, host, rms = _fit_e_host(ideal, meas)
    res = tuple((p, math.log(max(x / e, host) / t), x / e <= host)
                for p, x, t in zip(pts, ideal, meas))
    return Fit(gk, e, host, rms, res)


def fit(kernel: str, direction: str, order: str | None = None, ctas_per_sm: int | None = None,
        c0_grid: tuple[float, ...] = C0_GRID) -> Fit:
    """The best fixed cost on ``c0_grid`` for the kernel's grid (its order and CTAs per SM
    unless given)."""
    base = KERNELS[(kernel, direction)]
    base = dataclasses.replace(base, order=order or base.order,
                               ctas_per_sm=ctas_per_sm or base.ctas_per_sm)
    fits = [fit_at(kernel, direction, dataclasses.replace(base, fixed_tiles=c)) for c in c0_grid]
    return min(fits, key=lambda f: f.rms)


def rate_at(kernel: str, seq: int, groups: int, direction: str) -> float | None:
    """Median measured fraction of the peak at (seq, batch x heads), None if not measured."""
    v = sorted(flops(p, direction) / ((p.fwd_s if direction == "fwd" else p.bwd_s)
                                      * GPU.peak("bf16"))
               for p in points() if p.kernel == kernel and p.seq == seq
               and p.batch * p.heads == groups)
    return v[len(v) // 2] if v else None


HELD_OUT = "run4/attention_table.json"


def held_out_points(head_dim: int) -> list[Point]:
    """The dense table measured after the fit (``HELD_OUT``: 512-32,768 tokens × 1-128
    heads, head dims 64/128/192), causal points of ``head_dim``."""
    with open(os.path.join(MEAS, HELD_OUT)) as fh:
        d = json.load(fh)
    return [Point(HELD_OUT, a["kernel"], a["batch"], a["heads"], a["seq"], a["head_dim"],
                  a["fwd_seconds"], a["bwd_seconds"]) for a in d["attention"]
            if a["causal"] and a["head_dim"] == head_dim and a["fwd_seconds"]]


def held_out_residuals(f: Fit, kernel: str, direction: str, pts: list[Point],
                       factor: float | None = None) -> list[tuple[Point, float, bool]]:
    """(point, log(model / measured), host-bound) of ``pts`` under the in-sample fit ``f``
    (its c0, E and host floor; nothing refitted) with ``f.kernel``'s grid at the point's head
    dim (``attention_grid.at_head_dim``: the backward's key tile) and head-dim factor
    (``attention_grid.head_dim_factor`` at ``2·head_dim``: the table's q, k and v share it;
    ``factor``: this factor instead)."""
    peak = GPU.peak("bf16")
    out = []
    for p in pts:
        if p.kernel != kernel:
            continue
        g = ag.at_head_dim(f.kernel, p.head_dim)
        x = flops(p, direction) / (peak * ag.grid_factor(
            g, p.batch * p.heads, -(-p.seq // g.rows), GPU.sm_count)
            * (ag.head_dim_factor(f.kernel, 2 * p.head_dim) if factor is None else factor))
        t = p.fwd_s if direction == "fwd" else p.bwd_s
        out.append((p, math.log(max(x / f.asymptote, f.host_s) / t), x / f.asymptote <= f.host_s))
    return out


S0_GRID = tuple(2.0 * i for i in range(0, 301))
#: the backward's s0 that §5.132 landed with the 128-row tile at every head dim (the "before"
#: of §5.183's key tile by head dim)
S0_5132 = 82.0


def with_s0(f: Fit, s0: float) -> Fit:
    """``f`` with its kernel's head-dim constant set to ``s0`` (nothing else refitted; its
    register rule, ``tile_dims``, kept)."""
    return f._replace(kernel=dataclasses.replace(f.kernel, head_dim_s0=s0))


def flat(f: Fit) -> Fit:
    """``f`` at head dim 128's rate and tile at every head dim (no ``s0``, ``tile_dims`` or
    ``key_rows``)."""
    return f._replace(kernel=dataclasses.replace(f.kernel, head_dim_s0=0.0, tile_dims=0.0,
                                                 key_rows=()))


def one_tile(f: Fit) -> Fit:
    """``f`` with the 128-row tile at every head dim (no ``key_rows``: §5.132's grid)."""
    return f._replace(kernel=dataclasses.replace(f.kernel, key_rows=()))


def by_head_dim(f: Fit) -> bool:
    """Whether ``f``'s kernel has a rate or tile by head dim (``attention_grid.head_dim_factor``,
    ``at_head_dim``)."""
    return bool(f.kernel.head_dim_s0 or f.kernel.tile_dims or f.kernel.key_rows)


def rms_at(f: Fit, kernel: str, direction: str, head_dims: tuple[int, ...]) -> float:
    """rms of log(model/measured) over every run-4 point of ``head_dims`` (host-bound ones at
    the fit's floor, as the in-sample fit counts them)."""
    rs = [r for hd in head_dims
          for _, r, _ in held_out_residuals(f, kernel, direction, held_out_points(hd))]
    return math.sqrt(sum(r * r for r in rs) / len(rs))


def fit_s0(f: Fit, kernel: str, direction: str, head_dims: tuple[int, ...]) -> tuple[float, float]:
    """(s0, rms): the head-dim constant on ``S0_GRID`` (>= 0) that fits the run-4 points of
    ``head_dims`` best under the in-sample c0, E and host; s0 0 at the grid's edge means the
    points want a rate that rises as the head dim falls, which no s0 >= 0 gives."""
    return min(((s, rms_at(with_s0(f, s), kernel, direction, head_dims)) for s in S0_GRID),
               key=lambda x: x[1])


#: FlashAttention-3's sm90 backward by head dim (Dao-AILab/flash-attention @0251105,
#: hopper/flash_bwd_launch_template.h ``run_mha_bwd_hdim64/128/192/256``, causal, no softcap):
#: (kBlockM, kBlockN, Stages_dO, Stages_dS, MMA warpgroups)
FA3_SM90_BWD = {64: (128, 128, 2, 2, 2), 128: (64, 128, 2, 2, 2), 192: (64, 96, 1, 1, 3),
                256: (64, 80, 1, 1, 2)}
FACTOR_GRID = tuple(0.4 + 0.005 * i for i in range(161))


def free_factor(f: Fit, head_dim: int) -> tuple[float, float]:
    """(factor, rms): the one factor on cuDNN's backward rate at ``head_dim`` (on
    ``FACTOR_GRID``) that fits run 4's points there best, with the grid at the head dim's key
    tile: what any rate-by-head-dim rule could at most reach at that head dim."""
    def rms(x: float) -> float:
        rs = [r for _, r, _ in held_out_residuals(f, "native", "bwd",
                                                   held_out_points(head_dim), x)]
        return math.sqrt(sum(r * r for r in rs) / len(rs))
    return min(((x, rms(x)) for x in FACTOR_GRID), key=lambda t: t[1])


def additive_bound(head_dim: int) -> float:
    """The most a tile's time per FLOP at ``head_dim`` can exceed head dim 128's when it is
    a sum of non-negative terms (per FLOP; per score element, ∝ 1/D; per query tile visited,
    ∝ 1/kBlockN; per tile pair, ∝ 1/(kBlockM·kBlockN·D)) on FlashAttention-3's sm90 tiles:
    the largest of the terms' ratios to head dim 128's."""
    bm, bn = FA3_SM90_BWD[head_dim][:2]
    bm0, bn0 = FA3_SM90_BWD[128][:2]
    return max(1.0, 128 / head_dim, bn0 / bn, (bm0 * bn0 * 128) / (bm * bn * head_dim))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", action="store_true", help="compare CTA orders and occupancy")
    ap.add_argument("--points", action="store_true", help="every point's residual")
    ap.add_argument("--held-out", action="store_true",
                    help="the in-sample fit against the dense table measured after it "
                    "(run4), by head dim and sequence")
    ap.add_argument("--tiles", action="store_true",
                    help="the backward's time per FLOP by head dim against FlashAttention-3's "
                    "sm90 tiles (docs/calibration.md §5.183)")
    ap.add_argument("--shapes", default=None, metavar="GPU",
                    help="the cost model's factor on the catalog rate by sequence x batch·heads")
    a = ap.parse_args(argv)
    print("| kernel | dir | order | CTAs/SM | c0 (tiles) | E (fit) | host µs | rms log | "
          "max abs log, kernel-bound (n) | module c0 |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    fits = {}
    for (k, d), gk in KERNELS.items():
        f = fits[(k, d)] = fit(k, d)
        kb = f.kernel_bound()
        print(f"| {k} | {d} | {gk.order} | {gk.ctas_per_sm} | {f.kernel.fixed_tiles:.2f} | "
              f"{f.asymptote:.3f} | {f.host_s * 1e6:.1f} | {f.rms:.3f} | "
              f"{max(abs(r) for r in kb):.3f} ({len(kb)}) | {gk.fixed_tiles:.2f} |")
    print("\nAt the catalog's benchmark shape (seq %d, batch x heads %d), fraction of the bf16 "
          "peak:" % (ag.REF_SEQ, ag.REF_GROUPS))
    print("| kernel | dir | measured | model E·grid | catalog |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (k, d), f in fits.items():
        cat = GPU.flash_efficiency(k) * (0.8 if d == "bwd" else 1.0)
        g = ag.grid_factor(f.kernel, ag.REF_GROUPS, ag.REF_SEQ // ag.TILE, GPU.sm_count)
        print(f"| {k} | {d} | {rate_at(k, ag.REF_SEQ, ag.REF_GROUPS, d):.3f} | "
              f"{f.asymptote * g:.3f} | {cat:.3f} |")
    if a.orders:
        print("\nOrders (best c0 each): rms of log time over all points")
        print("| kernel | dir | order | CTAs/SM | c0 | E | rms |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
        for (k, d) in KERNELS:
            for order in ag.ORDERS:
                for cps in ((1, 2) if k == "fa2" else (1,)):
                    f = fit(k, d, order, cps, tuple(i * 0.5 for i in range(17)))
                    print(f"| {k} | {d} | {order} | {cps} | {f.kernel.fixed_tiles:.2f} | "
                          f"{f.asymptote:.3f} | {f.rms:.3f} |")
    if a.shapes:
        g = get_gpu(a.shapes)
        groups = (4, 8, 12, 16, 32, 64, 128)
        for kern in ("native", "fa2"):
            print(f"\n{g.name} {kern}: factor on the catalog rate (forward / backward), rows "
                  "sequence, columns batch x heads (attention_grid.shape_factors)")
            print("| seq | " + " | ".join(str(x) for x in groups) + " |")
            print("| ---: |" + " ---: |" * len(groups))
            for seq in (1024, 2048, 4096, 8192, 16384, 32768):
                cells = [ag.shape_factors(g, kern, x, seq) for x in groups]
                print(f"| {seq} | " + " | ".join(f"{f:.2f} / {b:.2f}" for f, b in cells) + " |")
    if a.held_out:
        print(f"\nHeld out ({HELD_OUT}, not in the fit): log(model/measured) of the "
              "kernel-bound points under the in-sample constants, before (head dim 128's rate) "
              "→ after (attention_grid.head_dim_factor: s0, and the backward's register rule "
              "tile_dims)")
        print("| kernel | dir | head dim | s0 / tile_dims / key rows | points (kernel-bound) | rms "
              "| max abs | median by seq 512 ... 32768 |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for (k, d), f in fits.items():
            for hd in (64, 128, 192):
                gs = (f,)
                if by_head_dim(f) and hd != 128:
                    gs = ((flat(f), with_s0(one_tile(f), S0_5132), f) if f.kernel.key_rows
                          else (flat(f), f))
                for g in gs:
                    res = held_out_residuals(g, k, d, held_out_points(hd))
                    kb = [(p, r) for p, r, host in res if not host]
                    if not kb:
                        continue
                    by = {}
                    for p, r in kb:
                        by.setdefault(p.seq, []).append(r)
                    med = " ".join(f"{sorted(v)[len(v) // 2]:+.2f}" for _, v in sorted(by.items()))
                    rs = [r for _, r in kb]
                    print(f"| {k} | {d} | {hd} | {g.kernel.head_dim_s0:.0f} / "
                          f"{g.kernel.tile_dims:.0f} / {ag.at_head_dim(g.kernel, hd).rows} | "
                          f"{len(res)} "
                          f"({len(kb)}) | {math.sqrt(sum(r * r for r in rs) / len(rs)):.3f} | "
                          f"{max(abs(r) for r in rs):.3f} | {med} |")
        print("\nThe head-dim constant s0 (units of d_qk + d_v; rms of log time over every run-4 "
              "point of the head dims, with the kernel's tile_dims; 'cross': s0 from one head "
              "dim, the rms at the other; 'flat': head dim 128's rate, neither s0 nor tile_dims)")
        print("| kernel | dir | tile_dims | key rows at 192 | s0 (64) | s0 (192) | s0 (both) | "
              "rms both at it | cross 64→192 | cross 192→64 | rms both, s0 0 | rms both, flat | "
              "module s0 |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: |")
        for d, f in (("fwd", fits[("native", "fwd")]), ("bwd", one_tile(fits[("native", "bwd")])),
                     ("bwd", fits[("native", "bwd")])):
            (s64, _), (s192, _), (sb, rb) = (fit_s0(f, "native", d, h)
                                             for h in ((64,), (192,), (64, 192)))
            print(f"| native | {d} | {f.kernel.tile_dims:.0f} | "
                  f"{ag.at_head_dim(f.kernel, 192).rows} | {s64:.0f} | {s192:.0f} | "
                  f"{sb:.0f} | {rb:.3f} | "
                  f"{rms_at(with_s0(f, s64), 'native', d, (192,)):.3f} | "
                  f"{rms_at(with_s0(f, s192), 'native', d, (64,)):.3f} | "
                  f"{rms_at(with_s0(f, 0.0), 'native', d, (64, 192)):.3f} | "
                  f"{rms_at(flat(f), 'native', d, (64, 192)):.3f} | "
                  f"{f.kernel.head_dim_s0:.0f} |")
        print("\nIn sample (run 1/2, head dim 128 only): unchanged by s0 and tile_dims "
              "(head_dim_factor is exactly 1 at d_qk + d_v = %d)" % ag.REF_DIMS)
    if a.tiles:
        f = fits[("native", "bwd")]
        print("\ncuDNN backward: time per FLOP over head dim 128's, by head dim (run 4, one "
              "free factor a head dim, the grid at the key tile; the tile model's most with "
              "FlashAttention-3's sm90 tiles; the module's rule)")
        print("| head dim | FA3 sm90 Bm x Bn | stages dO / dS | MMA warpgroups | key rows | "
              "fitted (rms) | additive tile model at most | module |")
        print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for hd in (64, 192):
            bm, bn, sdo, sds, wg = FA3_SM90_BWD[hd]
            x, r = free_factor(f, hd)
            print(f"| {hd} | {bm} x {bn} | {sdo} / {sds} | {wg} | "
                  f"{ag.at_head_dim(f.kernel, hd).rows} | {1 / x:.2f} ({r:.3f}) | "
                  f"{additive_bound(hd):.2f} | "
                  f"{1 / ag.head_dim_factor(f.kernel, 2 * hd):.2f} |")
    if a.points:
        for (k, d), f in fits.items():
            print(f"\n{k} {d}: seq, batch, heads, measured fraction of peak, log(model/measured)"
                  ", host-bound")
            for p, r, host in sorted(f.residuals, key=lambda x: (x[0].seq, x[0].batch
                                                                * x[0].heads, x[0].source)):
                t = p.fwd_s if d == "fwd" else p.bwd_s
                rate = flops(p, d) / (t * GPU.peak("bf16"))
                print(f"{p.seq:6d} {p.batch} {p.heads:3d} {rate:.3f} {r:+.3f}"
                      f"{'  host' if host else ''}  {p.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
