"""Report: pipeline schedules side by side (docs/reports/schedules.md).

Runs two ``paraplan compare`` commands and writes ``schedules.md`` with their figures and JSON:

1. the plan under ``--schedules`` (default GPipe, 1F1B, interleaved with 2 and 4 chunks) with
   timelines and the bubble sweep over micro-batch counts against the closed forms;
2. the timeline picture of issue 3: GPT-3 175B on 8 pipeline stages, 1F1B vs interleaved,
   with fewer micro-batches so that every bar is readable;
3. the same plan under 1F1B and the schedules that split the backward into B and W (ZB-H1,
   ZB-H2, ZB-V, DualPipe, DualPipeV), with their timelines on one time axis;
4. the schedule papers' own comparisons reproduced (``experiments/schedule_papers.py``): the
   zero-bubble paper's throughput table and DeepSeek's DualPipe table.

    python experiments/report_schedules.py                    # docs/reports/
    python experiments/report_schedules.py --model gpt-1.7b --cluster dgx-a100:1 \\
        --plan tp=2,pp=4,gbs=8 --pair-gbs 8 --out /tmp/r       # a small, fast run
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, fmt, header, md_table,  # noqa: E402
                                 paraplan, rel, shell, this_command)

NAME = "schedules"
GIB = 2 ** 30


def compare_args(a: argparse.Namespace, plan: str, schedules: str, timeline: str,
                 sweep: str | None) -> list[str]:
    args = ["compare", "--model", a.model, "--cluster", a.cluster, "--plan", plan,
            "--schedules", schedules, "--timeline", timeline]
    if sweep:
        args += ["--sweep", sweep]
        if a.sweep_microbatches:
            args += ["--sweep-microbatches", a.sweep_microbatches]
    return args


def with_gbs(plan: str, gbs: int) -> str:
    items = [i for i in plan.split(",") if i.strip() and not i.strip().startswith("gbs=")]
    return ",".join(items + [f"gbs={gbs}"])


def _rows_table(out: dict[str, Any]) -> str:
    rows = []
    for r in out["rows"]:
        if not r["valid"]:
            rows.append([r["schedule"], f"invalid here: {r['error']}"] + ["-"] * 7)
            continue
        rows.append([r["schedule"], fmt(r["step_time_s"], 3), fmt(r["analytic_step_time_s"], 3),
                     fmt(100 * r["bubble_fraction"], 1, " %"),
                     f"{r['bubble_over_ideal']:.3f} / {r['bubble_closed_form']:.3f}",
                     fmt(r["memory"]["peak_gib"], 1) + ("" if r["fits"] else " (over)"),
                     fmt(r["memory"]["simulated_activations_peak_gib"], 1),
                     fmt(r["p2p"]["per_gpu_bytes"] / GIB, 2),
                     fmt(r["p2p"]["total_bytes"] / GIB, 1)])
    return md_table(["schedule", "step s (sim)", "step s (analytic)", "bubble (busiest stage)",
                     "bubble/ideal sim / closed", "peak GiB", "activations GiB (sim)",
                     "p2p GiB per GPU", "p2p GiB all GPUs"], rows, align="lrrrrrrrr")


def _observations(out: dict[str, Any]) -> list[str]:
    """Sentences computed from the rows (nothing here is typed in by hand)."""
    rows = {r["schedule"]: r for r in out["rows"] if r["valid"]}
    notes = []
    if "gpipe" in rows and "1f1b" in rows:
        g, o = rows["gpipe"], rows["1f1b"]
        notes.append(f"GPipe holds every micro-batch's activations: peak "
                     f"{g['memory']['peak_gib']:.1f} GiB per GPU against "
                     f"{o['memory']['peak_gib']:.1f} GiB for 1F1B "
                     f"({g['memory']['peak_gib'] / o['memory']['peak_gib']:.2f}x), for a step "
                     f"time within {100 * abs(g['step_time_s'] / o['step_time_s'] - 1):.2f} %.")
    by_vpp = {r["vpp"]: r for r in rows.values() if r["schedule"] != "gpipe"}
    inter = sorted(by_vpp.items())
    if len(inter) > 1:
        b = [r["bubble_over_ideal"] for _, r in inter]
        shrinking = all(x > y for x, y in zip(b, b[1:]))
        notes.append("Bubble over ideal time by chunks per rank: "
                     + ", ".join(f"vpp={v}: {r['bubble_over_ideal']:.3f} (closed form "
                                 f"{r['bubble_closed_form']:.3f})" for v, r in inter)
                     + (" — it shrinks with every added chunk." if shrinking else
                        " — it does NOT shrink monotonically here."))
        first, last = inter[0][1], inter[-1][1]
        notes.append(f"Point-to-point traffic grows with the chunks: "
                     f"{first['p2p']['total_bytes'] / GIB:.1f} GiB ({first['schedule']}) to "
                     f"{last['p2p']['total_bytes'] / GIB:.1f} GiB ({last['schedule']}) per step "
                     f"over all GPUs.")
    return notes


def _sweep_section(out: dict[str, Any]) -> list[str]:
    sw = out["sweep"]
    pts = [p for p in sw["points"] if "error" not in p]
    ag = sw["agreement"]
    lines = ["## Bubble against micro-batches and chunks", "",
             f"![bubble sweep]({NAME}_sweep.png)", "",
             "Bubble in units of the ideal time (idle over busy, on the bottleneck stage) "
             "against the closed forms (pp-1)/m (GPipe, 1F1B) and (pp-1)/(vpp·m) "
             "(interleaved), simulated over the real network and with free communication.", "",
             md_table(["schedule", "micro-batches", "simulated", "free communication",
                       "closed form", "simulated / closed"],
                      [[p["schedule"], p["num_microbatches"], f"{p['simulated']:.4f}",
                        f"{p['simulated_free_comm']:.4f}", f"{p['closed_form']:.4f}",
                        f"{p['simulated'] / p['closed_form']:.3f}"] for p in pts]), ""]
    for key, name in (("simulated", "over the network"),
                      ("simulated_free_comm", "with free communication")):
        if key not in ag:
            continue
        a = ag[key]
        line = (f"- Simulated {name}: within {100 * a['max_rel_diff']:.1f} % of the closed "
                f"form at every one of {a['points']} points")
        if a.get("chunk_ratio_max_rel_diff") is not None:
            line += (f"; the ratio bubble(vpp)/bubble(1F1B) at equal m is within "
                     f"{100 * a['chunk_ratio_max_rel_diff']:.1f} % of 1/vpp "
                     f"({a['chunk_ratio_points']} points)")
        lines.append(line + ".")
    lines += ["", "The closed forms assume identical stages and count no optimizer step; the "
              "embedding on the first stage and the LM head on the last make those stages "
              "heavier, which moves the absolute values while the ratios between schedules "
              "stay those of the closed forms."]
    bad = [p for p in sw["points"] if "error" in p]
    if bad:
        lines += ["", "Refused combinations: " + "; ".join(
            f"{p['schedule']} m={p['num_microbatches']} ({p['error']})" for p in bad)]
    return lines


def _zero_bubble_notes(out: dict[str, Any]) -> list[str]:
    """Sentences computed from the zero-bubble comparison's rows."""
    rows = {r["schedule"]: r for r in out["rows"] if r["valid"]}
    notes = []
    names = {"zb-h1": "ZB-H1", "zb-h2": "ZB-H2", "zb-v": "ZB-V", "dualpipe": "DualPipe",
             "dualpipev": "DualPipeV"}
    if "1f1b" in rows:
        o = rows["1f1b"]
        for label, z in rows.items():
            name = label.split(":")[0]
            if name in ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev"):
                notes.append(
                    f"{names[name]}: step {z['step_time_s']:.3f} s against 1F1B's "
                    f"{o['step_time_s']:.3f} s ({100 * (z['step_time_s'] / o['step_time_s'] - 1):+.1f} %), "
                    f"bubble {100 * z['bubble_fraction']:.1f} % against "
                    f"{100 * o['bubble_fraction']:.1f} %, peak memory "
                    f"{z['memory']['peak_gib']:.1f} GiB against {o['memory']['peak_gib']:.1f} GiB.")
        if "dualpipe" in rows:
            d = rows["dualpipe"]
            notes.append(
                f"DualPipe's data-parallel communication, here only the all-reduce of the two "
                f"parameter copies' gradients between mirror ranks on different nodes, leaves "
                f"{d['breakdown_s']['dp_comm']:.3f} s exposed (1F1B: "
                f"{o['breakdown_s']['dp_comm']:.3f} s): its bubble is the smaller, its step "
                "the longer.")
    return notes


