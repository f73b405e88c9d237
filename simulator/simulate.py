"""``simulate(job)``: compile, build the network, run, and derive the metrics.

>>> from strategies.job_text import job_from_text
>>> job = job_from_text("gpt-1.7b", "dgx-a100:1", "tp=2,pp=2,dp=2,gbs=8")
>>> res = simulate(job)
>>> res.folded, res.simulated_ranks, sorted(res.metrics["breakdown_s"]) == sorted(BREAKDOWN_KEYS)
(True, [0, 4], True)
>>> abs(sum(res.metrics["breakdown_s"].values()) - res.step_time_s) < 1e-12
True
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable

from simulator.engine import core as engine
from simulator.engine.core import NotAlone
from simulator.gc_pause import paused_gc
from simulator.program.builder import NORM_LABEL
from simulator.program.compiler import compile_job
from simulator.fold import FoldSpec, fold_spec, make_link_map
from simulator.metrics import (BREAKDOWN_KEYS, LINK_SERIES_PER_KIND, PRIORITY,
                               activation_series, busiest, link_classes, link_name,
                               rank_breakdown, rank_ends, stage_bubbles, top_links)
from simulator.program.ops import Program
from simulator.result import SimResult
from simulator.network.backend import BACKENDS, DEFAULT_BACKEND, NetworkBackend, new_network
from simulator.network.routes import LinkTables
from simulator.network.cluster_net import LINK_KINDS, SimNetwork, link_kind
from strategies.errors import SpecError
from strategies.cost.system import get_system
from strategies.cost import flop_counts
from strategies.estimate.terms.stages import bubble_share
from strategies.flushes import flush_job, flushed_breakdown, flushed_step_s
from strategies.cost.stage import StageCosts
from strategies.cost.recompute import plan_share as rc_share
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays
from strategies.memory.activations import stash_entry_bytes
from strategies.job import Job
from topologies.cluster import Cluster
from topologies.graph import build_graph
from topologies.limits import MAX_SIM_MICROBATCHES
from topologies.routing import route

if TYPE_CHECKING:
    import networkx as nx

_GRAPHS: dict[str, tuple[Any, LinkTables]] = {}
TOP_LINKS = 10          # links in metrics["link_utilisation"]


def graph_of(cluster: Cluster) -> "nx.DiGraph":
    """``build_graph(cluster)``, kept for the next simulation of the same cluster (the last
    four clusters; a search's workers build theirs before their first plan,
    ``simulator.search.executors``)."""
    return _graph_and_tables(cluster)[0]


def _graph_and_tables(cluster: Cluster) -> tuple["nx.DiGraph", LinkTables]:
    """``graph_of``'s graph and its ``LinkTables`` (links, capacities, unfolded routes),
    kept with it: every simulation of a search shares them (a kept graph never changes)."""
    key = json.dumps(cluster.to_dict(), sort_keys=True)
    if key not in _GRAPHS:
        if len(_GRAPHS) >= 4:
            _GRAPHS.pop(next(iter(_GRAPHS)))
        graph = build_graph(cluster)
        _GRAPHS[key] = (graph, LinkTables(graph))
    return _GRAPHS[key]


def check_simulable(job: Job) -> None:
    """A job the simulator can run in reasonable time and memory: at most
    ``MAX_SIM_MICROBATCHES`` virtual micro-batches per pipeline rank (else ``SpecError``)."""
    v = job.num_microbatches * job.plan.vpp
    if v > MAX_SIM_MICROBATCHES:
        raise SpecError("num_microbatches", job.num_microbatches,
                        f"times vpp={job.plan.vpp} is {v:,} steps per pipeline rank; the simulator "
                        f"takes at most {MAX_SIM_MICROBATCHES:,} (use estimate, or a larger mbs or dp)")


def simulate(job: Job, fold: bool = True, granularity: str | None = None, *,
             network: str = DEFAULT_BACKEND, free_comm: bool = False,
             costs: StageCosts | None = None, link_series: bool = False,
             figures_only: bool = False) -> SimResult:
    """Simulate one optimizer step of ``job`` event by event.

    ``fold``: simulate one representative per symmetry class (``simulator.fold``; exact,
    and ``metrics["fold_note"]`` says what was folded and why not more). ``granularity``:
    ``chunk`` (default) or ``layer``. ``network``: the backend (``flows``, the default: flows
    share links max-min fairly; ``contention-free``: every flow at its bottleneck link's full
    bandwidth; see ``simulator.network.backend``). ``link_series``: also record each link's
    load over time (``metrics["link_series"]``, ``metrics["link_classes"]``; the ``flows``
    backend only). ``figures_only``: derive only the step figures the search reads
    (``simulator.extend.step_figures``: step, breakdown, exposed and overlapped communication,
    bubble and idle fractions by stage, critical rank, rank ends), not the activation memory
    and link metrics (the same run and the same figures, bit for bit; the metrics are
    computed after the run). ``free_comm`` and ``costs`` are test hooks (instant
    communication; a replaced cost table). Times in seconds.
    """
    if job.plan.flushes > 1:    # k pipeline flushes per step: one flush simulated, composed
        one = simulate(flush_job(job), fold, granularity, network=network, free_comm=free_comm,
                       costs=costs, link_series=link_series, figures_only=figures_only)
        return _flushed(one, job.plan.flushes)
    t0 = time.perf_counter()
    if network not in BACKENDS:
        raise SpecError("network", network, f"must be one of {', '.join(BACKENDS)}")
    check_simulable(job)
    with paused_gc():           # compile, run and metrics allocate ~1 M live objects
        spec = fold_spec(job, fold)
        try:
            res = _run(job, spec, granularity, network, free_comm, costs, link_series,
                       figures_only)
        except NotAlone:        # the gradient norm's ring shared the network: fold it less
            spec = fold_spec(job, fold, stats="equitable")
            res = _run(job, spec, granularity, network, free_comm, costs, link_series,
                       figures_only)
    res.metrics["network"] = network
    if len(job.cluster.groups) > 1:     # a mixed cluster: the GPU type of each simulated rank
        res.metrics["rank_gpus"] = {r: job.cluster.gpu_of_rank(r).name
                                    for r in res.simulated_ranks}
    res.step_time_s = res.metrics["step_time_s"]
    res.wall_s = time.perf_counter() - t0
    return res


def _run(job: Job, spec: FoldSpec, granularity: str | None, network: str, free_comm: bool,
         costs: StageCosts | None, link_series: bool, figures_only: bool) -> SimResult:
    """``simulate``'s run of the representatives ``spec`` gives, with its metrics; raises
    ``NotAlone`` where ``spec.alone``'s premise failed (``simulator.fold_stats``)."""
    programs = compile_job(job, ranks=spec.reps, granularity=granularity or "chunk",
                           costs=costs)
    graph, tables = _graph_and_tables(job.cluster)
    net = new_network(graph, route, make_link_map(job, spec.rep_of) if spec.folded
                      else None, network, record_load=link_series, tables=tables)
    net.count_bytes = not figures_only      # the figures read no link's bytes
    try:
        res = engine.run(programs, net=net, free_comm=free_comm, num_ranks=len(spec.rep_of),
                         rank_map=spec.rank_map(), sm_of=sms_of(job, programs),
                         watch=spec.alone and [(g, NORM_LABEL) for g in spec.alone])
        res.metrics = derive_metrics(res, job, programs, net, spec, figures_only)
    finally:
        net.close()         # its reference cycles, else garbage for the collector
    return res


