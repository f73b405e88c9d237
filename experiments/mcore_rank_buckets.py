"""Megatron-Core's gradient buckets per pipeline rank and chunk (docs/calibration.md §5.92):
the estimate and the contention-free simulation of small pipelined plans with the rule
(only pipeline rank 0's first chunk cut into buckets) and with the stack's bucket size on
every rank and chunk, and the gradient buckets each stage's rank reduces. A few seconds.

    python experiments/mcore_rank_buckets.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.simulate import simulate  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

#: Llama 3 8B cut to 16 layers, a 2,048-token vocabulary, 256-token sequences (the model of
#: tests/test_mcore_rank_buckets.py), on four DGX H100
MODEL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
PLANS = ("tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,sp=true",
         "tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2",
         "tp=2,pp=4,dp=4,mbs=1,gbs=16,zero=1,sp=true",
         "tp=2,pp=4,dp=4,mbs=1,gbs=16,zero=1,sp=true,layers_per_stage=3/5/5/3")


def stack(name: str, rule: bool):
    """The stack's profile, with the rule (as shipped) or its bucket size everywhere."""
    fw = get_profile(name)
    return fw if rule else replace(fw, dp_bucket=replace(fw.dp_bucket, first_chunk_only=False))


def buckets_by_stage(res, plan) -> list[int]:
    """Gradient buckets (calls, a bucket's expert part not counted apart) of one rank per
    stage."""
    per_stage = plan.tp * plan.cp * plan.dp
    out: dict[int, int] = {}
    for r in sorted({x.rank for x in res.records}):
        s = r // per_stage
        if s not in out:
            out[s] = len({x.label for x in res.by_rank(r)
                          if x.stream == "dp-comm" and " dp bucket" in x.label
                          and not x.label.endswith(" experts")})
    return [out[s] for s in sorted(out)]


def main() -> None:
    print(f"{'stack':14} {'rule':8} {'plan':70} {'estimate':>9} {'sim (cf)':>9} {'gap':>8}  "
          "buckets by stage")
    for name in ("megatron-core", "nemo"):
        for plan in PLANS:
            for rule in (True, False):
                job = make_job(MODEL, cluster_preset("dgx-h100", 4), parse_plan(plan),
                               framework=stack(name, rule))
                e = estimate(job).step_time_s
                res = simulate(job, network="contention-free")
                s = res.step_time_s
                print(f"{name:14} {'rank0c0' if rule else 'all':8} {plan:70} {e:9.6f} {s:9.6f} "
                      f"{100 * (e / s - 1):+7.3f}%  {buckets_by_stage(res, job.plan)}")


if __name__ == "__main__":
    main()
