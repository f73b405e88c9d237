"""Report: DeepSeek-V3's step on 2,048 H800 under DualPipe and 1F1B (docs/reports/deepseek_v3.md).

The plan DeepSeek-V3's report states (arXiv 2412.19437 §3.2-3.3): pp 16, ep 64, tp 1, ZeRO-1,
DualPipe, its FP8 recipe, HAI-LLM, 15,360 sequences of 4,096 tokens per step in the steady
phase, recomputing RMSNorm, the MLA up-projections and the SwiGLU output (§3.3.2). The same
plan under 1F1B for contrast. For each: the analytic estimate at the report's batch, and the
event-by-event simulation (2,048 GPUs on the contended network, folded) at ``--sim-gbs``
sequences (default: the report's batch, the full step), with a timeline
of a window of the step (a few ranks, a few micro-batches, every stream: the all-to-all
lanes under the compute).

    python experiments/report_deepseek.py                      # docs/reports/ (~15 s)
    python experiments/report_deepseek.py --model tiny-moe.yaml --cluster hgx-h800:2 \\
        --plan tp=1,pp=4,ep=4,zero=1,mbs=1 --gbs 64 --sim-gbs 32 --out /tmp/r   # seconds
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import multiprocessing
import signal
from dataclasses import replace
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import (DEFAULT_OUT, ReportWriter, fmt, header, md_table,  # noqa: E402
                                 rel, shell, this_command)

NAME = "deepseek_v3"
GIB = 2 ** 30
#: The published run this report reads its measured step and its plan from
#: (strategies/reference): the facts the report states (DeepSeek-V3 §3.2-3.3) live in that
#: entry, so ``validate`` and this report build the same job.
CASE_ID = "deepseekv3_report_h800_2048"
SCHEDULES = ("dualpipe", "1f1b")


def _entry() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The published run's entry and its siblings (``published_2026.json``)."""
    from strategies.reference.cases import DATA, load_reference
    entries = load_reference(os.path.join(os.path.dirname(DATA), "published_2026.json"))
    return next(c for c in entries if c["id"] == CASE_ID), entries


def reference_plan() -> str:
    """The plan ``validate`` builds for the published run (``strategies.reference.cases.
    case_from_entry``), without schedule and batch (added per row): pp 16, ep 64, tp 1, ZeRO-1
    (§3.2), §3.2.2's node-deduplicated dispatch (``deepep``), the recomputation of §3.2.3 and
    §3.3.2 (RMSNorm, the MLA up-projections, the SwiGLU output)."""
    from strategies.reference.cases import case_from_entry
    entry, siblings = _entry()
    p = case_from_entry(entry, siblings).job.plan
    parts = [f"tp={p.tp}", f"pp={p.pp}", f"ep={p.ep}", f"zero={p.zero}", f"mbs={p.mbs}",
             f"recompute={p.recompute}"]
    if p.recompute == "selective" and p.recompute_modules:
        parts.append("recompute_modules=" + "+".join(p.recompute_modules))
    return ",".join(parts + [f"moe_dispatcher={p.moe_dispatcher}"])


def measured_reference() -> dict[str, Any]:
    """The published run's measured step (``strategies.reference.measured.measured_step``)."""
    from strategies.reference.measured import measured_step
    case, _ = _entry()
    step, how = measured_step(case)
    n = int(case["hardware"]["n_gpus"])
    gbs, s = int(case["plan"]["global_batch"]), int(case["model"]["seq_len"])
    return {"id": CASE_ID, "step_time_s": step, "how": how, "n_gpus": n, "gbs": gbs,
            "seq_len": s, "tokens_per_s_per_gpu": gbs * s / (step * n),
            "gpu_hours_per_trillion_tokens":
                case["measured"]["gpu_hours_per_trillion_tokens"], "source": case["source"]}


def padded_model(model, pp: int):
    """``model`` with every stage as the busiest of its uneven split (``ceil(layers/pp)``
    layers each; validate's rule, ``strategies.reference.plan_reading``): the even split DualPipe
    needs. ``(model, layers added)``."""
    from strategies.reference.plan_reading import balanced_layers
    padded = balanced_layers(model, pp, [])
    extra = padded.num_layers - model.num_layers
    return (replace(padded, name=f"{model.name}-pad{padded.num_layers}") if extra else padded,
            extra)