def sms_of(job: Job, ranks: Iterable[int]) -> dict[int, int] | None:
    """Each simulated rank's SM count where ``job.system.comm_sm_share`` charges the SMs
    in-flight collectives hold (``simulator.engine.sm_hold``; 0 for a GPU without one), else
    None (not charged: the engine as it was)."""
    if not get_system(job.system).comm_sm_share:
        return None
    return {r: job.cluster.gpu_of_rank(r).sm_count or 0 for r in ranks}


def _flushed(one: SimResult, k: int) -> SimResult:
    """The result of ``k`` flushes from one flush's simulation (``strategies.flushes``): the
    step, breakdown and exposed/overlapped communication ``k`` times but the critical rank's
    optimizer; the bubble and idle fractions are ``k`` times one flush's time over the step.
    Records and activation series stay one flush's (``metrics["flushes"]``); the trace, the
    timeline and the JSON series lay out all ``k`` (``simulator.output.flush_view``)."""
    m = one.metrics
    t1, opt = one.step_time_s, float(m["breakdown_s"]["optimizer"])
    step = flushed_step_s(t1, opt, k)
    scale = k * t1 / step if step > 0 else 0.0
    m["breakdown_s"] = flushed_breakdown(m["breakdown_s"], k)
    m["breakdown_s_by_stage"] = [flushed_breakdown(b, k) for b in m["breakdown_s_by_stage"]]
    m.update({"step_time_s": step, "exposed_comm_s": k * m["exposed_comm_s"],
              "overlapped_comm_s": k * m["overlapped_comm_s"],
              "bubble_fraction_by_stage": [b * scale for b in m["bubble_fraction_by_stage"]],
              "idle_fraction_by_stage": [f * scale for f in m["idle_fraction_by_stage"]],
              "flushes": k})
    m.update(stage_bubbles(m["bubble_fraction_by_stage"]))
    one.step_time_s = step
    return one


