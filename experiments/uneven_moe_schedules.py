"""Interleaved, combined-1F1B (``ep_overlap``), zero-bubble and 1F1B plans over MoE stages
that differ in layers and kinds: the scalar estimate against the contention-free simulation
(calibration §5.54), beside the even composition (the estimate with ``chunk_correction.a2a_shift``
at 0: every chunk charged the even plan's mean all-to-all).

    python experiments/uneven_moe_schedules.py     # 50 seeded plans, about 10 s
"""
from __future__ import annotations

import os
import random
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: the plan switches of each schedule measured
SCHEDULES = {"interleaved": "schedule=interleaved,vpp=2",
             "ep_overlap": "schedule=interleaved,vpp=2,ep_overlap=true",
             "zb-h1": "schedule=zb-h1", "zb-v": "schedule=zb-v", "1f1b": "schedule=1f1b"}


def cases(schedule: str, n: int = 10, seed: int = 54) -> list[tuple[int, int, str]]:
    """Seeded ``(dense first layers 0-3, MTP modules 0/1, plan)`` of 16-layer MoE models:
    pp 2 or 4, EP over the data-parallel ranks, 32 micro-batches, uneven first/last stages
    (one in five on the even split; interleaved chunks' layers a multiple of vpp; ZB-V's
    V-shape only on the even split)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pp = rng.choice((2, 4))
        dense, mtp = rng.randint(0, 3), rng.randint(0, 1)
        split = ""
        if schedule != "zb-v" and rng.random() >= 0.2:
            q = 2 if schedule in ("interleaved", "ep_overlap") else 1
            mid = rng.choice((2, 4, 6) if q == 2 else (3, 4, 5)) if pp > 2 else 0
            first = q * rng.randint(1, (16 - (pp - 2) * mid - 2) // q)
            split = (f",first_stage_layers={first},"
                     f"last_stage_layers={16 - (pp - 2) * mid - first}")
        dp = 16 // pp
        out.append((dense, mtp, f"tp=1,pp={pp},ep={dp},mbs=1,gbs={32 * dp},"
                                f"{SCHEDULES[schedule]}{split}"))
    return out


def job_of(dense: int, mtp: int, plan: str):
    """DeepSeek-V3's layer at 16 layers (``dense`` dense first layers, ``mtp`` MTP modules),
    s 512, a 32k vocabulary, on two DGX H100 nodes."""
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    model = replace(model_preset("deepseek-v3"), name="ds-small", num_layers=16,
                    first_k_dense_replace=dense, num_nextn_predict_layers=mtp,
                    vocab_size=32000, seq_length=512)
    return make_job(model, cluster_preset("dgx-h100", 2), parse_plan(plan))


def errors(job) -> tuple[float, float]:
    """(estimate, even composition) / contention-free simulated step − 1."""
    import strategies.estimate.chunk_correction as cc
    import strategies.estimate.scalar as sc
    from simulator.simulate import simulate
    sim = simulate(job, network="contention-free").step_time_s
    est = sc.estimate(job).step_time_s
    shift = cc.a2a_shift
    cc.a2a_shift = lambda *a, **k: (0.0, None)
    try:
        even = sc.estimate(job).step_time_s
    finally:
        cc.a2a_shift = shift
    return est / sim - 1, even / sim - 1


def main() -> None:
    print("| schedule | plans | estimate min .. max | even composition min .. max |")
    print("|---|---:|---:|---:|")
    for name in SCHEDULES:
        errs = [errors(job_of(*c)) for c in cases(name)]
        est, even = [e for e, _ in errs], [e for _, e in errs]
        print(f"| {name} | {len(errs)} | {min(est):+.2%} .. {max(est):+.2%} "
              f"| {min(even):+.2%} .. {max(even):+.2%} |")


if __name__ == "__main__":
    main()
