#!/usr/bin/env python
"""The MLPerf Llama 3.1 405B held-out rows (``heldout_mlperf_llama.json``, calibration
§5.216) against the estimate's exposed terms, and, over the rows of one GPU and precision,
the least-squares line step = slope x (global batch / dp) + intercept, measured and
estimated: the slope is the per-sample time of one model replica (compute and what scales
with it), the intercept what a step costs whatever its batch (bubble, data-parallel
exchanges, the optimizer).

    python experiments/mlperf_llama_terms.py [--gpu H100] [--precision fp8]
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(ROOT, "strategies/reference/data/heldout_mlperf_llama.json")


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``ys`` on ``xs``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--precision", default="fp8", help="first word of the rows' precision")
    a = ap.parse_args(argv)
    rows = load_reference(DATA)
    fit = []
    print("| row | measured s | estimated s | error | exposed terms (s) |\n|---|---|---|---|---|")
    for r in rows:
        case = case_from_entry(r, rows)
        if case.skipped:
            continue
        est = estimate(case.job)
        m, e = case.measured_step_s, est.step_time_s
        terms = ", ".join(f"{k} {v:.2f}" for k, v in est.breakdown_s.items() if abs(v) >= 0.05)
        print(f"| {r['id']} | {m:.3f} | {e:.3f} | {100 * (e - m) / m:+.1f} % | {terms} |")
        if r["hardware"]["gpu"] == a.gpu and r["precision"].split(" ")[0] == a.precision:
            fit.append((r["plan"]["global_batch"] / r["plan"]["dp"], m, e))
    xs = [x for x, _, _ in fit]
    if len(set(xs)) < 2:
        print(f"{a.gpu} {a.precision}: fewer than two batch sizes a replica; no line")
    else:
        for name, k in (("measured", 1), ("estimated", 2)):
            s, b = line(xs, [f[k] for f in fit])
            print(f"{a.gpu} {a.precision} ({len(fit)} rows) {name}: {s:.5f} s per sample of a "
                  f"replica, {b:.3f} s a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
