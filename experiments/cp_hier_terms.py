"""Megatron-Core's hierarchical context parallelism (plan ``cp_comm=a2a+p2p``,
``hierarchical_cp=k``; docs/calibration.md §5.189) beside the ring (p2p) and the all-to-all
(a2a) on CP groups that span two DGX H100 nodes at 64K tokens: Llama 2 7B (32 KV heads, so a2a
runs at cp 16) and Llama 3 8B (8 KV heads: a2a stops at tp·cp = 8, a2a+p2p keeps the
all-to-all inside a node and rings across). Per plan and exchange: the bytes a rank sends a
forward pass at each level (all-to-all: Q/K/V + O; ring: the K/V buffer at ``(t·k, c/k)``),
the attention core's seconds a layer, the estimate's exposed CP seconds, the estimate, the
lower bound, the contention-free and flows simulation, the peak memory. About 10 s.

    python experiments/cp_hier_terms.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLAN = "tp={tp},cp=16,mbs=1,gbs=16,zero=1"
#: (model, tp, exchanges)
CASES = (("llama2-7b", 1, ("p2p", "a2a", "a2a+p2p:2", "a2a+p2p:4", "a2a+p2p:8")),
         ("llama3-8b", 1, ("p2p", "a2a+p2p:2", "a2a+p2p:4", "a2a+p2p:8")))


def main() -> None:
    from experiments.cp_a2a_terms import step_figures
    from strategies.cost.stage import stage_costs
    from strategies.job import make_job
    from strategies.memory.scalar import peak_memory
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset

    print("| plan | cp_comm | a2a MiB | ring MiB | attention f/b ms | exposed CP s | estimate s "
          "| bound s | contention-free s | flows s | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, tp, comms in CASES:
        m = model_preset(name).with_seq_length(65536)
        for comm in comms:
            c, _, k = comm.partition(":")
            spec = PLAN.format(tp=tp) + f",cp_comm={c}" + (f",hierarchical_cp={k}" if k else "")
            job = make_job(m, cluster_preset("dgx-h100", 2), parse_plan(spec),
                           framework="megatron-core")
            sc = stage_costs(job)
            a2a = (float(sc.cp_bytes) if sc.cp_a2a else float(sc.cp_qkv_bytes)) \
                + float(sc.cp_out_bytes)
            ring = 0.0 if sc.cp_a2a else float(sc.cp_bytes)
            e, lb, cf, fl = step_figures(job)
            label = comm.replace(":", " k ")
            print(f"| {name} tp {tp} cp 16 | {label} | {a2a / 2**20:.1f} | {ring / 2**20:.1f} "
                  f"| {1e3 * float(sc.attn_fwd):.2f} / {1e3 * float(sc.attn_bwd):.2f} "
                  f"| {e.breakdown_s['cp_comm']:.3f} | {e.step_time_s:.3f} | {lb:.3f} "
                  f"| {cf:.3f} | {fl:.3f} | {peak_memory(job)[1].total / 2**30:.2f} |")


if __name__ == "__main__":
    main()
