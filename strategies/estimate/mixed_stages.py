"""Pipelined plans on a mixed cluster, as arrays over plans: each stage's seconds on the GPU
type it waits for, and the pipeline composed from them as the scalar estimate composes one
plan (``stage_correction.per_stage`` / ``chunk_correction.per_chunk``, docs/calibration.md §5.45).

The analytic arrays time every stage on ``Cluster.gpu`` with ``num_layers / pp`` layers. Where
the stages lie on different GPU types the scalar estimate replaces that pipeline's compute
makespan by the real stages': both from the schedule's order with free communication
(``schedules.analysis``), stage ``s`` on the type among its ranks whose own forward +
backward is longest (``mixed.slowest_gpu``). Which types a stage holds is known from the rank
placement (pp outermost: stage ``s`` is ranks ``s·tp·cp·dp`` to ``(s+1)·tp·cp·dp − 1``,
``Job.stage_nodes``), and the order depends on ``(schedule, pp, m, vpp)`` only
(``analysis.free_comm_order``), so the plans that share those are replayed together, level
by level of the order's dependency graph (Megatron-Core's combined 1F1B order for the
``ep_overlap`` plans, ``combined.combined_steps``), with their seconds as arrays
(``analysis.free_comm_makespans``): the same operations on the same numbers as the scalar
estimate, plan by plan, through the same functions (a stage's or chunk's seconds:
``stage_passes``; each event's: ``analysis.event_seconds``; the step's correction and the
messages' shift: ``stage_correction.corrected_arrays`` / ``messages_shift_arrays``).

Covered: models of one kind of layer (the stage-cost record without ``by_kind``) on their
even split, the search's plans on a mixed cluster (it proposes no uneven layouts there), one
chunk per rank (``per_stage``) or several (``per_chunk``), the default micro-batch group
size. Plans with another layout (``layers_per_stage``, a layout string, first/last stage
layers: the arrays carry only its extremes) and models whose stages hold layers of several
kinds (dense and MoE, multi-token prediction) keep the even run on ``Cluster.gpu``.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from strategies.estimate.stage_correction import corrected_arrays, messages_shift_arrays
from strategies.estimate.stage_passes import (busiest, chunk_seconds, offload_seconds,
                                               stage_seconds)
from strategies.job import stage_node_bounds
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, rank_layers
from strategies.schedules.analysis import event_seconds, free_comm_makespans, free_comm_order
from strategies.schedules.registry import schedule_of_code
from topologies.cluster import Cluster

#: the stage-cost fields a stage's forward, backward and weight gradient read
_FIELDS = ("layer_fwd", "layer_bwd", "layer_recompute", "layer_wgrad", "embedding_fwd",
           "embedding_bwd", "embedding_wgrad", "head_fwd", "head_bwd", "head_wgrad",
           "recompute_cap", "layer_recompute_each", "layer_offload_fwd", "layer_offload_bwd")


def _rows(sc: Any, idx: np.ndarray, n: int) -> SimpleNamespace:
    """The stage-cost fields of plans ``idx`` (of ``n``) of the record ``sc``."""
    return SimpleNamespace(**{f: np.broadcast_to(np.asarray(getattr(sc, f), dtype=float),
                                                 (n,))[idx] for f in _FIELDS})


def stage_types(cl: Cluster, P: PlanArrays, idx: np.ndarray, s: int) -> list:
    """``(GPU, holds)`` for each node group of ``cl`` in node order: whether plans ``idx``'s
    stage ``s`` holds nodes of it (``job.stage_node_bounds``, as ``Job.stage_nodes``)."""
    G = cl.gpus_per_node
    per = np.ravel(np.asarray(P.tp) * np.asarray(P.cp) * np.asarray(P.dp))
    per = per[idx if per.size > 1 else np.zeros_like(idx)].astype(np.int64)
    lo, hi = stage_node_bounds(s, per, G)
    out, at = [], 0
    for g in cl.groups:
        out.append((g.gpu, (lo < at + g.num_nodes) & (hi >= at)))
        at += g.num_nodes
    return out


def _slowest(cands: list) -> tuple:
    """Of ``(holds, seconds tuple, key)`` in node order, plan by plan, the seconds of the one
    with the largest key among those held, the first on a tie (``mixed.slowest_gpu``)."""
    best, key = None, None
    for holds, secs, k in cands:
        if best is None:
            best = tuple(np.where(holds, x, np.nan) for x in secs)
            key = np.where(holds, k, -np.inf)
            continue
        take = holds & (k > key)
        best = tuple(np.where(take, x, y) for x, y in zip(secs, best))
        key = np.where(take, k, key)
    return best


def pipelined_mixed(m: ModelSpec, cl: Cluster, P: PlanArrays, base: Mapping[str, Any],
                    costs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The analytic arrays ``base`` (every stage on ``Cluster.gpu``, even work) of the plans
    ``P`` with the pipelined ones' compute makespan replaced by their real stages', as
    ``stage_correction.per_stage`` (one chunk per rank) and ``chunk_correction.per_chunk``
    price one plan on a mixed cluster. ``costs``: the stage-cost record of each GPU type by
    name (the scalar's ``stage_costs(job, gpu)``, plan by plan). Returns the arrays that
    change."""
    size = np.shape(base["step_time_s"])[0] if np.ndim(base["step_time_s"]) else 1
    pp_all = np.broadcast_to(np.asarray(P.pp), (size,)).astype(np.int64)
    # (a layout other than the even split: the arrays carry its extremes only, and the
    # scalar estimate prices it from the even plan's columns; kept as ``base``)
    uneven = rank_layers(m.num_layers, P)[4] | ~np.isnan(np.asarray(P.layout_first, float))
    keep = np.flatnonzero((pp_all > 1) & ~np.broadcast_to(uneven, (size,)))
    keys = ("step_time_s", "pp_comm", "ep_comm", "compute", "bubble", "mfu", "hfu",
            "tokens_per_s", "bubble_fraction", "p2p_time_s", "offload")
    out = {k: np.array(np.broadcast_to(np.asarray(base[k], dtype=float), (size,)))
           for k in keys}
    if keep.size == 0:
        return out
    cols = np.stack([np.broadcast_to(np.asarray(x), (size,)).astype(np.int64)[keep]
                     for x in (P.schedule, P.pp, P.vpp, np.asarray(P.gbs)
                               // (np.asarray(P.mbs) * np.asarray(P.dp)), P.ep_overlap)],
                    axis=1)
    uniq, inv = np.unique(cols, axis=0, return_inverse=True)
    tokens = np.broadcast_to(np.asarray(P.gbs), (size,)) * m.seq_length
    L = m.num_layers
    for j, (code, pp, vpp, mb, combined) in enumerate(uniq.tolist()):
        idx = keep[inv.reshape(-1) == j]
        sched = schedule_of_code(code)
        rows = {name: _rows(sc, idx, size) for name, sc in costs.items()}
        even_c = rows[cl.gpu.name]
        if vpp == 1:
            head_at = int(sched.ends(pp, vpp)[1])

            def stage(c, s, n):
                return stage_seconds(c, n, vpp, s == 0, s == head_at)
            n_real = L / pp               # the even split's layers per stage
            even = [stage(even_c, s, L / pp) for s in range(pp)]
            real, offs = [], []     # each stage's seconds, its exposed offload copies
            for s in range(pp):
                cands = []
                for gpu, holds in stage_types(cl, P, idx, s):
                    c = rows[gpu.name]
                    secs = stage(c, s, n_real)
                    cands.append((holds, (*secs, offload_seconds([(n_real, c)])),
                                  secs[0] + secs[1]))
                *secs, off = _slowest(cands)
                real.append(tuple(secs))
                offs.append(off)
            order = free_comm_order(sched, pp, mb, 1, None, bool(combined))

            def timing(times):
                f, b, w = (list(x) for x in zip(*times))
                slow = [(x + y) / (f[0] + b[0]) for x, y in zip(f, b)]
                return (event_seconds(sched, pp, 1, f[0], b[0], w[0], slow=slow),
                        mb * np.maximum.reduce([x + y for x, y in zip(f, b)]))
            ranks_e = [x + y for x, y, _ in even]
            ranks_u = [x + y for x, y, _ in real]
        else:
            last = sched.num_virtual_stages(pp, vpp) - 1
            mirrored = bool(sched.mirrored)
            n_chunk = L / (pp * vpp)

            def row(c, s):
                out_row = []
                for ch in range(2 if mirrored else vpp):
                    vs = sched.virtual_stage(s, ch, pp, vpp, 0)
                    out_row.append(chunk_seconds(c, [(n_chunk, c)], vs == 0, vs == last))
                return out_row
            even = [row(even_c, s) for s in range(pp)]
            real, offs = [], []
            for s in range(pp):
                cands = []
                for gpu, holds in stage_types(cl, P, idx, s):
                    r_ = row(rows[gpu.name], s)
                    off = sum(offload_seconds([(n_chunk, rows[gpu.name])]) for _ in r_)
                    cands.append((holds, (*(x for t in r_ for x in t), off),
                                  sum(f + b for f, b, _ in r_)))
                *flat, off = _slowest(cands)
                real.append([tuple(flat[3 * i:3 * i + 3]) for i in range(len(flat) // 3)])
                offs.append(off)
            order = free_comm_order(sched, pp, mb, vpp, None, bool(combined))

            def timing(times):
                return (event_seconds(sched, pp, vpp, 0.0, 0.0, chunk_times=times),
                        mb * np.maximum.reduce([sum(f + b for f, b, _ in rw)
                                                for rw in times]))
            ranks_e = [sum(f + b for f, b, _ in rw) for rw in even]
            ranks_u = [sum(f + b for f, b, _ in rw) for rw in real]
        r = {k: out[k][idx] for k in keys}
        msg = messages_shift_arrays(code, mb, pp, vpp, r["p2p_time_s"], ranks_e, ranks_u)
        # the even and the real stages in one replay of the order
        (sec_e, busy_e), (sec_u, busy_u) = timing(even), timing(real)
        n = idx.size
        spans = free_comm_makespans(order, lambda q, g: np.concatenate(
            [np.broadcast_to(sec_e(q, g), (n,)), np.broadcast_to(sec_u(q, g), (n,))]), 2 * n)
        # the busiest real stage's own exposed offload copies: the breakdown's entry
        fixed = corrected_arrays(r, (spans[:n], busy_e), (spans[n:], busy_u), tokens[idx], msg,
                                 offload=mb * busiest(ranks_u, offs))
        for k, v in fixed.items():
            out[k][idx] = v
    return out