def render(main_out: dict, pair_out: dict, command: str, main_cmd: str, pair_cmd: str,
           zb_out: dict | None = None, zb_cmd: str = "", papers: tuple | None = None) -> str:
    inp = main_out["inputs"]
    p = inp["plan"]
    parts = [header("Pipeline schedules side by side", command),
             f"One plan, {inp['model']['name']} on {inp['cluster']['name']} "
             f"(tp={p['tp']}, pp={p['pp']}, dp={p['dp']}, mbs={p['mbs']}, gbs={p['gbs']}, "
             f"{inp['num_microbatches']} micro-batches per pipeline), under each schedule:", "",
             f"`{main_cmd}`", "",
             _rows_table(main_out), "",
             "Bubble (busiest stage): idle compute over the step on the bottleneck stage, "
             "as `estimate` reports it. Bubble/ideal: idle over busy time on that stage, "
             "against the closed form. Peak memory is the "
             "estimator's per-GPU peak (\"over\": above the GPU's memory); the activation "
             "peak is measured on the simulated timeline; point-to-point bytes are the "
             "simulated sends of one step.", ""]
    parts += [f"- {n}" for n in _observations(main_out)]
    parts += ["", f"![timelines]({NAME}_timeline.png)", ""]
    parts += _sweep_section(main_out)
    pin = pair_out["inputs"]
    names = " against ".join(r["schedule"] for r in pair_out["rows"])
    parts += ["", f"## {pin['model']['name']}: {names}", "",
              f"{pin['model']['name']} on {pin['cluster']['name']}, "
              f"{pin['plan']['pp']} pipeline stages, {pin['num_microbatches']} micro-batches "
              "(issue 3's timeline picture). Hatched: idle compute (the bubble); lighter "
              "shades: later model chunks.", "",
              f"`{pair_cmd}`", "",
              f"![1F1B vs interleaved]({NAME}_1f1b_vs_interleaved.png)", "",
              _rows_table(pair_out)]
    if zb_out is not None:
        zin = zb_out["inputs"]
        parts += ["", "## Zero bubble: the backward split into B and W", "",
                  f"{zin['model']['name']} on {zin['cluster']['name']}, {zin['plan']['pp']} "
                  f"pipeline stages, {zin['num_microbatches']} micro-batches. ZB-H1, ZB-H2 "
                  "and ZB-V (Qi et al., ICLR 2024; ZB-V two chunks per rank in a V, the "
                  "embedding and the LM head both on rank 0) run each backward as B (input "
                  "gradient) and W (weight gradient) and place the W passes in what would be "
                  "bubbles; DualPipeV (DeepSeek-V3 §3.2.1, the V of ZB-V) runs in its steady "
                  "state the forward of one micro-batch with the whole backward of another "
                  "as one overlapped pair, compute in turn, each one's expert all-to-all "
                  "beside the other's compute (docs/schedules.md); DualPipe runs the same "
                  "pairs on two pipelines in opposite directions over the same ranks, each "
                  "rank holding two stages' parameters whose gradients it all-reduces with "
                  "its mirror rank's before the optimizer.", "", f"`{zb_cmd}`", "",
                  f"![1F1B and the zero-bubble schedules]({NAME}_zero_bubble.png)", "",
                  _rows_table(zb_out), ""]
        parts += [f"- {n}" for n in _zero_bubble_notes(zb_out)]
    if papers is not None:
        parts += _papers_section(*papers)
    return "\n".join(parts)


