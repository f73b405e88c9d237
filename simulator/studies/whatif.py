"""One what-if study end to end: a plan search per variant, the rows, the bandwidth checks
and the figure (the ``whatif`` JSON). No argparse here.

Each variant's best plan is the top-1 of ``run_search`` over the same space options, with
``k=1`` and no tolerance: the bound-ordered search makes the top-1 exact (the fastest
simulated plan of the space), so a variant that only adds bandwidth to another, whose space
is the same (the space depends on the GPU's memory, never on bandwidth), cannot be slower.
As a safeguard that does not rest on the search being exact, each variant also simulates the
best plans of the variants it only adds bandwidth to (as search references; variants run in
an order that puts those first) and keeps the fastest; ``best_from`` says where the kept plan
came from. Every such pair is then checked (``checks.bandwidth_monotone``); a violation is a
warning in the JSON and on stderr, never a silent result.

The JSON: ``inputs`` (the base question, ``vary`` as key -> values, ``gpu_hour_cost``, the
space options), ``rows`` (one per variant, the first axis varying slowest), ``checks``,
``warnings``, ``execution`` and ``wall_s``. Each row has the variant's values under their keys
(``"inter_node_gbps": 200``), ``variant`` (its label), ``job`` (the resolved cluster, GPU, GPU
count, batch, sequence, tokens per step and network), ``feasible`` (false with ``error`` when
no plan of the space fits; every result key is then null), ``best`` (the plan key), ``label``,
``plan``, ``step_time_s``, ``mfu``, ``tokens_per_s``, ``cost_per_million_tokens`` (null
without a price), ``memory.peak_gib``, ``bubble_fraction``, ``exposed_comm_s``,
``breakdown_s``, ``best_from``, ``space``, ``simulated``, ``network_parts`` (the scale-out
network's parts and, with ``--network-prices``, their price: ``simulator.studies.network_cost``)
and ``bandwidth_monotone`` (true or
false where the row has a variant with less bandwidth to compare with, else null).

Determinism: the report is the same whatever the worker count, except ``wall_s`` and the
``execution`` block.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from simulator.search.run import SearchConfig, run_search
from simulator.studies.network_cost import network_cost
from simulator.studies.prices import price_of
from simulator.studies.whatif_variants import (KEYS, Variant, cost_per_million_tokens,
                                               dominated_pairs, energy_per_million_tokens,
                                               search_order, tokens_per_step)
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.rules import check_precision
from strategies.plan import parse_plan
from strategies.search.space import SpaceOptions
from topologies.cluster import Cluster
from topologies.gpus import GIB, GPU

#: step time of a variant with more bandwidth may exceed the other's by this factor at most
#: (float noise of the simulator's event times)
MONOTONE_RTOL = 1e-9


@dataclass
class WhatifConfig:
    variants: list[Variant]
    vary: list[tuple[str, list[Any]]]
    base: dict[str, Any]                     # the base inputs, for the report
    dtype: str = "bf16"
    framework: FrameworkProfile | None = None
    options: SpaceOptions = field(default_factory=SpaceOptions)
    gpu_hour_cost: float | dict[str, float] | None = None   # one price, or per GPU name
    network_prices: dict[str, float] | None = None          # simulator.studies.network_cost
    power: bool = False
    exhaustive: bool = False
    workers: int = 1
    progress: bool = False


def run_whatif(cfg: WhatifConfig) -> dict[str, Any]:
    """Search every variant and return the report (see the module docstring)."""
    t0 = time.perf_counter()
    if cfg.framework is not None:    # a precision the stack lacks: refused before any plan
        check_precision(get_profile(cfg.framework), cfg.dtype)
    vs = cfg.variants
    pairs = dominated_pairs(vs)
    lower = {j: [i for i, jj in pairs if jj == j] for j in range(len(vs))}
    rows: list[dict[str, Any] | None] = [None] * len(vs)
    sims = 0
    for n, j in enumerate(search_order(vs)):
        if cfg.progress:
            print(f"paraplan whatif: [{n + 1}/{len(vs)}] {vs[j].label}", file=sys.stderr)
        refs, seen = [], set()
        for i in lower[j]:
            r = rows[i]
            if r is not None and r["feasible"] and r["best"] not in seen:
                seen.add(r["best"])
                refs.append((f"best of {vs[i].label}", parse_plan(r["best"])))
        rows[j], ran = _variant_row(cfg, vs[j], refs)
        sims += ran
    if not any(r["feasible"] for r in rows):
        errors = [r["error"] for r in rows]
        why = (errors[0] if len(set(errors)) == 1 else
               "; ".join(f"{v.label}: {e}" for v, e in zip(vs, errors)))
        raise SpecError("--vary", ", ".join(v.label for v in vs)[:200],
                        f"no variant has a feasible plan: {why[:600]}")
    checks, warnings = _monotone(vs, rows, pairs)
    for j, r in enumerate(rows):
        r["bandwidth_monotone"] = checks["by_row"][j]
    del checks["by_row"]
    for w in warnings:
        print(f"paraplan: warning: {w}", file=sys.stderr)
    return {"inputs": _inputs(cfg), "rows": rows, "checks": checks, "warnings": warnings,
            "execution": {"workers": cfg.workers, "simulations_run": sims},
            "wall_s": time.perf_counter() - t0}


def _inputs(cfg: WhatifConfig) -> dict[str, Any]:
    o = cfg.options
    return {**cfg.base, "dtype": cfg.dtype,
            "framework": get_profile(cfg.framework).name, "vary": {k: list(v) for k, v in cfg.vary},
            "variants": len(cfg.variants), "gpu_hour_cost": cfg.gpu_hour_cost,
            "network_prices": cfg.network_prices,
            "power": cfg.power,
            "memory_limit_gib": (o.memory_limit_bytes / GIB if o.memory_limit_bytes
                                 else None),
            "fixed": dict(o.fixed), "max_mbs": o.max_mbs, "max_vpp": o.max_vpp,
            "max_bubble": o.max_bubble, "allow_cross_node_tp": o.allow_cross_node_tp,
            "exhaustive": cfg.exhaustive, "top": 1}


def _job(v: Variant) -> dict[str, Any]:
    c = v.cluster
    return {"model": v.model.name, "cluster": c.name, "gpu": c.gpu.name,
            "gpu_types": [gpu.name for gpu, _ in c.gpu_counts()], "gpus": c.num_gpus,
            "nodes": c.num_nodes, "nvlink_domain": c.describe_domain(),
            "global_batch": v.global_batch, "seq_len": v.model.seq_length,
            "tokens_per_step": tokens_per_step(v),
            "inter_node_gbps": c.inter_node_bandwidth * 8 / 1e9,
            "intra_node_GBps": c.intra_node_bandwidth / 1e9, "nics_per_node": c.nics_per_node,
            "oversubscription": c.oversubscription}


_RESULT_KEYS = ("best", "label", "plan", "step_time_s", "mfu", "tokens_per_s",
                "cost_per_million_tokens", "memory", "bubble_fraction", "exposed_comm_s",
                "breakdown_s", "power_w_per_gpu", "energy_kwh_per_million_tokens")


def _variant_row(cfg: WhatifConfig, v: Variant,
                 refs: list[tuple[str, Any]]) -> tuple[dict[str, Any], int]:
    row: dict[str, Any] = dict(v.values)
    row["variant"] = v.label
    row["job"] = _job(v)
    price = per_gpu_mean(v.cluster, lambda gpu: price_of(cfg.gpu_hour_cost, gpu.name))
    row["gpu_hour_cost"] = price
    row["network_parts"] = network_cost(v.cluster, cfg.network_prices)
    if v.error is not None:
        row.update({"feasible": False, "error": v.error}, **{k: None for k in _RESULT_KEYS})
        row["best_from"] = None
        return row, 0
    sc = SearchConfig(model=v.model, cluster=v.cluster, gbs=v.global_batch, dtype=cfg.dtype,
                      framework=cfg.framework,
                      options=cfg.options, k=1, tolerance=0.0, exhaustive=cfg.exhaustive,
                      workers=cfg.workers, references=refs)
    try:
        rep = run_search(sc)
    except SpecError as e:   # no plan passes the constraints here: an answer, not a crash
        row.update({"feasible": False, "error": str(e)}, **{k: None for k in _RESULT_KEYS})
        row["best_from"] = None
        return row, 0
    best, src = rep["plans"][0], "search"
    for ref in rep["references"]:
        if ref["step_time_s"] < best["step_time_s"]:
            best, src = ref, ref["label"]
    step = best["step_time_s"]
    row.update({
        "feasible": True, "best": best["key"], "label": best.get("short") or best["label"],
        "plan": best["plan"], "step_time_s": step, "mfu": best["mfu"],
        "tokens_per_s": best["tokens_per_s"],
        "cost_per_million_tokens": (None if price is None else
                                    cost_per_million_tokens(price, v.cluster.num_gpus, step,
                                                            tokens_per_step(v))),
        "memory": {"peak_gib": best["memory"]["peak_gib"]},
        "bubble_fraction": best["bubble_fraction"], "exposed_comm_s": best["exposed_comm_s"],
        "breakdown_s": best["breakdown_s"], "best_from": src,
        "space": dict(rep["space"]), "simulated": rep["evaluated"]["simulated"],
    })
    tdp = per_gpu_mean(v.cluster, lambda gpu: gpu.tdp_w) if cfg.power else None
    row["power_w_per_gpu"] = tdp
    row["energy_kwh_per_million_tokens"] = (
        None if tdp is None else energy_per_million_tokens(tdp, v.cluster.num_gpus, step,
                                                           tokens_per_step(v)))
    return row, rep["execution"]["simulations_run"]


def per_gpu_mean(cluster: Cluster, value: Callable[[GPU], float | None]) -> float | None:
    """The mean of ``value(gpu)`` over every GPU of ``cluster`` (a price per GPU-hour, a TDP
    in watts): on a mixed cluster each type counts its GPUs; None if a type has no value."""
    counts = cluster.gpu_counts()
    values = [value(gpu) for gpu, _ in counts]
    if any(x is None for x in values):
        return None
    if len(counts) == 1:           # one type: exactly its value
        return values[0]
    return sum(x * n for x, (_, n) in zip(values, counts)) / cluster.num_gpus


def _monotone(vs: list[Variant], rows: list[dict[str, Any]],
              pairs: list[tuple[int, int]]) -> tuple[dict[str, Any], list[str]]:
    """Check every (less, more bandwidth) pair: more bandwidth never a longer step."""
    by_row: list[bool | None] = [None] * len(vs)
    bad, warnings, checked = [], [], 0
    for i, j in pairs:
        a, b = rows[i], rows[j]
        if not (a["feasible"] and b["feasible"]):
            continue
        checked += 1
        ok = b["step_time_s"] <= a["step_time_s"] * (1 + MONOTONE_RTOL)
        by_row[j] = ok and by_row[j] is not False
        if not ok:
            bad.append({"less": vs[i].label, "more": vs[j].label,
                        "step_time_s": [a["step_time_s"], b["step_time_s"]]})
            warnings.append(f"more bandwidth, longer step: {vs[j].label} takes "
                            f"{b['step_time_s']:.6g} s against {a['step_time_s']:.6g} s at "
                            f"{vs[i].label} (best plans {b['best']} / {a['best']})")
    return {"bandwidth_monotone": {"pairs": checked, "ok": not bad, "violations": bad},
            "by_row": by_row}, warnings


# ----------------------------------------------------------------- figure

def draw(report: dict[str, Any], path: str) -> None:
    """Step time, MFU and cost per million tokens (or tokens/s) per variant, as bars."""
    from simulator.output.figures import new_figure, save_figure
    rows = [r for r in report["rows"] if r["feasible"]]
    labels = [_short_label(r, report) for r in rows]
    cost = any(r["cost_per_million_tokens"] is not None for r in rows)
    panels = [("step_time_s", "step time (s)", 1.0, "{:.3g}"),
              ("mfu", "MFU (%)", 100.0, "{:.1f}")]
    if cost:
        price = report["inputs"]["gpu_hour_cost"]
        each = f"{price:g} USD/GPU-h" if isinstance(price, (int, float)) else "per-GPU prices"
        panels.append(("cost_per_million_tokens", f"USD / 10^6 tokens ({each})",
                       1.0, "{:.3g}"))
    else:
        panels.append(("tokens_per_s", "tokens/s", 1.0, "{:,.0f}"))
    if any(r["energy_kwh_per_million_tokens"] is not None for r in rows):
        panels.append(("energy_kwh_per_million_tokens", "kWh / 10^6 tokens (at TDP)",
                       1.0, "{:.3g}"))
    width = max(9.0, 0.5 * len(rows) * len(panels) + 2)
    fig, axes = new_figure((min(width, 20.0), 3.6), ncols=len(panels))
    x = list(range(len(rows)))
    for ax, (key, title, scale, fmt) in zip(axes, panels):
        vals = [float("nan") if r[key] is None else r[key] * scale for r in rows]
        bars = ax.bar(x, vals, color=[_colour(r, report) for r in rows])
        for b, val in zip(bars, vals):
            known = val == val
            ax.annotate(fmt.format(val) if known else "n/a",
                        (b.get_x() + b.get_width() / 2, b.get_height() if known else 0.0),
                        ha="center", va="bottom", fontsize=7)
        ax.set_title(title, fontsize=9)
        tilt = len(rows) * max(len(t) for t in labels) > 40
        ax.set_xticks(x, labels, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                      fontsize=7)
        ax.set_xlabel(" / ".join(report["inputs"]["vary"]), fontsize=8)
        ax.margins(y=0.15)
    i = report["inputs"]
    where = (f"{i['gpus']} GPUs" if "cluster" in i["vary"] or "gpu" in i["vary"]
             else i["cluster"])
    fig.suptitle(f"What if: {i['model']['name']} on {where}, global batch {i['global_batch']}, the best "
                 "plan of each variant", fontsize=10)
    save_figure(fig, path)


def _short_label(r: dict[str, Any], report: dict[str, Any]) -> str:
    return " / ".join(_fmt(r[k]) for k in report["inputs"]["vary"])


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _colour(r: dict[str, Any], report: dict[str, Any]) -> str:
    """One colour per value of the first varied key that is not a bandwidth (or per value
    of the first key)."""
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
    vary = report["inputs"]["vary"]
    key = next((k for k in vary if k not in ("inter_node_gbps", "intra_node_GBps")),
               next(iter(vary)))
    return palette[vary[key].index(r[key]) % len(palette)]


assert set(KEYS).isdisjoint(_RESULT_KEYS + ("network_parts",))
