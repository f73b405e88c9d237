"""The raw plan space: the product of the factorizations with the axes (``raw_product``),
each row carrying the switches of the stack or of ``--fix``, with the uneven layouts' rows,
hybrid sharding's twins (``search --hybrid``) and both ``delay_wgrad`` values where the
expert overlap leaves it free."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies.model import ModelSpec
from strategies.plan.checks import expert_shard_whole
from strategies.plan.choices import CP_COMMS
from strategies.plan.parse import tp_overlap_default
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.schedules import attr_by_code
from strategies.search.axes import factorizations, layout_axis, search_axes, with_etp
from strategies.search.layouts import LayerCosts, candidate_columns, candidate_layout
from strategies.search.options import SpaceOptions
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.rules import stack_tp_overlap
from topologies.cluster import Cluster


def raw_product(n: int, model: ModelSpec, cluster: Cluster, gbs: int,
                opts: SpaceOptions, framework: FrameworkProfile | None = None,
                costs: LayerCosts | None = None) -> dict[str, np.ndarray]:
    """The raw space of ``n`` GPUs as columns: the factorizations (each with its ``etp``)
    times the axes (``axes.search_axes``), the uneven layouts' rows where ``costs`` are given
    (``layouts``), hybrid sharding's twins (``opts.hybrid``) and both ``delay_wgrad`` values
    where the overlap leaves it free."""
    ax = search_axes(model, cluster, opts, framework)
    fac = with_etp(factorizations(n), model, opts.fixed)
    cols = _grid(fac, ax, ax["sched"], gbs, framework)
    for k in ("lf", "ll"):
        cols[k] = np.zeros(len(cols["tp"]), dtype=np.int64)
    cols["acc"] = np.zeros(len(cols["tp"]), dtype=bool)
    lay = layout_axis(model, cluster, ax, opts) if costs is not None else []
    if lay:
        # one candidate layout per (pp, vpp) (strategies.search.layouts), as extra rows
        pv = {(int(p), v) for p in fac[:, 1] for _, v in lay}
        keep = {pair: candidate_layout(model.num_layers, pair[0], pair[1], costs)
                for pair in pv}
        lay = [(code, v) for code, v in lay
               if any(keep[(int(p), v)] is not None for p in set(fac[:, 1].tolist()))]
    if lay:
        extra = _grid(fac, ax, lay, gbs, framework)
        has, lf, ll, acc = candidate_columns(model.num_layers, extra["pp"], extra["vpp"], costs)
        extra = {k: v[has] for k, v in extra.items()}
        extra.update(lf=lf[has], ll=ll[has], acc=acc[has])
        cols = {k: np.concatenate([cols[k], extra[k]]) for k in cols}
    if opts.hybrid and "dp_shard" not in opts.fixed:
        cols = _with_hybrid(cols, cluster.gpus_per_node, framework)
    cols = _with_exchanges(cols, ax["cpx"])
    return _both_delay_wgrad(cols, ax["switches"])


def _with_exchanges(cols: dict[str, np.ndarray], codes: list[int]) -> dict[str, np.ndarray]:
    """``cols`` (the stack's own exchange, or the one ``--fix cp_comm=`` gives every row),
    then each row with ``cp > 1`` once per exchange of ``codes`` (``axes.cp_exchanges``; the
    ``cpc`` column); an ``a2a+p2p`` row once per all-to-all size ``k`` (``cpk``: the plan's
    ``hierarchical_cp``), each divisor of ``cp`` with ``1 < k < cp``
    (``plan.spec.check_hierarchical_cp``), where ``--fix cp_comm=a2a+p2p`` too (a row whose
    ``cp`` has none keeps ``k = 1``, which the ``cp_seq`` rule prunes). Unchanged where no
    row takes a second exchange or a size (no ``cpc``/``cpk`` column added)."""
    hier = 1 + CP_COMMS.index("a2a+p2p")
    cp = cols["cp"]
    fixed_hier = "cpc" in cols and bool((cols["cpc"] == hier).any())
    if not codes and not fixed_hier:
        return cols
    n = len(cp)
    own = cols["cpc"] if "cpc" in cols else np.zeros(n, dtype=np.int64)
    ks = sorted({d for c in np.unique(cp).tolist() for d in range(2, int(c))
                 if int(c) % d == 0})
    parts: list[tuple[np.ndarray, int | np.ndarray, int | np.ndarray]] = []   # rows, cpc, cpk
    if fixed_hier:
        sized = np.zeros(n, dtype=bool)
        for k in ks:
            sel = np.flatnonzero((cp % k == 0) & (cp > k))
            sized[sel] = True
            parts.append((sel, hier, k))
        parts.insert(0, (np.flatnonzero(~sized), own[~sized], 1))
    else:
        parts.append((np.arange(n), own, 1))
    for code in codes:
        if code != hier:
            parts.append((np.flatnonzero(cp > 1), code, 1))
            continue
        for k in ks:
            parts.append((np.flatnonzero((cp % k == 0) & (cp > k)), hier, k))
    out = {key: np.concatenate([v[rows] for rows, _, _ in parts]) for key, v in cols.items()}
    out["cpc"] = np.concatenate([np.broadcast_to(np.asarray(c, dtype=np.int64), rows.shape)
                                 for rows, c, _ in parts])
    out["cpk"] = np.concatenate([np.full(rows.shape, k, dtype=np.int64) for rows, _, k in parts])
    return out


def _with_hybrid(cols: dict[str, np.ndarray], gpus_per_node: int,
                 framework: FrameworkProfile | None) -> dict[str, np.ndarray]:
    """``cols`` (``dp_shard = dp``) and, for ``search --hybrid``, their hybrid twins: shard
    groups of ``k`` nodes, ``dp_shard = k·G/(tp·cp)`` for ``k = 1, 2, 4, …`` (FSDP's HSDP
    within a node, replicas across: the shard group's ranks on the fastest links), where it
    is a whole number below ``dp`` that divides it, on the rows ``Plan`` takes it on
    (``zero ≥ 1``, ``dp_shard·cp ≥ 2``, with ``ep > 1`` a whole expert shard group:
    ``plan.checks.expert_shard_whole``) and at the ZeRO stages the stack runs it with
    (``FrameworkProfile.hybrid_zero``; any ZeRO >= 1 without a named stack; with ``ep > 1``
    only where ``FrameworkProfile.hybrid_ep``)."""
    dp, tc = cols["dp"], cols["tp"] * cols["cp"]
    zeros = framework.hybrid_zero if framework is not None else (1, 2, 3)
    moe_ok = framework.hybrid_ep if framework is not None else True
    base = np.isin(cols["zero"], zeros) & (gpus_per_node % tc == 0) \
        & ((cols["ep"] == 1) | moe_ok)
    node = np.where(base, gpus_per_node // np.maximum(tc, 1), 0)
    parts, shards = [cols], [dp]
    k = 1
    while True:
        s = node * k
        ok = base & (s >= 1) & (s < dp) & (dp % np.maximum(s, 1) == 0) & (s * cols["cp"] >= 2) \
            & ((cols["ep"] == 1) | expert_shard_whole(cols["tp"], cols["cp"], s, cols["ep"],
                                                      cols["etp"]))
        if not (base & (s < dp)).any():
            break
        if ok.any():
            parts.append({key: v[ok] for key, v in cols.items()})
            shards.append(s[ok])
        k *= 2
    out = {key: np.concatenate([p[key] for p in parts]) for key in cols}
    out["dps"] = np.concatenate(shards).astype(np.int64)
    return out


def _both_delay_wgrad(cols: dict[str, np.ndarray], switches: Mapping[str, Any]
                      ) -> dict[str, np.ndarray]:
    """``cols`` twice, with ``delay_wgrad`` off then on, where ``--fix ep_overlap=true`` leaves
    ``delay_wgrad`` free: Megatron-Core runs the overlap with or without it (default off,
    ``--delay-wgrad-compute`` on), and the estimate prices each (docs/calibration.md §5.101);
    ``cols`` unchanged otherwise (``delay_wgrad`` is refused without the overlap)."""
    if not switches.get("epo") or "dw" in switches:
        return cols
    n = len(cols["tp"])
    out = {k: np.concatenate([v, v]) for k, v in cols.items()}
    out["dw"] = np.repeat(np.array([False, True]), n)
    return out


def _grid(fac: np.ndarray, ax: dict, sched_axis: list, gbs: int,
          framework: FrameworkProfile | None) -> dict[str, np.ndarray]:
    """The product of the factorizations with the axes, over ``sched_axis``."""
    sched = np.array(sched_axis, dtype=np.int64)
    grids = np.meshgrid(np.arange(len(fac)), np.array(ax["ep"]), np.array(ax["mbs"]),
                        np.arange(len(sched)), np.array(ax["rc"]), np.array(ax["sp"]),
                        np.array(ax["zero"]), indexing="ij")
    fi, ep, mbs, si, rc, sp, zero = (g.ravel() for g in grids)
    cols = {"tp": fac[fi, 0], "pp": fac[fi, 1], "cp": fac[fi, 2], "dp": fac[fi, 3], "ep": ep,
            "etp": fac[fi, 4],
            "mbs": mbs, "gbs": np.full(fi.shape, gbs, dtype=np.int64), "sched": sched[si, 0],
            "vpp": sched[si, 1], "rc": rc, "sp": sp.astype(bool), "zero": zero}
    for k, v in _switches(framework, ax["switches"]).items():
        cols[k] = np.full(fi.shape, v)
    if "tpo" not in ax["switches"]:     # the stack's default, where it runs (tp > 1 with sp)
        cols["tpo"] = tp_overlap_default(cols["tpo"], cols["tp"], cols["sp"])
    if framework is not None:           # where the stack turns it off (NeMo, no sp)
        cols["tpo"] = stack_tp_overlap(framework, cols["tp"], cols["sp"], cols["tpo"])
    if "rcm" in ax:     # --fix recompute_modules: carried by the selective rows only
        cols["rcm"] = np.where(rc == RECOMPUTE_CODE["selective"], ax["rcm"], 0)
    for k in ("rcl", "rcu"):    # --fix recompute_layers (and method): the full rows only
        if k in ax:
            cols[k] = np.where(rc == RECOMPUTE_CODE["full"], ax[k], 0).astype(np.int64)
    # --fix flushes: on every row (``flush_rules`` prunes those that cannot flush); --fix
    # microbatch_group_size: on the rows of a schedule that takes a group (the rest pruned)
    cols["fl"] = np.full(fi.shape, ax.get("fl", 1), dtype=np.int64)
    cols["mgs"] = np.where(attr_by_code(cols["sched"], "uses_group").astype(bool),
                           ax.get("mgs", 0), 0).astype(np.int64)
    if "dps" in ax:     # --fix dp_shard: the rows it divides (``fixed_mask`` prunes the rest)
        cols["dps"] = np.where(cols["dp"] % ax["dps"] == 0, ax["dps"], cols["dp"])
    return cols


def _switches(fw: FrameworkProfile | None,
              fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan switches every searched plan carries: the named stack's defaults, or (no stack
    named) FlashAttention and the DP overlaps on, TP overlap off; then the ``SWITCH_KEYS``
    ``--fix`` gives (``fixed``, by short column, coded as ``PlanArrays`` codes them)."""
    if fw is None:
        out: dict[str, Any] = {"flash": True, "ogr": True, "opg": True, "tpo": False}
    else:
        out = {"flash": fw.default_flash_attn, "ogr": fw.default_overlap_grad_reduce,
               "opg": fw.default_overlap_param_gather, "tpo": fw.default_tp_comm_overlap}
    return {**out, **(fixed or {})}
