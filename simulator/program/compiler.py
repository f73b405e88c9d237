"""Compile a job into per-rank programs: ``compile_job(job) -> {rank: Program}``.

Pure and deterministic (no SimPy). Each rank runs its stage's Megatron-LM schedule
(``strategies.schedules.exchanges``: the orderings of ``strategies.schedules`` with Megatron's blocking
batched exchanges); ``simulator.program.builder`` turns the steps into ops on the compute, tp-comm,
cp-comm, ep-comm, dp-comm and pp-comm streams, with durations and bytes from
``strategies.cost.stage`` (the shared cost model). Ranks are placed Megatron's way
(``strategies.placement``, order ``tp-cp-dp-pp``), and global rank ``r`` is GPU ``r`` of
``topologies.graph``; a straggler GPU (``cluster.faults``) runs its compute ops
``factor`` times longer.

>>> from strategies.job_text import job_from_text
>>> job = job_from_text("gpt-1.7b", "dgx-a100:1", "tp=2,pp=2,dp=2,gbs=8")
>>> progs = compile_job(job, ranks=[0])
>>> [op.label for op in progs[0].streams["compute"]][:4]
['F0.c0', 'F0.c0', 'F1.c0', 'F1.c0']
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from itertools import chain
from typing import Iterable

import numpy as np

from simulator.program.builder import ProgramBuilder
from simulator.program.ops import Collective, Compute, Program, Recv, Send
from strategies.schedules import get_schedule
from strategies.schedules.exchanges import pipeline_actions
from strategies.cost.stage import StageCosts, stage_costs
from strategies import placement
from strategies.collectives import algorithm_for
from strategies.errors import SpecError
from strategies.job import Job

GRANULARITIES = ("chunk", "layer")


def stats_groups(plan) -> list[tuple[int, ...]]:
    """The gradient norm's all-reduce groups (``cost.norm_barrier.stats_group``), each in
    ring order, ordered by first rank: every rank with the distributed optimizer (ZeRO >= 1),
    else each model-parallel group (the pipeline groups of one tensor-parallel group's ranks,
    sorted). The simulator's programs (``Layout``) and the folding's checks
    (``simulator.fold``) read them here."""
    n = placement.world_size(plan)
    if plan.zero >= 1:
        return [tuple(range(n))]
    pp_of = {r: g for g in placement.groups(plan, "pp") for r in g}
    tp_of = {r: g for g in placement.groups(plan, "tp") for r in g}
    seen = np.zeros(n, dtype=bool)
    out: list[tuple[int, ...]] = []
    for r in range(n):
        if not seen[r]:
            g = tuple(sorted(x for t in tp_of[r] for x in pp_of[t]))
            seen[list(g)] = True
            out.append(g)
    return out


class Layout:
    """Communication groups of every rank (``placement.groups``) and the collective
    algorithm each group uses on this cluster (``strategies.collectives.algorithm_for``)."""

    def __init__(self, job: Job) -> None:
        plan = job.plan
        self.gpus_per_node = job.cluster.gpus_per_node
        self.per_stage = plan.tp * plan.cp * plan.dp
        n = placement.world_size(plan)
        self._groups: dict[str, tuple[np.ndarray, list[tuple[int, ...]]]] = {}
        for dim in ("tp", "cp", "dp", "ep", "etp", "edp", "dpcp", "dprep", "pp", "cpa", "cpr"):
            groups = placement.groups(plan, dim)      # they partition the ranks
            index = np.empty(n, dtype=np.int64)
            index[np.fromiter(chain.from_iterable(groups), np.int64)] = np.repeat(np.arange(len(groups)),
                                                      [len(g) for g in groups])
            self._groups[dim] = (index, list(map(tuple, groups)))
        self._plan, self._n = plan, n
        self._algo: dict[tuple, str] = {}

    def _stats_groups(self) -> None:
        """The gradient norm's groups (``stats_groups``), built on first use."""
        n = self._n
        mp = stats_groups(self._plan)
        index = np.empty(n, dtype=np.int64)
        index[np.fromiter(chain.from_iterable(mp), np.int64)] = np.repeat(
            np.arange(len(mp)), [len(g) for g in mp])
        self._groups["stats"] = (index, mp)

    def stage(self, rank: int) -> int:
        """Pipeline stage of ``rank`` (pp is the outermost dimension)."""
        return rank // self.per_stage

    def group(self, dim: str, rank: int) -> tuple[int, ...]:
        if dim == "stats" and dim not in self._groups:
            self._stats_groups()
        index, groups = self._groups[dim]
        return groups[int(index[rank])]

    def algorithm(self, group: tuple[int, ...], kind: str = "allreduce") -> str:
        """The algorithm of collective ``kind`` over ``group``: ``strategies.collectives``'
        selector, the rule the estimate and the bound use too."""
        key = (group, kind)
        algo = self._algo.get(key)
        if algo is None:
            algo = self._algo[key] = algorithm_for(kind, group, self.gpus_per_node)
        return algo


