"""Measured vs analytic vs simulated step time on the published runs, per run, per family and
per framework (the tables of docs/calibration.md).

Run:
    python experiments/validate_published.py                    # tier 1, analytic + simulated
    python experiments/validate_published.py --no-sim           # analytic only (a second)
    python experiments/validate_published.py --tiers 2,3 --no-sim --markdown

Uses ``simulator.studies.validate`` (the code behind ``paraplan validate``): the same cases, jobs,
assumptions and simulation method. A *family* is a run's id without its scale suffix (GPU
count, sequence length, micro-batch size); a *framework* is the software profile the case
was given (``strategies.reference.entry_stack.framework_of``).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.cli.validate import parse_tiers  # noqa: E402
from simulator.studies.validate import (default_jobs, load_cases, mape, not_fitting,  # noqa: E402
                                       validate_cases)


def family(case_id: str) -> str:
    """``dgxc_nemo2411_gpt3_175B_bf16_512gpu`` -> ``dgxc_nemo2411_gpt3_175B_bf16``."""
    key = re.sub(r"_\d+gpu.*$", "", case_id)
    key = re.sub(r"_seq\d+.*$", "", key)
    key = re.sub(r"_(t1|t2)_.*$", r"_\1", key)
    key = re.sub(r"_(weak|strong)_.*$", r"_\1", key)         # megatron_core_h100_weak_7.1B
    key = re.sub(r"^(torchtitan_\d+_[^_]+_t\d).*$", r"\1", key)  # torchtitan_2412_8B_t3_fsdp
    return re.sub(r"_(mbs|dp)\d.*$", "", key)


def groups(rows: list[dict], key) -> list[tuple[str, int, float | None, float | None, float | None,
                                                 float | None]]:
    """``(group, runs, analytic MAPE, analytic mean, simulated MAPE, simulated mean)``."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["analytic_error_pct"] is not None:
            by[key(r)].append(r)
    out = []
    for g, rs in sorted(by.items()):
        a = [r["analytic_error_pct"] for r in rs]
        s = [r["simulated_error_pct"] for r in rs if r["simulated_error_pct"] is not None]
        out.append((g, len(rs), mape(a), sum(a) / len(a), mape(s), sum(s) / len(s) if s else None))
    return out


def _f(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.1f} %" if signed else f"{v:.1f} %"


def render(rows: list[dict], frameworks: dict[str, str], markdown: bool) -> str:
    done = [r for r in rows if r["analytic_step_time_s"] is not None]
    lines: list[str] = []

    def table(head: list[str], body: list[list[str]]) -> None:
        if markdown:
            lines.append("| " + " | ".join(head) + " |")
            lines.append("| " + " | ".join("---" for _ in head) + " |")
            lines.extend("| " + " | ".join(b) + " |" for b in body)
        else:
            w = [max(len(str(x)) for x in col) for col in zip(head, *body)]
            lines.append("  ".join(h.ljust(n) for h, n in zip(head, w)))
            lines.extend("  ".join(str(x).ljust(n) for x, n in zip(b, w)) for b in body)
        lines.append("")

    table(["run", "framework", "plan", "GPUs", "measured s", "analytic s", "error",
           "simulated s", "error", "peak/HBM"],
          [[r["id"], frameworks[r["id"]], r["plan"], str(r["gpus"]), f"{r['measured_step_s']:.3f}",
            f"{r['analytic_step_time_s']:.3f}", _f(r["analytic_error_pct"], True),
            "-" if r["simulated_step_time_s"] is None else f"{r['simulated_step_time_s']:.3f}",
            _f(r["simulated_error_pct"], True),
            f"{r['memory_to_hbm']:.2f}" + (" !" if r["fits_as_stated"] is False else "")]
           for r in done])
    for title, key in (("family", lambda r: family(r["id"])),
                       ("framework", lambda r: frameworks[r["id"]])):
        table([title, "runs", "analytic MAPE", "analytic mean", "simulated MAPE",
               "simulated mean"],
              [[g, str(n), _f(am), _f(amean, True), _f(sm), _f(smean, True)]
               for g, n, am, amean, sm, smean in groups(done, key)])
    a = [r["analytic_error_pct"] for r in done]
    s = [r["simulated_error_pct"] for r in done if r["simulated_error_pct"] is not None]
    lines.append(f"all: {len(a)} runs; analytic MAPE {_f(mape(a))} (mean {_f(sum(a) / len(a), True)})"
                 + (f"; simulated MAPE {_f(mape(s))} (mean {_f(sum(s) / len(s), True)})" if s else
                    "; simulated: not run"))
    bad = not_fitting(done)
    if bad["count"]:
        lines.append(f"{bad['count']} runs do not fit as stated (peak/HBM '!': estimated peak "
                     f"above HBM by more than {100 * bad['margin']:.0f} %, "
                     "strategies.reference.stated_fit); the MAPE above includes "
                     f"{bad['in_analytic_mape']} of them")
    skipped = [r for r in rows if r["analytic_step_time_s"] is None]
    if skipped:
        lines.append(f"{len(skipped)} runs skipped (no step time or no resolvable plan; "
                     "`paraplan validate --verbose` says why)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiers", default="1", help="comma-separated tiers, or 'all' (default 1)")
    ap.add_argument("--no-sim", action="store_true", help="analytic only")
    ap.add_argument("--jobs", type=int, default=None, help="simulation processes")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    a = ap.parse_args(argv)
    cases = load_cases(tiers=parse_tiers(a.tiers))
    rows = validate_cases(cases, simulate=not a.no_sim, jobs=a.jobs or default_jobs())
    frameworks = {r["id"]: r.get("framework") or "-" for r in rows}
    print(render(rows, frameworks, a.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
