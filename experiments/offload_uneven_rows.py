"""Activation offloading over uneven pipeline stages (docs/calibration.md §5.217): each case's
estimated step, ``offload`` and ``compute`` entries and, with ``--sim``, the simulation's
``offload`` and ``compute`` and the relative gap of the two ``offload`` entries. The cases
are ``tests/test_offload_uneven.py``'s. Run in main's tree (``PYTHONPATH`` at it, without
``--sim``) for the figures before.

Run: python experiments/offload_uneven_rows.py [--sim]
"""
from __future__ import annotations

import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402
from topologies.cluster.arg import mixed_cluster  # noqa: E402

ATT = "offload_modules=qkv_linear+core_attn+attn_proj"
LLAMA = model_preset("llama3-8b")
MIXTRAL = model_preset("mixtral-8x7b")
#: Mixtral with two dense first layers: stages of two kinds of layer
DENSE_FIRST = dataclasses.replace(MIXTRAL, first_k_dense_replace=2)

#: (model, cluster, plan, global batch): first/last-stage counts, layers_per_stage, a layout
#: string, interleaved, zero-bubble and DualPipe orders, routed and attention-side modules,
#: one kind and two kinds of layer, a mixed cluster even and uneven
CASES = [
    (LLAMA, "dgx-h100:1", f"tp=1,pp=2,dp=4,mbs=1,{ATT},first_stage_layers=14", 64),
    (LLAMA, "dgx-h100:1", f"tp=1,pp=2,dp=4,mbs=1,{ATT},last_stage_layers=12", 64),
    (LLAMA, "dgx-h100:1", f"tp=2,pp=4,dp=1,mbs=1,{ATT},layers_per_stage=6/10/9/7", 16),
    (LLAMA, "dgx-h100:1", f"tp=2,pp=4,dp=1,mbs=1,{ATT},layout=Et*6|t*10|t*9|t*7L", 16),
    (LLAMA, "dgx-h100:1",
     f"tp=2,pp=2,dp=2,mbs=1,schedule=interleaved,{ATT},layout=Et*6|t*10|t*10|t*6L", 32),
    (LLAMA, "dgx-h100:1", f"tp=1,pp=2,dp=4,mbs=1,schedule=zb-h1,{ATT},first_stage_layers=14",
     64),
    (LLAMA, "dgx-h100:1",
     f"tp=1,pp=2,dp=4,mbs=1,schedule=dualpipe,{ATT},first_stage_layers=14", 64),
    (MIXTRAL, "dgx-h100:2",
     "tp=2,pp=2,ep=4,dp=4,mbs=1,offload_modules=expert_fc1+moe_act,first_stage_layers=14", 64),
    (DENSE_FIRST, "dgx-h100:2",
     "tp=2,pp=2,ep=4,dp=4,mbs=1,offload_modules=expert_fc1+moe_act,first_stage_layers=14", 64),
    (DENSE_FIRST, "dgx-h100:2", "tp=2,pp=2,ep=4,dp=4,mbs=1,offload_modules=expert_fc1+moe_act+"
     "qkv_linear+core_attn+attn_proj,last_stage_layers=14", 64),
    (LLAMA, "dgx-h100:1+dgx-a100:1", f"tp=2,pp=2,dp=4,mbs=1,{ATT}", 64),
    (LLAMA, "dgx-h100:1+dgx-a100:1", f"tp=2,pp=2,dp=4,mbs=1,{ATT},first_stage_layers=14", 64),
]


def case_job(model, cluster: str, plan: str, gbs: int) -> Job:
    """The job of one case (``cluster``: a preset ``name:nodes`` or a mixed ``a:n+b:m``)."""
    if "+" in cluster:
        cl = mixed_cluster(cluster)
    else:
        name, n = cluster.split(":")
        cl = cluster_preset(name, int(n))
    return make_job(model, cl, parse_plan(plan), global_batch=gbs)


def main(sim: bool) -> None:
    if sim:
        from simulator.simulate import simulate
    for model, cluster, plan, gbs in CASES:
        job = case_job(model, cluster, plan, gbs)
        e = estimate(job)
        name = model.name + (" (2 dense first)" if model.first_k_dense_replace else "")
        row = [name, cluster, plan.replace(ATT, "attn3"), f"{e.step_time_s:.4f}",
               f"{e.breakdown_s['offload']:.4f}", f"{e.breakdown_s['compute']:.4f}"]
        if sim:
            s = simulate(job).metrics["breakdown_s"]
            gap = e.breakdown_s["offload"] / s["offload"] - 1.0
            row += [f"{s['offload']:.4f}", f"{s['compute']:.4f}", f"{gap:.1e}"]
        print(" | ".join(row))


if __name__ == "__main__":
    main("--sim" in sys.argv[1:])
