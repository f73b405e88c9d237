"""Transformer Engine's three context-parallel exchanges side by side (plan ``cp_comm``: the
p2p ring, the K/V all-gather, the QKV/O all-to-all; docs/calibration.md §5.185) on Llama 3
8B (and Llama 2 7B, whose 32 KV heads let one CP group of 16 span both nodes) at 64K tokens on
two DGX H100 nodes: per plan and exchange, the bytes one layer pass
moves, the attention core's seconds per layer (forward, backward), the estimate's exposed CP
seconds a step, the estimate, the lower bound, the contention-free and the flows
simulation, and the peak memory (the fullest pipeline rank). About 1 min.

    python experiments/cp_a2a_terms.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (model, sequence, cluster, plan): Llama 3 8B's 8 KV heads keep tp·cp <= 8 under a2a
CASES = (("llama3-8b", 65536, "dgx-h100:2", "tp=1,cp=8,mbs=1,gbs=16,zero=1"),
         ("llama3-8b", 65536, "dgx-h100:2", "tp=2,cp=4,mbs=1,gbs=16,sp=true,zero=1"),
         ("llama3-8b", 65536, "dgx-h100:2", "tp=1,cp=4,pp=2,mbs=1,gbs=16,zero=1"),
         # multi-head attention (32 KV heads): the CP group spans both nodes
         ("llama2-7b", 65536, "dgx-h100:2", "tp=1,cp=16,mbs=1,gbs=16,zero=1"))


def step_figures(job):
    """``(estimate, lower bound s, contention-free s, flows s)`` of ``job``."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import estimate
    from strategies.plan_arrays import PlanArrays
    lb = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                     PlanArrays.from_plans([job.plan]), job.framework)[0])
    return (estimate(job), lb, simulate(job, network="contention-free").step_time_s,
            simulate(job, network="flows").step_time_s)


def main() -> None:
    from strategies.cost.stage import stage_costs
    from strategies.job import make_job
    from strategies.memory.scalar import peak_memory
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset

    print(f"{'plan':44s} {'cp_comm':10s} {'MiB/pass':>9s} {'attn f/b ms':>15s} "
          f"{'cp s':>7s} {'est s':>8s} {'bound s':>8s} {'cf s':>8s} {'flows s':>8s} "
          f"{'GiB':>6s}")
    for name, seq, cluster, spec in CASES:
        m = model_preset(name).with_seq_length(seq)
        name_c, nodes = cluster.split(":")
        for comm in ("p2p", "all_gather", "a2a"):
            job = make_job(m, cluster_preset(name_c, int(nodes)),
                           parse_plan(f"{spec},cp_comm={comm}"), framework="megatron-core")
            sc = stage_costs(job)
            moved = float(sc.cp_bytes) + float(sc.cp_out_bytes)   # a2a: Q/K/V + O sent
            e, lb, cf, fl = step_figures(job)
            print(f"{spec:44s} {comm:10s} {moved / 2**20:9.1f} "
                  f"{1e3 * float(sc.attn_fwd):7.2f}/{1e3 * float(sc.attn_bwd):7.2f} "
                  f"{e.breakdown_s['cp_comm']:7.3f} {e.step_time_s:8.3f} {lb:8.3f} {cf:8.3f} "
                  f"{fl:8.3f} {peak_memory(job)[1].total / 2**30:6.2f}")


if __name__ == "__main__":
    main()
