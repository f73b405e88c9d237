"""Report: one GPU count, three generations (docs/reports/generations.md).

Runs one ``paraplan whatif --vary cluster=...`` over presets of different GPU generations with
the same number of GPUs (DGX nodes or NVL72 trays follow), each variant's best plan simulated,
with the sourced per-GPU-hour prices (``simulator/studies/prices.py``) and the GPUs' TDPs.

    python experiments/report_generations.py                          # docs/reports/
    python experiments/report_generations.py --model llama3-8b --gpus 8 --global-batch 16 \\
        --max-mbs 1 --out /tmp/r                                        # a small, fast run
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, header, md_table,  # noqa: E402
                                 paraplan, rel, shell, this_command)

NAME = "generations"


def whatif_args(a: argparse.Namespace, plot: str) -> list[str]:
    first = a.clusters.split(",")[0]
    from topologies.cluster.preset_table import preset_unit_gpus
    count = a.gpus // preset_unit_gpus(first)
    args = ["whatif", "--model", a.model, "--cluster", f"{first}:{count}",
            "--global-batch", str(a.global_batch), "--vary", f"cluster={a.clusters}",
            "--gpu-hour-cost", a.gpu_hour_cost, "--power", "--plot", plot]
    if a.max_mbs:
        args += ["--max-mbs", str(a.max_mbs)]
    return args


def _num(v: float | None, fmt: str) -> str:
    return "no price" if v is None else fmt.format(v)


def render(out: dict[str, Any], command: str, run: str, figure: str) -> str:
    i = out["inputs"]
    rows = []
    for r in out["rows"]:
        if not r["feasible"]:
            rows.append([r["cluster"], f"no feasible plan: {r['error']}"] + ["-"] * 9)
            continue
        j = r["job"]
        rows.append([r["cluster"], f"{j['gpu']} ({j['cluster']})", j["nvlink_domain"],
                     f"`{r['label']}`", f"{r['step_time_s']:.4g}", f"{100 * r['mfu']:.1f} %",
                     f"{r['tokens_per_s']:,.0f}", _num(r["gpu_hour_cost"], "{:.2f}"),
                     _num(r["cost_per_million_tokens"], "{:.3f}"),
                     f"{r['power_w_per_gpu']:g}", f"{r['energy_kwh_per_million_tokens']:.3f}"])
    table = md_table(["cluster", "GPU", "NVLink domains", "best plan", "step s", "MFU",
                      "tokens/s", "USD/GPU-h", "USD / 10^6 tokens", "W per GPU",
                      "kWh / 10^6 tokens"], rows, align="llllrrrrrrr")
    ok = [r for r in out["rows"] if r["feasible"]]
    lines = []
    base = ok[0]
    for r in ok[1:]:
        line = (f"- {r['cluster']} against {base['cluster']}: "
                f"{base['step_time_s'] / r['step_time_s']:.2f}x the speed "
                f"(step {base['step_time_s']:.3g} s to {r['step_time_s']:.3g} s)")
        if r["cost_per_million_tokens"] and base["cost_per_million_tokens"]:
            d = 100 * (r["cost_per_million_tokens"] / base["cost_per_million_tokens"] - 1)
            line += f"; tokens {abs(d):.1f} % {'cheaper' if d < 0 else 'dearer'} at the prices above"
        lines.append(line + ".")
    cheapest = min((r for r in ok if r["cost_per_million_tokens"] is not None),
                   key=lambda r: r["cost_per_million_tokens"], default=None)
    if cheapest:
        lines.append(f"- Cheapest per token: {cheapest['cluster']} "
                     f"({cheapest['cost_per_million_tokens']:.3f} USD per 10^6 tokens).")
    return "\n".join([
        header("One GPU count, three generations", command),
        f"The best plan (the exact top-1 of a simulated plan search over the same space) of "
        f"{i['model']['name']} at a global batch of {i['global_batch']} sequences of {i['seq_len']} "
        f"tokens, {i['dtype']}, on {i['gpus']} GPUs of each system: DGX nodes of 8 GPUs, or "
        "GB200 NVL72 trays of 4 GPUs spread over racks of one NVLink domain each.",
        "",
        "**Prices** are on-demand list prices per GPU-hour, one dated public quote per GPU "
        "(sources in `simulator/studies/prices.py`, printed by the command); they move monthly "
        "and differ 2-3x between providers: give your own with `--gpu-hour-cost GPU=USD,...`. "
        "**Energy** counts every GPU at its TDP for the whole step (GPU boards only: an upper "
        "bound on the GPUs' share, without CPUs, NICs, switches or cooling).",
        "",
        f"`{run}`",
        "",
        table,
        "",
        *lines,
        "",
        f"![generations]({os.path.basename(figure)})",
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--clusters", default="dgx-h100,dgx-b200,gb200-nvl72")
    ap.add_argument("--gpu-hour-cost", default="default",
                    help="as paraplan whatif's (default: the sourced table)")
    ap.add_argument("--max-mbs", type=int, default=None, help="smaller space: faster run")
    a = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    final = rel(os.path.join(a.out, f"{NAME}.png"))
    with ReportWriter(a.out) as w:
        out = paraplan(whatif_args(a, w.path(f"{NAME}.png")))
        run = shell(["paraplan", *whatif_args(a, final)])
        w.json(f"{NAME}.json", {"whatif": out, "command": run})
        w.text(f"{NAME}.md", render(out, this_command("report_generations.py", argv), run,
                                    final))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
