"""The SM-share windows against the contention-free simulation (docs/calibration.md §5.159,
§5.161): for each plan the estimate and the simulation with ``SystemConfig.comm_sm_share``
off and on (ms), the charge on − off of each, and estimate/simulation off and on. Plans:
Llama-3 8B at 4 layers (8 for the interleaved ones), 2,048 tokens, one or two DGX H100
(ZeRO-1/2/3, interleaved), the README's main job's plan (GPT-3 175B on 128 DGX A100) and
DGX-Cloud's Nemotron-4 340B row of ``published.json``. About a minute.

    python experiments/sm_share_windows.py [NAME ...]
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.simulate import simulate  # noqa: E402
from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost.system import SystemConfig, get_system  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

NEMOTRON = "dgxc_nemo2411_nemotron4_340B_bf16_128gpu"


def _small(plan: str, nodes: int = 1, layers: int = 4, model: str = "llama3-8b",
           cl: str = "dgx-h100") -> Callable[[SystemConfig], Job]:
    m = model_preset(model)
    if model == "llama3-8b":
        m = replace(m, num_layers=layers, seq_length=2048)
    return lambda s: make_job(m, cluster_preset(cl, nodes), parse_plan(plan), system=s)


def _row(ident: str) -> Callable[[SystemConfig], Job]:
    case, = [c for c in load_cases(None, tiers=None) if c.id == ident]
    return lambda s: replace(case.job, system=replace(get_system(case.job.system),
                                                      comm_sm_share=s.comm_sm_share))


PLANS = {
    "zero1": lambda: _small("zero=1,gbs=32"),
    "zero2": lambda: _small("zero=2,gbs=32"),
    "zero3": lambda: _small("zero=3,gbs=32"),
    "tp2-zero3": lambda: _small("tp=2,zero=3,gbs=32"),
    "interleaved": lambda: _small("pp=2,vpp=2,schedule=interleaved,zero=1,gbs=32", layers=8),
    "interleaved-tp2": lambda: _small("tp=2,pp=2,vpp=2,schedule=interleaved,zero=1,gbs=32",
                                      nodes=2, layers=8),
    "readme": lambda: _small("tp=8,pp=8,mbs=2,gbs=1536,schedule=interleaved,vpp=12,sp=true",
                             nodes=128, model="gpt3-175b", cl="dgx-a100"),
    "nemotron4-340b": lambda: _row(NEMOTRON),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"plans (default all): {', '.join(PLANS)}")
    a = ap.parse_args(argv)
    print(f"{'plan':16} {'est off':>10} {'est on':>10} {'sim off':>10} {'sim on':>10} "
          f"{'est +':>8} {'sim +':>8} {'e/s off':>8} {'e/s on':>8}")
    for name in a.names or list(PLANS):
        job_of = PLANS[name]()
        jobs = [job_of(s) for s in (SystemConfig(), SystemConfig(comm_sm_share=1.0))]
        e = [estimate(j).step_time_s * 1e3 for j in jobs]
        s = [simulate(j, network="contention-free").step_time_s * 1e3 for j in jobs]
        print(f"{name:16} {e[0]:10.2f} {e[1]:10.2f} {s[0]:10.2f} {s[1]:10.2f} "
              f"{e[1] - e[0]:8.2f} {s[1] - s[0]:8.2f} {e[0] / s[0]:8.4f} {e[1] / s[1]:8.4f}")


if __name__ == "__main__":
    main()
