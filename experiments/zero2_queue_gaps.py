"""ZeRO-2's reduce-scatter queue at the end of the step (docs/calibration.md §5.127): the 16
pp 2 ZeRO-2 ZB-V / DualPipeV candidates of ``python -m simulator.cli search --schedules all``
(GPT-3 175B on ``dgx-a100:128``, global batch 1536) whose lower bound was above their array
estimate (§5.111, after §5.110), and the default space's ``tp8 pp1 dp32 cp4 mbs8
full-rc:58 z2`` (§5.110). Per plan: micro-batches a pipeline, the array estimate
(``analytic.estimate_arrays`` of the plan's own arrays), the lower bound, the
contention-free simulation and ``arrays/sim - 1``; then the least, the largest and the mean
of ``|arrays/sim - 1|`` and how many bounds are above their estimate. About a minute.

    python experiments/zero2_queue_gaps.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_V = "schedule={},vpp=2,zero=2"
PLANS = [f"{p},{_V.format(s)}" for p, s in (
    ("tp=4,pp=2,dp=32,cp=4,mbs=4,recompute=full,recompute_layers=12", "dualpipev"),
    ("tp=4,pp=2,dp=16,cp=8,mbs=8,recompute=full,recompute_layers=6", "zb-v"),
    ("tp=4,pp=2,dp=16,cp=8,mbs=8,recompute=full,recompute_layers=1,sp=1", "zb-v"),
    ("tp=4,pp=2,dp=16,cp=8,mbs=8,sp=1", "dualpipev"),
    ("tp=4,pp=2,dp=16,cp=8,mbs=8,recompute=full,recompute_layers=12", "dualpipev"),
    ("tp=4,pp=2,dp=16,cp=8,mbs=8,recompute=full,recompute_layers=1,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=64,mbs=4,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=64,mbs=4,recompute=full,recompute_layers=1,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=32,cp=2,mbs=4,recompute=full,recompute_layers=11", "dualpipev"),
    ("tp=8,pp=2,dp=32,cp=2,mbs=8,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=32,cp=2,mbs=8,recompute=full,recompute_layers=1,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=16,cp=4,mbs=8,recompute=full,recompute_layers=6", "zb-v"),
    ("tp=8,pp=2,dp=16,cp=4,mbs=8,recompute=full,recompute_layers=1,sp=1", "zb-v"),
    ("tp=8,pp=2,dp=16,cp=4,mbs=8,sp=1", "dualpipev"),
    ("tp=8,pp=2,dp=16,cp=4,mbs=8,recompute=full,recompute_layers=11", "dualpipev"),
    ("tp=8,pp=2,dp=16,cp=4,mbs=8,recompute=full,recompute_layers=1,sp=1", "dualpipev"))] + [
    "tp=8,pp=1,dp=32,cp=4,mbs=8,zero=2,recompute=full,recompute_layers=58"]


def main() -> int:
    from experiments.split_backward_gaps import plan_gaps, summary
    print(summary("all", plan_gaps(PLANS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
