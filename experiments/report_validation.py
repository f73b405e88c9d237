"""Report: published runs, measured vs analytic vs simulated (docs/reports/validation.md).

Runs ``paraplan validate --json --plot …`` and writes ``validation.md``, ``validation.png``
(the parity plot) and ``validation.json`` (the command's JSON) into ``--out``.

    python experiments/report_validation.py                  # docs/reports/
    python experiments/report_validation.py --reference my_runs.json --out /tmp/r

It also evaluates the held-out references (``--also``), analytically and simulated, as
``paraplan validate --reference FILE --jobs N`` does (``--no-held-out-sim``: analytic only, as
``--no-sim``), and tabulates them per model and per GPU:
the 2025-26 MoE and rack-scale runs issue 14 and 18 are judged on, and the frontier-scale
papers' runs (NVIDIA's NeMo 24.07 performance summary; Llama 3 405B on 8-16K H100,
MegaScale's Megatron-LM baseline on 256-12,288 A100, docs/calibration.md §5.16).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost.system import DEFAULT_SYSTEM                               # noqa: E402
from strategies.reference.cases import held_out_file_names                      # noqa: E402
from experiments._report import (DEFAULT_OUT, ReportWriter, fmt, header, md_table,  # noqa: E402
                                 paraplan, rel, this_command)

NAME = "validation"
DATA = os.path.join("strategies", "reference", "data")
# every reference file but published.json, in name order (paths relative to the repository)
ALSO = tuple(os.path.join(DATA, n) for n in held_out_file_names(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), DATA)))


def paraplan_args(a: argparse.Namespace, plot: str, jobs: bool = True) -> list[str]:
    args = ["validate", "--plot", plot, "--tiers", a.tiers]
    if a.reference:
        args += ["--reference", a.reference]
    if a.no_sim:
        args.append("--no-sim")
    if a.jobs and jobs:
        args += ["--jobs", str(a.jobs)]
    return args


def render(out: dict[str, Any], command: str, validate_cmd: str) -> str:
    an, si = out["analytic"], out["simulated"]
    rows = [r for r in out["cases"] if r["plan"] is not None]
    skipped = [r for r in out["cases"] if r["plan"] is None]
    parts = [header("Validation: published training runs", command),
             f"The numbers below are the output of `{validate_cmd}` "
             f"(reference: `{out['reference']}`, tiers {out['tiers']}). Each run's measured "
             "seconds per step is compared with the analytic estimate (`paraplan estimate`) "
             "and the event-by-event simulation (`paraplan simulate`, folded). Errors are "
             "signed: negative means the model predicts a faster step than was measured.",
             "",
             md_table(["model", "runs", "MAPE", "mean signed error", "worst abs. error"],
                      [[name, part["cases"], fmt(part["mape_pct"], 2, " %"),
                        fmt(part["mean_error_pct"], 2, " %"),
                        fmt(part["max_abs_error_pct"], 1, " %")]
                       for name, part in (("analytic", an), ("simulated", si))]),
             "",
             f"![parity plot]({NAME}.png)",
             "",
             "## Runs",
             "",
             md_table(["run", "plan", "GPUs", "measured s", "analytic s", "error",
                       "simulated s", "error", "simulation"],
                      [[r["id"], r["plan"], r["gpus"], fmt(r["measured_step_s"], 3),
                        fmt(r["analytic_step_time_s"], 3), fmt(r["analytic_error_pct"], 1, " %"),
                        fmt(r["simulated_step_time_s"], 3),
                        fmt(r["simulated_error_pct"], 1, " %"), r["sim_method"] or "-"]
                       for r in rows], align="llrrrrrrl"),
             "",
             "\"extended from m=g and m=2g\": the simulated step of a 1F1B or interleaved "
             "pipeline is affine in the number of micro-batches past one period, so it is "
             "simulated on g and 2g micro-batches and extended (exact to rounding; "
             "`paraplan validate --exact` simulates every micro-batch).",
             "",
             "## Assumptions per run",
             "",
             "Values the sources do not state are filled by the stated assumptions of "
             "`strategies/reference/cases.py`:",
             ""]
    parts += [f"- `{r['id']}` ({r['how_measured']}): " + "; ".join(r["assumptions"])
              for r in rows]
    parts += ["", f"## Skipped ({len(skipped)})", ""]
    parts += [f"- `{r['id']}`: {r['skipped']}" for r in skipped] or ["none"]
    parts += ["", f"Wall time of the command: {out['wall_s']:.1f} s."]
    return "\n".join(parts)


def _mape(rows: list[dict[str, Any]], key: str = "analytic_error_pct") -> list[Any]:
    """Runs, MAPE, mean signed and worst error of ``key`` over ``rows`` ("-" where none)."""
    signed = [r[key] for r in rows if r[key] is not None]
    if not signed:
        return [0, "-", "-", "-"]
    errs = [abs(e) for e in signed]
    return [len(signed), fmt(sum(errs) / len(errs), 1, " %"),
            fmt(sum(signed) / len(signed), 1, " %"), fmt(max(errs), 1, " %")]


def _summary(name: str, part: dict[str, Any]) -> str:
    if not part["cases"]:
        return f"{name}: not run"
    return (f"{name} {part['cases']} runs: MAPE {fmt(part['mape_pct'], 2, ' %')}, mean signed "
            f"{fmt(part['mean_error_pct'], 2, ' %')}, worst {fmt(part['max_abs_error_pct'], 1, ' %')}")


def render_stacks(out: dict[str, Any], also: list[dict[str, Any]]) -> str:
    """MAPE per software stack (``paraplan validate``'s ``frameworks``): the shipped
    reference's every tier, then the held-out files together (analytic; each run under the
    stack its source names, ``--framework``)."""
    held: dict[str, list[float]] = {}
    for o in also:
        for r in o["cases"]:
            if r.get("framework") and r["analytic_error_pct"] is not None:
                held.setdefault(r["framework"], []).append(r["analytic_error_pct"])

    def cells(errs: list[float]) -> list[Any]:
        if not errs:
            return [0, "-", "-", "-"]
        a = [abs(e) for e in errs]
        return [len(errs), fmt(sum(a) / len(a), 1, " %"), fmt(sum(errs) / len(errs), 1, " %"),
                fmt(max(a), 1, " %")]
    names = sorted(set(out["frameworks"]) | set(held))
    rows = []
    for n in names:
        s = out["frameworks"].get(n, {}).get("analytic")
        pub = ([s["cases"], fmt(s["mape_pct"], 1, " %"), fmt(s["mean_error_pct"], 1, " %"),
                fmt(s["max_abs_error_pct"], 1, " %")] if s and s["cases"] else [0, "-", "-", "-"])
        rows.append([f"`{n}`", *pub, *cells(held.get(n, []))])
    return "\n".join(["", "## Per software stack (analytic)", "",
                      f"`paraplan validate --tiers all --no-sim` on `{out['reference']}` "
                      "(every tier) and the held-out references below, per framework profile "
                      "(`--framework`: the stack each run's source names). Signed errors: "
                      "negative means predicted faster than measured.", "",
                      md_table(["framework", "published runs", "MAPE", "mean", "worst",
                                "held-out runs", "MAPE", "mean", "worst"], rows), ""])


def render_also(outs: list[dict[str, Any]], simulated: bool = True) -> str:
    """The held-out references: MAPE per model and per cluster (analytic, and simulated when
    ``simulated``), then every run."""
    how = ("`paraplan validate --reference FILE --jobs N`: analytic and simulated"
           if simulated else "`paraplan validate --reference FILE --no-sim`: analytic only")
    parts = ["", "## Held-out references (" + ("analytic and simulated" if simulated
                                                else "analytic") + ")", "",
             "MoE models, the B200/B300/GB200/GB300 generation, NVIDIA's NeMo 24.07 "
             "performance summary, DGX Cloud benchmarking's 2025 recipes, frontier-scale "
             "papers' runs (Llama 3, MegaScale) and classic ones (MT-NLG, GLM-130B, "
             f"BloombergGPT), all held out, evaluated as {how}. Same columns as above; "
             "negative means predicted faster than measured.", ""]
    if simulated:
        parts += ["A run the simulator cannot run says why in the simulation column "
                  "(\"not simulated: ...\"); it has an analytic error only and is left out "
                  "of the simulated MAPE.", ""]
    for out in outs:
        rows = [r for r in out["cases"] if r["plan"] is not None]
        skipped = [r for r in out["cases"] if r["plan"] is None]
        parts += [f"### `{out['reference']}`", "", _summary("Analytic", out["analytic"]) + "."]
        if simulated:
            parts += ["", _summary("Simulated", out["simulated"]) + "."]
        parts.append("")
        for key, title in (("model", "model"), ("cluster", "cluster")):
            groups: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                groups.setdefault(str(r[key]), []).append(r)
            heads = [title, "runs", "MAPE", "mean signed", "worst"]
            if simulated:
                heads = [title, "runs", "analytic MAPE", "mean signed", "worst",
                         "simulated runs", "simulated MAPE", "mean signed", "worst"]
            parts += [md_table(heads, [[k, *_mape(v)] + (_mape(v, "simulated_error_pct")
                                                         if simulated else [])
                                       for k, v in sorted(groups.items())]), ""]
        if simulated:
            parts += [md_table(["run", "plan", "GPUs", "dtype", "measured s", "analytic s",
                                "error", "simulated s", "error", "simulation"],
                               [[r["id"], r["plan"], r["gpus"], r["dtype"],
                                 fmt(r["measured_step_s"], 3), fmt(r["analytic_step_time_s"], 3),
                                 fmt(r["analytic_error_pct"], 1, " %"),
                                 fmt(r["simulated_step_time_s"], 3),
                                 fmt(r["simulated_error_pct"], 1, " %"), r["sim_method"] or "-"]
                                for r in rows], align="llrlrrrrrl"), ""]
        else:
            parts += [md_table(["run", "plan", "GPUs", "dtype", "measured s", "analytic s",
                                "error"],
                               [[r["id"], r["plan"], r["gpus"], r["dtype"],
                                 fmt(r["measured_step_s"], 3), fmt(r["analytic_step_time_s"], 3),
                                 fmt(r["analytic_error_pct"], 1, " %")] for r in rows],
                               align="llrlrrr"), ""]
        parts += [f"Skipped ({len(skipped)}): "
                  + ("; ".join(f"`{r['id']}`: {r['skipped']}" for r in skipped) or "none"), ""]
    return "\n".join(parts)


def render_memory(outs: list[dict[str, Any]]) -> str:
    """Peak memory per GPU of every run that prints one (``paraplan validate``'s
    ``measured_memory_gib``, ``estimated_memory_gib``: the estimate's peak stage,
    ``memory_error_pct``), per reference file, with each file's memory MAPE; "" where no run
    prints one (docs/calibration.md §5.74)."""
    parts: list[str] = []
    for out in outs:
        rows = [r for r in out["cases"] if r["plan"] is not None
                and r.get("memory_error_pct") is not None]
        if not rows:
            continue
        parts += [f"### `{out['reference']}`", "",
                  _summary("Memory", out.get("memory") or {"cases": 0}) + ".", "",
                  md_table(["run", "plan", "measured GiB", "estimated GiB", "error", "torch.compile"],
                           [[r["id"], r["plan"], fmt(r["measured_memory_gib"], 1),
                             fmt(r["estimated_memory_gib"], 1),
                             fmt(r["memory_error_pct"], 1, " %"),
                             "yes" if "torch.compile run" in (r["memory_how_measured"] or "")
                             else "no"] for r in rows], align="llrrrl"), ""]
    if not parts:
        return ""
    return "\n".join(["", "## Peak memory per GPU", "",
                      "Runs whose source prints a peak memory per GPU, against the estimate's "
                      "peak stage (`memory.peak_gib`: the tensors plus the model's allowances, "
                      f"{DEFAULT_SYSTEM.fixed_other_bytes / 2 ** 30:g} GiB fixed and "
                      f"{DEFAULT_SYSTEM.fragmentation:.0%} of the activations for "
                      "fragmentation, `SystemConfig`). What each "
                      "figure measures (`paraplan validate --verbose`): torchtitan logs the "
                      "caching allocator's max reserved bytes; BigScience's BLOOM prequel "
                      "figures are taken as nvidia-smi's used memory, in GiB. The reserve "
                      "above the allocations is not modelled beyond those allowances. "
                      "torch.compile runs: the model's layers save what eager autograd saves.",
                      "", *parts])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="folder (default docs/reports)")
    ap.add_argument("--reference", default=None, help="reference file (default: the shipped one)")
    ap.add_argument("--tiers", default="1")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--also", nargs="*", default=list(ALSO),
                    help="further reference files (default: the held-out ones)")
    ap.add_argument("--held-out-sim", action=argparse.BooleanOptionalAction, default=True,
                    help="simulate the --also files too (default on; --no-held-out-sim: "
                         "analytic only, seconds instead of minutes; --no-sim implies it)")
    a = ap.parse_args(argv)
    held_out_sim = a.held_out_sim and not a.no_sim
    argv = list(sys.argv[1:] if argv is None else argv)
    with ReportWriter(a.out) as w:
        out = paraplan(paraplan_args(a, w.path(f"{NAME}.png")))
        shown = ["paraplan", *paraplan_args(a, rel(os.path.join(a.out, f"{NAME}.png")), False)]
        also = [paraplan(["validate", "--reference", f,
                          *((["--jobs", str(a.jobs)] if a.jobs else []) if held_out_sim
                            else ["--no-sim"])]) for f in a.also]
        stacks = paraplan(["validate", "--tiers", "all", "--no-sim",
                           *(["--reference", a.reference] if a.reference else [])])
        w.json(f"{NAME}.json", {**out, "also": also, "stacks_all_tiers": stacks["frameworks"]})
        w.text(f"{NAME}.md", render(out, this_command("report_validation.py", argv),
                                    " ".join(shown)) + render_stacks(stacks, also)
               + render_also(also, held_out_sim)
               + render_memory([out, *also]))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