def end_stage_split(real_layers: int, pp: int) -> tuple[int, int]:
    """``(first, last)`` decoder layers of the end stages of the real model's uneven split:
    every middle stage the padded model's ``ceil(layers/pp)``, the layers padding added
    taken off the two end stages, the last one (which also runs the head, the loss and any
    MTP module) giving the odd one: calibration §5.33's ``Et*3|(t*4|)*14,t*2mL`` for 61
    layers on 16 stages, ``(3, 2)``. Under DualPipe rank 0 holds both end stages, so the
    padded model's end ranks carry ``2·ceil(layers/pp)`` layers where this split's carry
    ``first + last``. ``ValueError`` where an end stage would be left with no layer."""
    if pp < 2 or real_layers < 1:
        raise ValueError(f"end_stage_split: pp={pp}, real_layers={real_layers}: must be "
                         ">= 2 and >= 1")
    per = -(-real_layers // pp)
    extra = per * pp - real_layers
    first, last = per - extra // 2, per - (extra - extra // 2)
    if first < 1 or last < 1:
        raise ValueError(f"end_stage_split: real_layers={real_layers} on pp={pp} leaves "
                         f"first={first}, last={last}: each end stage must keep a layer")
    return first, last


def job_of(model, cluster: str, plan: str, schedule: str, gbs: int, dtype: str,
           framework: str):
    """The job of ``plan`` with ``schedule`` and ``gbs`` sequences (the CLI's parsers)."""
    from simulator.cli.common import parse_cluster_arg
    from strategies.framework import get_profile
    from strategies.job import make_job
    from strategies.plan import plan_from_mapping, plan_mapping
    fw = get_profile(framework)
    raw = plan_mapping(f"{plan},schedule={schedule},gbs={gbs}")
    return make_job(model, parse_cluster_arg(cluster), plan_from_mapping(raw, fw.plan_defaults()),
                    dtype=dtype, framework=fw)


def a2a_seconds(records, step: float) -> dict[str, float]:
    """Expert all-to-all seconds per rank over the step, the mean over the simulated ranks:
    in flight (the union of a rank's dispatch and combine intervals), under that rank's
    compute, and exposed (the breakdown's ``ep_comm``: in flight while the rank computes
    nothing, ``simulator.metrics.rank_breakdown``). Every schedule moves the same all-to-all
    bytes per step, so the means compare schedules; one rank's figures do not (a DualPipe
    rank holds two stages' layers)."""
    from collections import defaultdict

    from simulator.metrics import COMM_KINDS, intersect, measure, rank_breakdown, union
    by_rank = defaultdict(list)
    for r in records:
        by_rank[r.rank].append(r)
    window, tot = [(0.0, step)], {"in_flight_s": 0.0, "under_compute_s": 0.0, "exposed_s": 0.0}
    for mine in by_rank.values():
        a2a = intersect(union([(r.start + r.wait, r.end) for r in mine
                               if COMM_KINDS.get(r.kind) == "ep_comm"]), window)
        busy = intersect(union([(r.start, r.end) for r in mine if r.stream == "compute"]),
                         window)
        tot["in_flight_s"] += measure(a2a)
        tot["under_compute_s"] += measure(intersect(a2a, busy))
        tot["exposed_s"] += rank_breakdown(mine, step)[0]["ep_comm"]
    return {k: v / max(len(by_rank), 1) for k, v in tot.items()}


def window_of(result, m: int, periods: float = 3.0) -> tuple[float, float]:
    """A window of about ``periods`` micro-batches' worth of one rank's work, centred on the
    middle of the step (the steady state)."""
    mid, w = result.step_time_s / 2, periods * result.step_time_s / max(m, 1)
    return max(0.0, mid - w / 2), min(result.step_time_s, mid + w / 2)


def simulate_row(task: dict[str, Any]) -> dict[str, Any]:
    """One simulated row (runs in a worker process): the simulation's JSON figures, the
    all-to-all seconds of its critical rank and the timeline window written to
    ``task['timeline']``."""
    from simulator.output.timeline import draw_timeline
    from simulator.simulate import simulate, to_json
    job = job_of(task["model"], task["cluster"], task["plan"], task["schedule"], task["gbs"],
                 task["dtype"], task["framework"])
    t0 = time.perf_counter()
    res = simulate(job)
    out = to_json(res, job)
    out["wall_s"] = time.perf_counter() - t0
    out["a2a"] = a2a_seconds(res.records, res.step_time_s)
    lo, hi = window_of(res, job.num_microbatches)
    out["window_s"] = [lo, hi]
    draw_timeline(res, task["timeline"], max_ranks=task["ranks"], detail=("comm",),
                  window=(lo, hi),
                  title=f"{task['schedule']}: {job.model.name} {job.plan.short()} on "
                        f"{job.cluster.name}, {lo:.4g}-{hi:.4g} s of the step")
    keep = ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction",
            "max_stage_bubble_fraction", "breakdown_s",
            "memory", "memory_by_stage", "fits", "num_microbatches", "exposed_comm_s",
            "overlapped_comm_s", "events", "wall_s", "analytic_step_time_s", "fold_note",
            "simulated_ranks", "critical_rank", "a2a", "window_s")
    return {k: out[k] for k in keep}