def _papers_section(zb_rows: list, dp_rows: list, dp_setting: str) -> list[str]:
    from experiments.schedule_papers import dualpipe_table, zero_bubble_table
    errs = [abs(r["ratio"][k] / r["paper_ratio"][k] - 1) for r in zb_rows if "ratio" in r
            for k in r["ratio"]]
    out = ["", "## The papers' tables, reproduced", "",
            "`python experiments/schedule_papers.py` (also run by this report). Reference "
            "rows: `strategies/reference/data/schedule_studies.json` (Qi et al., \"Zero "
            "Bubble Pipeline Parallelism\", ICLR 2024, Tables 3, 4 and 6; the DualPipe "
            "README and DeepSeek-V3 report Table 2).", "",
            "### Zero bubble (Qi et al., ICLR 2024): throughput against 1F1B", "",
            "The paper's GPT-like models, GPU counts, micro-batch sizes and counts, one "
            "pipeline over all GPUs, sequence 1024, the first and last stage one layer fewer, "
            "A100 80 GB (our `dgx-a100` nodes; the paper's cluster used RoCE). ZB-1p and "
            "ZB-2p are the orders of the paper's automatic scheduling heuristic under the "
            "memory limits `p·M_B` and `2p·M_B` (`zb-1p`, `zb-2p`: "
            "`strategies/schedules/zb_auto.py`, ordered with each plan's own `T_F`, `T_B`, "
            "`T_W` and message time); the hand-made schedules with the same limits (ZB-H1, "
            "ZB-H2) are shown beside them. Ratio: samples/s of the schedule over 1F1B's (the "
            "paper's from its rounded table entries; ours from simulated times). Ours: the "
            "period of back-to-back iterations under the paper's optimizer post-validation "
            "(each rank starts its next iteration when it has finished its own; the longest "
            "rank span from its first compute to its optimizer step's end, "
            "`post_validation_period`), which is what a throughput over many iterations "
            "measures; one iteration: the simulator's step time from an idle pipeline, which "
            "adds the start skew of a parallelogram schedule such as ZB-2p.", "",
            zero_bubble_table(zb_rows), "",
            f"- Mean absolute error of the ratios: {100 * sum(errs) / max(len(errs), 1):.1f} % "
            f"over {len(errs)} (worst {100 * max(errs, default=0):.1f} %)."]
    for k in ("ZB-1p", "ZB-2p", "ZB-2p*"):
        e = [r["ratio"][k] / r["paper_ratio"][k] - 1 for r in zb_rows if k in r.get("ratio", {})]
        if e:
            miss = max(abs(x) for x in e) > 0.05
            out.append(f"- {k}: our ratio differs from the paper's by {100 * min(e):+.1f} to "
                       f"{100 * max(e):+.1f} %" + (": a miss (beyond 5 %)." if miss else "."))
    gain = [r["ratio"][k] / r["ratio_handmade"][k] - 1 for r in zb_rows
            for k in r.get("ratio", {})]
    skew = [r["ratio"][k] / r["ratio_one_iteration"][k] - 1 for r in zb_rows
            for k in r.get("ratio", {}) if k != "ZB-1p"]
    if gain:
        out.append(f"- The heuristic against the hand-made schedule of the same memory limit: "
                   f"{100 * min(gain):+.1f} to {100 * max(gain):+.1f} % in the ratio; "
                   "post-validation's back-to-back iterations against one iteration from an "
                   f"idle pipeline (ZB-2p, ZB-2p*): {100 * min(skew, default=0):+.1f} to "
                   f"{100 * max(skew, default=0):+.1f} %.")
    mem = [(r, k) for r in zb_rows for k in r.get("ratio", {})
           if k in (r.get("paper_memory_gb") or {})]
    for r, k in mem:
        out.append(f"- Peak memory, {r['model'].split(' (')[0]}: {k} ours "
                   f"{r['runs'][k]['memory_gib']:.1f} GiB against the paper's "
                   f"{r['paper_memory_gb'][k]} GB, 1F1B {r['runs']['1F1B']['memory_gib']:.1f} GiB against "
                   f"{r['paper_memory_gb']['1F1B']} GB.")
    out += ["- Not reproduced: " + r["skipped"] for r in zb_rows if "skipped" in r]
    out += ["- Not run: " + r["not_run"] for r in zb_rows if "not_run" in r]
    others = sorted({k for r in zb_rows for k in r["paper"]
                      if k != "1F1B" and k not in r.get("ratio", {})})
    if others:
        out.append(f"- Columns of the paper's rows we do not run: {', '.join(others)} (ZB-V "
                   "needs the layers over two chunks per rank with the first and last stage "
                   "one layer fewer, which our plans, splitting a rank's layers evenly over "
                   "its chunks, cannot express; 1F1B-I is interleaved 1F1B, not part of this "
                   "comparison).")
    return out + [
            "", "### DualPipe (DeepSeek-V3 Table 2; deepseek-ai/DualPipe README)", "",
            f"Same number of pipeline stages (8; DualPipeV on 4 ranks), 20 micro-batches, "
            f"chunk times {dp_setting}, no compute overlap in a pair (`F&B = F + B`, `B` the "
            "whole backward). Bubble: the worst rank's idle time inside its span with free "
            "communication (`analysis.free_comm_ranks` on our orders); activations: stashed "
            "stages' worth at the peak; parameters: stages held per device.", "",
            dualpipe_table(dp_rows), ""] + _dualpipe_notes(dp_rows)


