#!/usr/bin/env python
"""The analytic (and, with ``--simulate ID ...``, simulated) error on NVIDIA NeMo's 25.02,
25.04 and 25.07 performance summaries (strategies/reference/data/nemo_performance_25.json,
held out; docs/calibration.md §5.30), grouped by release, by system, by model family and
dense vs mixture of experts.

Each group: runs, MAPE, mean signed error (positive: the model is slower than measured) and
the worst row. Rows recorded but not evaluated (the parenthesised 25.07 figures) are listed
with their reason.

Run: python experiments/nemo_performance_25.py [--simulate ID ...]
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import md_table  # noqa: E402
from simulator.studies.validate import evaluate_case, load_cases, mape  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data", "nemo_performance_25.json")


def family(name: str) -> str:
    """The model family of a table's model name (GPT3, Llama 3, Llama 4, Nemotron, Mixtral)."""
    n = name.lower()
    for key, fam in (("gpt3", "GPT3"), ("llama4", "Llama 4"), ("llama", "Llama 3"),
                     ("nemotron", "Nemotron"), ("mixtral", "Mixtral")):
        if key in n:
            return fam
    return name


def rows(path: str = DATA, simulate: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One record per entry: id, release, system, family, moe, skipped, measured, analytic and
    (for ``simulate`` ids) simulated step times and errors (%)."""
    out = []
    for case in load_cases(path, tiers=None):
        r = evaluate_case(case, simulate=case.id in simulate)
        raw = case.raw
        r.update(release=raw.get("release"), system=raw.get("system"),
                 family=family(str(raw["model"]["name"])),
                 moe=case.job.model.is_moe if case.job is not None else None)
        out.append(r)
    return out


def groups(recs: list[dict[str, Any]], key: str) -> list[list[Any]]:
    """Per value of ``key``: runs, MAPE, mean signed error, worst row (analytic)."""
    table = []
    for v in sorted({str(r[key]) for r in recs if r["analytic_error_pct"] is not None}):
        es = [r for r in recs if str(r[key]) == v and r["analytic_error_pct"] is not None]
        errs = [r["analytic_error_pct"] for r in es]
        worst = max(es, key=lambda r: abs(r["analytic_error_pct"]))
        table.append([v, len(es), f"{mape(errs):.2f} %", f"{sum(errs) / len(errs):+.2f} %",
                      f"{worst['id']} {worst['analytic_error_pct']:+.1f} %"])
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=DATA)
    ap.add_argument("--simulate", nargs="*", default=[], help="entry ids to simulate too")
    a = ap.parse_args(argv)
    recs = rows(a.reference, tuple(a.simulate))
    ev = [r for r in recs if r["analytic_error_pct"] is not None]
    print(md_table(["id", "plan", "measured s", "analytic s", "error", "simulated s", "error"],
                   [[r["id"], r["plan"], f"{r['measured_step_s']:.3f}",
                     f"{r['analytic_step_time_s']:.3f}", f"{r['analytic_error_pct']:+.1f} %",
                     "-" if r["simulated_step_time_s"] is None else
                     f"{r['simulated_step_time_s']:.3f}",
                     "-" if r["simulated_error_pct"] is None else
                     f"{r['simulated_error_pct']:+.1f} %"] for r in ev]))
    errs = [r["analytic_error_pct"] for r in ev]
    print(f"\nall: {len(ev)} runs, analytic MAPE {mape(errs):.2f} %, "
          f"mean {sum(errs) / len(errs):+.2f} %")
    for key, title in (("release", "release"), ("system", "system"), ("family", "family"),
                       ("moe", "mixture of experts")):
        print(f"\nby {title}:\n")
        print(md_table([title, "runs", "MAPE", "mean", "worst"], groups(recs, key)))
    skipped = [r for r in recs if r["skipped"]]
    if skipped:
        print(f"\nrecorded, not evaluated ({len(skipped)}):")
        for r in skipped:
            print(f"  {r['id']}: {r['skipped'][:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
