#!/usr/bin/env python
"""The held-out rows of ``strategies/reference/data/heldout_2026b.json`` (calibration §5.48)
against paraplan, untouched: per run, then MAPE, mean signed error and worst error per stack,
per dense/MoE and per source group.

    python experiments/heldout_2026b_report.py            # analytic (a few seconds)
    python experiments/heldout_2026b_report.py --sim      # and simulated (--jobs N)

Uses ``simulator.studies.validate`` (the code behind ``paraplan validate --reference``): the
same cases, jobs, assumptions and simulation method."""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases, mape, validate_cases  # noqa: E402
from strategies.reference.cases import load_reference  # noqa: E402

DATA = os.path.join("strategies", "reference", "data", "heldout_2026b.json")


def group(case_id: str) -> str:
    """The source group of a row: torchtitan vanilla TP / async TP / FSDP-only (H200), or the
    Megatron-Bridge 26.06 table."""
    if case_id.startswith("mbridge2606_"):
        return "megatron-bridge 26.06"
    if "_h200_" in case_id:
        return "torchtitan FSDP (H200)"
    return "torchtitan async TP" if case_id.endswith("_asynctp") else "torchtitan vanilla TP"


def same_layout_2604() -> list[tuple[dict, dict]]:
    """(26.04.01 row, 26.06 row) pairs of Megatron-Bridge rows with the same model, system,
    GPU count, precision (its first word: "fp8" with or without the scaling) and layout (tp,
    pp, cp, vpp, ep, mbs, gbs)."""
    def key(r: dict) -> tuple:
        pl = r["plan"]
        sizes = ("tp", "pp", "cp", "virtual_stages", "ep", "microbatch", "global_batch")
        return (r["model"]["name"], r["hardware"]["gpu"], r["hardware"]["n_gpus"],
                r["precision"].split()[0], *(pl[k] for k in sizes))
    old = {key(r): r for r in load_reference(os.path.join(os.path.dirname(DATA),
                                                          "megatron_bridge_2604.json"))}
    return [(old[key(r)], r) for r in load_reference(DATA)
            if r["id"].startswith("mbridge2606_") and key(r) in old]


def _stats(errs: list[float]) -> str:
    worst = max(errs, key=abs)
    return (f"{len(errs):4d}  {mape(errs):6.1f} %  {sum(errs) / len(errs):+6.1f} %  "
            f"{worst:+6.1f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", action="store_true", help="simulate too")
    ap.add_argument("--jobs", type=int, default=1, help="simulation processes (default 1)")
    a = ap.parse_args(argv)
    cases = load_cases(DATA, tiers=None)
    info = {c.id: (c.job.framework.name, "moe" if c.job.model.num_experts > 1 else "dense")
            for c in cases if c.job is not None}
    rows = [r for r in validate_cases(cases, simulate=a.sim, jobs=a.jobs)
            if r["analytic_step_time_s"] is not None]
    print(f"{'run':44s} {'measured s':>10s} {'analytic':>9s} {'error':>8s}"
          + (f" {'simulated':>9s} {'error':>8s}" if a.sim else ""))
    for r in rows:
        line = (f"{r['id']:44s} {r['measured_step_s']:10.3f} {r['analytic_step_time_s']:9.3f} "
                f"{r['analytic_error_pct']:+7.1f}%")
        if a.sim and r["simulated_step_time_s"] is not None:
            line += f" {r['simulated_step_time_s']:9.3f} {r['simulated_error_pct']:+7.1f}%"
        print(line)
    for kind in ("analytic", "simulated") if a.sim else ("analytic",):
        key = f"{kind}_error_pct"
        for title, fn in (("stack", lambda r: info[r["id"]][0]),
                          ("dense/moe", lambda r: f"{info[r['id']][0]} {info[r['id']][1]}"),
                          ("source group", lambda r: group(r["id"]))):
            by: dict[str, list[float]] = defaultdict(list)
            for r in rows:
                if r[key] is not None:
                    by[fn(r)].append(r[key])
            print(f"\n{kind} by {title}: {'group':26s} runs    MAPE    mean   worst")
            for g, errs in sorted(by.items()):
                print(f"{'':{len(kind) + len(title) + 5}s}{g:26s} {_stats(errs)}")
        allerr = [r[key] for r in rows if r[key] is not None]
        if allerr:
            print(f"\n{kind} all: runs/MAPE/mean/worst {_stats(allerr)}")
    print("\nthe same layout and precision in megatron_bridge_2604.json (26.04.01 container): "
          "measured step s, 26.04.01 -> 26.06")
    for old, new in same_layout_2604():
        a, b = old["derived"]["step_time_s"], new["derived"]["step_time_s"]
        print(f"  {new['id']:44s} {a:8.3f} -> {b:8.3f}  {100 * (b / a - 1):+6.1f} %")
    print(f"{len(cases) - len(rows)} rows not run (`paraplan validate --reference {DATA} "
          "--verbose` says why)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