def _dualpipe_notes(rows: list) -> list[str]:
    """Sentences computed from the DualPipe table's rows."""
    same = [r for r in rows if abs(r["bubble"] - r["published_bubble"]) < 1e-9
            and r["params"] == r["published_params"]
            and r["activations"] == r["published_activations"]]
    notes = [f"- {len(same)} of {len(rows)} rows match the published bubble, parameters and "
             "activations exactly."]
    for r in rows:
        if r not in same:
            notes.append("- {} at F={:g}, B={:g}, W={:g}: our order idles {:g} against the "
                         "published {:g} ({:+g})".format(r["method"], *r["times"], r["bubble"],
                                                         r["published_bubble"],
                                                         r["bubble"] - r["published_bubble"])
                         + "; DeepSeek's form is exact at `W = 0` and `W = F` only "
                         "(`strategies.schedules.dual.span_excess`).")
    return notes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--cluster", default="dgx-a100:8")
    ap.add_argument("--plan", default="tp=8,pp=8,mbs=1,gbs=32,recompute=selective,sp=true")
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved:2,interleaved:4")
    ap.add_argument("--sweep-microbatches", default=None)
    ap.add_argument("--pair", default="1f1b,interleaved:2",
                    help="schedules of the second picture")
    ap.add_argument("--pair-gbs", type=int, default=16, help="global batch of the second picture")
    ap.add_argument("--zero-bubble", default="1f1b,zb-h1,zb-h2,zb-v,dualpipe,dualpipev",
                    help="schedules of the third picture (empty: none)")
    ap.add_argument("--no-papers", action="store_true",
                    help="leave out the papers' tables (experiments/schedule_papers.py)")
    a = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    final = {k: rel(os.path.join(a.out, f"{NAME}_{k}.png"))
             for k in ("timeline", "sweep", "1f1b_vs_interleaved", "zero_bubble")}
    pair_plan = with_gbs(a.plan, a.pair_gbs)
    with ReportWriter(a.out) as w:
        main_out = paraplan(compare_args(a, a.plan, a.schedules, w.path(f"{NAME}_timeline.png"),
                                         w.path(f"{NAME}_sweep.png")))
        pair_out = paraplan(compare_args(a, pair_plan, a.pair,
                                         w.path(f"{NAME}_1f1b_vs_interleaved.png"), None))
        main_cmd = shell(["paraplan", *compare_args(a, a.plan, a.schedules, final["timeline"],
                                                    final["sweep"])])
        pair_cmd = shell(["paraplan", *compare_args(a, pair_plan, a.pair,
                                                    final["1f1b_vs_interleaved"], None)])
        zb_out, zb_cmd = None, ""
        if a.zero_bubble:
            zb_out = paraplan(compare_args(a, pair_plan, a.zero_bubble,
                                           w.path(f"{NAME}_zero_bubble.png"), None))
            zb_cmd = shell(["paraplan", *compare_args(a, pair_plan, a.zero_bubble,
                                                      final["zero_bubble"], None)])
        papers = None
        if not a.no_papers:
            from experiments.schedule_papers import dualpipe_rows, zero_bubble_rows
            papers = (zero_bubble_rows(), dualpipe_rows(f=1.0, b=1.0, w=1.0)
                      + dualpipe_rows(f=1.0, b=1.0, w=0.5), "F = B = W = 1, then W = 0.5")
        w.json(f"{NAME}.json", {"compare": main_out, "pair": pair_out, "zero_bubble": zb_out,
                                "papers": None if papers is None else
                                {"zero_bubble": papers[0], "dualpipe": papers[1]},
                                "commands": [main_cmd, pair_cmd] + ([zb_cmd] if zb_cmd else [])})
        w.text(f"{NAME}.md", render(main_out, pair_out,
                                    this_command("report_schedules.py", argv), main_cmd, pair_cmd,
                                    zb_out, zb_cmd, papers))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
