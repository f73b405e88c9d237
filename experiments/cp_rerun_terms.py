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


def main() -> None:
    from simulator.simulate import simulate
    from strategies.cost import comm as cm
    from strategies.cost import cp_a2a, cp_ring
    from strategies.cost.stage import stage_costs
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.plan_arrays import PlanArrays
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
                sc, tp, cp = stage_costs(job), job.plan.tp, job.plan.cp
                if sc.cp_a2a:
                    f, b = cp_a2a.layer_waits(
                        lambda n: cm.collective_time("alltoall", n, cp, tp, cl), sc, cp)
                else:
                    f, b = cp_ring.layer_waits(
                        cm.collective_time("allgather", sc.cp_bytes, cp, tp, cl), sc, cp)
                e = estimate(job)
                lb = float(step_time_lower_bound(job.model, cl, job.dtype,
                                                 PlanArrays.from_plans([job.plan]),
                                                 job.framework)[0])
                cf = simulate(job, network="contention-free").step_time_s
                print(f"{spec:40s} {comm:10s} {rc:9s} {sc.cp_per_layer_recompute:6.2f} "
                      f"{1e3 * float(f):6.3f}/{1e3 * float(b):6.3f} "
                      f"{e.breakdown_s['cp_comm']:7.3f} {e.step_time_s:8.3f} {lb:8.3f} "
                      f"{cf:8.3f}")


if __name__ == "__main__":
    main()
