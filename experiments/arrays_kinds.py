"""The search's plan-column arrays against the scalar estimate on models that mix kinds of
layer (docs/calibration.md §5.51): seeded toy MoE models (8 experts, top 2; 0-3 dense first
layers, 0/1 MTP module) on two DGX H100 nodes, pp 1/2/4 under 1F1B, GPipe, ZB-H1,
interleaved and DualPipe, ep 1-8, recomputation none/selective/full, ZeRO 0/1. Prints, per
(pipelined, MTP, dense layers) class, the largest relative gap of the raw arrays
(``analytic.estimate_arrays``) and of the search's arrays (``kinds.with_kind_rows``) to
``scalar.estimate``, and for the largest raw gaps its parts: the base with the job's
rank fields (parameters, optimizer: the DP and optimizer terms) and the free-communication
compute makespans of the even split and of the real chunks (``chunk_correction.chunk_times``).

    python experiments/arrays_kinds.py [--cases 80]
"""
from __future__ import annotations

import argparse
import random

from experiments.bound_mixed_gpus import toy_moe
from strategies.errors import SpecError
from strategies.estimate import scalar as S
from strategies.estimate.chunk_correction import chunk_times
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.kinds import with_kind_rows
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.schedules.analysis import simulate_free_comm
from topologies.cluster import cluster_preset


def case(seed: int):
    """One seeded toy model and plan (a string)."""
    rng = random.Random(7000 + seed)
    m = toy_moe(rng, dense=(0, 1, 2, 3), mtp=(0, 1))
    pp, ep, tp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2])
    parts = [f"tp={tp}", f"pp={pp}", f"ep={ep}", f"mbs={rng.choice([1, 2])}",
             f"gbs={rng.choice([4, 8]) * (16 // (tp * pp)) * 2}"]
    if pp > 1:
        s = rng.choice(["1f1b", "gpipe", "zb-h1", "interleaved", "dualpipe"])
        parts.append(f"schedule={s}" + (",vpp=2" if s == "interleaved" else ""))
    parts.append(f"recompute={rng.choice(['none', 'selective', 'full'])}")
    if rng.random() < 0.3:
        parts.append("zero=1")
    return m, ",".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=80)
    args = ap.parse_args()
    cl = cluster_preset("dgx-h100", 2)
    rows, worst = {}, []
    for seed in range(args.cases):
        m, plan = case(seed)
        try:
            job = make_job(m, cl, parse_plan(plan))
            s = S.estimate(job).step_time_s
        except SpecError:
            continue
        P = PlanArrays.from_plans([job.plan])
        raw = estimate_arrays(m, cl, job.dtype, P, job.framework, job.system)
        new = with_kind_rows(m, cl, job.dtype, P, raw, lambda i: job.plan)
        g_raw = float(raw["step_time_s"][0]) / s - 1
        g_new = float(new["step_time_s"][0]) / s - 1
        key = (job.plan.pp > 1, m.num_nextn_predict_layers, m.first_k_dense_replace > 0)
        a, b, n = rows.get(key, (0.0, 0.0, 0))
        rows[key] = (max(a, abs(g_raw)), max(b, abs(g_new)), n + 1)
        worst.append((abs(g_raw), g_raw, seed, m, job, plan, float(raw["step_time_s"][0]), s))
    print("pipelined  mtp  dense  plans  max|raw/scalar-1|  max|search/scalar-1|")
    for k in sorted(rows):
        a, b, n = rows[k]
        print(f"{k[0]!s:9}  {k[1]:3d}  {k[2]!s:5}  {n:5d}  {a:17.3e}  {b:19.3e}")
    worst.sort(key=lambda x: -x[0])
    print("\nlargest raw gaps (ms): raw arrays, base with the job's rank fields, scalar; "
          "even and real compute makespans")
    for _, g, seed, m, job, plan, ta, ts in worst[:5]:
        p, mb = job.plan, job.num_microbatches
        base = float(estimate_arrays(m, cl, job.dtype, S.plan_arrays(p), job.framework,
                                     job.system, S.rank_fields(job))["step_time_s"])

        def span(t):
            return simulate_free_comm(p.schedule, p.pp, mb, p.vpp, 0.0, 0.0,
                                      p.microbatch_group_size, chunk_times=t)
        ev, re = span(chunk_times(job, cl.gpu)), span(chunk_times(job))
        print(f"{g:+.3f} dense={m.first_k_dense_replace} mtp={m.num_nextn_predict_layers} "
              f"{plan}\n   raw {ta * 1e3:.3f} base {base * 1e3:.3f} scalar {ts * 1e3:.3f}"
              f" | makespan even {ev * 1e3:.3f} real {re * 1e3:.3f}"
              f" | rest {(ts - base - (re - ev)) * 1e3:+.4f}")


if __name__ == "__main__":
    main()
