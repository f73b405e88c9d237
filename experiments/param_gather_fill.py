"""The overlapped parameter gathers on a one-chunk pipeline's fill path (docs/calibration.md
§5.194): the preset matrix's gpt-76.1b plan on dgx-b200:16 and its neighbours, estimate
against the simulation (flows and contention-free), step and ``dp_comm`` in seconds, as
``paraplan estimate|simulate --json`` gives them; then
``tests/test_sm_share_windows.py``'s ZeRO-1 SM-share charge split into its gathers' and its
gradient window's parts (on − off of ``comm_sm_share``, and with the overlap off), with the
gathers' calls (milliseconds). A few seconds.

    python experiments/param_gather_fill.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.cli.common import resolve_job  # noqa: E402
from simulator.cli.main import build_parser  # noqa: E402
from simulator.metrics import PARAM_GATHER_PREFIX  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.cost.system import SystemConfig  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

BASE = "tp=4,pp=2,cp=2,mbs=1,gbs=64,sp=true,zero=1,recompute=none,cp_comm=p2p"
PLANS = (f"{BASE},schedule=1f1b", f"{BASE},schedule=1f1b,overlap_param_gather=false",
         f"{BASE},schedule=interleaved,vpp=2",
         "tp=8,pp=1,cp=2,mbs=1,gbs=64,sp=true,zero=1,recompute=full,cp_comm=p2p")
#: tests/test_sm_share_windows.py's model and plan (one DGX H100)
LLAMA8 = replace(model_preset("llama3-8b"), num_layers=4, seq_length=2048)


def cli_job(plan: str):
    """The job ``paraplan estimate`` runs for ``plan`` (the stack's defaults filled in)."""
    argv = ["estimate", "--model", "gpt-76.1b", "--cluster", "dgx-b200:16", "--framework",
            "nemo", "--seq-len", "32768", "--plan", plan]
    return resolve_job(build_parser(argv).parse_args(argv))


def _figures(job) -> str:
    e = estimate(job)
    parts = [f"est {e.step_time_s:.4f} ({e.breakdown_s['dp_comm']:.4f})"]
    for net in ("flows", "contention-free"):
        r = simulate(job, network=net)
        parts.append(f"{net} {r.step_time_s:.4f} ({r.metrics['breakdown_s']['dp_comm']:.4f})")
    return " | ".join(parts)


def sm_share_parts(opg: bool) -> tuple[float, float, list[float]]:
    """(estimate's charge, simulation's charge, the simulated gathers' calls) in ms."""
    plan = parse_plan("zero=1,gbs=32" + ("" if opg else ",overlap_param_gather=false"))
    jobs = [make_job(LLAMA8, cluster_preset("dgx-h100", 1), plan, system=s)
            for s in (None, SystemConfig(comm_sm_share=1.0))]
    est = [estimate(j).step_time_s for j in jobs]
    sims = [simulate(j, network="contention-free") for j in jobs]
    rank = sims[1].simulated_ranks[0]
    calls = [1e3 * (x.end - x.start) for x in sorted(sims[1].by_rank(rank), key=lambda x: x.start)
             if x.label.startswith(PARAM_GATHER_PREFIX)]
    return 1e3 * (est[1] - est[0]), 1e3 * (sims[1].step_time_s - sims[0].step_time_s), calls


def one_call_ms() -> tuple[float, float]:
    """The estimate's gather of the rank's parameters as one call, and the forward window
    it overlaps (one micro-batch's forward of the rank's layers), in ms."""
    job = make_job(LLAMA8, cluster_preset("dgx-h100", 1), parse_plan("zero=1,gbs=32"))
    c, p = stage_costs(job), job.plan
    t = cm.dp_collective_time("allgather", c.param_bytes, c.params_by_stage[0], 0.0, p.tp,
                              p.cp, p.dp, 1, 1, job.cluster)
    return 1e3 * float(t), 1e3 * LLAMA8.num_layers * c.layer_fwd


def main() -> None:
    print("gpt-76.1b on dgx-b200:16, nemo, sequence 32768: step s (dp_comm s)")
    for plan in PLANS:
        job = cli_job(plan)
        print(f"  {plan}: {_figures(job)}")
    e1, s1, calls = sm_share_parts(True)
    e0, s0, _ = sm_share_parts(False)
    print("SM-share charge, llama3-8b 4 layers, zero=1 gbs=32, one DGX H100 (ms):")
    print(f"  whole: estimate {e1:.3f}, simulation {s1:.3f}")
    print(f"  gradient window (overlap_param_gather off): estimate {e0:.3f}, simulation {s0:.3f}")
    print(f"  gathers (the difference): estimate {e1 - e0:.3f}, simulation {s1 - s0:.3f}")
    print(f"  simulated gather calls: {len(calls)}, {sum(calls):.3f} in all, first "
          f"{calls[0]:.3f}")
    whole, fwd = one_call_ms()
    print(f"  the estimate's gather as one call: {whole:.3f}; the forward window: {fwd:.3f}")


if __name__ == "__main__":
    main()
