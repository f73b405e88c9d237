"""The search report's blocks (the ``search`` JSON of docs/cli.md), from what
``run.run_search`` found: the inputs, each simulated row's figures and why it ranks where it
does, the recommended plan with the fastest plan without each dimension it keeps, the
reference plans' rows, and a mixed cluster's heterogeneity-aware variants
(``uneven_rows``). ``switch_defaults``: the switches a row's key leaves out."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.cost import flop_counts
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import Plan
from strategies.search.plan_rows import plan_key
from strategies.stacks.cp_windows import own_exchange_refusal
from strategies.search.recommend import (Without, batching_sentences, exchange_sentence,
                                         expert_choice, expert_sentence, explain)
from topologies.gpus import GIB

if TYPE_CHECKING:
    from simulator.search.run import SearchConfig

BREAKDOWN_ORDER = ("bubble", "pp_comm", "tp_comm", "cp_comm", "ep_comm", "dp_comm",
                   "compute", "recompute", "offload", "optimizer")


def switch_defaults(cfg: SearchConfig) -> dict[str, Any] | None:
    """The switches a row's key leaves out: the named stack's defaults (``row_job`` reads
    them back), or None (``Plan``'s)."""
    return cfg.framework.plan_defaults() if cfg.framework is not None else None


def uneven_rows(cfg: SearchConfig, variants: list, res: dict, base: int,
                best: dict) -> dict[str, Any]:
    """The report's ``uneven`` block: the simulated variants, fastest first, the best
    ``k``."""
    rows = []
    for j, (plan, peak) in enumerate(variants):
        r = res[base + j]
        extra = {k: list(getattr(plan, k)) for k in ("layers_per_stage", "group_microbatches")
                 if getattr(plan, k) is not None}
        row = {"plan": {**plan_dict(plan), **extra},
               "key": plan_key(plan, switch_defaults(cfg)), "label": plan.short()}
        row.update(figures(cfg, plan, r))
        row.update({"memory": {"peak_gib": peak / GIB},
                    "vs_best": r["step_time_s"] / best["step_time_s"] - 1})
        rows.append(row)
    rows.sort(key=lambda x: (x["step_time_s"], x["key"]))
    for n, row in enumerate(rows):
        row["rank"] = n + 1
    return {"candidates": len(variants), "plans": rows[:cfg.k]}


def inputs_block(cfg: SearchConfig, space: Any) -> dict[str, Any]:
    """The report's ``inputs`` block: the model, cluster, batch, precision, stack and the
    search's options (``space``: the enumerated space, for its memory limit in bytes,
    reported in GiB)."""
    return {"model": cfg.model.report_dict(), "cluster": cfg.cluster.name,
            "gpus": cfg.cluster.num_gpus, "gpu": cfg.cluster.gpu.name,
            "gpus_text": cfg.cluster.describe_gpus(),
            "gpu_profile": cfg.cluster.gpu.profile.path if cfg.cluster.gpu.profile else None,
            "global_batch": cfg.gbs, "seq_len": cfg.model.seq_length, "dtype": cfg.dtype,
            "framework": get_profile(cfg.framework).name,
            "framework_limits": cfg.framework is not None,
            "memory_limit_gib": space.memory_limit / GIB, "top": cfg.k,
            "tolerance": cfg.tolerance, "fixed": dict(cfg.options.fixed),
            "max_bubble": cfg.options.max_bubble,
            "schedules": cfg.options.schedules, "max_mbs": cfg.options.max_mbs,
            "allow_cross_node_tp": cfg.options.allow_cross_node_tp,
            "faults": cfg.cluster.faults.to_dict()}


def figures(cfg: SearchConfig, plan: Plan, r: dict) -> dict[str, Any]:
    """A simulated row's figures from its result ``r``: step seconds, tokens per second,
    MFU, bubble fraction, exposed and overlapped communication seconds, the breakdown
    (seconds) and the engine's event count."""
    step = r["step_time_s"]
    n = cfg.cluster.num_gpus
    return {"step_time_s": step, "tokens_per_s": plan.gbs * cfg.model.seq_length / step,
            "mfu": float(flop_counts.mfu(cfg.model, plan.gbs, step, n,
                                         cfg.cluster.mean_peak(cfg.dtype))),
            "bubble_fraction": r["bubble_fraction"], "exposed_comm_s": r["exposed_comm_s"],
            "overlapped_comm_s": r["overlapped_comm_s"], "breakdown_s": dict(r["breakdown_s"]),
            "events": r["events"]}


def reasons(r: dict, best: dict, rank: int) -> list[str]:
    """Why this plan ranks where it does: the parts of its step that exceed the best's."""
    if rank == 1:
        return ["fastest simulated plan"]
    d = r["step_time_s"] - best["step_time_s"]
    out = [f"{100 * d / best['step_time_s']:.2f}% ({d:.3f} s) slower than #1"]
    diffs = sorted(((r["breakdown_s"][k] - best["breakdown_s"][k], k) for k in BREAKDOWN_ORDER),
                   reverse=True)
    out += [f"{k} +{x:.3f} s" for x, k in diffs[:2] if x > 1e-6]
    return out


def plan_row(cfg: SearchConfig, space: Any, analytic: dict, bounds: np.ndarray, plans: Any,
             res: dict, i: int, best_i: int, rank: int) -> dict[str, Any]:
    """Row ``i`` of the space as the report's ``plans`` list shows it at ``rank``: its plan,
    figures, peak memory (GiB), analytic step and lower bound (seconds) and why it ranks
    there against row ``best_i``."""
    p, r = plans[i], res[i]
    row = {"rank": rank, "plan": plan_dict(p), "key": plan_key(p, switch_defaults(cfg)),
           "label": p.short()}
    row.update(figures(cfg, p, r))
    row.update({"memory": {"peak_gib": float(space.peak_memory[i]) / GIB},
                "analytic_step_time_s": float(analytic["step_time_s"][i]),
                "lower_bound_s": float(bounds[i]), "simulated": True,
                "reasons": reasons(r, res[best_i], rank)})
    return row


def plan_dict(p: Plan) -> dict[str, Any]:
    """``p``'s fields as a row shows them: the parallel sizes, batch, schedule,
    recomputation, SP and ZeRO, and the fields other than their defaults it sets."""
    keys = ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "schedule", "vpp", "recompute", "sp",
            "zero")
    out = {k: getattr(p, k) for k in keys}
    if p.etp is not None:       # expert tensor parallelism other than tp (a mixture of experts)
        out["etp"] = p.etp
    if p.flushes != 1:          # pipeline flushes per step (strategies.flushes)
        out["flushes"] = p.flushes
    if p.microbatch_group_size is not None:     # the interleaved group other than pp
        out["microbatch_group_size"] = p.microbatch_group_size
    if p.cp_comm is not None:   # the context-parallel K/V exchange a --fix or the search names
        out["cp_comm"] = p.cp_comm
    if p.hierarchical_cp is not None:   # a2a+p2p's all-to-all size
        out["hierarchical_cp"] = p.hierarchical_cp
    return out


