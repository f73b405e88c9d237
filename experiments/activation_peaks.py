#!/usr/bin/env python
"""Each rank's activation peak: the memory model against the simulator's activation track.

Run (about 10 s, 80 small simulations):

    python experiments/activation_peaks.py          # Markdown table on stdout

For every schedule, recomputation (none, selective, op, full) and a dense model (Llama-3-8B's
layer) and a mixed dense/MoE one (DeepSeek-V3's layer, 2 dense + 6 MoE layers and one MTP
module), 8 layers at s = 512, ``tp=1,pp=4,dp=2,mbs=1,gbs=16`` (``ep=2`` for the MoE) on one
DGX H100: the largest relative difference over the ranks between the simulated activation
peak (the stash track's maximum plus the transient, ``simulate --json``'s
``activation_memory[].peak_bytes``) and ``memory_by_stage``'s activations,

* ``before``: the memory model priced the most-stashed moment of the order
  (``Schedule.in_flight`` forwards and the ``Schedule.pending_weight_grads`` waiting ``W``
  there) and the track found an overlapped forward's partner by its records interleaving;
* ``after``: both read one rule (``activations.stash_peak``: of the order's
  ``(stashed, pending W)`` pairs, ``schedules.stash.stash_frontier``, the one with the most
  bytes; the compiler's recorded pairs, ``Program.meta["paired_forwards"]``),

and how much the memory model's activations of the worst rank moved (``after / before``).

    python experiments/activation_peaks.py --arrays

prints instead, for ZB-1p and ZB-2p (whose order is solved per job's times) at ``pp`` 4 and
8, each rank's total from the array model's own pick (``rank_memory_arrays`` without counts:
the search's pruning, which orders with unit times) over ``memory_by_stage``'s, less 1.

    python experiments/activation_peaks.py --chunks

prints, for the interleaved, ZB-V, DualPipeV and DualPipe plans of the MoE model (whose
ranks' two chunks hold different kinds: a dense and an MoE layer, an MoE layer and the MTP
module; DualPipe's two copies), each rank's transformer-layer stash (the embedding and
logits left out) over what replaying the order with each entry at its own chunk's layers by
kind gives (this script's own replay): ``before``, every stashed entry the rank's mean
chunk at the mean chunk's peak pair (the model until each entry was priced by its own
chunk); ``after``, the model now (``activations.stash_at_peak``), 1 where the rule holds.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.metrics import activation_series  # noqa: E402
from simulator.output.metrics_json import activation_memory_json  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.memory import activations as act  # noqa: E402
from strategies.memory.scalar import memory_by_stage  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from strategies.schedules import get_schedule  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

MODELS = {
    "dense": replace(model_preset("llama3-8b"), name="dense-small", num_layers=8,
                     seq_length=512, vocab_size=32000),
    "moe": replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=512),
}
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-h2", 1),
             ("zb-1p", 1), ("zb-2p", 1), ("zb-v", 2), ("dualpipe", 1), ("dualpipev", 2)]
RECOMPUTE = ["none", "selective", "op", "full"]


def _old_activations(job, stage: int) -> float:
    """The memory model before: the most-stashed moment's counts."""
    p, m = job.plan, job.num_microbatches
    sc = get_schedule(p.schedule).for_job(job)
    n = sc.in_flight(stage, p.pp, m, p.vpp, p.microbatch_group_size)
    w = sc.pending_weight_grads(stage, p.pp, m, p.vpp, p.microbatch_group_size)
    return (n * act.activation_bytes_per_chunk(job, stage)
            + w * act.wgrad_bytes_per_chunk(job, stage)
            + act.transient_activation_bytes(job, stage))


def arrays_table() -> None:
    """ZB-1p/ZB-2p: the array model's unbound order against the job's bound one."""
    from strategies.memory.arrays import rank_memory_arrays
    from strategies.plan_arrays import PlanArrays
    print("| model | schedule | pp | recompute | array / memory_by_stage - 1, rank 0 … pp-1 |")
    print("| --- | --- | --- | --- | --- |")
    for name, model in MODELS.items():
        for sched in ("zb-1p", "zb-2p"):
            for pp, gbs in ((4, 16), (8, 32)):
                for rc in RECOMPUTE:
                    text = (f"tp=1,pp={pp},dp={8 // pp},mbs=1,gbs={gbs},schedule={sched},"
                            f"recompute={rc}" + (",ep=1" if name == "moe" else ""))
                    job = make_job(model, cluster_preset("dgx-h100", 1), parse_plan(text))
                    P = PlanArrays.from_plans([job.plan])
                    rel = [float(rank_memory_arrays(job.model, P, r, job.dtype, job.system,
                                                    job.cluster.gpu)[0]) / b.total - 1
                           for r, b in enumerate(memory_by_stage(job))]
                    print(f"| {name} | {sched} | {pp} | {rc} | "
                          + " ".join(f"{x:+.4f}" for x in rel) + " |")


