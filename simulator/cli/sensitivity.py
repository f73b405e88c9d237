"""``paraplan sensitivity``: which single slow GPU or link hurts this plan most
(``simulator.studies.sensitivity``; docs/faults.md)."""
from __future__ import annotations

import argparse

from simulator.cli.common import (Once, add_json, add_plan_inputs, emit_json, fmt_s,
                                  positive_int, resolve_job, table)
from simulator.studies.sensitivity import sensitivity


def _factor(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text[:60]!r}: must be a number") \
            from None


def register(sub) -> None:
    p = sub.add_parser("sensitivity", help="which single slow GPU or link hurts a plan most",
                       description="Simulate the plan with one straggler, one slow NVLink and "
                       "one slow NIC per symmetry class of GPUs, and rank the faults.")
    add_plan_inputs(p)
    p.add_argument("--factor", action=Once, type=_factor, default=1.5, metavar="F",
                   help="straggler slowdown, >= 1 (default 1.5)")
    p.add_argument("--link-factor", action=Once, type=_factor, default=4.0, metavar="F",
                   help="link slowdown (1/F of the bandwidth), >= 1 (default 4)")
    p.add_argument("--rows", action=Once, type=positive_int("--rows"), default=10, metavar="N",
                   help="rows in the table, worst first (default 10; --json gives all)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    job = resolve_job(args)
    rep = sensitivity(job, args.factor, args.link_factor)
    if args.json:
        emit_json({**rep, "inputs": job.to_dict()})
        return 0
    cl = job.cluster
    print(f"Sensitivity: {job.model.name} on {cl.name} ({cl.describe_gpus()}), plan "
          f"{job.plan.short()}: healthy step {fmt_s(rep['healthy_step_time_s'])}; "
          f"{rep['classes']} classes of equivalent GPUs, {len(rep['rows'])} faults simulated\n")
    print(table(["fault", "GPUs like it", "step", "slower by"],
                [[r["fault"], r["stands_for"], fmt_s(r["step_time_s"]),
                  f"{100 * r['slowdown']:.1f} %"] for r in rep["rows"][:args.rows]], "lrrr"))
    return 0
