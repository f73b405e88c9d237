"""Transformer Engine's three context-parallel exchanges side by side (plan ``cp_comm``: the
p2p ring, the K/V all-gather, the QKV/O all-to-all; docs/calibration.md §5.185) on Llama 3
8B (and Llama 2 7B, whose 32 KV heads let one CP group of 16 span both nodes) at 64K tokens on
two DGX H100 nodes: per plan and exchange, the bytes one layer pass
moves, the attention core's seconds per layer (forward, backward), the estimate's exposed CP
seconds a step, the estimate, the lower bound, the contention-free and the flows
simulation, and the peak memory (the fullest pipeline rank). About 1 min.

    python experiments/cp_a2a_terms.py
    python experiments/cp_a2a_terms.py --calls   # one forward pass's all-to-alls (§5.191)
    python experiments/cp_a2a_terms.py --agree   # estimate vs contention-free, 6 decimals
                                                 # (with a sliding-window model, §5.196)
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


#: a windowed model for the agreement rows (§5.196): Llama 3 8B, a 4096-token sliding window
#: on all but every second layer (gpt-oss's alternation)
WINDOWED = "llama3-8b-w4096"


def model_of(name: str):
    """The preset ``name``, or ``WINDOWED``: Llama 3 8B with its window."""
    from dataclasses import replace
    from strategies.presets import model_preset
    if name == WINDOWED:
        return replace(model_preset("llama3-8b"), name=WINDOWED, sliding_window=4096,
                       global_attention_every=2)
    return model_preset(name)


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


def calls() -> None:
    """One forward pass's all-to-all seconds of the a2a plans with ``cp`` 8 and 16
    (docs/calibration.md §5.191): each call's MiB, Q/K/V as one call of their sum plus O
    (§5.185's form), one call per tensor, and per call with the copies beside the calls
    (``cost.cp_a2a.group_wait``, the form the estimate reads)."""
    from strategies.cost import comm as cm
    from strategies.cost import cp_a2a
    from strategies.cost.stage import stage_costs
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset

    for name, seq, cluster, spec in (CASES[0], CASES[3]):
        name_c, nodes = cluster.split(":")
        job = make_job(model_preset(name).with_seq_length(seq),
                       cluster_preset(name_c, int(nodes)),
                       parse_plan(f"{spec},cp_comm=a2a"), framework="megatron-core")
        sc, p = stage_costs(job), job.plan

        def t(n, p=p, job=job):
            return float(cm.collective_time("alltoall", n, p.cp, p.tp, job.cluster))

        parts = [float(sc.cp_bytes) * x for x in sc.cp_qkv_parts]
        o = float(sc.cp_out_bytes)
        one = t(float(sc.cp_bytes)) + t(o)
        each = sum(t(n) for n in parts) + t(o)
        beside = float(cp_a2a.group_wait(t, parts, sc.copy_rate)
                       + cp_a2a.group_wait(t, [o], sc.copy_rate))
        mib = ", ".join(f"{n / 2**20:.0f}" for n in parts + [o])
        print(f"{name} {spec}: calls Q, K, V, O {mib} MiB; one of the sum + O "
              f"{1e3 * one:.3f} ms, per call {1e3 * each:.3f} ms, per call with the copies "
              f"beside {1e3 * beside:.3f} ms")


def agree() -> None:
    """The estimate and the contention-free simulation to 6 decimals (seconds) and their gap
    (%) for this script's a2a plans, ``cp_hier_terms``' a2a+p2p ones (§5.191) and, under
    ``jax-xla`` (MaxText's K/V all-gather, §5.195), this script's plans without pp, and
    ``WINDOWED``'s under the all-gather and the all-to-all (§5.196)."""
    from experiments.cp_hier_terms import CASES as HIER, PLAN
    from simulator.simulate import simulate
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from topologies.cluster import cluster_preset

    mc = "megatron-core"
    rows = [(name, cluster, f"{spec},cp_comm=a2a", mc) for name, _, cluster, spec in CASES]
    rows += [(name, "dgx-h100:2",
              PLAN.format(tp=tp) + f",cp_comm=a2a+p2p,hierarchical_cp={k}", mc)
             for name, tp, comms in HIER for c in comms if c.startswith("a2a+p2p")
             for k in [c.split(":")[1]]]
    # MaxText's K/V all-gather (jax-xla, its own exchange; §5.195), ZeRO-3 as its fsdp axis
    rows += [(name, cluster, spec.replace("zero=1", "zero=3"), "jax-xla")
             for name, _, cluster, spec in CASES if "pp=" not in spec]
    # sliding-window layers (§5.196): Llama 3 8B with a 4096-token window on every other
    # layer, over the two exchanges Transformer Engine runs a window with
    rows += [(WINDOWED, cluster, f"{spec},cp_comm={comm}", mc)
             for _, _, cluster, spec in CASES[:2] for comm in ("all_gather", "a2a")]
    for name, cluster, spec, fw in rows:
        name_c, nodes = cluster.split(":")
        job = make_job(model_of(name).with_seq_length(65536),
                       cluster_preset(name_c, int(nodes)), parse_plan(spec), framework=fw)
        e = estimate(job).step_time_s
        cf = simulate(job, network="contention-free").step_time_s
        tag = "" if fw == mc else f" --framework {fw}"
        print(f"{name} {spec}{tag}: estimate {e:.6f} s, contention-free {cf:.6f} s, "
              f"{100 * (cf - e) / e:+.4f} %")


if __name__ == "__main__":
    args = sys.argv[1:]
    calls() if "--calls" in args else agree() if "--agree" in args else main()
