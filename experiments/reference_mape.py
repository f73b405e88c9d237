"""Analytic MAPE and worst row of every reference file that ships
(``strategies/reference/data/*.json`` but the schedule studies), each through
``paraplan validate --no-sim``; ``--rows SUBSTR`` also lists each row whose id contains
SUBSTR with its measured and estimated step (seconds); a SUBSTR no row id holds, or a
blank one, exits 2 before anything runs. About 15 s.

    python experiments/reference_mape.py [--rows SUBSTR] [--pool PREFIX]

The last line is the held-out pooled MAPE: every run of every file but ``published.json``
(the calibration set), each run weighted once; ``--pool PREFIX`` adds the same over the
files whose names start with PREFIX (e.g. ``heldout_mlperf``).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections import Counter
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments._report import check_id_filter  # noqa: E402


def file_cases(path: str) -> list[dict]:
    """Every case of one reference file (all tiers), skipped ones included: ``paraplan
    validate --reference PATH --no-sim --json --tiers all``, run in this process (its JSON
    is the same as the command's; a non-zero exit raises)."""
    if ROOT not in sys.path:        # run as ``python experiments/reference_mape.py``
        sys.path.insert(0, ROOT)
    from simulator.cli.main import main as cli_main
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli_main(["validate", "--reference", path, "--no-sim", "--json", "--tiers", "all"])
    if rc != 0:
        raise RuntimeError(f"paraplan validate --reference {path} exited {rc}")
    return json.loads(buf.getvalue())["cases"]


def file_rows(path: str) -> list[dict]:
    """The validated, not skipped, cases of one reference file (all tiers)."""
    return [c for c in file_cases(path) if not c.get("skipped")]


def skip_summary(cases: list[dict]) -> str:
    """A file none of whose rows runs: how many are skipped and each distinct reason (the
    first 100 characters), most frequent first."""
    why = Counter(str(c.get("skipped"))[:100] for c in cases if c.get("skipped"))
    return f"{sum(why.values())} skipped: " + "; ".join(
        f"{n} x {w}" for w, n in why.most_common())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=None, help="list the rows whose id contains this text")
    ap.add_argument("--pool", default=None, metavar="PREFIX",
                    help="also the pooled MAPE of the files whose names start with PREFIX")
    a = ap.parse_args(argv)
    if a.rows is not None:      # before the 35 s of estimates: a typo is not an empty list
        check_id_filter("reference_mape", "--rows", a.rows)
    from strategies.reference.cases import held_out_file_names, run_file_names
    data = os.path.join(ROOT, "strategies", "reference", "data")
    held = set(held_out_file_names(data))
    pooled: dict[str, list[float]] = {"held-out": [], "pool": []}
    for f in (os.path.join(data, n) for n in run_file_names(data)):
        cases = file_cases(f)
        rows = [c for c in cases if not c.get("skipped")]
        if not rows:
            print(f"{os.path.basename(f):28} runs    0  MAPE      -    {skip_summary(cases)}")
            continue
        errs = [c["analytic_error_pct"] for c in rows]
        name = os.path.basename(f)
        pooled["held-out"] += errs if name in held else []
        pooled["pool"] += errs if a.pool and name.startswith(a.pool) else []
        mape = sum(abs(e) for e in errs) / max(1, len(errs))
        worst = max(errs, key=abs) if errs else 0.0
        print(f"{os.path.basename(f):28} runs {len(errs):4d}  MAPE {mape:6.2f} %  "
              f"worst {worst:+7.1f} %")
        for c in rows:
            if a.rows and a.rows in c["id"]:
                print(f"    {c['id']:60} meas {c['measured_step_s']:9.3f} "
                      f"est {c['analytic_step_time_s']:9.3f} {c['analytic_error_pct']:+6.1f} %")
    for label, errs in (("held-out pooled (every file but published.json)", pooled["held-out"]),
                        (f"pooled over {a.pool}*", pooled["pool"])):
        if errs:
            print(f"{label}: MAPE {sum(abs(e) for e in errs) / len(errs):.2f} % over "
                  f"{len(errs)} runs")


if __name__ == "__main__":
    main()