def fastest_without(cfg: SearchConfig, space: Any, bounds: np.ndarray, plans: Any, keys: Any,
                    res: dict, needed: set, pick: Plan) -> list[Without]:
    """For each dimension the pick keeps, the fastest plan without it: the least of the
    simulated times (needed plans) and the bounds (the rest), ties to a bound, then by key."""
    return [fastest_of(d, np.flatnonzero(space.cols[d] == 1), bounds, plans, keys, res, needed)
            for d in ("tp", "pp", "cp", "ep", "dp") if getattr(pick, d) != 1]


def fastest_of(dim: str, idx: np.ndarray, bounds: np.ndarray, plans: Any, keys: Any,
               res: dict, needed: set) -> Without:
    """``Without(dim, ...)`` of the rows ``idx``: the least of their simulated times (needed
    plans) and bounds (the rest), ties to a bound, then by key; no plan where ``idx`` is
    empty."""
    if idx.size == 0:
        return Without(dim, None, None, False)
    exact = np.isin(idx, np.fromiter(needed, dtype=np.int64, count=len(needed)))
    t = bounds[idx].astype(float)
    t[exact] = [res[i]["step_time_s"] for i in idx[exact].tolist()]
    tied = np.flatnonzero(t == t.min())     # keys (Plans) only for the ties
    t, exact, _, i = min((float(t[n]), bool(exact[n]), keys[int(idx[n])], int(idx[n]))
                         for n in tied.tolist())
    return Without(dim, plans[i], t, exact)