def compile_rank(job: Job, costs: StageCosts, layout: Layout, rank: int,
                 granularity: str = "chunk") -> Program:
    """The program of one rank."""
    p = job.plan
    b = ProgramBuilder(job, costs, layout, rank, granularity)
    if p.ep_overlap:        # Megatron-Core's combined 1F1B (strategies.schedules.combined)
        b.run(pipeline_actions(p.schedule, b.stage, p.pp, b.m, p.vpp,
                               p.microbatch_group_size, ep_overlap=True))
        return b.finish()
    # the schedule as this job runs it (ZB-1p/ZB-2p order with the job's times: one order
    # for all ranks, from the cost record of the cluster's slowest GPU)
    sched = get_schedule(p.schedule).for_job(job)
    # Megatron-Core's overlap_p2p_comm calls (docs/calibration.md §5.68)
    overlapped = bool(job.framework.overlap_p2p_comm and sched.overlaps_p2p and p.pp > 1)
    flush = job.framework.overlap_p2p_comm_warmup_flush     # §5.207
    args = (b.stage, p.pp, b.m, p.vpp, p.microbatch_group_size)
    if sched is get_schedule(p.schedule):     # not bound to the job's times: the same order
        b.run(_actions(p.schedule, overlapped, flush, *args))   # for every job with these args
    else:
        b.run(sched.overlapped_actions(*args, flush) if overlapped else sched.actions(*args))
    return b.finish()


@lru_cache(maxsize=256)
def _actions(schedule: str, overlapped: bool, flush: bool, stage: int, pp: int, m: int,
             vpp: int, group_size: int | None) -> tuple:
    """The registered ``schedule``'s actions (``overlapped_actions``, with ``flush`` its
    ``warmup_flush``, or ``actions``) of one rank, a pure function of its arguments, kept
    for the process: a search simulates plans that share a pipeline shape (twins that
    differ only in ZeRO or SP), and the actions are immutable (``Step``, ``Exchange``)."""
    sched = get_schedule(schedule)
    if overlapped:
        return tuple(sched.overlapped_actions(stage, pp, m, vpp, group_size, flush))
    return tuple(sched.actions(stage, pp, m, vpp, group_size))


def compile_job(job: Job, ranks: Iterable[int] | None = None, granularity: str = "chunk",
                costs: StageCosts | None = None) -> dict[int, Program]:
    """Programs of ``ranks`` (all ranks when None), keyed by global rank.

    ``granularity``: ``chunk`` (one compute op per model chunk and pass, its collectives
    lumped) or ``layer`` (one per layer). ``costs`` overrides the cost model (tests).
    Each rank computes at its own GPU's speed (``stage_costs(job, gpu)`` of the GPU type of
    its node): on a mixed cluster an H100 rank's kernels are shorter than an A100 rank's.
    """
    if granularity not in GRANULARITIES:
        raise SpecError("granularity", granularity, f"must be one of {', '.join(GRANULARITIES)}")
    cl = job.cluster
    by_gpu: dict[str, StageCosts] = {}

    def costs_of(rank: int) -> tuple[str, StageCosts]:
        if costs is not None:
            return "", costs
        gpu = cl.gpu_of_rank(rank) if len(cl.groups) > 1 else cl.gpu
        if gpu.name not in by_gpu:
            by_gpu[gpu.name] = stage_costs(job, gpu)
        return gpu.name, by_gpu[gpu.name]

    layout = Layout(job)
    n = placement.world_size(job.plan)
    ranks = range(n) if ranks is None else sorted(set(int(r) for r in ranks))
    out, templates, shared = {}, {}, {}
    for r in ranks:
        if not 0 <= r < n:
            raise SpecError("rank", r, f"must be in 0..{n - 1}")
        stage = layout.stage(r)
        name, c = costs_of(r)
        if job.plan.group_microbatches is not None:   # replicas of a group share a program
            name = f"{name}/{job.microbatches_of_rank(r)}"
        if (stage, name) not in templates:
            templates[(stage, name)] = out[r] = compile_rank(job, c, layout, r, granularity)
        else:
            out[r] = relabel(templates[(stage, name)], r, layout, shared)
    for gpu, factor in job.cluster.faults.stragglers:
        if gpu in out:
            out[gpu] = slow_down(out[gpu], factor)
    return out


