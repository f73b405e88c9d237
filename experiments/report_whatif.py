"""Report: what if the cluster changed? (docs/reports/whatif.md)

Runs two ``paraplan whatif`` commands and writes ``whatif.md`` with their figures and JSON:

1. the GPU generation: the same node count of DGX A100, DGX H100 and DGX H200 (each with its
   own NVSwitch and NICs), the best plan of each;
2. the inter-node bandwidth: the H100 cluster with 100, 200 and 400 Gb/s per NIC.

Costs use one assumed price per GPU-hour (``--gpu-hour-cost``) for every GPU type, so the
page also gives the break-even price: what a GPU-hour of each variant may cost before its
tokens cost more than the first variant's.

    python experiments/report_whatif.py                              # docs/reports/
    python experiments/report_whatif.py --model gpt-1.7b --nodes 1 --global-batch 16 \\
        --max-mbs 1 --inter-gbps 100,400 --out /tmp/r                   # a small, fast run
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, header, md_table,  # noqa: E402
                                 paraplan, rel, shell, this_command)

NAME = "whatif"
COMM_KEYS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")


def whatif_args(a: argparse.Namespace, cluster: str, vary: str, plot: str) -> list[str]:
    args = ["whatif", "--model", a.model, "--cluster", f"{cluster}:{a.nodes}",
            "--global-batch", str(a.global_batch), "--vary", vary,
            "--gpu-hour-cost", f"{a.gpu_hour_cost:g}", "--plot", plot]
    if a.max_mbs:
        args += ["--max-mbs", str(a.max_mbs)]
    if a.max_vpp:
        args += ["--max-vpp", str(a.max_vpp)]
    return args


def _pct(a: float, b: float) -> str:
    """``b`` relative to ``a``, signed, in percent."""
    return f"{100 * (b / a - 1):+.1f} %"


def _more_less(a: float, b: float) -> str:
    """``b`` against ``a`` in words: ``"12.3 % less"`` or ``"4.5 % more"``."""
    d = 100 * (b / a - 1)
    return f"{abs(d):.1f} % {'less' if d < 0 else 'more'}"


def _comm(r: dict[str, Any]) -> float:
    return sum(r["breakdown_s"][k] for k in COMM_KEYS)


def rows_table(out: dict[str, Any], key: str) -> str:
    first = next(r for r in out["rows"] if r["feasible"])
    price = out["inputs"]["gpu_hour_cost"]
    rows = []
    for r in out["rows"]:
        name = f"{r[key]:g}" if isinstance(r[key], float) else str(r[key])
        if not r["feasible"]:
            rows.append([name, f"no feasible plan: {r['error']}"] + ["-"] * 7)
            continue
        even = price * first["cost_per_million_tokens"] / r["cost_per_million_tokens"]
        rows.append([name, r["job"]["gpu"], f"`{r['label']}`", f"{r['step_time_s']:.4g}",
                     f"{100 * r['mfu']:.1f} %", f"{r['tokens_per_s']:,.0f}",
                     f"{r['memory']['peak_gib']:.1f}", f"{r['cost_per_million_tokens']:.3f}",
                     f"{even:.2f}"])
    return md_table([key, "GPU", "best plan", "step s", "MFU", "tokens/s", "peak GiB",
                     f"USD / 10^6 tokens at {price:g}/GPU-h",
                     f"break-even USD/GPU-h vs {first[key]}"], rows, align="lllrrrrrr")


def gpu_findings(out: dict[str, Any]) -> list[str]:
    """Sentences computed from the GPU-generation rows (nothing typed in by hand)."""
    from topologies.gpus import get_gpu
    rows = [r for r in out["rows"] if r["feasible"]]
    if len(rows) < 2:
        return []
    dtype, price = out["inputs"]["dtype"], out["inputs"]["gpu_hour_cost"]
    base = rows[0]
    notes = []
    for r in rows[1:]:
        peak = get_gpu(r["job"]["gpu"]).peak(dtype) / get_gpu(base["job"]["gpu"]).peak(dtype)
        speed = base["step_time_s"] / r["step_time_s"]
        ratio = base["cost_per_million_tokens"] / r["cost_per_million_tokens"]
        notes.append(
            f"{r['cluster']} against {base['cluster']}: {peak:.2f}x the {dtype} peak per GPU, "
            f"{speed:.2f}x the speed (step {base['step_time_s']:.3g} s to "
            f"{r['step_time_s']:.3g} s, MFU {100 * base['mfu']:.1f} % to {100 * r['mfu']:.1f} %)"
            f"; at one price per GPU-hour its tokens cost "
            f"{_more_less(base['cost_per_million_tokens'], r['cost_per_million_tokens'])}, "
            "and they "
            f"cost the same as {base['cluster']}'s at {price * ratio:.2f} USD per GPU-hour "
            f"(break-even, against {price:g} for {base['cluster']}).")
    fast = min(rows, key=lambda r: r["step_time_s"])
    notes.append(f"Fastest: {fast['cluster']} ({fast['step_time_s']:.3g} s per step, "
                 f"{fast['tokens_per_s']:,.0f} tokens/s).")
    plans = {r["cluster"]: r["label"] for r in rows}
    if len(set(plans.values())) > 1:
        notes.append("The best plan is not the same on every system: " + "; ".join(
            f"{c}: `{p}`" for c, p in plans.items()) + ".")
    else:
        notes.append(f"The same plan is best on every system: `{rows[0]['label']}`.")
    small = min(get_gpu(r["job"]["gpu"]).hbm_bytes for r in rows) / 2 ** 30
    big = [r for r in rows if r["memory"]["peak_gib"] > small]
    for r in big:
        notes.append(f"{r['cluster']}'s best plan holds {r['memory']['peak_gib']:.1f} GiB per "
                     f"GPU, more than the {small:.0f} GiB of the smallest GPU here: its "
                     "extra memory is what makes that plan possible.")
    return notes


def bandwidth_findings(out: dict[str, Any]) -> list[str]:
    rows = [r for r in out["rows"] if r["feasible"]]
    if len(rows) < 2:
        return []
    notes = []
    lo, hi = rows[0], rows[-1]
    notes.append(
        f"From {lo['inter_node_gbps']:g} to {hi['inter_node_gbps']:g} Gb/s per NIC the step "
        f"goes from {lo['step_time_s']:.3g} s to {hi['step_time_s']:.3g} s "
        f"({_pct(lo['step_time_s'], hi['step_time_s'])}), and so does the cost per million "
        f"tokens ({lo['cost_per_million_tokens']:.3f} to {hi['cost_per_million_tokens']:.3f} "
        "USD at the assumed price).")
    steps = [f"{a['inter_node_gbps']:g} to {b['inter_node_gbps']:g} Gb/s: "
             f"{_pct(a['step_time_s'], b['step_time_s'])}" for a, b in zip(rows, rows[1:])]
    notes.append("Step by step: " + "; ".join(steps) + ".")
    notes.append(f"Exposed communication of the best plan: {_comm(lo):.3g} s at "
                 f"{lo['inter_node_gbps']:g} Gb/s, {_comm(hi):.3g} s at "
                 f"{hi['inter_node_gbps']:g} Gb/s.")
    plans = [r["label"] for r in rows]
    if len(set(plans)) > 1:
        notes.append("The best plan changes with the network: " + "; ".join(
            f"{r['inter_node_gbps']:g} Gb/s: `{r['label']}`" for r in rows) + ".")
    else:
        notes.append(f"The same plan is best at every bandwidth: `{plans[0]}`.")
    mono = out["checks"]["bandwidth_monotone"]
    notes.append(f"Check: over {mono['pairs']} pairs that differ only by more bandwidth, the "
                 + ("step time never rises." if mono["ok"] else
                    f"step time ROSE {len(mono['violations'])} time(s): "
                    + "; ".join(out["warnings"])))
    return notes


def render(gpus: dict, bw: dict, command: str, gpus_cmd: str, bw_cmd: str) -> str:
    i = gpus["inputs"]
    price = i["gpu_hour_cost"]
    parts = [header("What if the cluster changed?", command),
             f"The best plan (the exact top-1 of `paraplan search` over the same plan space) of "
             f"{i['model']['name']} at a global batch of {i['global_batch']} sequences of "
             f"{i['seq_len']} tokens, {i['dtype']}, on {i['gpus']} GPUs, as the hardware "
             "changes.", "",
             f"**Assumption:** every GPU-hour costs {price:g} USD, whatever the GPU (an "
             "example price, not a quote). The cost per million tokens scales linearly with "
             "it; the break-even column is the price per GPU-hour at which a variant's tokens "
             "cost as much as the first row's at the assumed price, which does not depend on "
             "the assumption.", "",
             "## GPU generation", "",
             "Whole systems, each with its own node fabric and NICs: " + "; ".join(
                 f"{r['cluster']}: {r['job']['gpu']}, {r['job']['intra_node_GBps']:g} GB/s "
                 f"per GPU in the node, {r['job']['nics_per_node']} x "
                 f"{r['job']['inter_node_gbps']:g} Gb/s NICs per node" for r in gpus["rows"])
             + ".", "",
             f"`{gpus_cmd}`", "", rows_table(gpus, "cluster"), ""]
    parts += [f"- {n}" for n in gpu_findings(gpus)]
    parts += ["", f"![GPU generations]({NAME}_gpus.png)", "",
              "## Inter-node bandwidth", "",
              f"{bw['rows'][0]['job']['cluster']} with every NIC's bandwidth changed (the "
              "NVSwitch stays as it is).", "",
              f"`{bw_cmd}`", "", rows_table(bw, "inter_node_gbps"), ""]
    parts += [f"- {n}" for n in bandwidth_findings(bw)]
    parts += ["", f"![inter-node bandwidth]({NAME}_bandwidth.png)", "",
              "Step time may not rise when only bandwidth rises: each variant's search covers "
              "the same plans (bandwidth never changes which plans fit), and each also "
              "simulates the best plans of the variants with less bandwidth and keeps the "
              "fastest (`best_from` in the JSON), so the rule holds even if a search were "
              "approximate; `checks.bandwidth_monotone` counts the pairs checked."]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--clusters", default="dgx-a100,dgx-h100,dgx-h200",
                    help="node presets of the GPU-generation study")
    ap.add_argument("--bandwidth-cluster", default="dgx-h100",
                    help="node preset of the bandwidth study")
    ap.add_argument("--inter-gbps", default="100,200,400", help="NIC bandwidths, Gb/s")
    ap.add_argument("--gpu-hour-cost", type=float, default=2.0,
                    help="assumed USD per GPU-hour, the same for every GPU (default 2)")
    ap.add_argument("--max-mbs", type=int, default=None, help="smaller space: faster run")
    ap.add_argument("--max-vpp", type=int, default=None, help="smaller space: faster run")
    a = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    final = {k: rel(os.path.join(a.out, f"{NAME}_{k}.png")) for k in ("gpus", "bandwidth")}
    first = a.clusters.split(",")[0]
    studies = {"gpus": (first, f"cluster={a.clusters}"),
               "bandwidth": (a.bandwidth_cluster, f"inter_node_gbps={a.inter_gbps}")}
    with ReportWriter(a.out) as w:
        outs, cmds = {}, {}
        for k, (cluster, vary) in studies.items():
            outs[k] = paraplan(whatif_args(a, cluster, vary, w.path(f"{NAME}_{k}.png")))
            cmds[k] = shell(["paraplan", *whatif_args(a, cluster, vary, final[k])])
        w.json(f"{NAME}.json", {"gpus": outs["gpus"], "bandwidth": outs["bandwidth"],
                                "commands": [cmds["gpus"], cmds["bandwidth"]]})
        w.text(f"{NAME}.md", render(outs["gpus"], outs["bandwidth"],
                                    this_command("report_whatif.py", argv),
                                    cmds["gpus"], cmds["bandwidth"]))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
