"""``paraplan simulate``: the discrete-event simulation of one plan."""
from __future__ import annotations

import argparse

from simulator.cli_io import (CliError, Once, add_json, add_plan_inputs, check_output, emit_json,
                              positive_int, resolve_job)
from simulator.cmd_estimate import render
from strategies.memory import memory_by_origin_json


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
    p.set_defaults(func=run)


def _check_out(path: str | None, flag: str, exts: tuple[str, ...]) -> None:
    """Refuse an output path before simulating, not after (``cli_io.check_output``)."""
    check_output(path, flag, exts)


def check_simulable(job) -> None:
    """A job the simulator can run in reasonable time and memory: at most
    ``MAX_SIM_MICROBATCHES`` virtual micro-batches per pipeline rank."""
    from topologies.limits import MAX_SIM_MICROBATCHES
    v = job.num_microbatches * job.plan.vpp
    if v > MAX_SIM_MICROBATCHES:
        raise CliError("num_microbatches", job.num_microbatches,
                       f"times vpp={job.plan.vpp} is {v:,} steps per pipeline rank; the simulator "
                       f"takes at most {MAX_SIM_MICROBATCHES:,} (use estimate, or a larger mbs or dp)")


def run(args: argparse.Namespace) -> int:
    _check_out(args.trace, "--trace", (".json",))
    _check_out(args.timeline, "--timeline", (".png", ".svg"))
    job = resolve_job(args)
    check_simulable(job)
    from simulator.simulate import simulate, to_json
    res = simulate(job, fold=not args.full, granularity=args.granularity)
    out = to_json(res, job)
    out["memory_by_origin"] = memory_by_origin_json(job)
    title = f"{job.model.name} {job.plan.short()} on {job.cluster.name}"
    if args.trace:
        from simulator.trace import write_chrome_trace
        write_chrome_trace(res, args.trace, job.cluster.gpus_per_node, title)
    if args.timeline:
        from simulator.timeline import draw_timeline
        draw_timeline(res, args.timeline, title=title, max_ranks=args.timeline_ranks)
    if args.json:
        emit_json(out)
    else:
        print(render(out, job, "Simulation"))
        for flag, path in (("trace", args.trace), ("timeline", args.timeline)):
            if path:
                print(f"{flag} written to {path}")
    return 0
