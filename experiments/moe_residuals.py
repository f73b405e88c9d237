#!/usr/bin/env python
"""What the analytic estimate still misses on the published MoE runs, and where.

Run (a few seconds, analytic only):

    python experiments/moe_residuals.py            # Markdown tables on stdout

Table 1, for every MoE row of ``megatron_bridge_2604.json`` and ``published_2026.json``: the
measured and the estimated step, and the time the estimate misses per MoE layer and micro-batch
on the busiest pipeline rank, ``(measured - estimated) / (micro-batches x MoE layers per
rank)``, beside the model's own time for that layer (forward + backward, the stage record's
``layer_fwd + layer_bwd``). A cost per token grows with the micro-batch; a cost per layer and
micro-batch (host launches, device-to-host syncs) does not.

Table 3: mean absolute error per model family and file (every tier), the MoE families and the
dense rows.

Table 2: the same models, GPUs and layouts as NVIDIA ran them in the 26.08 NeMo container
(Megatron-Bridge ``docs/performance-summary.md`` at commit 067f987df03b: MXFP8, HybridEP, the
expert-parallel overlap and full-iteration CUDA graphs, ``src/megatron/bridge/perf_recipes/
{qwen,gpt_oss}/``), estimated from the 26.04 entry of the same model and GPU with the 26.08
precision, ep, micro-batch, dispatcher and overlap stated in its plan. The stack captures the
whole step in one CUDA graph there, so no host launch or sync is left in it.
"""
from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILES = ("strategies/reference/data/megatron_bridge_2604.json",
         "strategies/reference/data/published_2026.json")
BRIDGE_2604 = FILES[0]
#: 26.08 NeMo container rows (Megatron-Bridge docs/performance-summary.md, commit
#: 067f987df03b): (26.04 entry of the same model and GPU, ep, micro-batch, global batch,
#: tokens/s/GPU), MXFP8, sequence 4096
ROWS_2608 = (
    ("mbridge260401_qwen330ba3b_gb300_8_mxfp8", 8, 8, 512, 44544),
    ("mbridge260401_qwen330ba3b_gb200_8_mxfp8", 8, 4, 512, 39936),
    ("mbridge260401_gptoss120b_gb300_64_bf16", 16, 4, 1280, 33024),
    ("mbridge260401_gptoss120b_gb200_64_bf16", 64, 4, 1280, 28672),
)


def residual_rows(path: str) -> list[tuple]:
    """``(id, GPU, precision, mbs, measured s, estimated s, error %, missed ms per MoE layer
    and micro-batch, model ms per MoE layer)`` of every MoE row of ``path`` that resolves."""
    out = []
    for entry in load_reference(path):
        case = case_from_entry(entry)
        job = case.job
        if job is None or not job.model.is_moe or case.measured_step_s is None:
            continue
        est = estimate(job)
        sc = stage_costs(job)
        moe = sc.by_kind.get("moe") if sc.by_kind else None
        layer = (moe.layer_fwd + moe.layer_bwd) if moe else (sc.layer_fwd + sc.layer_bwd)
        per_rank = job.model.num_moe_layers / job.plan.pp
        gap = case.measured_step_s - est.step_time_s
        out.append((entry["id"], job.cluster.gpu.name, job.dtype, job.plan.mbs,
                    case.measured_step_s, est.step_time_s,
                    100 * (est.step_time_s / case.measured_step_s - 1),
                    1e3 * gap / (est.num_microbatches * per_rank), 1e3 * layer))
    return out


#: model families by the name in a run's id
FAMILIES = (("deepseek", "DeepSeek-V3"), ("dsv3", "DeepSeek-V3"), ("gptoss", "gpt-oss-120b"),
            ("qwen330", "Qwen3-30B-A3B"), ("qwen3_30", "Qwen3-30B-A3B"),
            ("qwen3235", "Qwen3-235B-A22B"), ("qwen3_235", "Qwen3-235B-A22B"),
            ("llama", "dense (Llama)"))


def family_rows(path: str) -> list[tuple[str, int, float]]:
    """``(family, runs, analytic MAPE %)`` of every row of ``path`` that resolves, by
    ``FAMILIES`` (others: ``other``), then all MoE rows and all rows."""
    from simulator.studies.validate import load_cases, mape, validate_cases
    by: dict[str, list[float]] = {}
    for r in validate_cases(load_cases(path, tiers=None), simulate=False):
        if r["analytic_error_pct"] is None:
            continue
        name = next((n for k, n in FAMILIES if k in r["id"].lower()), "other")
        by.setdefault(name, []).append(r["analytic_error_pct"])
    moe = [e for k, v in by.items() if k not in ("dense (Llama)", "other") for e in v]
    out = [(k, len(v), mape(v)) for k, v in sorted(by.items())]
    out.append(("all MoE rows", len(moe), mape(moe)))
    out.append(("all rows", sum(len(v) for v in by.values()),
                mape([e for v in by.values() for e in v])))
    return out


def rows_2608() -> list[tuple]:
    """``(26.04 id, ep, mbs, measured s, estimated s, error %)`` of ``ROWS_2608``."""
    base = {e["id"]: e for e in load_reference(BRIDGE_2604)}
    out = []
    for rid, ep, mbs, gbs, tok in ROWS_2608:
        e = copy.deepcopy(base[rid])
        n = e["hardware"]["n_gpus"]
        e["precision"] = "mxfp8"
        e["plan"].update(ep=ep, microbatch=mbs, global_batch=gbs, grad_accum=None,
                         moe_dispatcher="hybridep", ep_overlap=True, cuda_graph=True)
        e["source"]["table"] = "docs/performance-summary.md (26.08 NeMo container)"
        e["measured"] = {"tokens_per_s_per_gpu": tok}
        e["derived"] = {"step_time_s": gbs * 4096 / (tok * n)}
        case = case_from_entry(e)
        est = estimate(case.job)
        out.append((rid, ep, mbs, case.measured_step_s, est.step_time_s,
                    100 * (est.step_time_s / case.measured_step_s - 1)))
    return out


def main() -> None:
    print("| run | GPU | precision | mbs | measured s | estimated s | error | missed ms per "
          "MoE layer and micro-batch | model ms per MoE layer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in FILES:
        for r in residual_rows(path):
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[5]:.2f} | "
                  f"{r[6]:+.1f} % | {r[7]:.2f} | {r[8]:.2f} |")
    print()
    print("| file | family | runs | analytic MAPE |")
    print("|---|---|---|---|")
    for path in FILES:
        for fam, n, err in family_rows(path):
            print(f"| {os.path.basename(path)} | {fam} | {n} | {err:.2f} % |")
    print()
    print("| 26.04 entry, as run in 26.08 (MXFP8, HybridEP, EP overlap, full-iteration CUDA "
          "graph) | ep | mbs | measured s | estimated s | error |")
    print("|---|---|---|---|---|---|")
    for r in rows_2608():
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:+.1f} % |")


if __name__ == "__main__":
    main()