def estimate_row(model, a: argparse.Namespace, schedule: str, gbs: int,
                 plan: str | None = None) -> dict[str, Any]:
    """The analytic estimate's step and memory figures of ``plan`` (None: ``a.plan``)."""
    from strategies.estimate.scalar import estimate
    job = job_of(model, a.cluster, plan or a.plan, schedule, gbs, a.dtype, a.framework)
    e = estimate(job).to_json()
    keep = ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "breakdown_s", "memory",
            "memory_by_stage", "fits", "num_microbatches")
    return {k: e[k] for k in keep}


def real_split_rows(real, a: argparse.Namespace, pp: int) -> dict[str, Any]:
    """The real model (no padding) on ``end_stage_split``'s uneven split, each schedule's
    analytic estimate at the report's batch: ``{"first", "last", "plan", schedule: row}``,
    or ``{"error": why}`` where the split or the plan does not resolve (a toy model)."""
    from strategies.errors import SpecError
    try:
        first, last = end_stage_split(real.num_layers, pp)
        plan = f"{a.plan},first_stage_layers={first},last_stage_layers={last}"
        out: dict[str, Any] = {"first": first, "last": last, "plan": plan}
        out.update({s: estimate_row(real, a, s, a.gbs, plan) for s in SCHEDULES})
    except (SpecError, ValueError) as e:
        return {"error": str(e)}
    return out


