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
precision, ep, micro-batch, dispatcher, overlap, ``delay_wgrad_compute`` and
``fp8_dot_product_attention`` of its recipe stated in its plan (``PLAN_2608``), which the
reader applies with the rules it applies to the 26.06 rows (§5.98, §5.101). The stack captures the
whole step in one CUDA graph there, so no host launch or sync is left in it, and TE's fused
grouped MLP (``NVTE_CUTEDSL_FUSED_GROUPED_MLP``) quantises the routed activation inside the
GEMM, with no host split sizes for TE's per-expert padding copies (estimated with the
reader's rule for it, ``variants.with_fused_grouped_mlp``: docs/calibration.md §5.17, §5.90).

Table 4: NVIDIA's eager / partial-graph A/B on the Qwen3-30B-A3B H100 layout (Megatron-Bridge
``docs/training/cuda-graphs.md`` at commit 067f987df03b, "Representative Validation
Patterns": 16 H100, bf16, alltoall dispatcher, tp 1 pp 1 ep 16, mbs 1, gbs 1024, no EP
overlap; iterations 5-8 averaged 41.36 s eager and 42.00 s with Transformer Engine graphs of
``attn``, ``moe_router`` and ``moe_preprocess``), estimated from the 26.04 H100 entry with
that precision and dispatcher. The plan has no partial-graph switch, so only the eager run is
estimated; the graphed one shows whether the host launches of the graphed parts were on the
critical path.
"""
from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.stacks.variants import with_fused_grouped_mlp  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILES = ("strategies/reference/data/megatron_bridge_2604.json",
         "strategies/reference/data/published_2026.json")
BRIDGE_2604 = FILES[0]
#: 26.08 NeMo container rows (Megatron-Bridge docs/performance-summary.md, commit
#: 067f987df03b): (26.04 entry of the same model and GPU, ep, micro-batch, global batch,
#: tokens/s/GPU, the recipe that ran it), MXFP8, sequence 4096
ROWS_2608 = (
    ("mbridge260401_qwen330ba3b_gb300_8_mxfp8", 8, 8, 512, 44544,
     "qwen/gb300/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config"),
    ("mbridge260401_qwen330ba3b_gb200_8_mxfp8", 8, 4, 512, 39936,
     "qwen/gb200/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"),
    ("mbridge260401_gptoss120b_gb300_64_bf16", 16, 4, 1280, 33024,
     "gpt_oss/gb300/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config"),
    ("mbridge260401_gptoss120b_gb200_64_bf16", 64, 4, 1280, 28672,
     "gpt_oss/gb200/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"),
)
#: what every ``ROWS_2608`` recipe sets, stated in the row's plan for the reader to apply
#: (its rules, not a copy: ``entry_stack._with_stated_fp8_attention``, docs/calibration.md
#: §5.98, and ``stated_switches._delay_wgrad``, §5.101): ``fp8_dot_product_attention = True`` and
#: ``CommOverlapConfig(overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)``
#: (067f987df03b ``src/megatron/bridge/perf_recipes/qwen/common.py``
#: ``_enable_hybridep_full_iteration_mxfp8``, ``gpt_oss/common.py``
#: ``_apply_gpt_oss_120b_full_iter_fp8mx_configs``, which each recipe calls)
PLAN_2608 = {"precision": "mxfp8", "moe_dispatcher": "hybridep", "ep_overlap": True,
             "delay_wgrad": True, "cuda_graph": True, "fp8_attention": True}


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


#: Megatron-Bridge docs/training/cuda-graphs.md (067f987df03b): (26.04 entry of the layout,
#: precision, dispatcher, eager s, TE-scoped attn+moe_router+moe_preprocess graphs s)
ROW_GRAPH_AB = ("mbridge260401_qwen330ba3b_h100_16_fp8", "bf16", "alltoall", 41.36, 42.00)


def row_graph_ab() -> tuple:
    """``(eager measured s, graphed measured s, estimated s, error %, missed ms per MoE
    layer and micro-batch)`` of ``ROW_GRAPH_AB``."""
    rid, prec, disp, eager, graphed = ROW_GRAPH_AB
    e = copy.deepcopy({x["id"]: x for x in load_reference(BRIDGE_2604)}[rid])
    e["id"] = rid.replace("_fp8", "_bf16_graph_ab")
    e["precision"] = prec
    e["plan"].update(moe_dispatcher=disp, ep_overlap=False)
    # the run is the performance harness's H100 BF16 v1 config, the one the 26.04 row's
    # recipe reads (bridge_recipes.RECIPES), with the dispatcher and overlap set above
    e["source"]["table"] = ("docs/training/cuda-graphs.md, commit 067f987df03b; the 26.04 "
                            "performance config QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1")
    e["measured"] = {}
    e["derived"] = {"step_time_s": eager}
    job = case_from_entry(e).job
    est = estimate(job)
    per_rank = job.model.num_moe_layers / job.plan.pp
    return (eager, graphed, est.step_time_s, 100 * (est.step_time_s / eager - 1),
            1e3 * (eager - est.step_time_s) / (est.num_microbatches * per_rank))


def entry_2608(row: tuple) -> dict:
    """The reference entry of one ``ROWS_2608`` row: its 26.04 entry with the 26.08 layout,
    measurement and ``PLAN_2608`` stated in its plan."""
    rid, ep, mbs, gbs, tok, recipe = row
    e = copy.deepcopy({x["id"]: x for x in load_reference(BRIDGE_2604)}[rid])
    n = e["hardware"]["n_gpus"]
    sw = {k: v for k, v in PLAN_2608.items() if k != "precision"}
    e["precision"] = PLAN_2608["precision"]
    e["plan"].update(ep=ep, microbatch=mbs, global_batch=gbs, grad_accum=None, **sw)
    e["source"]["table"] = ("docs/performance-summary.md (26.08 NeMo container); "
                            f"src/megatron/bridge/perf_recipes/{recipe}")
    e["measured"] = {"tokens_per_s_per_gpu": tok}
    e["derived"] = {"step_time_s": gbs * 4096 / (tok * n)}
    return e


def rows_2608(fused_2608: bool = True) -> list[tuple]:
    """``(26.04 id, ep, mbs, measured s, estimated s, error %)`` of ``ROWS_2608``;
    ``fused_2608`` False: with the 26.04 stack's quantisation padding copies kept."""
    out = []
    for row in ROWS_2608:
        case = case_from_entry(entry_2608(row))
        # 26.08 runs TE's fused grouped MLP (the perf recipes' cutedsl_fused_grouped_mlp):
        # the one rule the reader applies to a row that states it (framework.
        # with_fused_grouped_mlp, docs/calibration.md §5.90); fused_2608 False keeps the
        # 26.04 stack's quantisation padding copies (§5.17)
        fw = with_fused_grouped_mlp(case.job.framework, case.job.dtype)
        job = replace(case.job, framework=fw if fused_2608 else replace(fw, quant_padding=True))
        est = estimate(job)
        out.append((row[0], row[1], row[2], case.measured_step_s, est.step_time_s,
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
    print("| 26.04 entry, as run in 26.08 (MXFP8, HybridEP, EP overlap with delayed weight "
          "gradients, full-iteration CUDA graph, MXFP8 attention) | ep | mbs | measured s | "
          "estimated s | error |")
    print("|---|---|---|---|---|---|")
    for r in rows_2608():
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:+.1f} % |")
    print()
    print("| Qwen3-30B-A3B, 16 H100, bf16, alltoall, ep 16, mbs 1 (Megatron-Bridge cuda-graphs.md)"
          " | eager s | TE graphs attn+moe_router+moe_preprocess s | estimated s (eager) | error"
          " | missed ms per MoE layer and micro-batch |")
    print("|---|---|---|---|---|---|")
    a = row_graph_ab()
    print(f"| {ROW_GRAPH_AB[0]} as bf16 alltoall | {a[0]:.2f} | {a[1]:.2f} | {a[2]:.2f} | "
          f"{a[3]:+.1f} % | {a[4]:.2f} |")


if __name__ == "__main__":
    main()
