"""Peak memory per GPU: the model against every reference row that prints one
(docs/calibration.md §5.74), per reference file and per family of rows.

The rows and their errors are ``paraplan validate``'s (``simulator.studies.validate``:
``measured_memory_gib`` read by ``strategies.reference.measured.measured_memory_gib``, GB/GiB
normalised; ``estimated_memory_gib`` the estimate's peak stage, ``memory.peak_gib``). A
family is the row id's first two words (``bloom_prequel``, ``torchtitan_2412``); torch.compile
rows are counted apart (``compiled``: Inductor decides what the backward saves, the memory
model's layers are eager autograd's).

Run (a few seconds):

    python experiments/memory_mape.py
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.studies.validate import load_cases, mape, validate_cases    # noqa: E402
from strategies.reference.cases import run_file_names                     # noqa: E402

DATA = os.path.join(ROOT, "strategies", "reference", "data")


def memory_rows(name: str) -> list[dict]:
    """``validate``'s rows of reference file ``name`` that print a peak and were estimated."""
    cases = [c for c in load_cases(os.path.join(DATA, name), None)
             if (c.raw.get("measured") or {}).get("memory_gib") is not None
             or (c.raw.get("measured") or {}).get("memory_gb") is not None]
    rows = validate_cases(cases, simulate=False)
    return [r for r in rows if r["memory_error_pct"] is not None]


def family(row: dict) -> str:
    compiled = "torch.compile run" in (row["memory_how_measured"] or "")
    return "_".join(row["id"].split("_")[:2]) + (" (compiled)" if compiled else "")


def main() -> int:
    files = run_file_names(DATA)
    print(f"{'file / family':42s} {'rows':>4s} {'MAPE':>8s} {'signed':>8s} {'worst':>8s}")
    for name in files:
        rows = memory_rows(name)
        if not rows:
            continue
        groups: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            groups[family(r)].append(r["memory_error_pct"])
        errs = [r["memory_error_pct"] for r in rows]
        print(f"{name:42s} {len(errs):4d} {mape(errs):7.2f}% {sum(errs) / len(errs):+7.2f}% "
              f"{max(errs, key=abs):+7.1f}%")
        for fam, e in sorted(groups.items()):
            print(f"  {fam:40s} {len(e):4d} {mape(e):7.2f}% {sum(e) / len(e):+7.2f}% "
                  f"{max(e, key=abs):+7.1f}%")
        for r in rows:
            print(f"    {r['id']:44s} measured {r['measured_memory_gib']:6.1f}  model "
                  f"{r['estimated_memory_gib']:6.1f}  {r['memory_error_pct']:+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
