"""Report: how fast the simulator runs (docs/reports/speed.md).

Runs ``experiments/bench_simulate.py --case C`` for each benchmark case (each in its own
process, so its peak memory is its own) and writes ``speed.md``, ``speed.png`` and
``speed.json``.

    python experiments/report_speed.py                          # every case, docs/reports/
    python experiments/report_speed.py --cases 175b-folded --out /tmp/r
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ROOT, ReportWriter, header, md_table, rel,  # noqa: E402
                                 this_command)

NAME = "speed"
BENCH = ROOT / "experiments" / "bench_simulate.py"
# The targets of the issue (seconds of wall time, on a 2-core machine).
TARGETS_S = {"175b-folded": 2.0, "175b-full": 60.0, "405b-folded": 10.0}


def bench_cases() -> list[str]:
    sys.path.insert(0, str(BENCH.parent))
    from bench_simulate import CASES
    return list(CASES)


def run_case(case: str, timeout: float = 1200) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(BENCH), "--case", case], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise RuntimeError(f"bench_simulate.py --case {case} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (None,) * 3
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_average_1min": load[0]}


def draw(rows: list[dict[str, Any]], path: str) -> None:
    from simulator.output.figures import new_figure, save_figure
    fig, ax = new_figure((7.5, 0.9 + 0.7 * len(rows)))
    names = [r["case"] for r in rows]
    ys = range(len(rows))
    ax.barh(list(ys), [r["wall_s"] for r in rows], color="#4C78A8", label="wall time")
    for y, r in zip(ys, rows):
        t = TARGETS_S.get(r["case"])
        if t:
            ax.plot([t, t], [y - 0.4, y + 0.4], color="#E45756", linewidth=2,
                    label="target" if y == 0 else None)
        ax.text(r["wall_s"], y, f" {r['wall_s']:.2f} s, {r['events_per_s']:,.0f} events/s",
                va="center", fontsize=8)
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("simulator wall time per benchmark case", fontsize=10)
    save_figure(fig, path)


def render(rows: list[dict[str, Any]], mach: dict[str, Any], command: str) -> str:
    table = md_table(
        ["case", "plan", "GPUs", "simulated ranks", "events", "wall s", "target s",
         "events/s", "peak RSS MiB", "step s (sim)", "step s (analytic)"],
        [[r["case"], r["plan"], f"{r['gpus']:,}", r["simulated_ranks"], f"{r['events']:,}",
          f"{r['wall_s']:.2f}", TARGETS_S.get(r["case"], "-"), f"{r['events_per_s']:,.0f}",
          f"{r['peak_rss_mib']:.0f}", f"{r['step_time_s']:.3f}",
          f"{r['analytic_step_time_s']:.3f}"] for r in rows], align="llrrrrrrrrr")
    met = [f"`{r['case']}` {'meets' if r['wall_s'] <= TARGETS_S[r['case']] else 'MISSES'} "
           f"its target ({r['wall_s']:.2f} s against {TARGETS_S[r['case']]:.0f} s)"
           for r in rows if r["case"] in TARGETS_S]
    load = mach["load_average_1min"]
    return "\n".join([
        header("Simulator speed", command),
        "Each case of `experiments/bench_simulate.py` run in its own process "
        "(`python experiments/bench_simulate.py --case CASE`); wall time of `simulate(job)` "
        "(compile, network, run, metrics), peak resident memory of the process.", "",
        table, "",
        "- " + ("; ".join(met) + "." if met else "no case with a target was run."),
        f"- Machine: {mach['cpus']} CPUs ({mach['processor']}), Python {mach['python']}, "
        f"{mach['platform']}; 1-minute load average {load:.2f} when the report started "
        "(other work on the machine slows every figure)." if load is not None else
        f"- Machine: {mach['cpus']} CPUs, Python {mach['python']}.",
        "",
        f"![wall time per case]({NAME}.png)"])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--cases", default=None, help="comma-separated (default: every case)")
    a = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    known = bench_cases()
    cases = known if a.cases is None else [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in known]
    if unknown or not cases:
        ap.error(f"--cases: unknown {unknown}; known: {', '.join(known)}")
    mach = machine()
    rows = [run_case(c) for c in cases]
    with ReportWriter(a.out) as w:
        w.draw(f"{NAME}.png", lambda p: draw(rows, p))
        w.json(f"{NAME}.json", {"machine": mach, "targets_s": TARGETS_S, "cases": rows})
        w.text(f"{NAME}.md", render(rows, mach, this_command("report_speed.py", argv)))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