def _stop(signum, frame) -> None:
    """SIGTERM: leave through the ``with`` blocks (the pool terminates its workers, the
    writer removes its temporary files)."""
    raise SystemExit(128 + signum)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="deepseek-v3")
    p.add_argument("--cluster", default="hgx-h800:256")
    p.add_argument("--plan", default=None, help="the plan without schedule and gbs (default: "
                   "the published run's, as validate builds it)")
    p.add_argument("--dtype", default="fp8-blockwise")
    p.add_argument("--framework", default="hai-llm")
    p.add_argument("--gbs", type=int, default=15360, help="sequences per step (the report's)")
    p.add_argument("--sim-gbs", type=int, default=None,
                   help="sequences per simulated step (default: --gbs, the full step; fewer "
                        "for a quicker look, at least 2 x pp micro-batches per pipeline for "
                        "DualPipe)")
    p.add_argument("--ranks", type=int, default=4, help="ranks in the timelines")
    p.add_argument("--workers", type=int, default=2, help="simulations run at once")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    return p.parse_args(argv)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    a.plan = a.plan or reference_plan()
    a.sim_gbs = a.sim_gbs or a.gbs
    from strategies.hf_config import load_model_arg
    from strategies.plan import plan_mapping
    t_start = time.perf_counter()
    real = load_model_arg(a.model)
    pp = int(plan_mapping(a.plan)["pp"])
    model, extra = padded_model(real, pp)
    ref = measured_reference()
    est = {s: estimate_row(model, a, s, a.gbs) for s in SCHEDULES}
    est_sim_batch = {s: estimate_row(model, a, s, a.sim_gbs) for s in SCHEDULES}
    real_split = real_split_rows(real, a, pp) if extra else None
    with ReportWriter(a.out) as w:
        tl = {s: w.path(f"{NAME}_{s}_window.png") for s in SCHEDULES}
        tasks = [{"model": model, "cluster": a.cluster, "plan": a.plan, "schedule": s,
                  "gbs": a.sim_gbs, "dtype": a.dtype, "framework": a.framework,
                  "ranks": a.ranks, "timeline": tl[s]} for s in SCHEDULES]
        signal.signal(signal.SIGTERM, _stop)   # a killed report stops its workers too
        with multiprocessing.Pool(max(1, min(a.workers, len(tasks)))) as pool:
            sims = dict(zip(SCHEDULES, pool.map(simulate_row, tasks, chunksize=1)))
        wall = time.perf_counter() - t_start
        if extra:   # the padded model as a model file, for the commands in the report
            w.json(f"{NAME}_model.json", {k: v for k, v in model.report_dict().items()
                                          if k not in ("params_total", "params_active",
                                                       "params_mtp")})
        data = {"command": this_command("report_deepseek.py", argv), "wall_s": wall,
                "inputs": {"model": a.model, "cluster": a.cluster, "plan": a.plan,
                           "dtype": a.dtype, "framework": a.framework, "gbs": a.gbs,
                           "sim_gbs": a.sim_gbs, "layers": real.num_layers,
                           "layers_added": extra, "padded_model": model.name},
                "reference": ref, "estimate": est, "estimate_at_sim_batch": est_sim_batch,
                "estimate_real_split": real_split, "simulated": sims}
        w.json(f"{NAME}.json", data)
        w.text(f"{NAME}.md", render(a, argv, data, real, model, extra))
        w.commit()
    print(f"wrote {rel(os.path.join(a.out, NAME + '.md'))} in {wall:.0f} s")
    return 0


def real_split_lines(rs: dict[str, Any] | None, real, model, pp: int) -> list[str]:
    """The report's paragraph and table of the real model on its uneven split
    (``real_split_rows``); nothing where no layer was added."""
    if not rs:
        return []
    head = f"## Peak memory on the real {real.num_layers} layers (analytic, the report's batch)"
    if "error" in rs:
        return [head, "", f"Not priced: {rs['error']}.", ""]
    per = model.num_layers // pp
    rows = []
    for s in SCHEDULES:
        e = rs[s]
        by = [x["peak_gib"] for x in e["memory_by_stage"]]
        worst = max(range(len(by)), key=lambda i: (by[i], -i))
        rows.append([s, fmt(e["step_time_s"], 2), fmt(by[0], 1), fmt(by[worst], 1)
                     + ("" if e["fits"] else " (over)"), str(worst)])
    return [head, "",
            f"Split: {rs['first']} layers on stage 0 and {rs['last']} on stage {pp - 1}, "
            f"{per} on every other (calibration §5.33; DeepSeek did not publish its split), "
            f"plan `{rs['plan']}`. Under DualPipe rank 0 holds stage 0 and stage {pp - 1}: "
            f"the padded model gives it {2 * per} layers, this split "
            f"{rs['first'] + rs['last']}, so the padded end ranks' peak above is the "
            "padding's, not the plan's (the middle ranks hold two stages of "
            f"{per} layers either way; calibration §5.138 decomposes the terms).", "",
            md_table(["schedule", "step s", "stage 0 GiB", "peak GiB (worst stage)",
                      "worst stage"], rows), ""]


