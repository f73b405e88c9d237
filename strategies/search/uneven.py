"""Uneven pipeline stages for mixed clusters: layer counts in proportion to each stage's speed.

Stage ``s`` of a plan holds the global ranks ``s·tp·cp·dp`` to ``(s+1)·tp·cp·dp - 1`` (pp is
the outermost coordinate, ``strategies.placement``), so on a cluster of node groups a stage
sits on one GPU type when its ranks fill whole groups. ``balanced_layers`` gives each stage the
layer count that minimises the largest stage time per micro-batch,
``max_s(n_s·t_s + e_s)`` with ``t_s`` one layer's forward + backward (+ recompute) on the
stage's slowest GPU and ``e_s`` the embedding (first stage) and LM head (last stage), subject
to ``sum n_s = num_layers`` and ``n_s >= 1``: Metis' and HetPipe's rule of sizing stages to
their devices, solved exactly (the sequences ``e_s + k·t_s`` are increasing, so taking the
smallest ``num_layers - pp`` of them after one layer each is optimal). Units: seconds.
"""
from __future__ import annotations

from dataclasses import replace

from strategies.cost.stage import stage_costs
from strategies.job import Job
from strategies.plan import Plan
from topologies.gpus import GPU


def stage_gpu(job: Job, stage: int, costs=None) -> GPU:
    """The slowest GPU type among the ranks of pipeline stage ``stage``: the one whose layer
    (forward + backward + recompute) takes longest (``estimate.mixed.slowest_gpu``; not the
    lowest peak, docs/calibration.md §5.39). ``costs``: a ``StageCostMemo`` of ``job`` to read
    the records from (default a fresh one)."""
    from strategies.estimate.mixed import slowest_gpu
    from strategies.estimate.stage_cost_memo import StageCostMemo
    costs = costs or StageCostMemo(job)

    def layer(g: GPU) -> float:
        c = costs(g)
        return c.layer_fwd + c.layer_bwd + c.layer_recompute
    return slowest_gpu(map(job.cluster.gpu_of_node, job.stage_nodes(stage)), layer)


def stage_layer_times(job: Job) -> tuple[list[float], list[float]]:
    """``(t_s, e_s)`` per stage: one layer's forward + backward + recompute seconds per
    micro-batch on the stage's GPU, and its fixed extra (embedding on the first stage, LM head
    and loss on the last), from the shared cost record (``strategies.cost.stage``)."""
    from strategies.estimate.stage_cost_memo import StageCostMemo
    pp = job.plan.pp
    costs = StageCostMemo(job)      # each GPU type's record once (the stages' GPU choice too)
    t, e = [], []
    for s in range(pp):
        c = costs(stage_gpu(job, s, costs))
        t.append(c.layer_fwd + c.layer_bwd + c.layer_recompute)
        extra = 0.0
        if s == 0:
            extra += c.embedding_fwd + c.embedding_bwd
        if s == pp - 1:
            extra += c.head_fwd + c.head_bwd
        e.append(extra)
    return t, e


def split_layers(num_layers: int, t: list[float], e: list[float],
                 cap: list[int] | None = None) -> tuple[int, ...] | None:
    """Layer counts ``1 <= n_s <= cap_s`` summing to ``num_layers`` that minimise
    ``max_s(n_s·t_s + e_s)`` (ties to the earlier stage); None when the caps hold fewer
    layers than the model has. ``cap``: the most layers each stage's memory holds."""
    pp = len(t)
    cap = [num_layers] * pp if cap is None else list(cap)
    if num_layers < pp:
        raise ValueError(f"{num_layers} layers cannot fill {pp} stages")
    if min(cap) < 1 or sum(cap) < num_layers:
        return None
    n = [1] * pp
    for _ in range(num_layers - pp):
        s = min((i for i in range(pp) if n[i] < cap[i]),
                key=lambda i: ((n[i] + 1) * t[i] + e[i], i))
        n[s] += 1
    return tuple(n)


def stage_layer_caps(job: Job, headroom: float = 0.0) -> list[int]:
    """The most layers each pipeline stage can hold within ``(1 - headroom)`` of its own
    GPUs' HBM (``strategies.memory.scalar``; a stage's memory depends on its own layer count
    only), 0 where not even one fits: Cephalo's point that a split by speed alone can
    overflow the smaller GPUs."""
    from strategies.memory.scalar import memory_components, stage_hbm_bytes
    p, L = job.plan, job.model.num_layers
    caps = []
    for s in range(p.pp):
        limit = stage_hbm_bytes(job, s) * (1.0 - headroom)

        def fits(k: int) -> bool:
            rest = [1] * p.pp
            rest[s] = k
            rest[(s + 1) % p.pp] += L - sum(rest)
            trial = replace(job, plan=replace(p, layers_per_stage=tuple(rest)))
            return sum(b.total for b in memory_components(trial, s).values()) <= limit

        lo, hi = 0, L - (p.pp - 1)          # largest k in [0, hi] that fits (monotone in k)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        caps.append(lo)
    return caps


