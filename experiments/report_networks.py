"""Report: rail-optimised, rail-only and multi-plane networks (docs/reports/networks.md).

Two parts. (1) ``paraplan whatif --vary network=... --vary failed_planes=0,1`` on one cluster
and model: the best plan's step time on each network, healthy and with one plane failed.
(2) The parts of each network as the fleet grows (``topologies.inventory``: switches and
transceivers of a two-tier Clos per plane), which is where the designs differ in cost.

    python experiments/report_networks.py                               # docs/reports/
    python experiments/report_networks.py --nodes 2 --global-batch 16 --max-mbs 1 \\
        --out /tmp/r                                                    # a small, fast run
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, header, md_table,  # noqa: E402
                                 paraplan, rel, shell, this_command)

NAME = "networks"
NETWORKS = "rail-fat-tree,rail-only,multi-plane,multi-plane:4"
#: (label, inter_node_topology, planes) of the fleet-size table
FLEET_NETWORKS = (("rail fat tree", "rail_fat_tree", 1), ("rail-only", "rail_only", 1),
                  ("2 planes", "rail_fat_tree", 2), ("4 planes", "rail_fat_tree", 4),
                  ("2 planes, rail-only", "rail_only", 2))


def whatif_args(a: argparse.Namespace, batch: int, plot: str | None = None) -> list[str]:
    args = ["whatif", "--model", a.model, "--cluster", f"{a.preset}:{a.nodes}",
            "--global-batch", str(batch), "--vary", f"network={NETWORKS}",
            "--vary", "failed_planes=0,1"]
    if a.max_mbs:
        args += ["--max-mbs", str(a.max_mbs)]
    return args + (["--plot", plot] if plot else [])


def fleet_table(preset: str, gpu_counts: Sequence[int]) -> list[dict[str, Any]]:
    """Parts of each network at each GPU count (``topologies.inventory``; no simulation)."""
    from topologies.cluster.presets import cluster_for_gpus
    from topologies.errors import SpecError
    from topologies.inventory import network_inventory
    out = []
    for n in gpu_counts:
        base = cluster_for_gpus(preset, n)
        for label, topology, planes in FLEET_NETWORKS:
            cl = replace(base, inter_node_topology=topology, planes=planes)
            try:
                inv = network_inventory(cl).to_dict()
            except SpecError as e:
                inv = {"error": e.rule}
            out.append({"gpus": n, "network": label, **inv})
    return out


def _step_rows(out: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in out["rows"]:
        p = r["network_parts"]
        parts = [f"{p['switches']:,}", f"{p['transceivers']:,}"] if "switches" in p else ["-", "-"]
        if not r["feasible"]:
            rows.append([r["network"], str(r["failed_planes"]), "no plan: every plane failed",
                         "-", "-", *parts])
            continue
        rows.append([r["network"], str(r["failed_planes"]), f"`{r['label']}`",
                     f"{r['step_time_s']:.4g}", f"{100 * r['mfu']:.1f} %", *parts])
    return rows


def _failed_lines(out: dict[str, Any]) -> list[str]:
    by = {(r["network"], r["failed_planes"]): r for r in out["rows"]}
    lines = []
    for net in NETWORKS.split(","):
        a, b = by.get((net, 0)), by.get((net, 1))
        if a and b and a["feasible"] and b["feasible"]:
            lines.append(f"- {net}: one failed plane lengthens the step by "
                         f"{100 * (b['step_time_s'] / a['step_time_s'] - 1):.2f} % "
                         f"({a['step_time_s']:.4g} s to {b['step_time_s']:.4g} s).")
        elif a and b and a["feasible"]:
            lines.append(f"- {net}: one plane is the whole network; with it failed no plan runs.")
    return lines


def render(runs: list[tuple[int, dict[str, Any], str]], fleet: list[dict[str, Any]],
           preset: str, command: str, figure: str) -> str:
    heads = ["network", "failed planes", "best plan", "step s", "MFU", "switches", "optics"]
    parts = []
    for batch, out, run in runs:
        i = out["inputs"]
        parts += [f"### {i['model']['name']}, global batch {batch}, on {i['cluster']} "
                  f"({i['gpus']} GPUs)", "", f"`{run}`", "",
                  md_table(heads, _step_rows(out), align="lllrrrr"), "",
                  *_failed_lines(out), ""]
    gpus = sorted({f["gpus"] for f in fleet})
    labels = [lab for lab, _, _ in FLEET_NETWORKS]
    cell = {(f["gpus"], f["network"]): f for f in fleet}

    def fmt(f: dict[str, Any]) -> str:
        if "error" in f:
            return "needs a 3rd tier"
        return f"{f['switches']:,} / {f['transceivers']:,} ({f['port_gbps']:g}G)"
    fleet_md = md_table(["GPUs", *labels],
                        [[f"{n:,}", *(fmt(cell[(n, lab)]) for lab in labels)] for n in gpus],
                        align="l" + "r" * len(labels))
    third = [n for n in gpus if "error" in cell[(n, labels[0])]]
    tiers = (f" The single-plane rail fat tree needs a third tier from {third[0]:,} GPUs "
             f"(its one spine layer joins every rail's leaves); rail-only (each rail its own "
             f"Clos) and the multi-plane networks (a larger radix) are still two-tier there."
             if third and all("error" not in cell[(third[0], lab)] for lab in labels[1:])
             else "")
    return "\n".join([
        header("Rail-optimised, rail-only and multi-plane networks", command),
        "How the scale-out network between NVLink domains changes a training step and what "
        "it is built of (docs/clusters.md, 'Scale-out networks'). Rail-optimised fat tree: "
        "NVIDIA's DGX SuperPOD design, a spine joins the rails. Rail-only (Wang et al., "
        "arXiv 2307.12169): each rail its own network, no spine; cross-rail traffic is "
        "forwarded over NVLink inside a node. Multi-plane: each NIC split into one port per "
        "independent switch plane (ConnectX-8 as 2 x 400G for Spectrum-X; Alibaba HPN's dual "
        "plane, SIGCOMM 2024), transfers striped over the planes.",
        "",
        "## Step time, healthy and with a failed plane",
        "",
        "The best plan (exact top-1 of a simulated plan search) on each network. Rail-only "
        "and the rail fat tree simulate the same: paraplan already routes traffic between "
        "rails over NVLink (NCCL's PXN), so the spine of a rail fat tree carries nothing a "
        "rail-only network could not; the difference is the switches and optics bought. "
        "Healthy planes give the same NIC bandwidth, hence the same step; a failed plane "
        "leaves (k - 1)/k of it, and the step grows by as much of the network time as the "
        "plan does not hide. A single-plane network with its plane failed has no path "
        "between nodes.",
        "",
        *parts,
        "## What each network is built of",
        "",
        f"Switches / transceivers of the scale-out network of `{preset}` at each GPU count "
        "(`topologies.inventory`: a two-tier Clos per plane of 51.2 Tb/s switches, so 128 "
        "ports at 400G, 256 at 200G, 64 at 800G; 1:1; two transceivers per link, NIC-leaf "
        "and leaf-spine). No prices are shipped: we found no public, dated list price for "
        "switches and optics to cite; give yours with `paraplan whatif ... --network-prices "
        "switch=USD,optic_400=USD,...` to turn the counts into dollars.",
        "",
        fleet_md,
        "",
        "Reading it: rail-only needs no spine while a rail fits one switch (up to the radix "
        "in nodes), so it saves the spine layer and half the optics until then; beyond that "
        "each rail is its own two-tier Clos and the saving goes. Splitting the NIC into "
        "planes of slower ports raises the switch radix by the plane count, so a fleet stays "
        "two-tier (no third tier of switches and optics) to several times the size, at the "
        "price of as many times more, slower, optics." + tiers,
        "",
        f"![networks]({os.path.basename(figure)})",
        "",
        "Not modelled: forwarding at the destination node, re-routing around a failed rail "
        "switch, third-tier networks, the price of NICs and cables, power.",
        "",
    ])


def draw(runs: list[tuple[int, dict[str, Any], str]], fleet: list[dict[str, Any]],
         path: str) -> None:
    from simulator.output.figures import new_figure, save_figure
    fig, (ax1, ax2) = new_figure((11.0, 4.0), ncols=2)
    width = 0.8 / max(1, len(runs))
    for k, (batch, out, _) in enumerate(runs):
        rows = out["rows"]
        xs = [i + k * width for i in range(len(rows))]
        base = rows[0]["step_time_s"]
        vals = [100 * (r["step_time_s"] / base - 1) if r["feasible"] else 0.0 for r in rows]
        ax1.bar(xs, vals, width, label=f"global batch {batch}")
        for x, r, v in zip(xs, rows, vals):
            if not r["feasible"]:
                ax1.annotate("no path", (x, 0), ha="center", va="bottom", fontsize=6,
                             rotation=90)
    names = [f"{r['network']}\n{r['failed_planes']} failed" for r in runs[0][1]["rows"]]
    ax1.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(names))], names,
                   fontsize=6, rotation=30, ha="right")
    ax1.set_ylabel("step time vs the first row (%)")
    ax1.set_title("best plan's simulated step time by network", fontsize=9)
    ax1.legend(fontsize=7)
    for label, _, _ in FLEET_NETWORKS:
        pts = [(f["gpus"], f["transceivers"]) for f in fleet
               if f["network"] == label and "transceivers" in f]
        if pts:
            ax2.plot(*zip(*pts), marker="o", label=label)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("GPUs (a line ends where a third tier would be needed)")
    ax2.set_ylabel("transceivers")
    ax2.set_title("optics of the scale-out network (2-tier Clos per plane, 51.2 Tb/s "
                  "switches)", fontsize=9)
    ax2.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--preset", default="dgx-h100")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--global-batch", default="128,32",
                    help="comma-separated global batches, one whatif each")
    ap.add_argument("--fleet", default="1024,4096,8192,16384,32768",
                    help="GPU counts of the parts table")
    ap.add_argument("--max-mbs", type=int, default=None, help="smaller space: faster run")
    a = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    final = rel(os.path.join(a.out, f"{NAME}.png"))
    batches = [int(b) for b in a.global_batch.split(",")]
    runs = [(b, paraplan(whatif_args(a, b)), shell(["paraplan", *whatif_args(a, b)]))
            for b in batches]
    fleet = fleet_table(a.preset, [int(n) for n in a.fleet.split(",")])
    with ReportWriter(a.out) as w:
        w.json(f"{NAME}.json", {"whatif": [{"command": run, "report": out}
                                           for _, out, run in runs], "fleet": fleet})
        w.draw(f"{NAME}.png", lambda p: draw(runs, fleet, p))
        w.text(f"{NAME}.md", render(runs, fleet, a.preset,
                                    this_command("report_networks.py", argv), final))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
