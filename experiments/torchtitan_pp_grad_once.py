#!/usr/bin/env python
"""Pipelined torchtitan reduces its gradients once per step (docs/calibration.md §5.34): the
torchtitan 405B rows run under ``torch.distributed.pipelining`` (tp 8, pp 8, FSDP2 ZeRO-2
over dp·cp = 8): Table 6's four (``published.json``) and Table 5's two fp8 rows
(``published_2026.json``), each as the model runs it (``comm_rules.grad_path``: the stage's
unsharded fp32 gradient reduce-scattered once after its last backward, FSDP2's copy-in once
per step) and with the rule off (``fsdp2=False``: ZeRO-2's reduce-scatter every micro-batch,
overlapped, the 1/8 gradient shard accumulated), with the exposed data-parallel time, the
clock slowdown's share (compute) and the peak memory of each.

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
FILES = (None, "strategies/reference/data/published_2026.json")


def main() -> int:
    print("| run | measured s | per micro-batch s (err) | once per step s (err) | "
          "dp_comm s | compute s | peak GiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path in FILES:
        for c in load_cases(path, tiers=None):
            if not c.id.lower().startswith("torchtitan_2412_405b") or c.job is None:
                continue
            off = dataclasses.replace(c.job, framework=dataclasses.replace(
                c.job.framework, fsdp2=False))
            e0, e1 = estimate(off), estimate(c.job)
            meas = c.measured_step_s

            def err(t: float) -> str:
                return f"{100 * (t - meas) / meas:+.1f} %"

            b0, b1 = e0.breakdown_s, e1.breakdown_s
            print(f"| {c.id} | {meas:.3f} | {e0.step_time_s:.3f} ({err(e0.step_time_s)}) | "
                  f"{e1.step_time_s:.3f} ({err(e1.step_time_s)}) | "
                  f"{b0['dp_comm']:.3f} → {b1['dp_comm']:.3f} | "
                  f"{b0['compute']:.3f} → {b1['compute']:.3f} | "
                  f"{peak_memory(c.job)[1].total / GIB:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
