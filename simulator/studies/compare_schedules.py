"""One plan under several pipeline schedules, side by side (``paraplan compare``).

Pure logic, no argparse: parse a schedule list (``gpipe,1f1b,interleaved:2``), build one job
per schedule, simulate each and collect the row (step time, bubble, memory, point-to-point
traffic); sweep the bubble over micro-batch counts against the closed forms; draw the sweep.

A schedule that is invalid for this job (interleaving with a micro-batch count that is not a
multiple of ``pp``, ``pp*vpp`` not dividing the layers, …) does not stop the comparison: its
row carries ``valid: false`` and ``error`` (the field, the value and the rule), and the
other schedules are compared. Unknown schedule names are input errors (``SpecError``).

Bubble in two units:

* ``bubble_fraction``: idle compute over the step, on the *bottleneck* stage (the one with the
  least idle time; as ``simulate``'s and ``estimate``'s JSON); ``bubble_fraction_by_stage``
  each stage's.
* ``bubble_over_ideal``: idle over busy time, on the same bottleneck stage, the unit of the closed forms ``(pp-1)/m`` (GPipe, 1F1B) and
  ``(pp-1)/(vpp·m)`` (interleaved). With balanced stages every stage has this value; when
  the embedding or the LM head makes an end stage heavier, the other stages also wait for it
  once per micro-batch, which is imbalance, not schedule bubble, and is left out this way.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

from strategies.errors import SpecError
from strategies.job import Job, make_job
from topologies.gpus import GIB
from strategies.plan import Plan
from strategies.schedules import get_schedule, resolve_name, schedule_names, schedules
from strategies.schedules.analysis import bubble_fraction_closed_form


def _registered(name: str):
    return get_schedule(name) if name in schedule_names() else None

DEFAULT_SCHEDULES = "gpipe,1f1b,interleaved:2,interleaved:4"
MAX_CHUNKS = 64     # largest V of a chunked schedule in ``--schedules``


def schedules_rule() -> str:
    """What an item of ``--schedules`` may be, from the registry."""
    plain = [s.name for s in schedules() if not s.chunked]
    chunked = [s for s in schedules() if s.chunked]
    items = plain + [f"{s.name}:V" for s in chunked]
    text = ", ".join(items[:-1]) + (" or " if len(items) > 1 else "") + items[-1]
    if chunked:
        text += (f" (V from 2 to {MAX_CHUNKS} model chunks per rank; "
                 + "; ".join(f"{s.name} alone means V={s.default_vpp}" for s in chunked) + ")")
    return "each item must be " + text


@dataclass(frozen=True)
class ScheduleChoice:
    """One item of ``--schedules``: ``label`` as given, ``schedule`` and ``vpp``."""

    label: str
    schedule: str
    vpp: int = 1


def parse_schedules(text: str) -> list[ScheduleChoice]:
    """``"gpipe,1f1b,interleaved:2"`` → choices, in order; unknown names, a bad chunk count
    or a repeated item raise ``SpecError`` naming ``--schedules``.

    >>> [c.label for c in parse_schedules("1f1b, interleaved:3")]
    ['1f1b', 'interleaved:3']
    """
    out: list[ScheduleChoice] = []
    for raw in str(text).split(","):
        item = raw.strip().lower()
        if not item:
            continue
        name, _, v = item.partition(":")
        name = resolve_name(name)
        sched = _registered(name)
        if sched is not None and not sched.chunked and not v:
            choice = ScheduleChoice(name, name, 1)
        elif sched is not None and sched.chunked:
            v = v or str(sched.default_vpp)   # as in --plan: schedule=name means its default
            if not v.isdigit() or not 2 <= int(v) <= MAX_CHUNKS:
                raise SpecError("--schedules", raw.strip(), schedules_rule())
            choice = ScheduleChoice(f"{name}:{int(v)}", name, int(v))
        else:
            raise SpecError("--schedules", raw.strip(), schedules_rule())
        if any(c.label == choice.label for c in out):
            raise SpecError("--schedules", raw.strip(), "given twice")
        out.append(choice)
    if not out:
        raise SpecError("--schedules", text, "name at least one schedule; " + schedules_rule())
    return out


def plan_with(plan: Plan, choice: ScheduleChoice, gbs: int | None = None,
              group_size: int | None = None) -> Plan:
    """``plan`` with ``choice``'s schedule and chunks (and ``gbs`` when given);
    ``group_size`` is the interleaved micro-batch group (default ``pp``)."""
    group = group_size if get_schedule(choice.schedule).uses_group else None
    return replace(plan, schedule=choice.schedule, vpp=choice.vpp,
                   microbatch_group_size=group, gbs=plan.gbs if gbs is None else gbs)


def job_for(base: Job, choice: ScheduleChoice, num_microbatches: int | None = None,
            group_size: int | None = None) -> Job:
    """``base`` under ``choice`` (and ``num_microbatches`` per pipeline when given); raises
    ``SpecError`` with the rule where the schedule does not fit."""
    p = base.plan
    gbs = None if num_microbatches is None else num_microbatches * p.mbs * p.dp
    return make_job(base.model, base.cluster, plan_with(p, choice, gbs, group_size),
                    dtype=base.dtype, framework=base.named_framework, system=base.system)


def check_pipelined(plan: Plan) -> None:
    if plan.pp < 2:
        raise SpecError("pp", plan.pp, "schedules differ only with pipeline parallelism: "
                        "give pp >= 2 in --plan")


def p2p_bytes(result) -> dict[str, float]:
    """Point-to-point bytes of one step from the simulated sends: ``total_bytes`` over every
    GPU of the cluster (folded ranks counted with their multiplicity) and ``per_gpu_bytes``
    (the most any one GPU sends)."""
    per_rank: dict[int, float] = {}
    for rec in result.records:
        if rec.kind == "pp_send":
            per_rank[rec.rank] = per_rank.get(rec.rank, 0.0) + rec.nbytes
    total = sum(b * len(result.rank_map.get(r, [r])) for r, b in per_rank.items())
    return {"total_bytes": total, "per_gpu_bytes": max(per_rank.values(), default=0.0)}


def bubble_over_ideal(result) -> float:
    """Idle over busy compute time on the bottleneck stage (see the module docstring):
    ``bubble_fraction`` (the least of ``bubble_fraction_by_stage``) over its complement."""
    f = result.metrics["bubble_fraction"]
    return f / (1.0 - f) if f < 1.0 else float("inf")


def w_share(job: Job) -> float:
    """The weight gradient's share of a layer's compute (``StageCosts.w_share``) where the
    job's schedule splits the backward, else 0 (the closed forms' ``w_share``)."""
    from strategies.cost.stage import stage_costs
    return stage_costs(job).w_share if get_schedule(job.plan.schedule).splits_backward else 0.0


def closed_form(job: Job) -> float:
    """The schedule's closed-form bubble over ideal time, with ``w_share(job)``."""
    p = job.plan
    return bubble_fraction_closed_form(p.schedule, p.pp, job.num_microbatches, p.vpp,
                                       w_share(job))