def other_exchange(space: Any, bounds: np.ndarray, plans: Any, keys: Any, res: dict,
                   needed: set, pick_i: int) -> Without | None:
    """Where the space explores the K/V exchange (``axes.cp_exchanges``: a ``cpc`` column of
    several codes) and row ``pick_i`` has ``cp > 1``: the fastest known plan with ``cp > 1``
    and another exchange (``fastest_of``; an a2a+p2p of another size is the same exchange);
    else None."""
    c = space.cols
    if "cpc" not in c or c["cp"][pick_i] == 1 or np.unique(c["cpc"]).size < 2:
        return None
    idx = np.flatnonzero((c["cp"] > 1) & (c["cpc"] != c["cpc"][pick_i]))
    return fastest_of("cp_comm", idx, bounds, plans, keys, res, needed)


def recommended_row(cfg: SearchConfig, space: Any, analytic: dict, bounds: np.ndarray,
                    plans: Any, keys: Any, res: dict, out: Any) -> dict[str, Any]:
    """The report's ``recommended`` block: the pick of the bound-ordered search ``out``
    (``plan_row``'s figures) and why (``recommend.explain``, the batching and expert
    sentences)."""
    pick, best = out.pick, out.ranked[0]
    p = plans[pick]
    row = plan_row(cfg, space, analytic, bounds, plans, res, pick, best, 1 if pick == best else 2)
    row.pop("rank")
    row["why"] = explain(p, res[pick]["step_time_s"], plans[best], res[best]["step_time_s"],
                         cfg.tolerance, cfg.cluster.gpus_per_node,
                         fastest_without(cfg, space, bounds, plans, keys, res,
                                         set(out.needed), p))
    row["why"] += batching_sentences(p, cfg.options.fixed)
    other = other_exchange(space, bounds, plans, keys, res, set(out.needed), pick)
    stack = cfg.framework or get_profile(None)
    why = own_exchange_refusal(cfg.model, stack) if p.cp > 1 else None
    if other is not None or why:    # the K/V exchange the search chose, named (and why)
        row["why"].append(exchange_sentence(p, res[pick]["step_time_s"], other,
                                            stack.cp_impl, why))
    row["within_tolerance"] = len(out.pool)
    if cfg.model.is_moe:        # the expert-parallel choice, named (recommend.expert_choice)
        row["expert"] = expert_choice(p, cfg.cluster.gpus_per_node, cfg.model.num_experts)
        row["why"].append(expert_sentence(row["expert"]))
    return row


def reference_row(cfg: SearchConfig, label: str, p: Plan, r: dict,
                  best: dict) -> dict[str, Any]:
    """A reference plan's row: its figures from ``r``, its scalar peak memory (GiB) and its
    step against the best row's (``vs_best``, a fraction)."""
    from strategies.memory.scalar import peak_memory
    job = make_job(cfg.model, cfg.cluster, p, dtype=cfg.dtype, framework=cfg.framework,
                   system=cfg.system)
    row = {"label": label, "plan": plan_dict(p), "key": plan_key(p, switch_defaults(cfg)),
           "short": p.short()}
    row.update(figures(cfg, p, r))
    row["memory"] = {"peak_gib": peak_memory(job)[1].total / GIB}
    row["vs_best"] = r["step_time_s"] / best["step_time_s"] - 1
    return row
