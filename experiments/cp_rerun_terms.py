"""The recomputed forward's context-parallel exchange (docs/calibration.md §5.187): Llama 3
8B at 64K tokens on two DGX H100 nodes, Transformer Engine's three exchanges (plan
``cp_comm``) under no, selective (``core_attn``) and full recomputation: the rerun count per
layer (``recompute.cp_reruns``), one layer's forward and backward CP waits (the estimate's
rule), the step's exposed CP seconds, the estimate, the lower bound and the contention-free
simulation. About 30 s.

    python experiments/cp_rerun_terms.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (model, sequence, cluster, plan)
CASES = (("llama3-8b", 65536, "dgx-h100:2", "tp=2,cp=4,mbs=1,gbs=16,sp=true,zero=1"),
         ("llama3-8b", 65536, "dgx-h100:2", "tp=1,cp=4,pp=2,mbs=1,gbs=16,zero=1"))


def row(job) -> tuple:
    """``(reruns, forward wait ms, backward wait ms, exposed CP s, estimate s, bound s,
    contention-free s)`` of one job."""
    from simulator.simulate import simulate
    from strategies.cost.stage import stage_costs
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import estimate
    from strategies.estimate.terms.layer_comm import cp_waits
    from strategies.plan_arrays import PlanArrays

    sc, P = stage_costs(job), PlanArrays.from_plans([job.plan])
    f, b = cp_waits(sc, job.cluster, job.plan.tp, job.plan.cp)
    e = estimate(job)
    return (sc.cp_per_layer_recompute, 1e3 * float(f), 1e3 * float(b), e.breakdown_s["cp_comm"],
            e.step_time_s,
            float(step_time_lower_bound(job.model, job.cluster, job.dtype, P, job.framework)[0]),
            simulate(job, network="contention-free").step_time_s)


def main() -> None:
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset

    print(f"{'plan':40s} {'cp_comm':10s} {'recompute':9s} {'reruns':>6s} "
          f"{'wait f/b ms':>13s} {'cp s':>7s} {'est s':>8s} {'bound s':>8s} {'cf s':>8s}")
    for name, seq, cluster, spec in CASES:
        m = model_preset(name).with_seq_length(seq)
        name_c, nodes = cluster.split(":")
        cl = cluster_preset(name_c, int(nodes))
        for comm in ("p2p", "all_gather", "a2a"):
            for rc in ("none", "selective", "full"):
                job = make_job(m, cl, parse_plan(f"{spec},cp_comm={comm},recompute={rc}"),
                               framework="megatron-core")
                n, f, b, c, e, lb, cf = row(job)
                print(f"{spec:40s} {comm:10s} {rc:9s} {n:6.2f} {f:6.3f}/{b:6.3f} {c:7.3f} "
                      f"{e:8.3f} {lb:8.3f} {cf:8.3f}")


if __name__ == "__main__":
    main()
