#!/usr/bin/env python
"""A GPU profile's measured collectives against the network model, and what they move.

Run (a few seconds):

    python experiments/profile_collectives.py                       # the fake backend's profile
    python experiments/profile_collectives.py --profile h100.yaml   # a measured one
    python experiments/profile_collectives.py --coll-gpus 2,4,8     # the fake on 2, 4, 8 GPUs

Table 1: per op, GPU count and buffer size (nccl-tests' count) of the profile, the measured
seconds, the seconds the cluster's network model gives the same collective within one node
(``strategies.cost.comm``, stride 1), and their ratio: what ``comm.measured_scale`` multiplies
the model by at that size (docs/calibration.md §5.71).

Table 2: the analytic and simulated step of a few plans on one node of the cluster, with the
catalog GPU and with the profiled one. Without ``--profile`` the profile is the fake
backend's (``simulator.calibrate.backend.FakeBackend``: collectives at 360 GB/s bus
bandwidth, everything else exactly the catalog's curve), so Table 2's difference is the
collectives' alone. Its collectives are measured on the group sizes ``--coll-gpus`` names
(default 8, the whole machine: §5.71's figures; calibrate's own default is 2,4,8, §7.1).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import hbm_rate  # noqa: E402
from strategies.cost.measured import COLLECTIVE_KINDS  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.stacks.profile import LAUNCH_GAP_S  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402
from topologies.gpu_profile import load_gpu_profile  # noqa: E402

PLANS = ("tp=8,mbs=1,gbs=8", "tp=8,mbs=1,gbs=8,sp=true", "tp=4,dp=2,mbs=1,gbs=8,sp=true",
         "tp=2,dp=4,mbs=1,gbs=8,zero=1", "dp=8,mbs=1,gbs=8,zero=1")


def fake_profile(model, coll_gpus: tuple[int, ...] = (8,)):
    """The fake backend's profile on 8 GPUs: the catalog's curve, collectives at 360 GB/s
    on groups of ``coll_gpus`` GPUs."""
    fb = FakeBackend(gemm_scale=1.0, attention_scale=1.0, hbm_fraction=hbm_rate.HBM_EFFICIENCY,
                     launch_gap=LAUNCH_GAP_S, count=8)
    spec = CalibrationSpec(models=(model,), tps=(1,), mbs=(1,), seqs=(4096,), dtypes=("bf16",),
                           coll_gpus=coll_gpus)
    return calibrate(fb, spec)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None, help="a paraplan calibrate profile (YAML/JSON)")
    ap.add_argument("--cluster", default="dgx-h100", help="cluster preset (one node is used)")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--coll-gpus", default="8", help="the fake's group sizes (default 8)")
    args = ap.parse_args(argv)
    model = model_preset(args.model)
    groups = tuple(int(g) for g in args.coll_gpus.split(","))
    prof = load_gpu_profile(args.profile) if args.profile else fake_profile(model, groups)
    base = cluster_preset(args.cluster, 1)
    gpu = replace(base.gpu, profile=prof)
    profiled = replace(base, groups=(replace(base.groups[0], gpu=gpu),))
    print(f"Table 1: {args.profile or 'fake backend (360 GB/s bus bandwidth)'} against the "
          f"network model of {base.name} (within one node)\n")
    print("| op | GPUs | bytes | measured (us) | model (us) | measured / model |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for c in sorted(prof.collectives, key=lambda c: (c.op, c.gpus, c.bytes)):
        model_s = float(cm.collective_time(COLLECTIVE_KINDS[c.op], float(c.bytes), c.gpus, 1,
                                           base))       # (no profile: the network model)
        print(f"| {c.op} | {c.gpus} | {c.bytes:,} | {c.seconds * 1e6:.1f} | "
              f"{model_s * 1e6:.1f} | {c.seconds / model_s:.3f} |")
    print(f"\nTable 2: {args.model} on one node of {base.name}, catalog vs profiled "
          f"(seconds per step)\n")
    print("| plan | analytic catalog | analytic profiled | change | simulated catalog | "
          "simulated profiled | change |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for plan in PLANS:
        row = []
        for cl in (base, profiled):
            job = make_job(model, cl, parse_plan(plan))
            row.append((estimate(job).step_time_s, simulate(job).step_time_s))
        (ea, sa), (eb, sb) = row
        print(f"| {plan} | {ea:.4f} | {eb:.4f} | {100 * (eb / ea - 1):+.2f} % | {sa:.4f} | "
              f"{sb:.4f} | {100 * (sb / sa - 1):+.2f} % |")


if __name__ == "__main__":
    main()
