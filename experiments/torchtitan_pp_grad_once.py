#!/usr/bin/env python
"""What-if for pipelined torchtitan (calibration §3.22, "Not done"): the four Llama 3.1 405B
rows of December 2024 (tp 8, pp 8, FSDP2 over dp_shard·cp = 8) as the model runs them now
(ZeRO-2: every micro-batch's gradients reduce-scattered into the 1/8 shard, overlapped) and
with the gradient path of PyTorch pipelining's FSDP2 handling (gradient sync off for every
backward, the stage's whole gradient reduce-scattered once after its last backward, the
unsharded gradient accumulated in fp32 over the micro-batches). That path is costed here as
the model's ZeRO-1 without overlapped reduction (``zero=1, overlap_grad_reduce=false``: the
same unsharded fp32 gradient buffer, one reduce-scatter after the backward, the optimizer on
the 1/8 shard, one parameter all-gather per step). A what-if, not the model: torchtitan does
not offer ZeRO-1, FSDP2's copy-in pass then runs once per step (uncharged here), and the
plan is replaced after validation.

Run (a few seconds):

    python experiments/torchtitan_pp_grad_once.py
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.memory.scalar import peak_memory  # noqa: E402

GIB = 2 ** 30


def main() -> int:
    print("| run | measured s | model s (err) | once per step s (err) | model GiB | once GiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for c in load_cases(tiers=None):
        if not c.id.startswith("torchtitan_2412_405B") or c.job is None:
            continue
        once = dataclasses.replace(c.job, plan=dataclasses.replace(
            c.job.plan, zero=1, overlap_grad_reduce=False))
        t0, t1 = estimate(c.job).step_time_s, estimate(once).step_time_s
        m0, m1 = peak_memory(c.job)[1].total / GIB, peak_memory(once)[1].total / GIB
        meas = c.measured_step_s

        def err(t: float) -> str:
            return f"{100 * (t - meas) / meas:+.1f} %"

        print(f"| {c.id} | {meas:.3f} | {t0:.3f} ({err(t0)}) | {t1:.3f} ({err(t1)}) | "
              f"{m0:.1f} | {m1:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
