#!/usr/bin/env python
"""Pipeline messages over node-crossing hops: the estimate against the contention-free
simulation (docs/calibration.md §5.66).

Run (about a minute):

    python experiments/pipeline_hops.py
    python experiments/pipeline_hops.py --row heldout_2026b:mbridge2606_llama31405b_gb200_256_nvfp4

The first table prices one pipeline message four ways (``terms.messages.path_p2p_times`` replaced
for the estimate): the single hop of before (``p2p_time(tp·cp·dp)``: inside a node whenever
the stages are closer than a node), the mean over the path's hops, every message at the
slowest hop, and this change's rule (``comm.path_p2p_time``: the mean of the hops next to the
worst rank). GPT 1.7B with 48 layers and a 1,024-token vocabulary on two DGX H100 nodes,
stages 2 GPUs apart (``tp 2, dp 1``), so the pipeline spans both nodes. ``--row`` gives a
reference row's step per micro-batch at ``g`` and ``2g`` micro-batches with free
communication, contention-free and on flows, and the estimate's, and the exposed
communication per micro-batch of the contention-free run's breakdown and the estimate's
(a schedule that is not extended, DualPipe's or GPipe's: the whole step and its breakdown).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from p2p_exchange_count import MODEL  # noqa: E402
from simulator import extend as ex  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.estimate.terms import messages  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from strategies.schedules import schedules  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

CASES = [("tp=2,pp=8,dp=1,mbs=1,sp=true,gbs=32", 1 / 8),
         ("tp=2,pp=8,dp=1,mbs=1,sp=true,schedule=interleaved,vpp=2,gbs=32", 1 / 8),
         ("tp=2,pp=8,dp=1,mbs=1,sp=true,schedule=interleaved,vpp=2,gbs=64", 1 / 4),
         ("tp=1,pp=16,dp=1,mbs=1,schedule=interleaved,vpp=3,gbs=32", 1.0)]
RULE = messages.path_p2p_times


def single(sched, pp, v, stride, nbytes, cl):
    return cm.p2p_time(nbytes, cl, stride)


def slowest(sched, pp, v, stride, nbytes, cl):
    G = cl.gpus_per_node
    return np.maximum(cm.p2p_time(nbytes, cl, stride),
                      cm.p2p_time(nbytes, cl, G + np.asarray(stride) % G))


def path_mean(sched, pp, v, stride, nbytes, cl):
    code, pp, v, stride = (int(np.asarray(x).ravel()[0]) for x in (sched, pp, v, stride))
    hops = schedules()[code].path_hops(pp, max(v, 1))
    G = cl.gpus_per_node
    t = [cm.p2p_time(nbytes, cl, G + (b - a) * stride % G
                     if (a * stride) // G != (b * stride) // G else 0) for a, b in hops]
    return sum(t) / len(t)


def table() -> None:
    print("| plan | network | single hop | path mean | slowest hop | worst rank's neighbours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base = cluster_preset("dgx-h100", 2)
    for plan, scale in CASES:
        cl = dataclasses.replace(base, inter_node_bandwidth=base.inter_node_bandwidth * scale)
        job = make_job(MODEL, cl, parse_plan(plan))
        sim = simulate(job, network="contention-free").step_time_s
        errs = []
        for rule in (single, path_mean, slowest, RULE):
            messages.path_p2p_times = rule
            try:
                errs.append(estimate(job).step_time_s / sim - 1)
            finally:
                messages.path_p2p_times = RULE
        print(f"| {plan} | {scale:g} | " + " | ".join(f"{e:+.1%}" for e in errs) + " |")


def row(spec: str) -> None:
    name, rid = spec.split(":")
    rows = load_reference(f"strategies/reference/data/{name}.json")
    job = case_from_entry(next(r for r in rows if r["id"] == rid), rows).job
    if not ex.can_extend(job, figures=False):        # GPipe, DualPipe: the whole step once
        e = estimate(job)
        free = simulate(job, free_comm=True, figures_only=True)
        cf = simulate(job, network="contention-free", figures_only=True)
        flows = simulate(job, figures_only=True)
        print(f"m={job.num_microbatches}: free {free.step_time_s:.4f} contention-free "
              f"{cf.step_time_s:.4f} flows {flows.step_time_s:.4f} estimate {e.step_time_s:.4f} s")
        for key in e.breakdown_s:
            print(f"  {key}: free {free.metrics['breakdown_s'][key]:.4f} contention-free "
                  f"{cf.metrics['breakdown_s'][key]:.4f} estimate {e.breakdown_s[key]:.4f} s")
        return
    g = ex.period(job)
    out, parts = {}, {}
    for k in (1, 2):
        j = ex.with_microbatches(job, k * g)
        free = simulate(j, network="contention-free", figures_only=True)
        e = estimate(j)
        parts[k] = (free.metrics["breakdown_s"], e.breakdown_s)
        out[k] = [simulate(j, free_comm=True, figures_only=True).step_time_s,
                  free.step_time_s, simulate(j, figures_only=True).step_time_s, e.step_time_s]
        print(f"m={k * g}: free {out[k][0]:.4f} contention-free {out[k][1]:.4f} "
              f"flows {out[k][2]:.4f} estimate {out[k][3]:.4f} s")
    per = [(b - a) / g for a, b in zip(out[1], out[2])]
    print("per micro-batch: free {:.5f} contention-free {:.5f} flows {:.5f} estimate {:.5f} s"
          .format(*per))
    for key in ("pp_comm", "ep_comm", "tp_comm", "bubble"):
        sim_k = (parts[2][0][key] - parts[1][0][key]) / g
        est_k = (parts[2][1][key] - parts[1][1][key]) / g
        print(f"  {key} per micro-batch: contention-free {sim_k:.5f} estimate {est_k:.5f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", help="FILE:ROW_ID of a reference row (FILE without .json)")
    a = ap.parse_args()
    row(a.row) if a.row else table()
