"""The MaxText Llama 2 70B rows (DGX Cloud, v24.11.1) under their recipe's remat policy: the
figures of docs/calibration.md §3.17.

Run:
    python experiments/maxtext_remat.py

Per row: measured and estimated step time, the exposed data-parallel communication, the
estimated peak memory; per precision: one layer's forward, backward and recomputation and
its fp8 casts (one micro-batch of 2 x 4096 tokens on one H100, ``strategies.cost.layer_time``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import elementwise_time, layer_time  # noqa: E402
from strategies.cost.recompute import modules_mask  # noqa: E402
from strategies.estimate import estimate  # noqa: E402


def main() -> None:
    cases = [c for c in load_cases(tiers=(2, 3)) if c.id.startswith("dgxc_maxtext")]
    print("run  measured_s  estimate_s  error  dp_comm_s  memory_GB")
    for c in cases:
        e = estimate(c.job)
        mem = sum(e.memory.__dict__.values()) / 1e9
        print(f"{c.id}  {c.measured_step_s:.3f}  {e.step_time_s:.3f}  "
              f"{100 * (e.step_time_s / c.measured_step_s - 1):+.1f} %  "
              f"{e.breakdown_s['dp_comm']:.3f}  {mem:.1f}")
    job = cases[0].job
    m, gpu, fw, p = job.model, job.cluster.gpu, job.framework, job.plan
    mask = modules_mask(p.recompute_modules or ())
    print("\nper layer, one micro-batch (ms): dtype  forward  backward  recompute  "
          "cast_fwd  cast_bwd")
    for dtype in ("bf16", "fp8"):
        lt = layer_time.layer_time(m, b=p.mbs, tp=1, cp=1, ep=1, sp=False, flash=True, recompute=1,
                                   gpu=gpu, dtype=dtype, fw=fw, modules=mask)
        cf, cb = elementwise_time.cast_time(m, p.mbs, 1, 1, False, gpu, dtype)
        print(f"{dtype}  {lt.fwd * 1e3:.1f}  {lt.bwd * 1e3:.1f}  {lt.recompute * 1e3:.1f}  "
              f"{cf * 1e3:.2f}  {cb * 1e3:.2f}")


if __name__ == "__main__":
    main()