def render(a, argv, data, real, model, extra) -> str:
    from strategies.plan import plan_mapping
    ref, est, est_m, sims = (data["reference"], data["estimate"],
                             data["estimate_at_sim_batch"], data["simulated"])
    pp = int(plan_mapping(a.plan)["pp"])
    full = a.cluster == "hgx-h800:256"     # the report's cluster: compare with its figure
    model_arg = f"docs/reports/{NAME}_model.json" if extra else a.model
    lines = [header("DeepSeek-V3 on 2,048 H800: DualPipe against 1F1B",
                    data["command"], f"Ran in {data['wall_s']:.0f} s on this machine."), ""]
    lines += [f"Plan: `{a.plan}` with `--framework {a.framework} --dtype {a.dtype}` on "
              f"`{a.cluster}` (DeepSeek-V3 report, arXiv 2412.19437 §3.2-3.3: pp 16, ep 64 "
              "over 8 nodes, tp 1, ZeRO-1, DualPipe; recomputation of RMSNorm, the MLA "
              "up-projections and the SwiGLU output, §3.3.2).", ""]
    if extra:
        lines += [f"**Assumption: {extra} layers added.** `--model {a.model}` gives no even "
                  f"split (`num_layers={real.num_layers}: must be divisible by pp={pp}` "
                  "unless a layout names the per-stage layers: DualPipe takes an uneven "
                  "layout, docs/layout.md; the real model on one is calibration §5.33). "
                  f"Both schedules here run `{model.name}` "
                  f"(`{model_arg}`): every stage as the busiest stage of the uneven split, "
                  f"{model.num_layers // pp} layers each ({model.num_layers} decoder layers, the "
                  f"{extra} added ones MoE layers like the rest; the MTP module on the last "
                  "stage), the rule `validate` applies to every published run whose layers do "
                  "not divide (`strategies/reference/cases.py`). A pipeline's step is set by "
                  "its busiest stage, so this is the step of the uneven split; the model "
                  f"FLOPs behind MFU count the {model.num_layers} layers, "
                  f"{100 * extra / real.num_layers:.0f} % more layer FLOPs than the real "
                  "model's.", ""]
    lines += ["## Step at the report's batch (analytic estimate)", "",
              f"{a.gbs:,} sequences per step. Measured: {ref['step_time_s']:.2f} s per step "
              f"({ref['how']}; {ref['gpu_hours_per_trillion_tokens']:,} H800 GPU-hours per "
              f"trillion tokens, {ref['tokens_per_s_per_gpu']:.0f} tokens/s/GPU; "
              f"`strategies/reference`, case `{ref['id']}`).", ""]
    rows = []
    for s in SCHEDULES:
        e = est[s]
        tok_gpu = e["tokens_per_s"] / ref["n_gpus"]
        rows.append([s, fmt(e["step_time_s"], 2), _pct(e["mfu"]), _pct(e["bubble_fraction"]),
                     fmt(e["breakdown_s"]["ep_comm"], 2), fmt(e["memory"]["peak_gib"], 1)
                     + ("" if e["fits"] else " (over)"),
                     f"{tok_gpu:.0f}" if full else "-",
                     f"{100 * (e['step_time_s'] / ref['step_time_s'] - 1):+.1f} %"
                     if full else "-"])
    lines += [md_table(["schedule", "step s", "MFU", "bubble", "exposed all-to-all s",
                        "peak GiB (worst stage)", "tokens/s/GPU", "vs measured step"], rows),
              ""]
    n_mb = sims["dualpipe"]["num_microbatches"]
    if a.sim_gbs == a.gbs:
        head = (f"{a.sim_gbs:,} sequences per step, the report's batch ({n_mb} micro-batches "
                "per pipeline): the whole step simulated (each run below took the wall time "
                "shown). The analytic estimate at the same batch is beside it.")
    else:
        head = (f"{a.sim_gbs:,} sequences per step ({n_mb} micro-batches per pipeline, "
                f"`--sim-gbs`), fewer than the report's {a.gbs:,}: the step is NOT extended "
                "to the report's batch (`simulator/extend.py` needs two more runs per "
                "schedule and has no proven affine form for DualPipe's figures). The analytic "
                "estimate at the same batch is beside it.")
    lines += ["## Simulated, event by event", "", head, ""]
    rows = []
    for s in SCHEDULES:
        r, e = sims[s], est_m[s]
        rows.append([s, fmt(r["step_time_s"], 3), fmt(e["step_time_s"], 3), _pct(r["mfu"]),
                     _pct(r["bubble_fraction"]), fmt(r["a2a"]["in_flight_s"], 2),
                     fmt(r["a2a"]["under_compute_s"], 2), fmt(r["a2a"]["exposed_s"], 2),
                     fmt(r["memory"]["peak_gib"], 1) + ("" if r["fits"] else " (over)"),
                     f"{r['wall_s']:.0f}"])
    lines += [md_table(["schedule", "step s (sim)", "step s (analytic)", "MFU", "bubble",
                        "all-to-all in flight s", "under compute s", "exposed s",
                        "peak GiB", "wall s"], rows), "",
              "All-to-all seconds per GPU, the mean over the simulated ranks (both schedules "
              "move the same all-to-all bytes per step): in flight is the union of a rank's "
              "dispatch and combine intervals, under compute the part while the rank "
              "computes, exposed the breakdown's `ep_comm` (the rank idle, waiting for it). "
              "The step's breakdown (`breakdown_s` in the JSON) is the critical rank's. "
              "Bubble: the busiest stage's idle share of the step in both columns (the "
              "estimate's breakdown `bubble` over its step; the simulated stage with the "
              "least bubble). The middle stages also wait for the end ranks, which hold the "
              "embedding, the head and the MTP module: the most idle stage's "
              "(`max_stage_bubble_fraction`) is "
              + ", ".join(f"{s} {_pct(sims[s]['max_stage_bubble_fraction'])}"
                          for s in SCHEDULES)
              + "; the critical rank's own "
              + ", ".join(f"{s} {_pct(sims[s]['breakdown_s']['bubble'] / sims[s]['step_time_s'])}"
                          for s in SCHEDULES) + ".", ""]
    d, o = sims["dualpipe"], sims["1f1b"]
    lines += [f"- Exposed all-to-all: DualPipe {d['a2a']['exposed_s']:.2f} s against 1F1B "
              f"{o['a2a']['exposed_s']:.2f} s; DualPipe's step "
              f"{100 * (d['step_time_s'] / o['step_time_s'] - 1):+.1f} % against 1F1B's.",
              "- Fold: " + d["fold_note"] + ".", ""]
    lines += ["## Peak memory per stage (GiB, simulated batch)", "",
              md_table(["stage"] + list(SCHEDULES),
                       [[i] + [fmt(sims[s]["memory_by_stage"][i]["peak_gib"], 1)
                               for s in SCHEDULES]
                        for i in range(len(d["memory_by_stage"]))]), "",
              "\"over\": above the GPU's usable HBM (the H800 preset's 79.6 GiB; `fits`). "
              "`--framework hai-llm` with `--dtype fp8-blockwise` caches the activations in "
              "FP8 (E5M6 after the attention) and keeps BF16 Adam moments, as the report's "
              "§3.3.3 states (docs/memory.md, docs/calibration.md §5.23); the end ranks hold "
              "each copy's 4 layers of the padded model with the embedding, the head and the "
              "MTP module.", ""]
    lines += real_split_lines(data.get("estimate_real_split"), real, model, pp)
    lines += ["## Timelines", ""]
    for s in SCHEDULES:
        lo, hi = sims[s]["window_s"]
        lines += [f"### {s}: {lo:.4g}-{hi:.4g} s of the simulated step "
                  f"({sims[s]['step_time_s']:.4g} s)", "",
                  f"![{s} window]({NAME}_{s}_window.png)", ""]
    lines += ["## Commands", "", "Each row is also one CLI call (the padded model as a model "
              "file: `--model` takes an estimate's `inputs.model` back):", "", "```bash"]
    for s in SCHEDULES:
        lines.append(shell(["paraplan", "simulate", "--model", model_arg, "--cluster", a.cluster,
                            "--framework", a.framework, "--dtype", a.dtype, "--plan",
                            f"{a.plan},schedule={s},gbs={a.sim_gbs}", "--timeline",
                            f"{s}.png", "--timeline-ranks", str(a.ranks),
                            "--timeline-detail", "comm"]))
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