def balanced_plan(job: Job, headroom: float | None = None) -> Plan | None:
    """``job``'s plan with ``layers_per_stage`` sized to its stages' GPUs, or None where that
    changes nothing (one stage, model chunks interleaved, a schedule that holds stages r and
    pp-1-r on rank r: DualPipe, whose per-rank sizing ``plan.checks`` refuses, or the even
    split already best) or no split fits. ``headroom``: when given, each stage's layers are
    capped to what fits ``(1 - headroom)`` of its GPUs' HBM (``stage_layer_caps``)."""
    from strategies.schedules.registry import get_schedule
    p = job.plan
    if p.pp == 1 or p.vpp != 1 or get_schedule(p.schedule).mirrored:
        return None
    caps = None if headroom is None else stage_layer_caps(job, headroom)
    split = split_layers(job.model.num_layers, *stage_layer_times(job), caps)
    if split is None:
        return None
    if split == p.layers_per_stage or (p.layers_per_stage is None and len(set(split)) == 1
                                       and split[0] * p.pp == job.model.num_layers):
        return None
    return replace(p, layers_per_stage=split)


def replica_microbatch_times(job: Job) -> dict[int, float]:
    """Seconds of one micro-batch through a whole replica's layers (forward, backward,
    recomputation, embedding and LM head) on each node group's GPU, for the groups that
    hold data-parallel replicas (``strategies.job.replica_groups``)."""
    from strategies.job import replica_groups
    out: dict[int, float] = {}
    for g in sorted(set(replica_groups(job.cluster, job.plan))):
        c = stage_costs(job, job.cluster.groups[g].gpu)
        out[g] = (job.model.num_layers / job.plan.pp * (c.layer_fwd + c.layer_bwd
                                                        + c.layer_recompute)
                  + c.embedding_fwd + c.embedding_bwd + c.head_fwd + c.head_bwd)
    return out


MAX_SPLITS = 200_000     # counts the exhaustive batch-share walk may visit


def split_microbatches(total: int, replicas: dict[int, int], t: dict[int, float]
                       ) -> dict[int, int] | None:
    """Micro-batches per replica ``m_g >= 1`` for each group ``g`` holding ``replicas[g]``
    replicas, with ``sum_g replicas[g]·m_g = total``, minimising ``max_g m_g·t_g`` (ties: the
    smaller counts on earlier groups); None when no split adds up, or when the exhaustive
    walk over the counts would visit more than ``MAX_SPLITS`` of them."""
    groups = sorted(replicas)
    best: tuple[float, tuple] | None = None
    size = 1
    for g in groups[:-1]:
        size *= max(1, total // replicas[g])
    if size > MAX_SPLITS:
        return None

    def walk(i: int, left: int, chosen: tuple) -> None:
        nonlocal best
        g = groups[i]
        if i == len(groups) - 1:
            if left >= replicas[g] and left % replicas[g] == 0:
                pick = chosen + (left // replicas[g],)
                cost = max(m * t[h] for m, h in zip(pick, groups))
                if best is None or (cost, pick) < best:
                    best = (cost, pick)
            return
        rest = sum(replicas[h] for h in groups[i + 1:])
        for m in range(1, (left - rest) // replicas[g] + 1):
            walk(i + 1, left - m * replicas[g], chosen + (m,))

    walk(0, total, ())
    return None if best is None else dict(zip(groups, best[1]))


def balanced_microbatches(job: Job) -> Plan | None:
    """``job``'s plan with ``group_microbatches`` sized to each group's speed (Whale's batch
    shares), or None where it cannot apply (one GPU type, a replica spanning groups, ZeRO >= 2,
    expert parallelism, more than three groups) or changes nothing."""
    from strategies.errors import SpecError
    from strategies.job import replica_groups
    p, cl = job.plan, job.cluster
    if cl.uniform or len(cl.groups) > 3 or p.zero >= 2 or p.ep > 1:
        return None
    try:
        groups = replica_groups(cl, p)
    except SpecError:
        return None
    replicas = {g: groups.count(g) for g in set(groups)}
    if len(replicas) < 2 or p.gbs % p.mbs:
        return None
    split = split_microbatches(p.gbs // p.mbs, replicas, replica_microbatch_times(job))
    if split is None or len(set(split.values())) == 1:
        return None
    counts = tuple(split.get(g, 1) for g in range(len(cl.groups)))
    return replace(p, group_microbatches=counts)
