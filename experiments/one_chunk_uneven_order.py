"""One-chunk schedules on uneven stages (docs/calibration.md §5.235): each case's estimated
step through the per-stage path (``stage_correction.per_stage``, the path before §5.235) and
the per-chunk path (``chunk_correction.per_chunk``, the real stages' order with each layer's
communication), the contention-free simulation's step, and the even split's estimate
against its simulation. ``--beyond``: more than one pipeline, a mixed cluster, pp 8 across
nodes and the Qwen3-235B-A22B reference plan (dp 8 and dp 32). ``--speed``: CPU seconds of
the first estimate of six Llama 3.1 405B uneven 1F1B plans in this process.

Run: python experiments/one_chunk_uneven_order.py [--beyond] [--speed]
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from experiments.offload_uneven_rows import case_job  # noqa: E402
from strategies.presets import model_preset  # noqa: E402

LLAMA, MIXTRAL = model_preset("llama3-8b"), model_preset("mixtral-8x7b")
MX = "tp=2,pp=4,ep=2,etp=1,dp=1,mbs=1"
LL = "tp=2,pp=4,dp=1,mbs=1"
MX_LAYOUT, LL_LAYOUT = "layout=Et*5|t*10|t*9|t*8L", "layout=Et*10|t*8|t*7|t*7L"
SCHEDULES = ("1f1b", "gpipe", "deepspeed-1f1b", "zb-h1")
QWEN_SLOTS = "tp=1,pp=8,ep=8,mbs=2,account_embedding=true,account_loss=true"
#: (model, cluster, plan, global batch): beyond one pipeline of one GPU type
BEYOND = [
    (MIXTRAL, "dgx-h100:2", f"tp=2,pp=4,ep=2,dp=2,mbs=1,{MX_LAYOUT}", 32),
    (LLAMA, "dgx-h100:1+dgx-a100:1", "tp=4,pp=4,dp=1,mbs=1,layers_per_stage=10/10/6/6", 16),
    (MIXTRAL, "dgx-h100:2",
     "tp=2,pp=8,ep=2,etp=1,dp=1,mbs=1,layout=Et*4|t*4|t*4|t*4|t*4|t*4|t*5|t*3L", 16),
    (LLAMA, "dgx-h100:2", "tp=8,pp=2,dp=1,mbs=1,layers_per_stage=18/14", 16),
    (model_preset("qwen3-235b-a22b"), "dgx-b300:8", f"{QWEN_SLOTS},dp=8", 256),
    (model_preset("qwen3-235b-a22b"), "dgx-b300:32", f"{QWEN_SLOTS},dp=32", 8192),
]


def both_paths(job) -> tuple[float, float]:
    """``job``'s estimated step through ``per_stage`` and through ``per_chunk`` (seconds)."""
    import strategies.estimate.scalar as scalar
    real = scalar.by_chunk
    try:
        scalar.by_chunk = lambda j, c=None: False
        old = scalar.estimate(job).step_time_s
        scalar.by_chunk = lambda j, c=None: True
        new = scalar.estimate(job).step_time_s
    finally:
        scalar.by_chunk = real
    return old, new


def simulated(job) -> float:
    """The contention-free simulation's step (seconds)."""
    from simulator.simulate import simulate
    return simulate(job, network="contention-free").step_time_s


def row(model, cluster: str, plan: str, gbs: int, even: str | None = None) -> str:
    job = case_job(model, cluster, plan, gbs)
    old, new = both_paths(job)
    sim = simulated(job)
    out = [model.name, cluster, plan, f"{old:.6f} ({old / sim - 1:+.2%})",
           f"{new:.6f} ({new / sim - 1:+.2%})", f"{sim:.6f}"]
    if even is not None:
        from strategies.estimate.scalar import estimate
        ej = case_job(model, cluster, even, gbs)
        out.append(f"{estimate(ej).step_time_s / simulated(ej) - 1:+.2%}")
    return " | ".join(out)


def speed() -> None:
    from strategies.estimate.scalar import estimate
    m = model_preset("llama3.1-405b")
    estimate(case_job(m, "dgx-h100:64", "tp=8,pp=2,dp=32,mbs=1", 2048))   # warm-up
    total = 0.0
    for pp, f, last in ((4, 32, 30), (8, 14, 16), (16, 7, 7)):
        for mbs in (1, 2):
            job = case_job(m, "dgx-h100:64", f"tp=8,pp={pp},dp={64 // pp},mbs={mbs},"
                           f"first_stage_layers={f},last_stage_layers={last}", 2048)
            t = time.process_time()
            estimate(job)
            total += time.process_time() - t
    print(f"six 405B uneven 1F1B plans: {total:.2f} s CPU (first estimate of each)")


def main(argv: list[str]) -> None:
    print("model | cluster | plan | per_stage | per_chunk | simulation | even split")
    for s in SCHEDULES:
        print(row(MIXTRAL, "dgx-h100:1", f"{MX},schedule={s},{MX_LAYOUT}", 16,
                  f"{MX},schedule={s}"))
        print(row(LLAMA, "dgx-h100:1", f"{LL},schedule={s},{LL_LAYOUT}", 16,
                  f"{LL},schedule={s}"))
    if "--beyond" in argv:
        for model, cluster, plan, gbs in BEYOND:
            print(row(model, cluster, plan, gbs))
    if "--speed" in argv:
        speed()


if __name__ == "__main__":
    main(sys.argv[1:])
