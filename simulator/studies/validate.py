"""Measured vs analytic vs simulated step time on published training runs.

The logic behind ``paraplan validate`` and ``experiments/report_validation.py``, kept free of
argparse so that any script can call it: load a reference file (``strategies.reference.cases``),
estimate and simulate every case that resolves to a job, compute each error and the mean
absolute percentage error (MAPE) of each model, and draw the parity plot.

Long pipelines are simulated on fewer micro-batches and extended exactly
(``simulator.extend``). With ``m`` micro-batches per pipeline and ``g`` the schedule's period
(``pp``, or the interleaved micro-batch group size), a 1F1B or interleaved step is warm-up +
``m/g`` identical steady-state periods + cool-down and tail, so it is affine in ``m`` for
``m >= g``: ``step(m) = step(2g) + (m - 2g) / g * (step(2g) - step(g))`` (to rounding: within
1e-13 on every tier-1 case, and ``tests/test_validate_cli.py`` checks it on small jobs). GPipe
(no steady state) and ``exact=True`` simulate all ``m`` micro-batches.

>>> rows = validate_cases(load_cases(tiers=(1,))[:2], simulate=False)
>>> sorted(rows[0])[:4]
['analytic_error_pct', 'analytic_step_time_s', 'assumptions', 'cluster']
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Sequence

from simulator.extend import extended_step_time, period
from simulator.workers import process_pool, terminate_pool
from strategies.errors import SpecError
from strategies.job import Job
from strategies.reference.cases import DATA, Case, case_from_entry, load_reference
from strategies.reference.measured import measured_memory_gib
from strategies.reference.stated_fit import FIT_MARGIN, stated_fit



def load_cases(path: str | None = None, tiers: Sequence[int] | None = (1,)) -> list[Case]:
    """The cases of a reference file (``tiers=None``: every tier). An entry that does not
    resolve (a missing key, a value out of range) becomes a skipped case with the reason,
    never a crash; a file that is not a list of mappings is a ``SpecError``."""
    data = load_reference(path)
    out, seen = [], set()
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise SpecError("reference", f"{path or DATA}[{i}]",
                            f"each case must be a mapping, not a {type(entry).__name__}")
        tier = entry.get("tier", 3)   # it picks the cases to run: checked before any is run
        if isinstance(tier, bool) or not isinstance(tier, int) or tier < 1:
            raise SpecError(f"reference[{i}].tier", tier, "must be an integer >= 1 (absent: 3)")
        if entry.get("id") is not None:
            if str(entry["id"]) in seen:
                raise SpecError(f"reference[{i}].id", entry["id"], "a case id is given twice "
                                "(each case once: a repeat would count twice in the MAPE)")
            seen.add(str(entry["id"]))
        if tiers is not None and tier not in tiers:
            continue
        out.append(_case(entry, i, data))
    return out


def _case(entry: dict, index: int, siblings: Sequence[dict] = ()) -> Case:
    ident = str(entry.get("id") or f"case {index}")
    tier = entry.get("tier", 3)
    try:
        return case_from_entry(entry, siblings)
    except SpecError as e:
        why = f"does not resolve: {e}"
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        why = f"malformed entry ({type(e).__name__}: {e})"
    return Case(id=ident, tier=tier if isinstance(tier, int) else 3, measured_step_s=None,
                how_measured="", job=None, skipped=why, raw=entry)


def simulated_step_time(job: Job, exact: bool = False) -> tuple[float, str]:
    """Simulated seconds per step (folded) and how they were obtained: ``"full"`` or
    ``"extended from m=g and m=2g"`` (``simulator.extend.extended_step_time``)."""
    return extended_step_time(job, exact)


def _pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


def evaluate_case(case: Case, simulate: bool = True, exact: bool = False) -> dict[str, Any]:
    """One row: the case, its measured, analytic and simulated step times and errors (%,
    signed: positive means the model is slower than measured)."""
    row: dict[str, Any] = {"id": case.id, "tier": case.tier, "skipped": case.skipped or None,
                           "measured_step_s": case.measured_step_s,
                           "how_measured": case.how_measured or None,
                           "plan": None, "gpus": None, "analytic_step_time_s": None,
                           "analytic_error_pct": None, "simulated_step_time_s": None,
                           "simulated_error_pct": None, "sim_method": None, "sim_wall_s": None,
                           "assumptions": list(case.assumptions)}
    mem, mem_how = measured_memory_gib(case.raw)
    row.update(measured_memory_gib=mem, memory_how_measured=mem_how or None,
               estimated_memory_gib=None, memory_error_pct=None, hbm_gib=None,
               memory_to_hbm=None, fits_as_stated=None)
    job = case.job
    if job is None:
        return row
    from strategies.estimate.scalar import estimate
    est = estimate(job)
    row.update(plan=job.plan.short(), gpus=job.cluster.num_gpus,
               cluster=job.cluster.name, model=job.model.name, dtype=job.dtype,
               framework=job.framework.name,
               num_microbatches=job.num_microbatches,
               analytic_step_time_s=est.step_time_s,
               analytic_error_pct=_pct(est.step_time_s, case.measured_step_s))
    peak = est.memory.total / 2 ** 30   # the peak stage: what "max over GPUs" measures
    row.update(estimated_memory_gib=peak, memory_error_pct=_pct(peak, mem))
    fit = stated_fit(job, est.memory_by_stage)   # the fullest stage against its own HBM
    row.update(hbm_gib=fit.hbm_bytes / 2 ** 30, memory_to_hbm=fit.ratio,
               fits_as_stated=fit.fits)
    if mem is not None and job.framework.elementwise_kernels == "compiled":
        row["memory_how_measured"] += ("; torch.compile run: the model's memory is eager "
                                       "autograd's saved tensors (Inductor chooses its own)")
    if simulate:
        t0 = time.perf_counter()
        try:
            step, how = simulated_step_time(job, exact)
        except SpecError as e:
            row["sim_method"] = f"not simulated: {e}"
        else:
            row.update(simulated_step_time_s=step, sim_method=how,
                       simulated_error_pct=_pct(step, case.measured_step_s))
        row["sim_wall_s"] = time.perf_counter() - t0
    return row


def _evaluate_star(args: tuple[Case, bool, bool]) -> dict[str, Any]:
    return evaluate_case(*args)


def validate_cases(cases: Sequence[Case], simulate: bool = True, exact: bool = False,
                   jobs: int = 1,
                   on_row: Callable[[int, dict[str, Any]], None] | None = None
                   ) -> list[dict[str, Any]]:
    """``evaluate_case`` over ``cases``, in order; ``jobs > 1`` fans the simulations out over
    local processes. ``on_row(index, row)`` is called as each row is ready (progress)."""
    work = [(c, simulate, exact) for c in cases]
    heavy = [i for i, c in enumerate(cases) if c.job is not None]
    rows: list[dict[str, Any] | None] = [None] * len(cases)
    if jobs > 1 and simulate and len(heavy) > 1:
        # Longest first (more micro-batch steps, more stages) so the pool ends together.
        heavy.sort(key=lambda i: -_cost(cases[i].job))
        pool = process_pool(min(jobs, len(heavy)))
        try:
            futures = {i: pool.submit(_evaluate_star, work[i]) for i in heavy}
            for i in range(len(cases)):
                rows[i] = futures[i].result() if i in futures else _evaluate_star(work[i])
                if on_row:
                    on_row(i, rows[i])
            pool.shutdown()
        except BaseException:       # an error or a stop signal: end the workers now
            terminate_pool(pool)
            raise
        return rows  # type: ignore[return-value]
    for i, w in enumerate(work):
        rows[i] = _evaluate_star(w)
        if on_row:
            on_row(i, rows[i])
    return rows  # type: ignore[return-value]


def _cost(job: Job) -> float:
    m, g = job.num_microbatches, period(job)
    steps = min(m, 3 * g) * job.plan.vpp
    return steps * job.plan.pp


def mape(errors_pct: Iterable[float | None]) -> float | None:
    """Mean absolute percentage error of the given signed errors (None where there are none)."""
    vals = [abs(e) for e in errors_pct if e is not None]
    return sum(vals) / len(vals) if vals else None


def error_summary(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """``mape_pct``, ``cases``, ``max_abs_error_pct`` and ``mean_error_pct`` of the rows'
    ``key`` (a signed error, %), None where no row has one."""
    errs = [r[key] for r in rows if r.get(key) is not None]
    return {"mape_pct": mape(errs), "cases": len(errs),
            "max_abs_error_pct": max((abs(e) for e in errs), default=None),
            "mean_error_pct": sum(errs) / len(errs) if errs else None}


def by_framework(rows: Sequence[dict[str, Any]], simulate: bool = True
                 ) -> dict[str, dict[str, Any]]:
    """Per software stack (the case's framework profile, sorted by name): ``analytic`` and
    ``simulated`` error summaries (``error_summary``) of the rows that have a plan."""
    names = sorted({r["framework"] for r in rows if r.get("framework")})
    out = {}
    for name in names:
        rs = [r for r in rows if r.get("framework") == name]
        out[name] = {"analytic": error_summary(rs, "analytic_error_pct"),
                     "simulated": error_summary(rs, "simulated_error_pct") if simulate
                     else error_summary((), "simulated_error_pct")}
    return out


def not_fitting(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rows whose stated plan does not fit its GPUs' memory
    (``strategies.reference.stated_fit``): ``margin`` (``FIT_MARGIN``), their ``ids``, and how
    many of them each MAPE includes (``in_analytic_mape``, ``in_simulated_mape``: they are
    kept in it, not dropped)."""
    bad = [r for r in rows if r.get("fits_as_stated") is False]
    return {"margin": FIT_MARGIN, "count": len(bad), "ids": [r["id"] for r in bad],
            "in_analytic_mape": sum(r["analytic_error_pct"] is not None for r in bad),
            "in_simulated_mape": sum(r["simulated_error_pct"] is not None for r in bad)}


def summarize(rows: Sequence[dict[str, Any]], simulate: bool = True) -> dict[str, Any]:
    """The JSON of ``paraplan validate``: ``analytic`` and ``simulated`` (each with
    ``mape_pct``, ``cases`` counted and ``max_abs_error_pct``), ``memory`` (the same over the
    rows that print a peak memory, ``memory_error_pct``; ``mape_pct`` None where none does),
    ``does_not_fit`` (``not_fitting``), ``frameworks`` (``by_framework``: the same per software
    stack) and ``cases`` (the rows)."""
    return {"analytic": error_summary(rows, "analytic_error_pct"),
            "simulated": error_summary(rows, "simulated_error_pct") if simulate else
            error_summary((), "simulated_error_pct"),
            "memory": error_summary(rows, "memory_error_pct"),
            "does_not_fit": not_fitting(rows),
            "frameworks": by_framework(rows, simulate),
            "evaluated": sum(r["plan"] is not None for r in rows),
            "skipped": sum(r["plan"] is None for r in rows),
            "cases": list(rows)}


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def draw_parity(summary: dict[str, Any], path: str | os.PathLike, title: str = "") -> None:
    """Parity plot (predicted vs measured seconds per step, log-log), analytic and simulated,
    with the ±10 % and ±20 % bands; ``.png`` or ``.svg``, written atomically."""
    from simulator.output.figures import new_figure, save_figure
    rows = [r for r in summary["cases"] if r["analytic_step_time_s"] is not None]
    fig, ax = new_figure((6.4, 6.0))
    xs = [r["measured_step_s"] for r in rows]
    series = [("analytic", "analytic_step_time_s", "o", "#4C78A8"),
              ("simulated", "simulated_step_time_s", "x", "#E45756")]
    lo = min(xs + [r[k] for r in rows for _, k, _, _ in series if r[k]], default=0.1) / 1.4
    hi = max(xs + [r[k] for r in rows for _, k, _, _ in series if r[k]], default=10.0) * 1.4
    line = [lo, hi]
    ax.plot(line, line, color="black", linewidth=0.8, label="measured = predicted")
    for band, alpha in ((0.1, 0.18), (0.2, 0.09)):
        ax.fill_between(line, [v * (1 - band) for v in line], [v * (1 + band) for v in line],
                        color="grey", alpha=alpha, linewidth=0, label=f"±{band:.0%}")
    for name, key, marker, colour in series:
        pts = [(r["measured_step_s"], r[key]) for r in rows if r[key] is not None]
        part = summary[name]
        if not pts:
            continue
        label = f"{name} (MAPE {part['mape_pct']:.1f} %, {part['cases']} runs)"
        ax.scatter(*zip(*pts), marker=marker, color=colour, s=28, label=label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title or "published runs: predicted vs measured", fontsize=10)
    save_figure(fig, path)
