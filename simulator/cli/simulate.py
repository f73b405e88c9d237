"""``paraplan simulate``: the discrete-event simulation of one plan."""
from __future__ import annotations

import argparse

from simulator.cli.common import (CliError, Once, add_json, add_plan_inputs, check_output, emit_json,
                                  positive_int, resolve_job)
from simulator.cli.estimate import render
from simulator.cli.launch_export import add_export, export_settings
from simulator.network import BACKEND_NAMES
from simulator.output.metrics_json import activation_memory_json, link_utilisation_json
from strategies.memory.scalar import memory_by_origin_json
from topologies.gpus import GIB


def register(sub) -> None:
    p = sub.add_parser("simulate", help="event-by-event simulation of one plan")
    add_plan_inputs(p)
    add_json(p)
    p.add_argument("--trace", metavar="F.json", action=Once,
                   help="write a Chrome trace (opens in Perfetto)")
    p.add_argument("--timeline", metavar="F.png", action=Once,
                   help="write a Gantt chart (.png or .svg)")
    p.add_argument("--timeline-ranks", type=positive_int("--timeline-ranks", 4096), default=None,
                   metavar="N", help="at most N ranks in the timeline (default 64)")
    p.add_argument("--timeline-detail", action=Once, default=None, metavar="ITEMS",
                   help="more in the timeline, comma-separated: memory (activation memory "
                        "panel), links (link utilisation panel), comm (communication lanes)")
    p.add_argument("--full", action="store_true", help="simulate every rank (no symmetry folding)")
    p.add_argument("--granularity", choices=("chunk", "layer"), default="chunk",
                   help="one op per model chunk (default) or per layer")
    p.add_argument("--network", choices=BACKEND_NAMES, default=BACKEND_NAMES[0],
                   help="flows: flows share links max-min fairly (default); contention-free: "
                        "every message and collective moves as if alone on the network")
    add_export(p, "also print the plan's launch settings")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output(args.trace, "--trace", (".json",))
    check_output(args.timeline, "--timeline", (".png", ".svg"))
    detail = timeline_detail(args)
    if args.timeline_ranks is not None and not args.timeline:
        raise CliError("--timeline-ranks", args.timeline_ranks, "needs --timeline F.png")
    job = resolve_job(args)
    exported = export_settings(args, job)   # refused before the simulation, not after it
    from simulator.simulate import simulate, to_json
    res = simulate(job, fold=not args.full, granularity=args.granularity, network=args.network,
                   link_series=True)
    out = to_json(res, job)
    out["memory_by_origin"] = memory_by_origin_json(job)
    out["link_utilisation"] = link_utilisation_json(res)
    out["activation_memory"] = activation_memory_json(res, job)
    if exported is not None:
        out["export"] = exported
    title = f"{job.model.name} {job.plan.short()} on {job.cluster.name}"
    if args.trace:
        from simulator.output.chrome_trace import write_chrome_trace
        write_chrome_trace(res, args.trace, job.cluster.gpus_per_node, title)
    if args.timeline:
        from simulator.output.timeline import draw_timeline
        draw_timeline(res, args.timeline, title=title, max_ranks=args.timeline_ranks or 64,
                      detail=detail)
    if args.json:
        emit_json(out)
    else:
        print(render(out, job, "Simulation"))
        print(render_detail(out))
        for flag, path in (("trace", args.trace), ("timeline", args.timeline)):
            if path:
                print(f"{flag} written to {path}")
        if exported is not None:
            print(f"\n{args.export} launch settings\n{exported['text']}")
    return 0


def timeline_detail(args: argparse.Namespace) -> tuple[str, ...]:
    """``--timeline-detail`` checked: known items, and only with ``--timeline``."""
    if args.timeline_detail is None:
        return ()
    from simulator.output.timeline import check_detail
    if not args.timeline:
        raise CliError("--timeline-detail", args.timeline_detail, "needs --timeline F.png")
    try:
        return check_detail(args.timeline_detail.split(","))
    except ValueError as e:
        raise CliError("--timeline-detail", args.timeline_detail, str(e)) from None


def render_detail(out: dict) -> str:
    """The link classes and each stage's activation peak, in words (``--json`` has it all)."""
    lines = ["", "links by class (utilisation of line rate over the step; peak of the busiest):"]
    if not out["link_utilisation"]["by_kind"]:
        lines.append("  (link load over time is recorded on the flows network backend only)")
    for kind, c in out["link_utilisation"]["by_kind"].items():
        top = c["busiest"][0] if c["busiest"] else None
        lines.append(f"  {kind:<7} {c['links']:>5} links  mean {100 * c['mean_utilisation']:5.1f}%"
                     f"  peak {100 * c['peak_utilisation']:5.1f}%"
                     + (f"  busiest {top['link']}" if top else ""))
    lines.append("activation memory peak per simulated rank (GiB, at s):")
    seen = set()
    for r in out["activation_memory"]:
        if r["stage"] in seen:
            continue
        seen.add(r["stage"])
        lines.append(f"  rank {r['rank']:>5} (stage {r['stage']}): {r['peak_bytes'] / GIB:.2f} GiB"
                     f" at {r['peak_at_s']:.4g} s")
    return "\n".join(lines)
