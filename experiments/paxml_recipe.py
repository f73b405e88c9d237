"""The PaxML GPT-3 175B FP8 rows (DGX Cloud, v24.11.1) under their recipe: the figures of
docs/calibration.md §3.23.

Run:
    python experiments/paxml_recipe.py

Per row: measured and estimated step time and error, the estimate's breakdown (compute,
recomputation, exposed data-parallel communication, optimizer with the weight casts), its peak
memory, and a what-if that is not the model: the FSDP all-gathers carrying the fp32 weights
Praxis stores (``SystemConfig.param_bytes=4``) instead of bf16.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.estimate import estimate  # noqa: E402


def main() -> None:
    cases = [c for c in load_cases(tiers=(2, 3)) if c.id.startswith("dgxc_paxml")]
    print("run  plan  measured_s  estimate_s  error  compute_s  recompute_s  dp_comm_s  "
          "optimizer_s  memory_GB  |  what-if fp32 gathers: estimate_s  error")
    for c in cases:
        e = estimate(c.job)
        b = e.breakdown_s
        mem = sum(e.memory.__dict__.values()) / 1e9
        w = estimate(replace(c.job, system=replace(c.job.system, param_bytes=4.0))).step_time_s
        p = c.job.plan
        print(f"{c.id}  {p.recompute}:{'+'.join(p.recompute_modules or ())} z{p.zero} dp{p.dp}  "
              f"{c.measured_step_s:.3f}  {e.step_time_s:.3f}  "
              f"{100 * (e.step_time_s / c.measured_step_s - 1):+.1f} %  {b['compute']:.3f}  "
              f"{b['recompute']:.3f}  {b['dp_comm']:.3f}  {b['optimizer']:.3f}  {mem:.1f}  |  "
              f"{w:.3f}  {100 * (w / c.measured_step_s - 1):+.1f} %")


if __name__ == "__main__":
    main()
