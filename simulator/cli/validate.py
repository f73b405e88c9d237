"""``paraplan validate``: the published runs through ``estimate`` and ``simulate``.

Each case of the reference file (``strategies/reference/data/published.json`` by default, tier 1) is
estimated and simulated (folded; long pipelines extended exactly from two short runs, see
``simulator.studies.validate``); the command prints measured, analytic and simulated seconds per
step with their errors, and the MAPE of each model; the peak/HBM column marks (``!``) a run whose
stated plan does not fit its GPUs' memory (``strategies.reference.stated_fit``). ``--plot F.png``
draws the parity plot.
"""
from __future__ import annotations

import argparse
import sys
import time

from simulator.workers import MAX_WORKERS
from simulator.cli.common import CliError, Once, add_json, emit_json, positive_int, table
from simulator.studies.validate import default_jobs, draw_parity, load_cases, summarize, validate_cases
from strategies.reference.cases import load_reference
from strategies.errors import SpecError
from topologies.limits import parse_int_text


def register(sub) -> None:
    p = sub.add_parser(
        "validate", help="published runs: measured vs analytic vs simulated",
        description="Run the published training runs through estimate and simulate (folded) "
                    "and compare with the measured step times: each run's errors and the MAPE "
                    "of each model. 1F1B and interleaved pipelines with many micro-batches are "
                    "simulated on g and 2g micro-batches (g: pp or the group size) and "
                    "extended, which is exact because the step is affine in the micro-batch "
                    "count past one period; --exact simulates them in full.")
    p.add_argument("--reference", metavar="FILE", default=None, action=Once,
                   help="a reference file in the format of strategies/reference/data/published.json "
                        "(default: the one that ships)")
    p.add_argument("--tiers", default=None, action=Once,
                   help="comma-separated tiers to run, or 'all' (default: 1 for the shipped "
                        "reference, all for a --reference file)")
    p.add_argument("--plot", metavar="F.png", default=None, action=Once,
                   help="write the parity plot (.png or .svg)")
    p.add_argument("--no-sim", action="store_true", help="analytic only (a second, not minutes)")
    p.add_argument("--exact", action="store_true",
                   help="simulate every micro-batch (no extension from two short runs)")
    p.add_argument("--jobs", type=positive_int("--jobs", MAX_WORKERS), default=None, metavar="N",
                   help="simulate on N local processes (default: the CPU count, at most 8)")
    p.add_argument("--verbose", action="store_true",
                   help="list skipped cases and each case's assumptions")
    add_json(p)
    p.set_defaults(func=run)


def parse_tiers(text: str) -> tuple[int, ...] | None:
    """``"1,2"`` → ``(1, 2)``; ``"all"`` → None (every tier)."""
    if text.strip().lower() == "all":
        return None
    items = text.split(",")
    try:
        tiers = [parse_int_text("--tiers", t) for t in items]
    except SpecError:
        raise CliError("--tiers", text, "must be comma-separated integers (1,2) or 'all'") from None
    if min(tiers) < 1:
        raise CliError("--tiers", text, "must name tiers >= 1")
    if len(set(tiers)) != len(tiers):
        raise CliError("--tiers", text, "a tier is given twice")
    return tuple(sorted(tiers))


def run(args: argparse.Namespace) -> int:
    if args.plot:
        from simulator.cli.common import check_output
        check_output(args.plot, "--plot", (".png", ".svg"))
    if args.tiers is None:
        args.tiers = "1" if args.reference is None else "all"
    tiers = parse_tiers(args.tiers)
    t0 = time.perf_counter()
    cases = load_cases(args.reference, tiers)
    if not cases and args.reference is not None and not load_reference(args.reference):
        raise CliError("--reference", args.reference, "holds no case (an empty list): give a "
                       "list of cases in the format of strategies/reference/data/published.json")
    if not cases:
        raise CliError("--tiers", args.tiers, f"no case of {args.reference or 'the shipped reference'} "
                       "is in these tiers")
    simulate = not args.no_sim
    progress = None
    if not args.json and simulate and sys.stderr.isatty():
        def progress(i: int, row: dict) -> None:
            print(f"\r  {i + 1}/{len(cases)} {row['id'][:50]:<50}", end="", file=sys.stderr,
                  flush=True)
    rows = validate_cases(cases, simulate=simulate, exact=args.exact,
                          jobs=args.jobs or default_jobs(), on_row=progress)
    if progress:
        print("\r" + " " * 60 + "\r", end="", file=sys.stderr)
    out = summarize(rows, simulate)
    out = {"reference": args.reference or "strategies/reference/data/published.json",
           "tiers": list(tiers) if tiers else "all", **out,
           "wall_s": time.perf_counter() - t0}
    if args.plot:
        draw_parity(out, args.plot, title=_plot_title(out))
    if args.json:
        emit_json(out)
    else:
        print(render(out, args.verbose))
        if args.plot:
            print(f"parity plot written to {args.plot}")
    return 0


