"""What the affine extension (simulator/extend.py) saves on the plans the README's default
search simulates (GPT-3 175B, 128 DGX A100, global batch 1536): per plan, the CPU seconds of
the full simulation and of the two short runs it would be extended from, and whether the
search extends it (``can_extend``). CPU seconds (``time.process_time``), so that a loaded
machine disturbs the comparison less than wall time would.

    python experiments/bench_extend.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.extend import base, can_extend, period, with_microbatches  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

PLANS = [   # the references and the heaviest plans the default search simulates
    "tp=8,pp=8,dp=16,mbs=1,gbs=1536,schedule=1f1b,recompute=full",
    "tp=8,pp=8,dp=16,mbs=1,gbs=1536,schedule=interleaved,vpp=2,recompute=full",
    "tp=4,pp=8,dp=32,mbs=1,gbs=1536,schedule=interleaved,vpp=12,sp=true,zero=1",
    "tp=4,pp=16,dp=16,mbs=1,gbs=1536,schedule=interleaved,vpp=6,sp=true,zero=1",
]


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    model, cluster = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    print(f"{'plan':<74} {'m':>3} {'g':>3} {'short runs':>10} {'full CPU s':>10} "
          f"{'short CPU s':>11}  extended by the search")
    for key in PLANS:
        job = make_job(model, cluster, parse_plan(key))
        m, g, b = job.num_microbatches, period(job), base(job)
        full = cpu(lambda: simulate(job))
        short = cpu(lambda: [simulate(with_microbatches(job, k * g)) for k in (b, b + 1)])
        print(f"{key:<74} {m:>3} {g:>3} {f'{b * g}+{(b + 1) * g}':>10} {full:>10.2f} "
              f"{short:>11.2f}  {'yes' if can_extend(job) else 'no'}")


if __name__ == "__main__":
    main()