def row_for(choice: ScheduleChoice, job: Job, result) -> dict[str, Any]:
    """The ``compare`` JSON row of one simulated schedule."""
    from simulator.simulate import to_json
    out = to_json(result, job)
    sim_act = max(result.metrics["peak_activation_bytes"], default=0.0) / GIB
    return {
        "schedule": choice.label, "valid": True, "error": None, "plan": job.plan.short(),
        "vpp": job.plan.vpp, "num_microbatches": job.num_microbatches,
        "step_time_s": out["step_time_s"], "analytic_step_time_s": out["analytic_step_time_s"],
        "tokens_per_s": out["tokens_per_s"], "mfu": out["mfu"],
        "bubble_fraction": out["bubble_fraction"],
        "bubble_fraction_by_stage": result.metrics["bubble_fraction_by_stage"],
        "max_stage_bubble_fraction": out["max_stage_bubble_fraction"],
        "bubble_over_ideal": bubble_over_ideal(result),
        "bubble_closed_form": closed_form(job),
        "memory": {**out["memory"], "simulated_activations_peak_gib": sim_act},
        "fits": out["fits"], "p2p": p2p_bytes(result),
        "exposed_comm_s": out["exposed_comm_s"], "breakdown_s": out["breakdown_s"],
        "events": out["events"], "wall_s": out["wall_s"],
    }


def invalid_row(choice: ScheduleChoice, err: SpecError) -> dict[str, Any]:
    return {"schedule": choice.label, "valid": False, "error": str(err)}


def compare(base: Job, choices: Sequence[ScheduleChoice], fold: bool = True,
            group_size: int | None = None
            ) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    """Rows (one per choice, in order) and the ``(label, SimResult)`` of the valid ones."""
    from simulator.simulate import check_simulable
    from simulator.simulate import simulate
    check_pipelined(base.plan)
    rows, results = [], []
    for choice in choices:
        try:
            job = job_for(base, choice, group_size=group_size)
            check_simulable(job)
        except SpecError as e:
            rows.append(invalid_row(choice, e))
            continue
        res = simulate(job, fold=fold)
        rows.append(row_for(choice, job, res))
        results.append((choice.label, res))
    return rows, results


def default_sweep_microbatches(pp: int) -> list[int]:
    """``pp, 2pp, 4pp, 8pp``: valid for every interleaving with the default group size."""
    return [pp, 2 * pp, 4 * pp, 8 * pp]