def _plot_title(out: dict) -> str:
    return (f"{out['evaluated']} published runs (tiers "
            f"{','.join(map(str, out['tiers'])) if isinstance(out['tiers'], list) else 'all'})")


def _err(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} %"


def _sec(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _fit(r: dict) -> str:
    """The fullest stage's estimated peak over its HBM, ``!`` where it does not fit as stated."""
    if r.get("memory_to_hbm") is None:
        return "-"
    return f"{r['memory_to_hbm']:.2f}" + (" !" if r["fits_as_stated"] is False else "")


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def render(out: dict, verbose: bool = False) -> str:
    rows = [r for r in out["cases"] if r["plan"] is not None]
    memory = any(r.get("measured_memory_gib") is not None for r in rows)
    head = ["case", "plan", "GPUs", "measured", "analytic", "error", "simulated", "error",
            "peak/HBM"]
    if memory:      # GiB per GPU, shown only where some run prints its peak
        head += ["mem meas", "mem est", "error"]

    def cells(r: dict) -> list:
        c = [r["id"], r["plan"], r["gpus"], _sec(r["measured_step_s"]),
             _sec(r["analytic_step_time_s"]), _err(r["analytic_error_pct"]),
             _sec(r["simulated_step_time_s"]), _err(r["simulated_error_pct"]), _fit(r)]
        if memory:
            measured = r.get("measured_memory_gib")
            c += [_gib(measured), _gib(r.get("estimated_memory_gib") if measured else None),
                  _err(r.get("memory_error_pct"))]
        return c
    lines = [f"Published runs ({out['reference']}, tiers {out['tiers']}): seconds per step"
             + ("; peak memory per GPU, GiB" if memory else ""),
             table(head, [cells(r) for r in rows], align="llr" + "r" * (len(head) - 3)),
             ""]
    for name in ("analytic", "simulated"):
        part = out[name]
        if part["mape_pct"] is None:
            lines.append(f"{name:<9}  MAPE -  (not run)" if name == "simulated" else
                         f"{name:<9}  MAPE -")
            continue
        lines.append(f"{name:<9}  MAPE {part['mape_pct']:.2f} % over {part['cases']} runs "
                     f"(mean signed {part['mean_error_pct']:+.2f} %, worst "
                     f"{part['max_abs_error_pct']:.1f} %)")
    stacks = out.get("frameworks") or {}
    if len(stacks) > 1:
        lines.append("")
        lines.append("per software stack (--framework), signed errors:")
        lines.append(table(["framework", "runs", "analytic MAPE", "mean", "worst",
                            "simulated MAPE", "mean", "worst"],
                           [[name, s["analytic"]["cases"], _pct(s["analytic"]["mape_pct"]),
                             _err(s["analytic"]["mean_error_pct"]),
                             _pct(s["analytic"]["max_abs_error_pct"]),
                             _pct(s["simulated"]["mape_pct"]),
                             _err(s["simulated"]["mean_error_pct"]),
                             _pct(s["simulated"]["max_abs_error_pct"])]
                            for name, s in stacks.items()], align="lr" + "r" * 6))
        lines.append("")
    bad = out.get("does_not_fit") or {}
    if bad.get("count"):
        lines.append(f"{bad['count']} runs do not fit as stated (peak/HBM marked '!': the "
                     f"estimated peak stage exceeds its GPUs' memory by more than "
                     f"{100 * bad['margin']:.0f} %, the memory model's error band); the "
                     f"analytic MAPE includes {bad['in_analytic_mape']} of them, the simulated "
                     f"{bad['in_simulated_mape']}")
    part = out.get("memory") or {}
    if part.get("mape_pct") is not None:
        lines.append(f"{'memory':<9}  MAPE {part['mape_pct']:.2f} % over {part['cases']} runs "
                     f"that print a peak (mean signed {part['mean_error_pct']:+.2f} %, worst "
                     f"{part['max_abs_error_pct']:.1f} %; the model's peak stage against the "
                     "printed peak, --verbose says what each measures)")
    lines.append(f"{out['skipped']} cases skipped; {out['wall_s']:.1f} s"
                 + ("" if verbose else " (--verbose lists them and every assumption)"))
    if verbose:
        for r in out["cases"]:
            if r["plan"] is None:
                lines.append(f"  skipped {r['id']}: {r['skipped']}")
            else:
                sim = f"; simulation {r['sim_method']}" if r["sim_method"] else ""
                mem = (f"; memory {r['memory_how_measured']}" if r.get("memory_how_measured")
                       else "")
                lines.append(f"  {r['id']}: {r['how_measured']}{sim}{mem}; "
                             + "; ".join(r["assumptions"]))
    return "\n".join(lines)
