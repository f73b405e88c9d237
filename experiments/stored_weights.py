#!/usr/bin/env python
"""Which weights each stack stores, and what that does (docs/calibration.md §5.46): the peak
memory (with the peak stage's params and optimizer state) and the checkpoint size of
llama3-8b on one DGX H100 (dp 8) under Composer's FSDP1 (``pytorch-eager``, FSDP2's state:
``FrameworkProfile.fsdp2``), MaxText (``jax-xla``, fp32 weights only:
``FrameworkProfile.master_only``) and torchtitan; then the Chrome trace of a step of ``k``
pipeline flushes against the reported step time (``simulator.output.flush_view``).

Run (a few seconds):

    python experiments/stored_weights.py
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.output.chrome_trace import to_chrome_trace                    # noqa: E402
from simulator.simulate import simulate                                      # noqa: E402
from strategies.goodput import checkpoint_bytes                              # noqa: E402
from strategies.job import make_job                                          # noqa: E402
from strategies.memory.scalar import peak_memory                             # noqa: E402
from strategies.plan import Plan, parse_plan                                 # noqa: E402
from strategies.presets import model_preset                                  # noqa: E402
from topologies.cluster import cluster_preset                                # noqa: E402

GIB = 2 ** 30
CASES = (("pytorch-eager", "mbs=1,gbs=64,zero=3,recompute=full"),
         ("jax-xla", "mbs=1,gbs=64,zero=3"),
         ("torchtitan", "mbs=1,gbs=64,zero=3"))


def main() -> None:
    m = model_preset("llama3-8b")
    print("stack          plan                                  peak GiB  params/opt GiB  "
          "checkpoint GB")
    for fw, plan in CASES:
        job = make_job(m, cluster_preset("dgx-h100", 1), parse_plan(plan), framework=fw)
        b = peak_memory(job)[1]
        print(f"{fw:14s} {plan:37s} {b.total / GIB:8.2f}  {b.params / GIB:5.2f}/"
              f"{b.optimizer / GIB:5.2f}     {checkpoint_bytes(m, fw) / 1e9:8.1f}")
    print("\ngpt-1.7b tp2 pp4 gbs32 on dgx-a100:2: trace span against the step (ms)")
    for k in (1, 2, 4):
        job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                       Plan(tp=2, pp=4, gbs=32, flushes=k))
        res = simulate(job)
        xs = [e for e in to_chrome_trace(res)["traceEvents"] if e["ph"] == "X"]
        span = max(e["ts"] + e["dur"] for e in xs) / 1e3
        print(f"flushes={k}: step {res.step_time_s * 1e3:.3f}, trace span {span:.3f}, "
              f"{len(xs)} events")


if __name__ == "__main__":
    main()
