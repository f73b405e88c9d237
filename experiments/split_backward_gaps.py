"""The split-backward V and parallelogram schedules' array estimate against their lower bound and
their contention-free simulation (docs/calibration.md §5.111): the 39 candidates of ``python -m
simulator.cli search --schedules all`` (GPT-3 175B on ``dgx-a100:128``, global batch 1536)
whose lower bound was above their array estimate at main 29409ed (29 DualPipeV, 10 ZB-H2), and
seven ZB-V plans of §5.109 (five with fewer than ``2p - 1`` micro-batches a pipeline). Per plan:
micro-batches a pipeline, the array estimate (``analytic.estimate_arrays`` of the plan's own
arrays), the lower bound, the contention-free simulation and ``arrays/sim - 1``; then per
schedule the least, the largest and the mean of ``|arrays/sim - 1|`` and how many bounds are
above their estimate. About 2 minutes.

    python experiments/split_backward_gaps.py
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLANS = [
    "tp=1,pp=16,dp=8,cp=8,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,zero=1",
    "tp=1,pp=16,dp=4,cp=16,mbs=2,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,zero=1",
    "tp=2,pp=16,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,zero=1",
    "tp=2,pp=16,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=4,pp=2,dp=16,cp=8,mbs=8,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=2",
    "tp=4,pp=8,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,zero=1",
    "tp=4,pp=8,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=4,pp=8,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,zero=1",
    "tp=4,pp=8,dp=16,cp=2,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=4,pp=16,dp=16,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=0",
    "tp=4,pp=16,dp=16,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=4,pp=16,dp=8,cp=2,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=0",
    "tp=4,pp=16,dp=8,cp=2,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=4,pp=16,dp=8,cp=2,mbs=2,schedule=dualpipev,vpp=2,sp=1,zero=0",
    "tp=4,pp=16,dp=8,cp=2,mbs=2,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=8,pp=2,dp=64,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=2,sp=1,zero=1",
    "tp=8,pp=2,dp=64,mbs=2,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=17,sp=1,zero=1",
    "tp=8,pp=2,dp=64,mbs=4,schedule=dualpipev,vpp=2,sp=1,zero=2",
    "tp=8,pp=2,dp=64,mbs=4,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=2",
    "tp=8,pp=4,dp=32,mbs=2,schedule=zb-h2,sp=1,zero=1",
    "tp=8,pp=4,dp=32,mbs=2,schedule=zb-h2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=8,pp=8,dp=16,mbs=1,schedule=zb-h2,sp=1,zero=0",
    "tp=8,pp=8,dp=16,mbs=1,schedule=zb-h2,sp=1,zero=1",
    "tp=8,pp=8,dp=16,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=0",
    "tp=8,pp=8,dp=16,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=8,pp=8,dp=16,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=0",
    "tp=8,pp=8,dp=16,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=8,pp=8,dp=16,mbs=2,schedule=zb-h2,sp=1,zero=1",
    "tp=8,pp=8,dp=16,mbs=2,schedule=zb-h2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=8,pp=16,dp=8,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=0",
    "tp=8,pp=16,dp=8,mbs=1,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=8,pp=16,dp=8,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=0",
    "tp=8,pp=16,dp=8,mbs=1,schedule=dualpipev,vpp=2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=8,pp=16,dp=8,mbs=2,schedule=zb-h2,sp=1,zero=0",
    "tp=8,pp=16,dp=8,mbs=2,schedule=zb-h2,sp=1,zero=1",
    "tp=8,pp=16,dp=8,mbs=2,schedule=zb-h2,recompute=full,recompute_layers=1,sp=1,zero=0",
    "tp=8,pp=16,dp=8,mbs=2,schedule=zb-h2,recompute=full,recompute_layers=1,sp=1,zero=1",
    "tp=8,pp=16,dp=8,mbs=2,schedule=dualpipev,vpp=2,sp=1,zero=0",
    "tp=8,pp=16,dp=8,mbs=2,schedule=dualpipev,vpp=2,sp=1,zero=1",
    "tp=4,pp=4,dp=64,mbs=8,schedule=zb-v,vpp=2,recompute=full,recompute_layers=9,sp=1,zero=2",
    "tp=2,pp=4,dp=128,mbs=4,schedule=zb-v,vpp=2,recompute=full,sp=1,zero=2",
    "tp=4,pp=8,dp=32,mbs=4,schedule=zb-v,vpp=2,recompute=full,recompute_layers=2,sp=1,zero=2",
    "tp=8,pp=16,dp=8,mbs=8,schedule=zb-v,vpp=2,recompute=full,recompute_layers=2,sp=1",
    "tp=1,pp=16,dp=64,mbs=1,schedule=zb-v,vpp=2,recompute=full,recompute_layers=2,zero=2",
    "tp=8,pp=16,dp=8,mbs=2,schedule=zb-v,vpp=2,sp=1",
    "tp=8,pp=8,dp=16,mbs=1,schedule=zb-v,vpp=2,sp=1",
]


def plan_gaps(specs: list[str]) -> list[tuple]:
    """Print the table's row of each plan spec (GPT-3 175B on ``dgx-a100:128``, global batch
    1536) and return ``(job, arrays, bound, simulated)`` per plan (seconds)."""
    from simulator.simulate import simulate
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.plan_arrays import PlanArrays
    from strategies.presets import model_preset
    from topologies.cluster import parse_cluster_arg
    m, cl = model_preset("gpt3-175b"), parse_cluster_arg("dgx-a100:128")
    out = []
    print("| plan | m | arrays s | bound s | simulated s | arrays/sim - 1 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for spec in specs:
        job = make_job(m, cl, parse_plan(spec), global_batch=1536)
        P = PlanArrays.from_plans([job.plan])
        a = estimate_arrays(m, cl, "bf16", P)
        est = float(np.ravel(a["step_time_s"])[0])
        bound = float(np.ravel(step_time_lower_bound(m, cl, "bf16", P,
                                                     costs=a["stage_costs"]))[0])
        sim = simulate(job, network="contention-free").step_time_s
        out.append((job, est, bound, sim))
        print(f"| `{job.plan.short()}` | {job.num_microbatches} | {est:.3f} | {bound:.3f} | "
              f"{sim:.3f} | {est / sim - 1:+.2%} |")
    return out


def summary(name: str, rows: list[tuple]) -> str:
    """``name``: plans, the least and largest ``arrays/sim - 1``, its mean absolute value and
    how many bounds are above their estimate, of ``plan_gaps``' rows."""
    rel = np.array([est / sim - 1 for _, est, _, sim in rows])
    return (f"{name}: {len(rows)} plans, arrays/sim - 1 {rel.min():+.2%}..{rel.max():+.2%}, "
            f"mean |.| {np.abs(rel).mean():.2%}, "
            f"bound > arrays {sum(bound > est for _, est, bound, _ in rows)}")


def main() -> int:
    by: dict[str, list] = {}
    for row in plan_gaps(PLANS):
        by.setdefault(row[0].plan.schedule, []).append(row)
    for name, rows in by.items():
        print(summary(name, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
