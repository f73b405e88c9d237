"""Report: where and why the analytic estimate and the simulation disagree
(docs/reports/analytic_vs_sim.md).

Enumerates a plan space with itertools (tp, pp, micro-batch size, schedule, ZeRO stage) for a
model on clusters of 2 to 8 nodes, keeps the plans that resolve and fit in memory, and runs
each through ``estimate`` and ``simulate`` (folded). Both read the same cost model, so the
step-time difference is dynamics; it is split into the exposed-time components of the two
breakdowns (``bubble``, ``pp_comm``, ``dp_comm``, ``tp_comm``, …), whose differences add up to
the step-time difference exactly.

    python experiments/report_analytic_vs_sim.py                # docs/reports/
    python experiments/report_analytic_vs_sim.py --quick --out /tmp/r   # a few plans, seconds
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Iterator, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, header, md_table, rel,  # noqa: E402
                                 this_command)
from strategies.errors import SpecError  # noqa: E402
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan import Plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

NAME = "analytic_vs_sim"

# (model, cluster preset, nodes, global batch): the full study and the quick one.
SETTINGS = [("gpt-18.4b", "dgx-a100", n, 128) for n in (2, 4, 8)]
QUICK = [("gpt-1.7b", "dgx-a100", 2, 16)]
GRID = {"tp": (1, 2, 4, 8), "pp": (1, 2, 4, 8), "mbs": (1, 2, 4),
        "schedule": ("1f1b", "interleaved:2", "gpipe"), "zero": (0, 1)}
QUICK_GRID = {"tp": (2, 8), "pp": (1, 2, 4), "mbs": (1,), "schedule": ("1f1b", "interleaved:2"),
              "zero": (1,)}

# The parts a difference is split into: the breakdown's keys, with compute, recomputation
# and bubble summed (how a step divides between them depends on which stage a breakdown is
# taken on: the simulation's critical rank, the estimator's bottleneck stage).
PARTS = {"pipeline": ("compute", "recompute", "bubble"), "pp_comm": ("pp_comm",),
         "dp_comm": ("dp_comm",), "tp_comm": ("tp_comm",), "cp_comm": ("cp_comm",),
         "ep_comm": ("ep_comm",), "optimizer": ("optimizer",)}
WHY = {
    "pipeline": "compute + recompute + bubble: the simulated schedule (fill, drain, waits on "
                "heavier stages, messages on the critical path) against the closed form",
    "pp_comm": "point-to-point transfers left exposed",
    "dp_comm": "data-parallel gradient reduction and parameter gathers: overlap with the "
               "backward and sharing of the network",
    "tp_comm": "tensor-parallel collectives", "cp_comm": "context-parallel ring",
    "ep_comm": "expert all-to-all", "optimizer": "optimizer step",
}


def plan_space(grid: dict[str, Sequence[Any]]) -> Iterator[Plan]:
    """Every combination of the grid that makes a valid ``Plan`` (dp left to the job)."""
    for tp, pp, mbs, sched, zero in itertools.product(
            grid["tp"], grid["pp"], grid["mbs"], grid["schedule"], grid["zero"]):
        name, _, v = sched.partition(":")
        if pp == 1 and name != "1f1b":
            continue
        try:
            yield Plan(tp=tp, pp=pp, mbs=mbs, schedule=name, vpp=int(v or 1), zero=zero,
                       sp=tp > 1, recompute="selective")
        except SpecError:
            continue


def jobs_of(settings, grid) -> tuple[list[tuple[str, Job]], dict[str, int]]:
    """The jobs that resolve and fit, labelled by setting; counts of the others by reason."""
    out, dropped = [], {"invalid": 0, "over memory": 0}
    for model, preset, nodes, gbs in settings:
        m, cl = model_preset(model), cluster_preset(preset, nodes)
        for plan in plan_space(grid):
            try:
                job = make_job(m, cl, plan, global_batch=gbs)
            except SpecError:
                dropped["invalid"] += 1
                continue
            if not estimate(job).fits:
                dropped["over memory"] += 1
                continue
            out.append((f"{model} on {preset}:{nodes}", job))
    return out, dropped


def evaluate(item: tuple[str, Job]) -> dict[str, Any]:
    from simulator.simulate import simulate
    setting, job = item
    est = estimate(job)
    res = simulate(job)
    sim_b = {k: float(res.metrics["breakdown_s"][k]) for k in BREAKDOWN_KEYS}
    p = job.plan
    return {"setting": setting, "plan": p.short(), "gpus": job.cluster.num_gpus,
            "tp": p.tp, "pp": p.pp, "dp": p.dp, "mbs": p.mbs, "vpp": p.vpp,
            "schedule": p.schedule, "zero": p.zero, "num_microbatches": job.num_microbatches,
            "analytic_step_time_s": est.step_time_s, "simulated_step_time_s": res.step_time_s,
            "diff_pct": 100 * (res.step_time_s / est.step_time_s - 1),
            "analytic_breakdown_s": dict(est.breakdown_s), "simulated_breakdown_s": sim_b,
            "diff_parts_s": {part: sum(sim_b[k] - est.breakdown_s[k] for k in keys)
                             for part, keys in PARTS.items()},
            "sim_wall_s": res.wall_s}


def run_all(items, jobs: int) -> list[dict[str, Any]]:
    if jobs <= 1:
        return [evaluate(i) for i in items]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(evaluate, items, chunksize=1))


def dominant(row: dict[str, Any]) -> str:
    """The part with the largest absolute difference."""
    d = row["diff_parts_s"]
    return max(d, key=lambda k: abs(d[k]))


def pct(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    diffs = [r["diff_pct"] for r in rows]
    absd = [abs(x) for x in diffs]
    comp = {}
    for k in PARTS:
        share = [100 * r["diff_parts_s"][k] / r["analytic_step_time_s"] for r in rows]
        comp[k] = {"mean_pct_of_step": statistics.fmean(share) if share else 0.0,
                   "mean_abs_pct_of_step": statistics.fmean(map(abs, share)) if share else 0.0,
                   "dominant_in": sum(dominant(r) == k for r in rows)}
    groups: dict[str, dict[str, Any]] = {}
    for name, pred in (("pp = 1", lambda r: r["pp"] == 1),
                       ("pp > 1, 1F1B / GPipe", lambda r: r["pp"] > 1 and r["vpp"] == 1),
                       ("pp > 1, interleaved", lambda r: r["vpp"] > 1),
                       ("dp = 1", lambda r: r["dp"] == 1),
                       ("dp > 1", lambda r: r["dp"] > 1),
                       ("ZeRO 0", lambda r: r["zero"] == 0),
                       ("ZeRO 1", lambda r: r["zero"] == 1)):
        sel = [r for r in rows if pred(r)]
        if sel:
            groups[name] = {"plans": len(sel),
                            "median_abs_diff_pct": statistics.median(abs(r["diff_pct"]) for r in sel),
                            "max_abs_diff_pct": max(abs(r["diff_pct"]) for r in sel),
                            "mean_diff_pct": statistics.fmean(r["diff_pct"] for r in sel)}
    return {"plans": len(rows), "mean_diff_pct": statistics.fmean(diffs) if diffs else None,
            "median_abs_diff_pct": statistics.median(absd) if absd else None,
            "p90_abs_diff_pct": pct(absd, 0.9), "max_abs_diff_pct": max(absd, default=None),
            "within_1pct": sum(x <= 1 for x in absd), "within_5pct": sum(x <= 5 for x in absd),
            "components": comp, "groups": groups}


def draw(rows: list[dict[str, Any]], summary: dict[str, Any], path: str) -> None:
    from simulator.output.figures import new_figure, save_figure
    fig, (ax1, ax2) = new_figure((12.5, 5.0), ncols=2)
    markers = {1: "o", 2: "s", 4: "^", 8: "D"}
    colours = {"1f1b": "#4C78A8", "gpipe": "#54A24B", "interleaved": "#F58518"}
    for r in rows:
        ax1.scatter(r["analytic_step_time_s"], r["diff_pct"], marker=markers.get(r["pp"], "x"),
                    color=colours.get(r["schedule"], "grey"), s=22, alpha=0.75,
                    edgecolors="none")
    ax1.axhline(0, color="black", linewidth=0.7)
    ax1.set_xscale("log")
    ax1.set_xlabel("analytic step time (s)")
    ax1.set_ylabel("simulated / analytic - 1 (%)")
    for pp, mk in markers.items():
        ax1.scatter([], [], marker=mk, color="grey", label=f"pp={pp}")
    for s, c in colours.items():
        ax1.scatter([], [], marker="o", color=c, label=s)
    ax1.legend(fontsize=7, ncols=2)
    ax1.grid(True, linewidth=0.3, alpha=0.5)
    ax1.set_title(f"{summary['plans']} plans: step-time difference", fontsize=10)
    keys = [k for k in PARTS if any(abs(r["diff_parts_s"][k]) > 1e-9 for r in rows)] or ["pipeline"]
    data = [[100 * r["diff_parts_s"][k] / r["analytic_step_time_s"] for r in rows]
            for k in keys]
    try:
        ax2.boxplot(data, orientation="horizontal", flierprops={"markersize": 3})
    except TypeError:   # matplotlib < 3.10
        ax2.boxplot(data, vert=False, flierprops={"markersize": 3})
    ax2.set_yticks(range(1, len(keys) + 1), keys)
    ax2.axvline(0, color="black", linewidth=0.7)
    ax2.set_xlabel("simulated - analytic exposed time (% of the analytic step)")
    ax2.grid(True, axis="x", linewidth=0.3, alpha=0.5)
    ax2.set_title("where the difference comes from (one box per part)", fontsize=10)
    save_figure(fig, path)


def findings(rows: list[dict[str, Any]], s: dict[str, Any]) -> list[str]:
    """The written finding, every number taken from this run."""
    if not rows:
        return ["No plan fitted; nothing to compare."]
    comp = s["components"]
    ranked = sorted(comp, key=lambda k: -comp[k]["mean_abs_pct_of_step"])
    top = [k for k in ranked if comp[k]["mean_abs_pct_of_step"] > 0][:3]
    out = [f"Over {s['plans']} plans the simulated step is on average "
           f"{s['mean_diff_pct']:+.2f} % off the analytic one (median |difference| "
           f"{s['median_abs_diff_pct']:.2f} %, 90th percentile {s['p90_abs_diff_pct']:.2f} %, "
           f"worst {s['max_abs_diff_pct']:.2f} %); {s['within_1pct']} plans agree within 1 % "
           f"and {s['within_5pct']} within 5 %."]
    if top:
        out.append("The difference comes mostly from " + "; ".join(
            f"`{k}` ({WHY[k]}: {comp[k]['mean_abs_pct_of_step']:.2f} % of the step on average, "
            f"mean signed {comp[k]['mean_pct_of_step']:+.2f} %, the largest component in "
            f"{comp[k]['dominant_in']} plans)" for k in top) + ".")
    g = s["groups"]
    pairs = [("pp = 1", "pp > 1, 1F1B / GPipe"), ("pp > 1, 1F1B / GPipe", "pp > 1, interleaved"),
             ("dp = 1", "dp > 1"), ("ZeRO 0", "ZeRO 1")]
    for a, b in pairs:
        if a in g and b in g:
            out.append(f"{a}: median |difference| {g[a]['median_abs_diff_pct']:.2f} % "
                       f"({g[a]['plans']} plans, worst {g[a]['max_abs_diff_pct']:.2f} %) against "
                       f"{b}: {g[b]['median_abs_diff_pct']:.2f} % ({g[b]['plans']} plans, worst "
                       f"{g[b]['max_abs_diff_pct']:.2f} %).")
    worst = sorted(rows, key=lambda r: -abs(r["diff_pct"]))[:5]
    out.append("Largest disagreements: " + "; ".join(
        f"{r['plan']} ({r['setting']}, {r['num_microbatches']} micro-batches): "
        f"{r['diff_pct']:+.2f} %, mostly `{dominant(r)}` "
        f"({r['diff_parts_s'][dominant(r)]:+.3f} s)" for r in worst) + ".")
    return out


DETAIL = ("pipeline", "pp_comm", "dp_comm", "tp_comm")


def _arrow(row: dict[str, Any], part: str) -> str:
    a = sum(row["analytic_breakdown_s"][k] for k in PARTS[part])
    b = sum(row["simulated_breakdown_s"][k] for k in PARTS[part])
    return f"{a:.3f} → {b:.3f}"


def render(rows, summary, dropped, settings, grid, command: str, wall: float) -> str:
    parts = [header("Analytic estimate against simulation", command),
             "Both read the same cost model (`strategies/`), so any difference between "
             "`paraplan estimate` and `paraplan simulate` comes from dynamics the closed "
             "forms leave out. The step-time difference is split into the exposed-time "
             "components of the two breakdowns (their differences add up to it exactly); "
             "compute, recomputation and bubble are summed as `pipeline`, since how a step "
             "divides between them depends on the stage a breakdown is taken on (the "
             "simulation's critical rank, the estimator's bottleneck stage).", "",
             "Plan space (itertools over the grid, recompute=selective, sp when tp > 1; dp "
             "from the GPU count): " + ", ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}"
                                                 for k, v in grid.items()) + ".", "",
             md_table(["model", "cluster", "GPUs", "global batch"],
                      [[m, f"{p}:{n}", n * 8, g] for m, p, n, g in settings]), "",
             f"{summary['plans']} plans fit and were simulated; "
             f"{dropped['invalid']} combinations do not resolve (divisibility, schedule rules) "
             f"and {dropped['over memory']} do not fit in memory.", "",
             "## Finding", ""]
    parts += [f"- {f}" for f in findings(rows, summary)]
    parts += ["", f"![analytic vs simulated]({NAME}.png)", "", "## By group", "",
              md_table(["group", "plans", "median abs. diff", "mean diff", "worst abs. diff"],
                       [[k, v["plans"], f"{v['median_abs_diff_pct']:.2f} %",
                         f"{v['mean_diff_pct']:+.2f} %", f"{v['max_abs_diff_pct']:.2f} %"]
                        for k, v in summary["groups"].items()]), "",
              "## By component", "",
              md_table(["component", "mean abs. (% of step)", "mean signed (% of step)",
                        "largest in (plans)", "what it is"],
                       [[k, f"{v['mean_abs_pct_of_step']:.3f}", f"{v['mean_pct_of_step']:+.3f}",
                         v["dominant_in"], WHY[k]]
                        for k, v in summary["components"].items()], align="lrrrl"), "",
              "## The largest disagreements in detail", "",
              "Exposed seconds per step, analytic → simulated, of each part:", "",
              md_table(["setting", "plan", "diff"] + list(DETAIL),
                       [[r["setting"], r["plan"], f"{r['diff_pct']:+.2f} %"]
                        + [_arrow(r, k) for k in DETAIL]
                        for r in sorted(rows, key=lambda r: -abs(r["diff_pct"]))[:10]],
                       align="llr" + "r" * len(DETAIL)), "",
              "## Every plan", "",
              md_table(["setting", "plan", "m", "analytic s", "simulated s", "diff",
                        "largest component"],
                       [[r["setting"], r["plan"], r["num_microbatches"],
                         f"{r['analytic_step_time_s']:.4f}", f"{r['simulated_step_time_s']:.4f}",
                         f"{r['diff_pct']:+.2f} %",
                         f"{dominant(r)} {r['diff_parts_s'][dominant(r)]:+.4f} s"]
                        for r in sorted(rows, key=lambda r: -abs(r["diff_pct"]))],
                       align="llrrrrl"), "",
              f"Wall time: {wall:.0f} s."]
    return "\n".join(parts)


def _rounded(obj: Any) -> Any:
    """Floats to 7 significant digits (the JSON of hundreds of plans stays small)."""
    if isinstance(obj, float):
        return float(f"{obj:.7g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--quick", action="store_true", help="a few small plans (tests)")
    ap.add_argument("--jobs", type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    a = ap.parse_args(argv)
    argv = [x for x in (sys.argv[1:] if argv is None else argv)]
    settings, grid = (QUICK, QUICK_GRID) if a.quick else (SETTINGS, GRID)
    t0 = time.perf_counter()
    items, dropped = jobs_of(settings, grid)
    rows = run_all(items, a.jobs)
    summary = summarize(rows)
    wall = time.perf_counter() - t0
    shown = [x for i, x in enumerate(argv)
             if x != "--jobs" and not (i and argv[i - 1] == "--jobs")]
    command = this_command("report_analytic_vs_sim.py", shown)
    with ReportWriter(a.out) as w:
        w.draw(f"{NAME}.png", lambda p: draw(rows, summary, p))
        w.json(f"{NAME}.json", {"settings": settings, "grid": grid, "dropped": dropped,
                                "summary": summary, "plans": _rounded(rows)}, compact=True)
        w.text(f"{NAME}.md", render(rows, summary, dropped, settings, grid, command, wall))
        for f in w.commit():
            print(f"wrote {rel(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