def derive_metrics(res: SimResult, job: Job, programs: dict[int, Program], net: NetworkBackend,
                   spec: FoldSpec, figures_only: bool = False) -> dict[str, Any]:
    """The metrics of ``SimResult.metrics`` (see the module docstrings of metrics);
    ``figures_only``: the step figures alone (``simulate``), without the activation memory
    and the link metrics."""
    metas = {r: p.meta for r, p in programs.items()}
    ends = rank_ends(res.records, metas)
    step = max(ends.values(), default=0.0)
    critical = min(r for r, t in ends.items() if t == step) if ends else 0
    by_rank: dict[int, list] = {r: [] for r in programs}
    for rec in res.records:
        by_rank[rec.rank].append(rec)
    first_of_stage: dict[int, int] = {}
    for r in sorted(programs):
        first_of_stage.setdefault(programs[r].stage, r)
    bubbles, idle, peaks, memory, by_stage = [], [], [], {}, []
    parts: dict[int, tuple] = {}       # rank -> its rank_breakdown (the critical rank's reused)
    for stage in range(job.plan.pp):
        rank = first_of_stage[stage]
        part, _ = parts[rank] = rank_breakdown(by_rank[rank], step)
        by_stage.append(part)
        bubbles.append(float(bubble_share(part["bubble"], step)))
        busy = part["compute"] + part["recompute"] + part["optimizer"]
        idle.append((step - busy) / step if step > 0 else 0.0)
    breakdown, overlapped = parts.get(critical) or rank_breakdown(by_rank[critical], step)
    figures = {
        "step_time_s": step, "critical_rank": critical, "engine_end_s": res.step_time_s,
        "breakdown_s": breakdown, "exposed_comm_s": sum(breakdown[k] for k in PRIORITY),
        "breakdown_s_by_stage": by_stage,
        "overlapped_comm_s": overlapped, "bubble_fraction_by_stage": bubbles,
        **stage_bubbles(bubbles), "idle_fraction_by_stage": idle}
    if figures_only:
        return {**figures, "fold_note": spec.note, "rank_ends_s": ends}
    per_stage: dict[int, tuple[float, float]] = {}     # the same for every rank of a stage
    for r in sorted(programs):
        stage = programs[r].stage
        if stage not in per_stage:
            per_stage[stage] = stash_entry_bytes(job, stage)
        memory[r] = activation_series(by_rank[r], *per_stage[stage],
                                      partners=programs[r].meta.get("paired_forwards", {}))
    for stage in range(job.plan.pp):
        peaks.append(max(b for _, b in memory[first_of_stage[stage]]))
    link_bytes = net.link_bytes()
    bandwidth = {e: float(net.graph.edges[e]["bandwidth"]) for e in link_bytes}
    kind_of = {e: link_kind(*e) for e in link_bytes}
    links: dict[str, Any] = {}
    if getattr(net, "record_load", False):
        keep = busiest(link_bytes, TOP_LINKS)
        for kind in LINK_KINDS:
            keep += [e for e in busiest(link_bytes, LINK_SERIES_PER_KIND, kind_of, kind)
                     if e not in keep]
        util = {e: [(t, r / bandwidth[e]) for t, r in series]
                for e, series in net.link_rate_series(keep).items()}
        links = {"link_series": {link_name(e): {"kind": kind_of[e], "utilisation": util[e]}
                                 for e in keep},
                 "link_classes": link_classes(link_bytes, bandwidth, kind_of, step, util)}
    return {
        **figures, "peak_activation_bytes": peaks, "activation_memory": memory,
        "link_utilisation": top_links(link_bytes, bandwidth, step, TOP_LINKS, kind_of),
        "degraded_links": degraded_links(net, link_bytes, step),
        **links, "fold_note": spec.note, "rank_ends_s": ends,
    }


