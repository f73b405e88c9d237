#!/usr/bin/env python
"""ZeRO-2 without overlap (``overlap_grad_reduce=false``) inside a pipeline: estimate against
simulation per schedule, the paths of ``strategies.estimate.terms.dp_exposure.z2_sync_exposed``.

Run (a few seconds):

    python experiments/zero2_sync_paths.py [--overlap]

Every plan runs on two nodes of its cluster, ZeRO-2 with each micro-batch's reduce-scatter
after its backward (``W`` on a split backward) on the compute stream. Columns: the analytic
step, the simulated one (``flows``), their gap, the gap against the ``contention-free``
simulation, the same plan's gap with ZeRO-1 (the pipeline model's own error), and whether
the lower bound stays at most the simulation. The last lines give the worst gap per
schedule. Plans: the sync grid of ``tests/test_zero_overlap.py`` and a sweep of micro-batch
counts, stages and chunks on an 8- and a 16-layer Llama 3 8B. ``--overlap``: the same plans
with ``overlap_grad_reduce=true`` (the reduce-scatters on the data-parallel stream,
``sharded_exposed`` and, under ZB-H1, ``split_tail_exposed``), and the grid's ZB-H1 row
with ep 4.
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.simulate import simulate  # noqa: E402
from strategies.estimate.lower_bound import step_time_lower_bound  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

LLAMA8 = dataclasses.replace(model_preset("llama3-8b"), num_layers=8, seq_length=2048)
LLAMA16 = dataclasses.replace(model_preset("llama3-8b"), num_layers=16, seq_length=2048)
MIXTRAL4 = dataclasses.replace(model_preset("mixtral-8x7b"), num_layers=4, seq_length=1024)
DSV3_8 = dataclasses.replace(model_preset("deepseek-v3"), num_layers=8, first_k_dense_replace=1,
                             num_nextn_predict_layers=0, seq_length=1024)
GRID = [  # (name, model, cluster, plan)
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=2,gbs=32"),
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=4,gbs=32"),
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=2,gbs=32,schedule=gpipe"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=1,gbs=64"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=4,gbs=64"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=4,ep=1,gbs=64"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=1,gbs=64,schedule=gpipe"),
    ("deepseek-v3/8", DSV3_8, "hgx-h800", "pp=4,ep=2,gbs=32"),
    ("deepseek-v3/8", DSV3_8, "hgx-h800", "pp=2,ep=2,gbs=32"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=1,gbs=64,schedule=zb-h1"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=1,gbs=64,schedule=zb-v,vpp=2"),
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=2,gbs=32,schedule=zb-h1"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=4,ep=1,gbs=64,schedule=zb-h1"),
    ("deepseek-v3/8", DSV3_8, "hgx-h800", "pp=4,ep=2,gbs=32,schedule=zb-h1"),
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=2,gbs=32,schedule=interleaved,vpp=2"),
    ("mixtral/4", MIXTRAL4, "dgx-h100", "pp=2,ep=1,gbs=64,schedule=interleaved,vpp=2"),
    ("llama3-8b/8", LLAMA8, "dgx-h100", "pp=4,gbs=32,schedule=interleaved,vpp=2"),
]
SWEEP = [("llama3-8b/8", LLAMA8, "dgx-h100", f"pp={pp},gbs={gbs},schedule={s}")
         for s in ("1f1b", "zb-h1", "interleaved,vpp=2") for pp in (2, 4) for gbs in (16, 64)
         if not (s.startswith("interleaved") and gbs // (16 // pp) < pp)] + \
        [("llama3-8b/16", LLAMA16, "dgx-h100", f"pp={pp},gbs={gbs},schedule={s}")
         for s in ("1f1b", "zb-h1", "interleaved,vpp=2", "interleaved,vpp=4")
         for pp in (2, 4) for gbs in (32,)]


def row(model, cluster: str, plan: str, overlap: bool = False
        ) -> tuple[float, float, float, float, bool]:
    """(estimate s, simulated s, contention-free s, ZeRO-1 gap, bound <= simulation)."""
    ogr = "true" if overlap else "false"

    def job_of(zero: int):
        return make_job(model, cluster_preset(cluster, 2),
                        parse_plan(f"{plan},zero={zero},overlap_grad_reduce={ogr}"))
    job = job_of(2)
    e, s = estimate(job).step_time_s, simulate(job).step_time_s
    c = simulate(job, network="contention-free").step_time_s
    j1 = job_of(1)
    g1 = estimate(j1).step_time_s / simulate(j1).step_time_s - 1
    bound = float(step_time_lower_bound(model, job.cluster, job.dtype,
                                        PlanArrays.from_plans([job.plan]), job.framework)[0])
    return e, s, c, g1, bound <= s


def main() -> None:
    overlap = "--overlap" in sys.argv[1:]
    plans = GRID + SWEEP + ([("mixtral/4", MIXTRAL4, "dgx-h100",
                              "pp=2,ep=4,gbs=64,schedule=zb-h1")] if overlap else [])
    worst: dict[str, float] = {}
    print("| model | plan | estimate s | simulated s | gap | contention-free gap "
          "| ZeRO-1 gap | bound <= sim |")
    print("|---|---|---|---|---|---|---|---|")
    for name, model, cluster, plan in plans:
        e, s, c, g1, ok = row(model, cluster, plan, overlap)
        gap = e / s - 1
        kind = next((k for k in ("interleaved", "zb-h1", "zb-v", "gpipe") if k in plan),
                    "1f1b")
        worst[kind] = max(worst.get(kind, 0.0), abs(gap))
        print(f"| {name} | {plan} | {e:.4f} | {s:.4f} | {100 * gap:+.2f} % | "
              f"{100 * (e / c - 1):+.2f} % | {100 * g1:+.2f} % | {ok} |")
    print()
    for kind, w in sorted(worst.items()):
        print(f"worst |gap| {kind}: {100 * w:.2f} %")


if __name__ == "__main__":
    main()
