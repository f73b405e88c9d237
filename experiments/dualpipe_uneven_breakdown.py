"""DualPipe and DualPipeV over uneven stages (docs/calibration.md §5.222, §5.225): each
case's estimated step and the breakdown's ``compute``, ``offload``, ``tp_comm``, ``pp_comm``
and ``bubble`` entries and, with ``--sim``, the contention-free simulation's step and the same entries of
its busiest stage (``simulate``'s ``breakdown_s_by_stage``, the stage of largest compute +
recompute + offload: the stage the estimate's breakdown describes) and the relative gap of
the two ``compute`` entries. The cases are ``tests/test_dualpipe_uneven_breakdown.py``'s. Run
in main's tree (``PYTHONPATH`` at it, without ``--sim``) for the figures before.

Run: python experiments/dualpipe_uneven_breakdown.py [--sim]
"""
from __future__ import annotations

import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from experiments.offload_uneven_rows import ATT, case_job  # noqa: E402
from strategies.presets import model_preset  # noqa: E402

LLAMA = model_preset("llama3-8b")
MIXTRAL = model_preset("mixtral-8x7b")
#: DeepSeek-V3's layers cut to 8 (one dense first, MoE after, one MTP module), s = 1024
DS8 = dataclasses.replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                          first_k_dense_replace=1, vocab_size=32000, seq_length=1024)
DP = "tp=2,pp=4,dp=1,mbs=1,schedule=dualpipe"
DV = "tp=2,pp=4,dp=1,mbs=1,schedule=dualpipev,vpp=2"
MX = "tp=2,pp=4,ep=2,dp=2,mbs=1"
UNEVEN = "layout=Et*5|t*10|t*9|t*8L"
V_UNEVEN = "layout=Et*3|t*4|t*4|t*5|t*4|t*4|t*4|t*4L"
ROUTED = "offload_modules=expert_fc1+moe_act"

#: (model, cluster, plan, global batch, uneven): DualPipe and DualPipeV, a layout string and
#: first/last-stage counts, with and without activation offloading, one kind of layer (dense,
#: MoE) and two (dense first layers and an MTP module, even split), and the even splits
CASES = [
    (LLAMA, "dgx-h100:1", f"{DP},{UNEVEN}", 16, True),
    (LLAMA, "dgx-h100:1", f"{DP},{ATT},{UNEVEN}", 16, True),
    (LLAMA, "dgx-h100:1", f"{DP},first_stage_layers=6,last_stage_layers=10", 16, True),
    (LLAMA, "dgx-h100:1", f"{DV},{V_UNEVEN}", 16, True),
    (LLAMA, "dgx-h100:1", f"{DV},{ATT},{V_UNEVEN}", 16, True),
    (MIXTRAL, "dgx-h100:2", f"{MX},schedule=dualpipe,{UNEVEN}", 32, True),
    (MIXTRAL, "dgx-h100:2", f"{MX},schedule=dualpipe,{ROUTED},{UNEVEN}", 32, True),
    (MIXTRAL, "dgx-h100:2", f"{MX},schedule=dualpipev,vpp=2,{V_UNEVEN}", 32, True),
    (DS8, "hgx-h800:2", "pp=4,ep=2,zero=1,schedule=dualpipe", 32, False),
    (DS8, "hgx-h800:2", "pp=4,ep=2,zero=1,schedule=dualpipev,vpp=2", 32, False),
    (LLAMA, "dgx-h100:1", DP, 16, False),
    (LLAMA, "dgx-h100:1", f"{DP},{ATT}", 16, False),
    (LLAMA, "dgx-h100:1", DV, 16, False),
]

#: the breakdown entries compared
KEYS = ("compute", "offload", "tp_comm", "pp_comm", "bubble")


def busiest_stage(sim_json: dict) -> dict:
    """The simulated breakdown of the stage of largest compute + recompute + offload
    (``simulate``'s ``breakdown_s_by_stage``; the first on a tie)."""
    stages = sim_json["breakdown_s_by_stage"]
    return max(stages, key=lambda b: b["compute"] + b["recompute"] + b["offload"])


def against_simulation(job, keys: tuple[str, ...], rel: float = 1e-9) -> list[str]:
    """The entries of ``keys`` (and ``step``) where ``estimate(job)`` and the contention-free
    simulation's busiest stage (``busiest_stage``) differ by more than ``rel``, and
    ``"sum"`` where the estimate's breakdown does not add up to its step (1e-12): the check
    the exactness tests make. Empty where they agree."""
    from simulator.simulate import simulate, to_json
    from strategies.estimate.scalar import estimate
    e = estimate(job)
    out = to_json(simulate(job, network="contention-free"), job)
    b = busiest_stage(out)
    pairs = [("step", e.step_time_s, out["step_time_s"])] + [
        (k, e.breakdown_s[k], b[k]) for k in keys]
    bad = [k for k, x, y in pairs if abs(x - y) > rel * abs(y) + 1e-12]
    if abs(sum(e.breakdown_s.values()) - e.step_time_s) > 1e-12 * e.step_time_s:
        bad.append("sum")
    return bad


def main(sim: bool) -> None:
    from strategies.estimate.scalar import estimate
    if sim:
        from simulator.simulate import simulate, to_json
    for model, cluster, plan, gbs, _ in CASES:
        job = case_job(model, cluster, plan, gbs)
        e = estimate(job)
        name = model.name
        row = [name, cluster, plan.replace(ATT, "attn3"), f"{e.step_time_s:.4f}"]
        row += [f"{e.breakdown_s[k]:.4f}" for k in KEYS]
        if sim:
            j = to_json(simulate(job, network="contention-free"), job)
            b = busiest_stage(j)
            gap = e.breakdown_s["compute"] / b["compute"] - 1.0
            row += [f"{j['step_time_s']:.4f}"] + [f"{b[k]:.4f}" for k in KEYS] + [f"{gap:.1e}"]
        print(" | ".join(row))


if __name__ == "__main__":
    main("--sim" in sys.argv[1:])
