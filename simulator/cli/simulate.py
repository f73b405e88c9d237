"""``paraplan simulate``: the discrete-event simulation of one plan."""
from __future__ import annotations

import argparse

from simulator.cli.common import (Once, add_json, add_plan_inputs, check_output, emit_json,
                                  positive_int, resolve_job)
from simulator.cli.estimate import render
from simulator.network import BACKEND_NAMES
from strategies.memory.scalar import memory_by_origin_json


def register(sub) -> None:
    p = sub.add_parser("simulate", help="event-by-event simulation of one plan")
    add_plan_inputs(p)
    add_json(p)
    p.add_argument("--trace", metavar="F.json", action=Once,
                   help="write a Chrome trace (opens in Perfetto)")
    p.add_argument("--timeline", metavar="F.png", action=Once,
                   help="write a Gantt chart (.png or .svg)")
    p.add_argument("--timeline-ranks", type=positive_int("--timeline-ranks", 4096), default=64,
                   metavar="N", help="at most N ranks in the timeline (default 64)")
    p.add_argument("--full", action="store_true", help="simulate every rank (no symmetry folding)")
    p.add_argument("--granularity", choices=("chunk", "layer"), default="chunk",
                   help="one op per model chunk (default) or per layer")
    p.add_argument("--network", choices=BACKEND_NAMES, default=BACKEND_NAMES[0],
                   help="flows: flows share links max-min fairly (default); contention-free: "
                        "every message and collective moves as if alone on the network")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output(args.trace, "--trace", (".json",))
    check_output(args.timeline, "--timeline", (".png", ".svg"))
    job = resolve_job(args)
    from simulator.simulate import simulate, to_json
    res = simulate(job, fold=not args.full, granularity=args.granularity, network=args.network)
    out = to_json(res, job)
    out["memory_by_origin"] = memory_by_origin_json(job)
    title = f"{job.model.name} {job.plan.short()} on {job.cluster.name}"
    if args.trace:
        from simulator.output.chrome_trace import write_chrome_trace
        write_chrome_trace(res, args.trace, job.cluster.gpus_per_node, title)
    if args.timeline:
        from simulator.output.timeline import draw_timeline
        draw_timeline(res, args.timeline, title=title, max_ranks=args.timeline_ranks)
    if args.json:
        emit_json(out)
    else:
        print(render(out, job, "Simulation"))
        for flag, path in (("trace", args.trace), ("timeline", args.timeline)):
            if path:
                print(f"{flag} written to {path}")
    return 0
