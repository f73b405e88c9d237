"""Every reference file's analytic error with the communication SMs uncharged (the default)
and charged per overlap window (``SystemConfig.comm_sm_share`` = 1 on every row,
``strategies.cost.sm_share.overlap_extra``; docs/calibration.md §5.152, §5.156): per file the MAPE off → on, per stack the mean signed error,
and per file and stack how many rows move toward and away from their measurement. In
process, analytic only (about 30 s). ``--sim``: instead, ``published.json``'s rows of
``--tiers`` (default 1) estimated and simulated (folded, as ``validate``) with the switch
off and on in every row's job (the simulator charges the same SMs,
``simulator.engine.sm_hold``, docs/calibration.md §5.159): both MAPEs off → on (minutes).

    python experiments/sm_share_rows.py [--share 1.0] [--tiers 1] [--rows]
    python experiments/sm_share_rows.py --sim [--tiers 1] [--jobs 2]
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.cli.validate import parse_tiers  # noqa: E402
from simulator.studies.validate import load_cases, mape, validate_cases  # noqa: E402
from strategies.cost.system import get_system  # noqa: E402
from strategies.estimate import analytic  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOVED = 0.05   # percentage points a row's |error| must change by to count as moved


@contextlib.contextmanager
def share_on(share: float) -> Iterator[None]:
    """Every analytic estimate in this process with ``comm_sm_share = share`` (the SMs of
    each overlap window charged, ``analytic.charged_sms``)."""
    orig = analytic.charged_sms

    def forced(m, gpu, profile, system, P):
        return orig(m, gpu, profile, replace(get_system(system), comm_sm_share=share), P)
    analytic.charged_sms = forced
    try:
        yield
    finally:
        analytic.charged_sms = orig


def switched(cases: list, share: float) -> list:
    """``cases`` with ``comm_sm_share = share`` in each job's ``system`` (estimate and
    simulator alike read it there)."""
    return [c if c.job is None else replace(c, job=replace(
        c.job, system=replace(get_system(c.job.system), comm_sm_share=share))) for c in cases]


def sim_main(share: float, tiers: Any, jobs: int, rows: bool = False) -> None:
    """``--sim``: ``published.json``'s rows of ``tiers``, estimated and simulated with the
    switch off and on; each MAPE off → on (``rows``: and each row's errors)."""
    cases = load_cases(os.path.join(ROOT, "strategies/reference/data/published.json"),
                       tiers=tiers)
    runs = [validate_cases(switched(cases, s), simulate=True, jobs=jobs) for s in (0.0, share)]
    for key in ("analytic_error_pct", "simulated_error_pct"):
        ok = [i for i, r in enumerate(runs[0]) if r[key] is not None and runs[1][i][key] is not None]
        off, on = ([runs[k][i][key] for i in ok] for k in (0, 1))
        print(f"published.json {key:20} runs {len(ok):4d}  MAPE {mape(off):6.2f} -> {mape(on):6.2f} %")
    if rows:
        for r0, r1 in zip(*runs):
            if r0["simulated_error_pct"] is not None:
                print(f"    {r0['id']:58} est {r0['analytic_error_pct']:+6.1f} -> "
                      f"{r1['analytic_error_pct']:+6.1f}  sim {r0['simulated_error_pct']:+6.1f}"
                      f" -> {r1['simulated_error_pct']:+6.1f} %")


def file_rows(path: str, tiers: Any = None) -> list[dict[str, Any]]:
    """The validated (not skipped) rows of one reference file in ``tiers`` (None: every
    tier), analytic only."""
    return [r for r in validate_cases(load_cases(path, tiers=tiers), simulate=False)
            if r["analytic_error_pct"] is not None]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=1.0, help="comm_sm_share when on (default 1)")
    ap.add_argument("--tiers", default="all", help="comma-separated tiers, or 'all' (default)")
    ap.add_argument("--rows", action="store_true", help="list every row that moves")
    ap.add_argument("--sim", action="store_true",
                    help="published.json's --tiers (default 1) estimated and simulated")
    ap.add_argument("--jobs", type=int, default=2, help="simulation processes with --sim")
    a = ap.parse_args(argv)
    if a.sim:
        sim_main(a.share, parse_tiers("1" if a.tiers == "all" else a.tiers), a.jobs, a.rows)
        return
    tiers = parse_tiers(a.tiers)
    toward = away = total = 0
    held_off: list[float] = []
    held_on: list[float] = []
    for f in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        if "schedule_studies" in f:
            continue
        off = file_rows(f, tiers)
        with share_on(a.share):
            on = {r["id"]: r for r in file_rows(f, tiers)}
        if not off:
            continue
        name = os.path.basename(f)
        e_off = [r["analytic_error_pct"] for r in off]
        e_on = [on[r["id"]]["analytic_error_pct"] for r in off]
        print(f"{name:28} runs {len(off):4d}  MAPE {mape(e_off):6.2f} -> {mape(e_on):6.2f} %")
        if name != "published.json":
            held_off, held_on = held_off + e_off, held_on + e_on
        stacks: dict[str, list] = defaultdict(list)
        for r, e in zip(off, e_on):
            stacks[r["framework"]].append((r["analytic_error_pct"], e, r["id"]))
        for stack, v in sorted(stacks.items()):
            t = sum(abs(y) < abs(x) - MOVED for x, y, _ in v)
            w = sum(abs(y) > abs(x) + MOVED for x, y, _ in v)
            toward, away, total = toward + t, away + w, total + len(v)
            print(f"    {stack:22} runs {len(v):4d}  mean {sum(x for x, _, _ in v) / len(v):+6.1f}"
                  f" -> {sum(y for _, y, _ in v) / len(v):+6.1f} %  toward {t:3d}  away {w:3d}")
            if a.rows:
                for x, y, i in v:
                    if abs(y - x) > MOVED:
                        print(f"        {i:58} {x:+6.1f} -> {y:+6.1f} %")
    print(f"all files: {total} runs, {toward} toward their measurement, {away} away")
    if held_off:
        print(f"held-out files (all but published.json), pooled: {len(held_off)} runs, MAPE "
              f"{mape(held_off):.2f} -> {mape(held_on):.2f} %")


if __name__ == "__main__":
    main()