def _per_chunk_peak(job, r: int) -> float:
    """The layers' stash peak of rank ``r`` with each stashed entry (and pending ``W``) its
    own chunk's layers by kind (``layout.chunk_kinds``), over the order's moments."""
    from strategies.layout import chunk_kinds
    p = job.plan
    split = get_schedule(p.schedule).splits_backward
    mirrored = get_schedule(p.schedule).mirrored
    per = {}
    for c in range(2 if mirrored else p.vpp):
        # DualPipe's chunk 1 runs its copy of stage pp-1-r (held there as chunk 0)
        kinds = (chunk_kinds(job.model, job.layout, r if c == 0 else p.pp - 1 - r, 0)
                 if mirrored else chunk_kinds(job.model, job.layout, r, c))
        views = act.stash_kinds(job.model, kinds, sum(kinds.values()))
        per[c] = (sum(n * act.job_layer_activation_bytes(job, model=v) for v, n in views),
                  sum(n * act.layer_wgrad_bytes(v, job.seq_len, p.mbs, p.tp, p.sp, p.cp)
                      for v, n in views) if split else 0.0)
    steps = get_schedule(p.schedule).for_job(job).steps(r, p.pp, job.num_microbatches, p.vpp)
    has_w = {(s.microbatch, s.chunk) for s in steps if s.kind == "W"}
    live: set = set()
    pend: set = set()
    best, group = 0.0, []

    def level() -> float:
        return sum(per[c][0] for _, c in live) + sum(per[c][1] for _, c in pend)
    for s in steps:
        group.append(s)
        if s.overlap:
            continue
        for g in group:
            if g.kind == "B":
                live.discard((g.microbatch, g.chunk))
                if (g.microbatch, g.chunk) in has_w:
                    pend.add((g.microbatch, g.chunk))
        best = max(best, level())
        for g in (g for g in group if g.kind == "F"):
            live.add((g.microbatch, g.chunk))
            best = max(best, level())
        for g in (g for g in group if g.kind == "W"):
            pend.discard((g.microbatch, g.chunk))
        group = []
    return best


def chunks_table() -> None:
    """The mean-chunk stash (before) and the model's (after) against a per-chunk replay."""
    from strategies.layout import order_chunk_kinds
    from strategies.schedules.stash import peak_pair
    print("| schedule | recompute | rank | chunks (kinds) | before / replay | after / replay |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sched, v in (("interleaved", 2), ("zb-v", 2), ("dualpipev", 2), ("dualpipe", 1)):
        for rc in ("none", "full"):
            text = f"tp=1,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule={sched},vpp={v},recompute={rc}"
            job = make_job(MODELS["moe"], cluster_preset("dgx-h100", 1), parse_plan(text))
            p = job.plan
            sc = get_schedule(sched)
            for r in range(p.pp):
                a = act.chunk_layer_activation_bytes(job, r)
                wb = act.wgrad_bytes_per_chunk(job, r)
                front = sc.for_job(job).stash_frontier(r, p.pp, job.num_microbatches, p.vpp)
                n, w = peak_pair(front, act.activation_bytes_per_chunk(job, r), wb)
                replay = _per_chunk_peak(job, r)
                kinds = [order_chunk_kinds(job.model, job.layout, r, c, sc.mirrored)
                         for c in range(2 if sc.mirrored else v)]
                print(f"| {sched} | {rc} | {r} | {kinds} | {(n * a + w * wb) / replay:.4f} "
                      f"| {act.stash_at_peak(job, r)[2] / replay:.4f} |")


def main() -> None:
    if "--arrays" in sys.argv[1:]:
        arrays_table()
        return
    if "--chunks" in sys.argv[1:]:
        chunks_table()
        return
    print("| model | schedule | recompute | before: sim / model - 1 (worst rank) "
          "| after | model after / before (that rank) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, model in MODELS.items():
        for sched, v in SCHEDULES:
            for rc in RECOMPUTE:
                text = (f"tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule={sched},vpp={v},recompute={rc}"
                        + (",ep=2" if name == "moe" else ""))
                job = make_job(model, cluster_preset("dgx-h100", 1), parse_plan(text))
                res = simulate(job)
                stages = memory_by_stage(job)
                by_rank: dict[int, list] = {}
                for rec in res.records:
                    by_rank.setdefault(rec.rank, []).append(rec)
                before, after = (0.0, 0, 1.0), 0.0
                for row in activation_memory_json(res, job):
                    s = row["stage"]
                    old_track = activation_series(by_rank[row["rank"]],
                                                  act.activation_bytes_per_chunk(job, s),
                                                  act.wgrad_bytes_per_chunk(job, s))
                    old_sim = max(b for _, b in old_track) + row["transient_bytes"]
                    old = _old_activations(job, s)
                    new = stages[s].activations
                    if abs(old_sim / old - 1) >= abs(before[0]):
                        before = (old_sim / old - 1, s, new / old)
                    after = max(after, abs(row["peak_bytes"] / new - 1))
                print(f"| {name} | {sched} | {rc} | {before[0]:+.4f} (rank {before[1]}) "
                      f"| {after:.1e} | {before[2]:.4f} |")


if __name__ == "__main__":
    main()
