"""``paraplan compare``: one plan under several pipeline schedules, side by side.

The plan of ``--plan`` (its own schedule and vpp are overridden) is simulated once per item
of ``--schedules``; the table gives step time, bubble, peak memory and point-to-point
traffic. A schedule that does not fit the job (e.g. interleaving with a micro-batch count
that is not a multiple of pp) is reported on its own row with the rule, and the others are
still compared; the exit status is 2 only when no schedule fits. ``--timeline F.png`` draws
one panel per schedule on a shared time axis; ``--sweep F.png`` plots the bubble against the
micro-batch count (``--sweep-microbatches``) with the closed forms.
"""
from __future__ import annotations

import argparse

from simulator.cli.common import (CliError, Once, add_json, add_plan_inputs,
                                  check_distinct_outputs, emit_json, fmt_s, positive_int,
                                  resolve_job, resolve_plan_fills, table)
from simulator.cli.common import check_output
from simulator.cli.estimate import default_lines
from strategies.errors import SpecError
from topologies.limits import parse_int_text
from simulator.studies.compare_schedules import (DEFAULT_SCHEDULES, bubble_sweep, check_pipelined,
                                        compare, default_sweep_microbatches, draw_sweep,
                                        parse_schedules, schedules_rule, sweep_agreement)


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="one plan under several pipeline schedules",
        description="Simulate one plan under several pipeline schedules (the plan's own "
                    "schedule and vpp are replaced) and compare step time, bubble, peak memory "
                    "and point-to-point traffic. A schedule that does not fit the job is "
                    "reported on its own row with the rule (JSON: valid=false, error); the "
                    "exit status is 2 only when no schedule fits.")
    add_plan_inputs(p)
    p.add_argument("--schedules", default=DEFAULT_SCHEDULES, action=Once,
                   help=f"comma-separated; {schedules_rule()} (default {DEFAULT_SCHEDULES})")
    p.add_argument("--timeline", metavar="F.png", action=Once,
                   help="write the timelines, one panel per schedule (.png or .svg)")
    p.add_argument("--timeline-ranks", type=positive_int("--timeline-ranks", 4096), default=None,
                   metavar="N", help="at most N ranks per panel (default 16)")
    p.add_argument("--sweep", metavar="F.png", action=Once,
                   help="write the bubble sweep over micro-batch counts (.png or .svg)")
    p.add_argument("--sweep-microbatches", metavar="M,M,...", default=None, action=Once,
                   help="micro-batch counts of the sweep (default pp,2pp,4pp,8pp)")
    p.add_argument("--full", action="store_true", help="simulate every rank (no folding)")
    add_json(p)
    p.set_defaults(func=run)


def parse_counts(text: str | None, pp: int) -> list[int]:
    """The sweep's micro-batch counts: comma-separated ASCII integers in 1..4096 (sorted,
    duplicates merged), or the default ``pp, 2pp, 4pp, 8pp``."""
    if text is None:
        return default_sweep_microbatches(pp)
    try:
        counts = sorted({parse_int_text("--sweep-microbatches", t) for t in text.split(",")
                         if t.strip()})
    except SpecError:
        raise CliError("--sweep-microbatches", text, "must be comma-separated integers") from None
    if not counts or counts[0] < 1 or counts[-1] > 4096:
        raise CliError("--sweep-microbatches", text, "must name counts between 1 and 4096")
    return counts


