#!/usr/bin/env python
"""A fixed time per GEMM kernel, fitted on XLA's public matmul tables beside the catalog's rate
and shape model (docs/calibration.md §5.37).

Run (a few seconds, analytic only):

    python experiments/gemm_fixed_time.py

XLA's matmul tables (tensorflow a305421c, ``.../cost_model/matmul_interpolator_data.h``,
transcribed in ``h100_gemm_shapes.XLA_SM90_BF16`` and ``blackwell_gemm_shapes.XLA_SM100_*``)
hold the median CUPTI *kernel* duration of one HLO ``dot`` per entry: the kernel's own time,
without the host or the idle gap between kernels (``framework.launch_gap_s``). Each entry's
time ``T`` is set against ``U``, the model's compute time of that GEMM without the fixed
term (``gemm_kernel.gemm_compute`` at the catalog rate, ``b`` times: smooth shape penalty, K
knee), in the law ``T = a·U + t0``. ``a`` is not free: it is the catalog's own
sustained/burst ratio (the catalog efficiency over mamf-finder's burst fraction of the same
part and dtype, ``blackwell_gemm_shapes.MAMF_BEST``), since XLA's short solo kernels run at
the burst clock. ``t0`` is the one free parameter, fitted in relative error (closed form,
``fit_fixed``), per GPU generation (``sm_90``: H100 bf16; ``sm_100``: B200 bf16 and fp8
together). Table 1 gives the fit and its residual with and without ``t0``; Table 2 the
unconstrained two-parameter fit (``a`` free) as a check.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.blackwell_gemm_shapes import (MAMF_BEST, XLA_SM100_BF16,  # noqa: E402
                                               XLA_SM100_FP8)
from experiments.h100_gemm_shapes import XLA_SM90_BF16  # noqa: E402
from strategies.cost import gemm_kernel, gemm_time  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

#: (generation, [(table, GPU it is priced on, dtype)]) of each fit
GENERATIONS = (
    ("sm_90", ((XLA_SM90_BF16, "H100-SXM5-80GB", "bf16"),)),
    ("sm_100", ((XLA_SM100_BF16, "B200-SXM-180GB", "bf16"),
                (XLA_SM100_FP8, "B200-SXM-180GB", "fp8"))),
)


def sustained_over_burst(gpu: str, dtype: str) -> float:
    """The catalog's ``gemm_efficiency(dtype)`` of ``gpu`` over mamf-finder's burst fraction
    (best TFLOP/s over the datasheet rate, ``MAMF_BEST``)."""
    row = next(r for r in MAMF_BEST if r[0] == gpu and r[1] == dtype)
    return get_gpu(gpu).gemm_efficiency(dtype) / (row[5] / row[6])


def points(gen: str) -> list[tuple]:
    """``(T measured s, U model s without the fixed term, a)`` of every entry of ``gen``."""
    return [p for table, name, dtype in dict(GENERATIONS)[gen]
            for p in _table_points(table, name, dtype)]


def fit_fixed(pts: list[tuple]) -> float:
    """``t0`` (s) minimising ``sum(((a·U + t0) / T - 1)^2)`` over ``pts`` ``(T, U, a)``:
    ``sum((1 - a·U/T) / T) / sum(1 / T^2)``."""
    num = sum((1.0 - a * U / T) / T for T, U, a in pts)
    den = sum(1.0 / (T * T) for T, _, _ in pts)
    return num / den


def residual(pts: list[tuple], t0: float) -> tuple[float, float, float]:
    """(rms, mean signed, largest |.|) of ``(a·U + t0)/T - 1`` over ``pts``."""
    r = [(a * U + t0) / T - 1.0 for T, U, a in pts]
    return (math.sqrt(sum(x * x for x in r) / len(r)), sum(r) / len(r), max(abs(x) for x in r))


def fit_free(pts: list[tuple]) -> tuple[float, float]:
    """``(a, t0)`` of the same law with ``a`` free too (2x2 least squares in relative
    error)."""
    s11 = sum((U / T) ** 2 for T, U, _ in pts)
    s12 = sum(U / T / T for T, U, _ in pts)
    s22 = sum(1 / T / T for T, _, _ in pts)
    b1 = sum(U / T for T, U, _ in pts)
    b2 = sum(1 / T for T, _, _ in pts)
    det = s11 * s22 - s12 * s12
    return (b1 * s22 - b2 * s12) / det, (s11 * b2 - s12 * b1) / det


def main() -> int:
    print("Table 1: fixed time per GEMM kernel, a = the catalog's sustained/burst ratio\n")
    print("| generation | entries | a | t0 fitted µs | catalog µs | rms without t0 | "
          "rms with t0 | mean signed with t0 | largest with t0 | kernel times µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for gen, tables in GENERATIONS:
        pts = points(gen)
        t0 = fit_fixed(pts)
        r0, r1 = residual(pts, 0.0), residual(pts, t0)
        a = "/".join(f"{sustained_over_burst(n, d):.3f}" for _, n, d in tables)
        lo, hi = min(p[0] for p in pts), max(p[0] for p in pts)
        print(f"| {gen} | {len(pts)} | {a} | {t0 * 1e6:.3f} | "
              f"{gemm_kernel.GEMM_FIXED_S[gen] * 1e6:.3f} "
              f"| {r0[0]:.3f} | {r1[0]:.3f} | {r1[1]:+.3f} | {r1[2]:.3f} | "
              f"{lo * 1e6:.1f}-{hi * 1e6:.1f} |")
    print("\nTable 2: a free (check): per table\n")
    print("| table | entries | a | t0 µs | rms |")
    print("|---|---:|---:|---:|---:|")
    for gen, tables in GENERATIONS:
        for table, name, dtype in tables:
            sub = [(T, U, 1.0) for T, U, _ in _table_points(table, name, dtype)]
            a, t0 = fit_free(sub)
            rms = math.sqrt(sum(((a * U + t0) / T - 1) ** 2 for T, U, _ in sub) / len(sub))
            print(f"| {gen} {dtype} ({name}) | {len(sub)} | {a:.3f} | {t0 * 1e6:.2f} | "
                  f"{rms:.3f} |")
    return 0


def _table_points(table: tuple, name: str, dtype: str) -> list[tuple]:
    """``points``' ``(T, U, a)`` of one ``table`` priced on ``name`` in ``dtype``."""
    g = get_gpu(name)
    a = sustained_over_burst(name, dtype)
    rate, kn = gemm_time._rates(g, dtype)[0], gemm_kernel.k_knee(g, dtype)
    wv = gemm_kernel.gemm_waves(g)
    return [(2.0 * b * m * n * k / (v * 1e12),
             b * float(gemm_kernel.gemm_compute(m, n, k, rate, kn, wv)), a)
            for b, m, n, k, v in table]


if __name__ == "__main__":
    raise SystemExit(main())
