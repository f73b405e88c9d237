"""Measured vs analytic step time on the published runs (tier 1 by default).

Run: python experiments/validate_published.py [--tiers 1,2] [--verbose]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference import reference_cases  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiers", default="1")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    cases = reference_cases(tiers=tuple(int(t) for t in a.tiers.split(",")))
    errs = []
    print(f"{'case':44s} {'plan':38s} {'measured':>9s} {'analytic':>9s} {'error':>7s}")
    for c in cases:
        if c.job is None:
            if a.verbose:
                print(f"{c.id:44s} skipped: {c.skipped}")
            continue
        e = estimate(c.job)
        err = (e.step_time_s - c.measured_step_s) / c.measured_step_s
        errs.append(abs(err))
        print(f"{c.id:44s} {c.job.plan.short():38s} {c.measured_step_s:9.3f} {e.step_time_s:9.3f} {100 * err:+6.1f}%")
        if a.verbose:
            print("    ", {k: round(v, 3) for k, v in e.breakdown_s.items()}, "mfu", round(e.mfu, 3))
            print("     assumptions:", "; ".join(c.assumptions))
    n_skip = sum(c.job is None for c in cases)
    print(f"\n{len(errs)} cases, {n_skip} skipped; analytic MAPE {100 * sum(errs) / max(len(errs), 1):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
