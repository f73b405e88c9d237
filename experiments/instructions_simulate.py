"""Instructions a simulation executes, counted by valgrind: a speed figure that the machine's
load does not move.

On the shared 2-core machine wall and CPU times of one case moved by up to 40 % between runs
(issue 17), more than the changes they were meant to measure. Valgrind's cachegrind (no cache
simulation) counts the instructions the Python process executes; the count of a run is the same
from one run to the next (within a few parts per million) whatever else the machine does.
Instructions are not time (a cache miss costs more than an add), but fewer instructions for the
same events is what a faster engine looks like.

For a case of ``bench_simulate.py`` this runs the interpreter twice under valgrind: once up to
the job (imports and ``make(case)``) and once through ``simulate(job)``; the difference is the
simulation's. ``--tree DIR`` counts another checkout (e.g. ``git archive COMMIT | tar -x -C
DIR``) with this harness. Prints figures; asserts nothing. Needs ``valgrind`` on the path; a
run takes 30 to 60 times its native time (about 5 minutes for ``175b-full``).

    python experiments/instructions_simulate.py --case 175b-full
    python experiments/instructions_simulate.py --case 175b-full --tree /tmp/before
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _job_only(case: str, tree: str, simulate: bool) -> None:
    """The measured program: imports and the job, and with ``simulate`` the simulation."""
    sys.path.insert(0, tree)
    sys.path.insert(0, str(Path(tree) / "experiments"))
    from bench_simulate import make
    job, fold = make(case)
    if simulate:
        from simulator.simulate import simulate as run
        res = run(job, fold=fold)
        print(json.dumps({"events": res.events, "records": len(res.records),
                          "step_time_s": res.step_time_s}))


def count(case: str, tree: str, simulate: bool) -> tuple[int, str]:
    """``(instructions, the program's last line of output)`` of one run under cachegrind."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--case", case, "--tree", tree, "--inner",
           "run" if simulate else "job"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {proc.stderr[-500:]}")
    lines = proc.stdout.strip().splitlines()
    return int(found.group(1).replace(",", "")), lines[-1] if lines else ""


def main() -> None:
    sys.path.insert(0, str(ROOT / "experiments"))
    from bench_simulate import CASES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", default="175b-full", choices=sorted(CASES))
    ap.add_argument("--tree", default=str(ROOT),
                    help="the checkout whose simulator is counted (default: this one)")
    ap.add_argument("--inner", choices=("job", "run"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        _job_only(a.case, a.tree, a.inner == "run")
        return
    if not (Path(a.tree) / "simulator").is_dir():
        ap.error(f"--tree {a.tree!r}: not a checkout (no simulator/ in it)")
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not on the path")
    base, _ = count(a.case, a.tree, False)
    full, out = count(a.case, a.tree, True)
    print(f"{a.case} ({a.tree}): {full - base:,} instructions in simulate(job) "
          f"({full:,} in all, {base:,} for the imports and the job); {out}")


if __name__ == "__main__":
    main()