def degraded_links(net: SimNetwork, link_bytes: dict, step: float) -> list[dict[str, Any]]:
    """Every directed link a fault slowed (``cluster.faults``): its factor, the bytes it
    carried and their share of what it could carry in the step at its degraded bandwidth."""
    rows = []
    for u, v, d in net.graph.edges(data=True):
        if d.get("degraded", 1.0) > 1.0:
            b = float(link_bytes.get((u, v), 0.0))
            rows.append({"link": f"{u}->{v}", "factor": d["degraded"], "bytes": b,
                         "utilisation": b / (d["bandwidth"] * step) if step > 0 else 0.0})
    return sorted(rows, key=lambda r: (-r["bytes"], r["link"]))


def to_json(result: SimResult, job: Job) -> dict[str, Any]:
    """The CLI's ``simulate`` JSON: the ``estimate`` keys with the simulated step time,
    throughput, MFU/HFU, bubble (the bottleneck stage's, as the estimate's) and breakdown, plus
    ``max_stage_bubble_fraction``, ``bubble_fraction_by_stage``, ``simulated``, ``exposed_comm_s``,
    ``overlapped_comm_s``, ``events``, ``wall_s``, ``analytic_step_time_s``, the folding keys
    and ``network`` (the backend)."""
    from strategies.estimate.scalar import estimate
    est = estimate(job)
    out = est.to_json()
    step, m = result.step_time_s, result.metrics
    p, peak = job.plan, job.cluster.mean_peak(job.dtype)   # the mean peak over the GPUs
    n = job.cluster.num_gpus
    rc = RECOMPUTE_CODE[p.recompute]
    out.update({
        "step_time_s": step, "tokens_per_s": job.tokens_per_step / step if step > 0 else 0.0,
        "mfu": float(flop_counts.mfu(job.model, p.gbs, step, n, peak)) if step > 0 else 0.0,
        "hfu": float(flop_counts.hfu(job.model, p.gbs, p.flash_attn, rc, step, n, peak,
                                     rc_share(job.model.num_layers, PlanArrays.of_plan(p)),
                                     PlanArrays.of_plan(p).recompute_modules,
                                     job.framework.recompute_early_stop,
                                     job.framework.recompute_flash_fwd))
        if step > 0 else 0.0,
        "bubble_fraction": m["bubble_fraction"],
        "max_stage_bubble_fraction": m["max_stage_bubble_fraction"],
        "bubble_fraction_by_stage": m["bubble_fraction_by_stage"],
        "breakdown_s": {k: float(m["breakdown_s"][k]) for k in BREAKDOWN_KEYS},
        "breakdown_s_by_stage": [{k: float(b[k]) for k in BREAKDOWN_KEYS}
                                 for b in m["breakdown_s_by_stage"]],
        "simulated": True, "exposed_comm_s": m["exposed_comm_s"],
        "overlapped_comm_s": m["overlapped_comm_s"], "events": result.events,
        "wall_s": result.wall_s, "analytic_step_time_s": est.step_time_s,
        "folded": result.folded, "simulated_ranks": len(result.simulated_ranks),
        "fold_note": m["fold_note"], "degraded_links": m["degraded_links"],
        "network": m.get("network", DEFAULT_BACKEND),
        "critical_rank": m["critical_rank"], "idle_fraction_by_stage": m["idle_fraction_by_stage"],
    })
    return out
