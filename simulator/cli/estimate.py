"""``paraplan estimate``: the analytic estimate of one plan."""
from __future__ import annotations

import argparse
from typing import Any

from simulator.cli.common import (add_json, add_plan_inputs, emit_json, fmt_s, resolve_job,
                                  table)
from simulator.cli.launch_export import add_export, check_export_early, export_settings
from strategies.cost import comm as cm
from strategies.estimate.scalar import estimate
from strategies.memory.scalar import memory_by_origin_json
from topologies.cluster import Cluster


def collectives_read(cl: Cluster) -> str:
    """Which of the GPU profile's measured collectives the cost model reads
    (``strategies.cost.comm.measured_scale``: groups within one node of the measured size)."""
    prof = cm.profile_of(cl)
    if prof is None:
        return "its collectives not read (the node groups carry different profiles)"
    if not prof.collectives:
        return "no collectives measured (network model)"
    sizes: dict = {}
    for c in prof.collectives:
        sizes.setdefault((c.op, c.gpus), []).append(c.bytes)
    same: dict = {}                    # ops measured over the same GPUs and sizes together
    for (op, g), b in sizes.items():
        same.setdefault((g, f"{min(b) / 2**20:g}-{max(b) / 2**20:g} MiB"), []).append(op)
    groups: dict = {}                  # then the GPU counts with the same ops and sizes
    for (g, mib), ops in same.items():
        groups.setdefault((", ".join(ops), mib), []).append(str(g))
    return "collectives read within a node: " + "; ".join(
        f"{ops} on {', '.join(gs)} GPUs, {mib}" for (ops, mib), gs in groups.items()
    ) + " (between nodes: the network model)"


def register(sub) -> None:
    p = sub.add_parser("estimate", help="analytic step time and memory of one plan")
    add_plan_inputs(p)
    add_json(p)
    add_export(p, "also print the plan's launch settings")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    job = resolve_job(args)
    check_export_early(args, job.named_framework, job.model)     # before the estimate
    out = estimate(job).to_json()
    out["memory_by_origin"] = memory_by_origin_json(job)
    exported = export_settings(args, job)
    if exported is not None:
        out["export"] = exported
    if args.json:
        emit_json(out)
    else:
        print(render(out, job, "Analytic estimate"))
        if exported is not None:
            print(f"\n{args.export} launch settings\n{exported['text']}")
    return 0


def layout_lines(job) -> list[str]:
    """The pipeline layout (``Job.layout``) where it is not the even split: Megatron's string
    and what each rank's chunks hold."""
    lay = job.layout
    if job.plan.pp == 1 or (lay.uniform and lay.source == "even"):
        return []
    return [f"layout  {lay.text}   ({lay.source}; layers per stage "
            f"{'/'.join(map(str, lay.layers_per_stage))})",
            *(f"        {row}" for row in lay.table())]


def default_lines(job) -> list[str]:
    """The plan fields the named stack filled where the plan gave none (``Job.plan_defaults``),
    one line each: what was assumed and why."""
    return [f"{'assumed' if i == 0 else '':<8}{f.text()}"
            for i, f in enumerate(job.plan_defaults)]


def render(out: dict[str, Any], job, title: str) -> str:
    """The human report shared by ``estimate`` and ``simulate``."""
    p, cl, m = job.plan, job.cluster, job.model
    mem = out["memory"]
    lines = [f"{title}: {m.name} on {cl.name} ({cl.describe_gpus()}), {job.dtype}, "
             f"{job.framework.name}",
             f"plan    {p.short()}   gbs {p.gbs}, seq {job.seq_len}, "
             + (f"{'/'.join(map(str, p.group_microbatches))} micro-batches per pipeline "
                "by node group" if p.group_microbatches is not None else
                f"{out['num_microbatches']} micro-batches per pipeline"),
             *layout_lines(job),
             *default_lines(job),
             *([f"NVLink  {cl.describe_domain()}"] if cl.gpus_per_tray else []),
             *([f"network {cl.planes} planes of {cl.inter_node_topology}, each NIC's "
                f"{cl.inter_node_bandwidth * 8 / 1e9:g} Gb/s as {cl.planes} ports of "
                f"{cl.inter_node_bandwidth * 8 / 1e9 / cl.planes:g} Gb/s, transfers striped"]
               if cl.planes > 1 else
               ["network rail-only (no spine; cross-rail traffic relayed over NVLink)"]
               if cl.inter_node_topology == "rail_only" else []),
             *([f"GPU profile {cl.gpu.profile.path} (measured, calibration.md §7)",
                f"        {collectives_read(cl)}"] if cl.gpu.profile is not None else []),
             "",
             f"step time       {fmt_s(out['step_time_s'])}",
             f"tokens/s        {out['tokens_per_s']:,.0f}",
             f"MFU / HFU       {100 * out['mfu']:.1f} % / {100 * out['hfu']:.1f} %",
             f"bubble          {100 * out['bubble_fraction']:.1f} % of the step "
             + ("(busiest stage)" if not out.get("simulated") else
                f"(busiest stage; most idle stage {100 * out['max_stage_bubble_fraction']:.1f} %)"),
             f"peak memory     {mem['peak_gib']:.2f} GiB of {cl.min_hbm_bytes / 2**30:.0f} GiB"
             f"  -> {'fits' if out['fits'] else 'DOES NOT FIT'}"]
    if cl.faults:
        lines.append("faults          " + "; ".join(
            [f"GPU {g} computes x{f:g} slower" for g, f in cl.faults.stragglers]
            + [f"{t} at 1/{f:g} bandwidth" for t, f in cl.faults.degraded]))
    if out.get("simulated"):
        lines += [f"analytic        {fmt_s(out['analytic_step_time_s'])} "
                  f"({100 * (out['analytic_step_time_s'] / out['step_time_s'] - 1):+.1f} % vs simulated)",
                  f"comm            {fmt_s(out['exposed_comm_s'])} exposed, "
                  f"{fmt_s(out['overlapped_comm_s'])} overlapped",
                  f"events          {out['events']:,} in {out['wall_s']:.2f} s"
                  + (f" ({out['simulated_ranks']} of {cl.num_gpus} ranks simulated, folded)"
                     if out.get("folded") else "")]
        if cl.faults:
            crit = out["critical_rank"]
            per_stage = cl.num_gpus // p.pp
            lines.append(f"who waits       the step ends on rank {crit} (stage {crit // per_stage});"
                         " idle by stage " + ", ".join(
                             f"{100 * x:.0f} %" for x in out["idle_fraction_by_stage"]))
    total = out["step_time_s"] or 1.0
    lines += ["", "where the time goes (exposed seconds per step)"]
    lines.append(table(["part", "seconds", "share"],
                       [[k, f"{v:.4f}", f"{100 * v / total:.1f} %"]
                        for k, v in out["breakdown_s"].items() if v > 0] or [["-", "0", "-"]]))
    lines += ["", "memory by pipeline stage (GiB)"]
    lines.append(table(["stage", "params", "grads", "optimizer", "activations", "other", "total"],
                       [[i, *(f"{s[k]:.2f}" for k in ("params_gib", "grads_gib", "optimizer_gib",
                                                     "activations_gib", "other_gib", "peak_gib"))]
                        for i, s in enumerate(out["memory_by_stage"])]))
    return "\n".join(lines)