def run(args: argparse.Namespace) -> int:
    check_distinct_outputs(("--timeline", args.timeline), ("--sweep", args.sweep))
    check_output(args.timeline, "--timeline", (".png", ".svg"))
    check_output(args.sweep, "--sweep", (".png", ".svg"))
    choices = parse_schedules(args.schedules)
    if args.timeline_ranks is not None and not args.timeline:
        raise CliError("--timeline-ranks", args.timeline_ranks, "needs --timeline F.png")
    plan, fw, fills = resolve_plan_fills(args)
    fills = tuple(f for f in fills if f.field != "schedule")    # compare sets the schedule
    check_pipelined(plan)
    if args.sweep_microbatches is not None and not args.sweep:
        raise CliError("--sweep-microbatches", args.sweep_microbatches,
                       "sets the counts of --sweep F.png: give --sweep too")
    counts = parse_counts(args.sweep_microbatches, plan.pp) if args.sweep else None
    # The plan's own schedule is replaced; resolve the job as 1F1B (always valid) first.
    base = resolve_job(args, plan=plan_1f1b(plan, fw), framework=fw, fills=fills)
    group = plan.microbatch_group_size
    rows, results = compare(base, choices, fold=not args.full, group_size=group)
    out = {"inputs": base.to_dict(), "schedules": [c.label for c in choices], "rows": rows}
    if args.sweep:
        points = bubble_sweep(base, choices, counts, group_size=group)
        out["sweep"] = {"microbatches": counts, "points": points,
                        "agreement": sweep_agreement(points)}
        p = base.plan
        draw_sweep(points, args.sweep, p.pp, title=f"pipeline bubble: {base.model.name} on "
                   f"{base.cluster.name}, tp{p.tp} pp{p.pp} dp{p.dp}, mbs {p.mbs}")
    if args.timeline and results:
        from simulator.output.timeline import draw_comparison
        draw_comparison(results, args.timeline, title=_title(base),
                        max_ranks=args.timeline_ranks or 16)
    if args.json:
        emit_json(out)
    else:
        print(render(out, base))
        for flag, path in (("timelines", args.timeline), ("bubble sweep", args.sweep)):
            if path and (results or flag != "timelines"):
                print(f"{flag} written to {path}")
    if not results:
        raise CliError("--schedules", args.schedules,
                       "no schedule fits this job: " + "; ".join(r["error"] for r in rows))
    return 0


def plan_1f1b(plan, fw=None):
    """``plan`` under the default schedule (1F1B), which every pipelined job accepts, or under
    the first schedule of a named stack ``fw`` that runs no 1F1B (MaxText: GPipe)."""
    from dataclasses import replace
    from strategies.schedules import DEFAULT_SCHEDULE
    sched = DEFAULT_SCHEDULE if fw is None else fw.runnable_schedule(DEFAULT_SCHEDULE)
    return replace(plan, schedule=sched, vpp=1, microbatch_group_size=None)


def _title(job) -> str:
    p = job.plan
    return (f"{job.model.name} on {job.cluster.name}: tp{p.tp} pp{p.pp} dp{p.dp}, "
            f"{job.num_microbatches} micro-batches of {p.mbs} per pipeline")


def render(out: dict, job) -> str:
    p = job.plan
    lines = [f"{job.model.name} on {job.cluster.name} ({job.cluster.describe_gpus()}): "
             f"tp{p.tp} pp{p.pp} dp{p.dp}, gbs {p.gbs}, "
             f"{job.num_microbatches} micro-batches per pipeline", *default_lines(job), ""]
    body = [[r["schedule"], fmt_s(r["step_time_s"]), fmt_s(r["analytic_step_time_s"]),
             f"{100 * r['bubble_fraction']:.1f} %",
             f"{r['bubble_over_ideal']:.3f} / {r['bubble_closed_form']:.3f}",
             f"{r['memory']['peak_gib']:.1f}" + ("" if r["fits"] else " (!)"),
             f"{r['p2p']['per_gpu_bytes'] / 2**30:.2f}", f"{r['p2p']['total_bytes'] / 2**30:.1f}"]
            for r in out["rows"] if r["valid"]]
    if body:
        lines.append(table(["schedule", "step (sim)", "analytic", "bubble",
                            "bubble/ideal sim/closed", "peak GiB", "p2p GiB/GPU", "p2p GiB total"],
                           body, align="lrrrrrrr"))
        lines.append("bubble: idle over the step, busiest stage (as estimate's); bubble/ideal: that stage, "
                     "simulated / the schedule's closed form ((pp-1)/(vpp*m); split backward: with W's "
                     "share); (!) over the GPU's memory")
    lines += [f"{r['schedule']}: invalid here: {r['error']}" for r in out["rows"] if not r["valid"]]
    if "sweep" in out:
        lines += ["", "bubble / ideal time against micro-batches (simulated, free comm, closed form)"]
        pts = out["sweep"]["points"]
        lines.append(table(["schedule", "m", "simulated", "free comm", "closed form"],
                           [[q["schedule"], q["num_microbatches"], f"{q['simulated']:.4f}",
                             f"{q.get('simulated_free_comm', 0):.4f}", f"{q['closed_form']:.4f}"]
                            for q in pts if "error" not in q], align="lrrrr"))
        lines += [f"{q['schedule']} m={q['num_microbatches']}: invalid here: {q['error']}"
                  for q in pts if "error" in q]
    return "\n".join(lines)
