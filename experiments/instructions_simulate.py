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
DIR``) with this harness. ``--plan PLAN`` counts a plan of the README's default job (GPT-3
175B on 128 DGX A100, folded) instead of a case, e.g. one the default search simulates.
Prints figures; asserts nothing. Needs ``valgrind`` on the path; a run takes 30 to 60 times
its native time (about 5 minutes for ``175b-full``).

    python experiments/instructions_simulate.py --case 175b-full
    python experiments/instructions_simulate.py --case 175b-full --tree /tmp/before
    python experiments/instructions_simulate.py --plan tp=4,pp=16,mbs=1,gbs=1536,\
schedule=interleaved,vpp=6,sp=true,zero=1
    python experiments/instructions_simulate.py --figures-only --plan <plan>
        # the step figures alone (``figures_only``), as the search and validate simulate
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


def _job_only(case: str, tree: str, simulate: bool, plan: str | None = None,
              figures_only: bool = False) -> None:
    """The measured program: imports and the job, and with ``simulate`` the simulation."""
    sys.path.insert(0, tree)
    sys.path.insert(0, str(Path(tree) / "experiments"))
    if plan is None:
        from bench_simulate import make
        job, fold = make(case)
    else:                     # a plan of the default job, as the search simulates it
        from strategies.job import make_job
        from strategies.plan import parse_plan
        from strategies.presets import model_preset
        from topologies.cluster import cluster_preset
        job = make_job(model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128),
                       parse_plan(plan))
        fold = True
    if simulate:
        from simulator.simulate import simulate as run
        res = run(job, fold=fold, figures_only=figures_only)
        print(json.dumps({"events": res.events, "records": len(res.records),
                          "step_time_s": res.step_time_s}))


def count(case: str, tree: str, simulate: bool, plan: str | None = None,
          figures_only: bool = False) -> tuple[int, str]:
    """``(instructions, the program's last line of output)`` of one run under cachegrind."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--case", case, "--tree", tree, "--inner",
           "run" if simulate else "job"] + (["--plan", plan] if plan else []) + \
        (["--figures-only"] if figures_only else [])
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
    ap.add_argument("--plan", default=None,
                    help="a plan of the default job (GPT-3 175B, dgx-a100:128) instead of --case")
    ap.add_argument("--figures-only", action="store_true",
                    help="simulate(job, figures_only=True): the step figures alone, as the "
                         "search and validate derive them")
    ap.add_argument("--inner", choices=("job", "run"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        _job_only(a.case, a.tree, a.inner == "run", a.plan, a.figures_only)
        return
    if not (Path(a.tree) / "simulator").is_dir():
        ap.error(f"--tree {a.tree!r}: not a checkout (no simulator/ in it)")
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not on the path")
    base, _ = count(a.case, a.tree, False, a.plan)
    full, out = count(a.case, a.tree, True, a.plan, a.figures_only)
    what = "simulate(job, figures_only=True)" if a.figures_only else "simulate(job)"
    print(f"{a.plan or a.case} ({a.tree}): {full - base:,} instructions in {what} "
          f"({full:,} in all, {base:,} for the imports and the job); {out}")


if __name__ == "__main__":
    main()