def slow_down(program: Program, factor: float) -> Program:
    """``program`` on a straggler: every compute op lasts ``factor`` times longer
    (``topologies.faults``); communication is unchanged."""
    streams = {name: tuple(replace(op, seconds=op.seconds * factor) if type(op) is Compute
                           else op for op in ops)
               for name, ops in program.streams.items()}
    return Program(program.rank, program.stage, streams, program.meta)


def relabel(template: Program, rank: int, layout: Layout, shared: dict | None = None) -> Program:
    """``template``'s program moved to ``rank`` of the same stage: the same ops with the
    rank's own peers and groups (programs depend on the stage and the groups only). Ops are
    immutable, so the ranks of one group share its collective ops: ``shared`` (one dict per
    ``compile_job``) keeps them by template group and group, with the template's places of
    the ops (``_places``: worked out once per template)."""
    t = template.rank
    groups = {layout.group(d, t): layout.group(d, rank)
              for d in ("tp", "cp", "dp", "ep", "etp", "edp", "dpcp", "dprep", "cpa", "cpr",
                        "stats") if d != "stats" or d in layout._groups}
    peers = dict(zip(layout.group("pp", t), layout.group("pp", rank)))
    shared = {} if shared is None else shared
    places = shared.get(id(template))
    if places is None or places[0] is not template:
        places = shared[id(template)] = (template, _places(template))
    streams = {}
    for name, (ops, by_group, p2p) in places[1].items():
        new = np.array(ops, dtype=object) if by_group or p2p else None
        for group, (where, colls) in by_group.items():
            g = groups.get(group)
            if g is None:   # the tied embedding's pair or DualPipe's mirror pair: pp members
                g = tuple(peers[r] for r in group)
            key = (id(colls), g)
            moved = shared.get(key)
            if moved is None:
                # (every field but the group is the template's: the remote share of a
                # forwarded all-to-all included, or the members of one rendezvous would
                # disagree on its bytes and the last to arrive would decide)
                moved = np.empty(len(colls), dtype=object)
                moved[:] = [Collective(
                    op.id, op.stream, op.kind, g, op.nbytes,
                    layout.algorithm(g, op.kind) if op.algorithm != "ring_stepwise"
                    else op.algorithm, op.tag, op.category, op.label, op.repeat,
                    op.microbatch, op.chunk, op.deps, op.remote_scale, op.nvlink_share,
                    op.sms) for op in colls]
                shared[key] = moved
            new[where] = moved
        # positional construction: dataclasses.replace costs several times more, and a
        # template of a large job is relabelled for every rank of its stage
        for k, op in p2p:
            new[k] = Send(op.id, op.stream, peers[op.dst], op.nbytes, op.tag, op.label,
                          op.microbatch, op.chunk, op.deps, op.blocking) if type(op) is Send \
                else Recv(op.id, op.stream, peers[op.src], op.tag, op.label, op.microbatch,
                          op.chunk, op.deps)
        streams[name] = ops if new is None else tuple(new.tolist())
    return Program(rank, template.stage, streams, template.meta)


def _places(template: Program) -> dict[str, tuple]:
    """Per stream of ``template``: its ops, its collectives by group (the group -> (their
    places as an index array, the ops: a tuple that lives as long as the template's memo)),
    in the order of each group's first op, and its sends and receives ``(place, op)``; what
    ``relabel`` changes for each rank, the compute ops being every rank's own."""
    out = {}
    for name, ops in template.streams.items():
        by_group: dict[tuple, tuple[list, list]] = {}
        p2p = []
        for k, op in enumerate(ops):
            kind = type(op)
            if kind is Collective:
                where, colls = by_group.setdefault(op.group, ([], []))
                where.append(k)
                colls.append(op)
            elif kind is not Compute:
                p2p.append((k, op))
        out[name] = (ops, {g: (np.array(w, dtype=np.intp), tuple(c))
                           for g, (w, c) in by_group.items()}, p2p)
    return out
