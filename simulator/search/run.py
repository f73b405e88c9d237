"""One plan search end to end: the space, the analytic scores, the bound-ordered simulations,
the recommendation, and the report (the ``search`` JSON of docs/cli.md). No argparse here.

Determinism: the report is the same whatever the worker count or backend, except ``wall_s``
and the ``execution`` block (how the work ran: workers, simulations run including
speculative ones, results reused from a results file).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from simulator.gc_pause import paused_gc
from simulator.search.executors import Backfill, make_executor, progress_printer
from simulator.search.report import (inputs_block, plan_row, recommended_row, reference_row,
                                     switch_defaults, uneven_rows)
from simulator.search.results_file import Cached, ResultsLog, context_hash
from strategies.cost.system import SystemConfig
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.kinds import with_kind_rows
from strategies.estimate.mixed import estimate_arrays_mixed
from strategies.framework import get_profile
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.rules import check_precision, plan_violations
from strategies.job import make_job
from strategies.model import ModelSpec
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.search.recommend import complexity
from strategies.search.bound_ordered import bound_ordered_search
from strategies.search.plan_rows import plan_key
from strategies.search.prune_rules import RULES
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import Cluster

@dataclass
class SearchConfig:
    model: ModelSpec
    cluster: Cluster
    gbs: int
    dtype: str = "bf16"
    options: SpaceOptions = field(default_factory=SpaceOptions)
    k: int = 5
    tolerance: float = 0.03
    exhaustive: bool = False
    exact: bool = False          # simulate every micro-batch (no affine extension)
    workers: int = 1
    backend: str = "local"
    ray_address: str | None = None
    results: str | None = None
    resume: bool = False
    progress: bool = False
    references: list[tuple[str, Plan]] = field(default_factory=list)
    framework: FrameworkProfile | None = None
    system: SystemConfig | None = None        # policy constants (None: DEFAULT_SYSTEM)


def run_search(cfg: SearchConfig) -> dict[str, Any]:
    """Search and return the report (see the module docstring)."""
    t0 = time.perf_counter()
    m, cl = cfg.model, cfg.cluster
    fw, named = get_profile(cfg.framework), cfg.framework
    sw = switch_defaults(cfg)
    if named is not None:       # a precision the stack lacks: refused before any plan
        check_precision(fw, cfg.dtype)

    def plan_of(i: int) -> Plan:
        if i < 0:                   # a reference plan (known before the space is scored)
            return refs[-i - 1][1]
        return variants[i - base][0] if i >= base else plans[i]

    def kind_priced(analytic: dict, only=None) -> dict:
        """Pipelined plans of a model that mixes kinds of layer, or of an uneven layout: the
        analytic figures the scalar estimate gives them (its stages by kind and by their own
        chunks, ``estimate.kinds``)."""
        return with_kind_rows(m, cl, cfg.dtype, space.arrays, analytic, space.plan, named,
                              cfg.system, only)

    def key_of(i: int) -> str:
        if i < 0:
            return plan_key(refs[-i - 1][1], sw)
        return plan_key(variants[i - base][0], sw) if i >= base else keys[i]

    # the workers start (fork, imports; Ray's start-up) while this process scores the space
    inner = make_executor(cfg.backend, cfg.workers,
                          (m, cl, cfg.dtype, named and named.name, cfg.system, cfg.exact),
                          plan_of, cfg.ray_address)
    ex: Backfill | None = None
    try:
        refs = [resolve_reference(cfg, label, p) for label, p in cfg.references]
        refs = [r for r in refs if r is not None]
        # the reference plans, simulated whatever the search finds (``Backfill.finish``), start
        # now on a pool's workers, idle while this process scores the space; at the end they
        # held up the last worker to finish (with a results file: after the scoring, as before)
        early = Cached(inner, key_of, None) if inner.capacity > 1 and not cfg.results else None
        started = [-j - 1 for j in range(len(refs))] if early is not None else []
        for i in started:
            early.submit(i)
        with paused_gc():     # hundreds of thousands of small tuples, no cycles (gc_pause)
            space = enumerate_space(m, cl, cfg.gbs, cfg.options, framework=named,
                                    dtype=cfg.dtype, system=cfg.system)
        if space.size == 0:
            raise SpecError("search", f"{m.name} on {cl.name}", empty_space_rule(space.pruned))
        analytic = estimate_arrays_mixed(m, cl, cfg.dtype, space.arrays, fw, cfg.system)
        if not cl.uniform:      # the heterogeneity-aware variants order every row by it
            analytic = kind_priced(analytic)
        bounds = step_time_lower_bound(m, cl, cfg.dtype, space.arrays, fw, cfg.system,
                                       costs=analytic["stage_costs"])
        plans = Rows(space.size, space.plan)      # built as the search reads them
        keys = Rows(space.size, lambda i: plan_key(plans[i], sw))
        # a mixed cluster: heterogeneity-aware variants, simulated after the exact search
        variants = [] if cl.uniform else _uneven_variants(cfg, space, analytic)
        base = len(plans)

        log = None
        if cfg.results:
            log = ResultsLog(cfg.results, context_hash(m, cl, cfg.dtype, cfg.gbs,
                                                       named and named.name, cfg.exact,
                                                       cfg.system),
                             cfg.resume)
        # the reference plans, once the search can no longer need them (their bound above
        # its limit, which only falls), and a mixed cluster's variants run on idle workers
        ref_bounds = reference_bounds(cfg, fw, [p for _, p in refs])
        state: list = []
        ex = Backfill(early or Cached(inner, key_of, log),
                      [-j - 1 for j in range(len(refs)) if -j - 1 not in started]
                      + [base + j for j in range(len(variants))],
                      lambda i: i >= base or (bool(state) and not cfg.exhaustive
                                              and ref_bounds[-i - 1] > state[0].limit()),
                      running=started)
        order = np.sort(bounds)
        progress = progress_printer(cfg.progress, lambda st: int(np.searchsorted(
            order, st.limit() if np.isfinite(st.limit()) else order[-1], side="right")))

        def on_result(i: int, t: float, st) -> None:
            state[:] = [st]
            if progress is not None:
                progress(i, t, st)
        cx = Rows(space.size, lambda i: complexity(plans[i], cl.gpus_per_node))
        out = bound_ordered_search(bounds.tolist(), ex, k=cfg.k, tolerance=cfg.tolerance,
                                   exhaustive=cfg.exhaustive, keys=keys, complexity=cx,
                                   on_result=on_result)
        ex.finish()     # a reference plan the search also ran was simulated once (Cached)
        ex.close()
    except BaseException:           # an error or a stop signal: end the workers now
        (ex or inner).close(abort=True)
        raise
    finally:
        if cfg.progress:
            import sys
            sys.stderr.write("\n")
    res = ex.results
    if cl.uniform:      # the rows the report shows (each row's figures are its own)
        analytic = kind_priced(analytic, set(out.ranked) | {out.pick})
    report = {
        "inputs": inputs_block(cfg, space),
        "plans": [plan_row(cfg, space, analytic, bounds, plans, res, i, out.ranked[0], n + 1)
                  for n, i in enumerate(out.ranked)],
        "recommended": recommended_row(cfg, space, analytic, bounds, plans, keys, res, out),
        "references": [reference_row(cfg, label, p, res[-j - 1], res[out.ranked[0]])
                       for j, (label, p) in enumerate(refs)],
        "pruned": {r: space.pruned.get(r, 0) for r, _ in RULES},
        "pruned_rules": {r: text for r, text in RULES},
        "space": {"raw": space.raw, "feasible": space.size},
        "evaluated": {"analytic": space.size, "simulated": len(out.needed),
                      "exhaustive": cfg.exhaustive, "exact": cfg.exact,
                      "extended": sum(1 for i in out.needed
                                      if res[i].get("method", "full") != "full")},
        "execution": {"backend": cfg.backend, "workers": cfg.workers,
                      "simulations_run": ex.inner.simulated,
                      "reused_from_results": ex.inner.reused},
        "wall_s": time.perf_counter() - t0,
    }
    if not cl.uniform:
        report["uneven"] = uneven_rows(cfg, variants, res, base, res[out.ranked[0]])
    return report


def empty_space_rule(pruned: dict[str, int]) -> str:
    """Why a search has no plan, in words: the rule that pruned the last plans (the last,
    in ``RULES`` order, that pruned any: the rules apply in that order), what it means, and
    the plans each rule pruned."""
    counts = [(r, pruned.get(r, 0)) for r, _ in RULES if pruned.get(r, 0)]
    if not counts:
        return "no plan passes the constraints (the space is empty)"
    last = counts[-1][0]
    return (f"no plan passes the constraints: the last {counts[-1][1]:,} were pruned by rule "
            f"{last} ({dict(RULES)[last]}); plans pruned by rule: "
            + ", ".join(f"{r} {n:,}" for r, n in counts))


class Rows(Sequence):
    """``n`` values, ``fn(i)`` each, computed when first read and kept: the search reads the
    plans, keys and complexities of a few rows of a space of thousands."""

    def __init__(self, n: int, fn: Callable[[int], Any]) -> None:
        self.n, self.fn, self.memo = n, fn, {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if not -self.n <= i < self.n:
            raise IndexError(i)
        i %= self.n
        if i not in self.memo:
            self.memo[i] = self.fn(i)
        return self.memo[i]


UNEVEN_CANDIDATES = 24   # heterogeneity-aware variants simulated on a mixed cluster


def _uneven_variants(cfg: SearchConfig, space, analytic) -> list[tuple[Plan, float]]:
    """A mixed cluster: the best plans by analytic score, each made heterogeneity-aware
    (``strategies.search.uneven``): pipeline stages sized to their GPUs (``layers_per_stage``,
    one chunk per rank, capped by each stage's memory) and data-parallel replicas taking
    micro-batches in proportion to their GPUs' speed (``group_microbatches``); the first
    ``UNEVEN_CANDIDATES`` distinct variants whose every stage fits its GPUs' memory, with
    their peak memory (bytes). A heuristic beside the exact search: the analytic score
    prices even work, each pipeline stage on its own GPU type (``estimate_arrays_mixed``)."""
    from strategies.memory.scalar import memory_by_stage, stage_hbm_bytes
    from strategies.search.uneven import balanced_microbatches, balanced_plan
    out: list[tuple[Plan, float]] = []
    seen: set[str] = set()
    sw = switch_defaults(cfg)
    limit = 1.0 - cfg.options.headroom
    for i in np.argsort(analytic["step_time_s"], kind="stable").tolist():
        if len(out) >= UNEVEN_CANDIDATES:
            break
        job = make_job(cfg.model, cfg.cluster, space.plan(i), dtype=cfg.dtype,
                       framework=cfg.framework)
        for plan in (balanced_plan(job, cfg.options.headroom), balanced_microbatches(job)):
            if plan is None or plan_key(plan, sw) in seen or len(out) >= UNEVEN_CANDIDATES:
                continue
            if cfg.framework is not None and plan_violations(cfg.framework, plan):
                continue        # a per-rank layer count the named stack cannot give
            seen.add(plan_key(plan, sw))
            bjob = make_job(cfg.model, cfg.cluster, plan, dtype=cfg.dtype,
                            framework=cfg.framework)
            stages = memory_by_stage(bjob)
            if all(b.total <= stage_hbm_bytes(bjob, s) * limit for s, b in enumerate(stages)):
                out.append((plan, max(b.total for b in stages)))
    return out


def reference_bounds(cfg: SearchConfig, fw: FrameworkProfile, plans: list[Plan]) -> list[float]:
    """The lower bound of each reference plan (seconds), as the search bounds its rows."""
    if not plans:
        return []
    arrays = PlanArrays.from_plans(plans)
    costs = estimate_arrays(cfg.model, cfg.cluster, cfg.dtype, arrays, fw,
                            cfg.system)["stage_costs"]
    return step_time_lower_bound(cfg.model, cfg.cluster, cfg.dtype, arrays, fw, cfg.system,
                                 costs=costs).tolist()


def resolve_reference(cfg: SearchConfig, label: str, plan: Plan, strict: bool = False
                      ) -> tuple[str, Plan] | None:
    """A reference plan resolved against the job (None when it does not apply here; with
    ``strict``, a plan the user gave, the SpecError saying why)."""
    try:
        job = make_job(cfg.model, cfg.cluster, plan, global_batch=cfg.gbs, dtype=cfg.dtype,
                       framework=cfg.framework, system=cfg.system)
    except SpecError:
        if strict:
            raise
        return None
    return label, job.plan