def bubble_sweep(base: Job, choices: Sequence[ScheduleChoice], microbatches: Sequence[int],
                 free_comm: bool = True, group_size: int | None = None
                 ) -> list[dict[str, Any]]:
    """For every choice and micro-batch count: the closed form, the simulated
    ``bubble_over_ideal`` over the real network and (``free_comm``) with free communication.
    Combinations the schedule refuses are kept as points with ``error``."""
    from simulator.simulate import simulate
    check_pipelined(base.plan)
    points = []
    for choice in choices:
        for m in microbatches:
            pt: dict[str, Any] = {"schedule": choice.label, "vpp": choice.vpp,
                                  "num_microbatches": m}
            try:
                job = job_for(base, choice, m, group_size)
            except SpecError as e:
                points.append({**pt, "error": str(e)})
                continue
            res = simulate(job)
            pt.update(closed_form=closed_form(job), w_share=w_share(job),
                      simulated=bubble_over_ideal(res),
                      bubble_fraction=res.metrics["bubble_fraction"],
                      step_time_s=res.step_time_s)
            if free_comm:
                pt["simulated_free_comm"] = bubble_over_ideal(simulate(job, free_comm=True))
            points.append(pt)
    return points


def sweep_agreement(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How well the simulated points follow the closed forms.

    For ``simulated`` and ``simulated_free_comm``: ``max_rel_diff``, the largest
    ``|simulated / closed form - 1|`` (absolute agreement; stage imbalance moves it), and
    ``chunk_ratio_max_rel_diff``, the largest distance of ``bubble(vpp, m) / bubble(1, m)``
    from the closed form's ``1/vpp`` (how the bubble shrinks with more chunks), over every
    ``m`` where a non-interleaved point exists.
    """
    out: dict[str, Any] = {}
    for key in ("simulated", "simulated_free_comm"):
        ok = [p for p in points if p.get(key) is not None and p.get("closed_form")]
        if not ok:
            continue
        part: dict[str, Any] = {
            "points": len(ok),
            "max_abs_diff": max(abs(p[key] - p["closed_form"]) for p in ok),
            "max_rel_diff": max(abs(p[key] / p["closed_form"] - 1) for p in ok)}
        base = {p["num_microbatches"]: p[key] for p in ok if p["vpp"] == 1 and p[key] > 0}
        ratios = [abs(p[key] / base[p["num_microbatches"]] * p["vpp"] - 1)
                  for p in ok if p["vpp"] > 1 and p["num_microbatches"] in base]
        part["chunk_ratio_points"] = len(ratios)
        part["chunk_ratio_max_rel_diff"] = max(ratios) if ratios else None
        out[key] = part
    return out


def draw_sweep(points: Sequence[dict[str, Any]], path: str | os.PathLike, pp: int,
               title: str = "") -> None:
    """Bubble over ideal against micro-batches (log-log): closed forms as lines, simulated
    points as filled (network) and hollow (free communication) markers."""
    from simulator.output.figures import new_figure, save_figure
    fig, ax = new_figure((7.5, 5.0))
    colours = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#B279A2", "#72B7B2", "#9D755D"]
    ok = [p for p in points if "error" not in p]
    def family(p: dict[str, Any]) -> tuple:
        """Points whose schedules share a closed form share a line (GPipe and 1F1B do)."""
        sched = get_schedule(p["schedule"].partition(":")[0])
        return (p["vpp"],) + tuple(float(sched.bubble_fraction(pp, k, p["vpp"], p["w_share"]))
                                   for k in (1, 2))

    by_vpp: dict[tuple, list[dict[str, Any]]] = {}
    for p in ok:
        by_vpp.setdefault(family(p), []).append(p)
    for n, ((v, *_), pts) in enumerate(sorted(by_vpp.items())):
        c = colours[n % len(colours)]
        names = ", ".join(dict.fromkeys(p["schedule"] for p in pts))
        ms = sorted({p["num_microbatches"] for p in pts})
        lo, hi = ms[0], ms[-1]
        grid = [lo * (hi / lo) ** (i / 40) for i in range(41)] if hi > lo else [lo]
        sched = get_schedule(pts[0]["schedule"].partition(":")[0])
        w = pts[0]["w_share"]
        form = f"(pp-1)/{'(vpp·m)' if v > 1 else 'm'}" if not sched.splits_backward else \
            f"{sched.name}'s closed form, W share {w:.2f}"
        ax.plot(grid, [float(sched.bubble_fraction(pp, m, v, w)) for m in grid], color=c,
                linewidth=1.2, label=f"{names}: {form}")
        ax.scatter([p["num_microbatches"] for p in pts], [p["simulated"] for p in pts],
                   color=c, marker="o", s=30, zorder=3)
        free = [(p["num_microbatches"], p["simulated_free_comm"]) for p in pts
                if p.get("simulated_free_comm") is not None]
        if free:
            ax.scatter(*zip(*free), facecolors="none", edgecolors=c, marker="s", s=46, zorder=3)
    ax.scatter([], [], color="grey", marker="o", label="simulated (network)")
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="s",
               label="simulated (free communication)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batches per pipeline (m)")
    ax.set_ylabel("bubble / ideal time (bottleneck stage)")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=8)
    ax.set_title(title or f"pipeline bubble, pp={pp}", fontsize=10)
    save_figure(fig, path, field="--sweep")
