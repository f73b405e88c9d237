#!/usr/bin/env python
"""Estimate against simulation where expert parameters leave the dense data-parallel group,
and the two network backends on a DeepEP all-to-all row.

Run (about 15 s on a quiet core):

    python experiments/moe_dp_groups.py

Table 1: small MoE plans whose ZeRO-3 gathers and reduce-scatters or DualPipe's mirror
all-reduce carry routed-expert parameters (``strategies.cost.comm.dp_parts``,
``grad_shard_params``): the analytic step, the simulated one, their gap, and the lower bound.
The same plan without expert parallelism is listed beside the ZeRO-3 one (its gap is the
ZeRO-3 model's own).

Table 2: ``mbridge260401_deepseekv3_b200_256_mxfp8`` (DeepEP, node-limited, deduplicated
all-to-all) on 16 micro-batches per pipeline: the ``flows`` and ``contention-free`` backends
(contention-free is a lower bound on flows for the same programs) and the estimate.
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
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

MIXTRAL4 = dataclasses.replace(model_preset("mixtral-8x7b"), num_layers=4, seq_length=1024)
DSV3_8 = dataclasses.replace(model_preset("deepseek-v3"), num_layers=8, first_k_dense_replace=1,
                             num_nextn_predict_layers=0, seq_length=1024)
PLANS = [("mixtral-8x7b, 4 layers", MIXTRAL4, "dgx-h100", 2, "ep=4,zero=3,gbs=32"),
         ("mixtral-8x7b, 4 layers", MIXTRAL4, "dgx-h100", 2, "ep=1,zero=3,gbs=32"),
         ("mixtral-8x7b, 4 layers", MIXTRAL4, "dgx-h100", 2, "tp=2,ep=4,etp=1,zero=3,gbs=32"),
         ("deepseek-v3, 8 layers", DSV3_8, "hgx-h800", 2, "pp=4,ep=4,zero=2,schedule=dualpipe,gbs=32"),
         ("deepseek-v3, 8 layers", DSV3_8, "hgx-h800", 2, "pp=4,ep=2,zero=2,schedule=dualpipe,gbs=32"),
         ("deepseek-v3, 8 layers", DSV3_8, "hgx-h800", 2,
          "pp=4,vpp=2,ep=2,zero=1,schedule=dualpipev,gbs=32")]
ROW = "mbridge260401_deepseekv3_b200_256_mxfp8"


def small_plans() -> None:
    print("| model | cluster | plan | estimate s | simulated s | gap | bound s |")
    print("|---|---|---|---|---|---|---|")
    for name, m, cl_name, nodes, plan in PLANS:
        cl = cluster_preset(cl_name, nodes)
        job = make_job(m, cl, parse_plan(plan))
        est, sim = estimate(job).step_time_s, simulate(job).step_time_s
        bound = float(step_time_lower_bound(m, cl, job.dtype, PlanArrays.from_plans([job.plan]),
                                            job.framework)[0])
        print(f"| {name} | {cl_name}:{nodes} | {plan} | {est:.4f} | {sim:.4f} | "
              f"{100 * (est / sim - 1):+.1f} % | {bound:.4f} |")


def backends(microbatches: int = 16) -> None:
    data = load_reference(os.path.join("strategies", "reference", "data",
                                       "megatron_bridge_2604.json"))
    entry = next(x for x in data if x["id"] == ROW)
    job = case_from_entry(entry, data).job
    p = job.plan
    job = make_job(job.model, job.cluster,
                   dataclasses.replace(p, gbs=microbatches * p.mbs * p.dp),
                   dtype=job.dtype, framework=job.framework, system=job.system)
    flows = simulate(job).step_time_s
    free = simulate(job, network="contention-free").step_time_s
    print(f"\n{ROW} ({job.plan.short()}, {microbatches} micro-batches per pipeline)\n")
    print("| estimate s | flows s | contention-free s |")
    print("|---|---|---|")
    print(f"| {estimate(job).step_time_s:.4f} | {flows:.4f} | {free:.4f} |")


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    small_plans()
    backends()
