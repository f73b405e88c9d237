"""The times ZB-1p/ZB-2p's heuristic orders with, read from a job's stage-cost record
(``strategies.schedules.zb_auto``): per pipeline stage and micro-batch the seconds of ``F``
(forward), ``B`` (input gradient, with any recomputation) and ``W`` (weight gradient), each
the median over stages as the authors' scheduler takes it; ``T_comm`` one pipeline message
(``strategies.cost.comm.p2p_time``, the estimate's rule); ``M_W/M_B`` from the activation
model (``wgrad_bytes_per_chunk`` over ``chunk_layer_activation_bytes``). Each stage's layers
are costed kind by kind, as the compiler costs them (``strategies.cost.stage.chunk_layers``).
"""
from __future__ import annotations

from typing import Any

from strategies.schedules.zb_auto import AutoTimes


def _median(xs: list[float]) -> float:
    """The upper median (``sorted(xs)[len(xs)//2]``, the released scheduler's choice)."""
    return sorted(xs)[len(xs) // 2]


def job_times(job: Any) -> AutoTimes:
    """``AutoTimes`` of ``job`` (seconds; module docstring)."""
    from strategies.cost import comm as cm
    from strategies.cost.stage import chunk_layers, chunk_sum, stage_costs
    from strategies.memory.activations import (chunk_layer_activation_bytes,
                                               wgrad_bytes_per_chunk)
    from strategies.schedules.registry import head_rank
    p, sc = job.plan, stage_costs(job)
    head = head_rank(p.schedule, p.pp, p.vpp)
    f, b, w = [], [], []
    for s in range(p.pp):
        # the stage's layers, each kind at its own cost (``chunk_layers``, as the compiler)
        items = chunk_layers(sc, s, 0, job.layers_of_chunk(s, 0))
        f.append(chunk_sum(items, lambda x: x.layer_fwd)
                 + (s == 0) * sc.embedding_fwd + (s == head) * sc.head_fwd)
        n = job.layers_of_chunk(s, 0)
        # recomputation as the compiler charges it (block partial: the record's rule)
        rc = (sc.chunk_recompute(n, n, items)[0] if sc.recompute_cap > 0
              else chunk_sum(items, lambda x: x.layer_recompute))
        b.append(chunk_sum(items, lambda x: x.layer_bwd - x.layer_wgrad) + rc
                 + (s == 0) * (sc.embedding_bwd - sc.embedding_wgrad)
                 + (s == head) * (sc.head_bwd - sc.head_wgrad))
        w.append(chunk_sum(items, lambda x: x.layer_wgrad) + (s == 0) * sc.embedding_wgrad
                 + (s == head) * sc.head_wgrad)
    crosses = p.tp * p.cp * p.dp >= job.cluster.gpus_per_node
    t_comm = float(cm.p2p_time(sc.p2p_bytes, job.cluster, crosses)) if p.pp > 1 else 0.0
    mid = p.pp // 2
    act = chunk_layer_activation_bytes(job, mid)
    w_mem = min(1.0, wgrad_bytes_per_chunk(job, mid) / act) if act > 0 else 0.0
    return AutoTimes(_median(f), max(0.0, _median(b)), _median(w), t_comm, w_mem)
