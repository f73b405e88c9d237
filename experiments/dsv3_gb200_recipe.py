#!/usr/bin/env python
"""DeepSeek-V3 on GB200 in NVIDIA's DGX Cloud 25.05 recipe, field by field against the job the
reader builds, and the miss decomposed (docs/calibration.md §5.174). Analytic, a few seconds:

    python experiments/dsv3_gb200_recipe.py

Table 1: every switch the GB200 job ran, read at the versions the recipe pins
(NVIDIA/dgxc-benchmarking v25.05.05 ``deepseek_v3/pretraining/launch.sh``; NVIDIA/NeMo
7a8f1cc7bc40, ``setup.sh`` L54: ``scripts/performance/llm/pretrain_deepseek_v3.py``,
``scripts/performance/utils.py``, ``recommended_model_configs/model_configs_gb200.csv``,
``nemo/collections/llm/recipes/deepseek_v3.py``, ``recipes/deepseek.py``,
``gpt/model/deepseek.py``, ``lightning/run/plugins.py``), beside the value the reader's job
holds for ``dgxc2505_deepseek_v3_671b_gb200_128_bf16`` (``case_from_entry``) and whether they
agree. Switches the job has no field for are listed with "-" and what the model does instead.

Table 2: the five DeepSeek-V3 rows' estimate in ms per layer and micro-batch of the busiest
stage (``dgxc_deepseek_h100.breakdown_per_layer``: micro-batches per pipeline x ``64/pp``), and
the part of the measured step left once the modelled all-to-all, bubble, pipeline, data-
parallel and optimizer terms are taken off (``rest``), beside the model's own per-layer work
(compute + recompute + TP, ``work``): what the GPU (or its host) spent per layer and
micro-batch outside the expert all-to-all, if the model's all-to-all is right.

Table 3: what each reading of the miss predicts for the step's change from 128 to 256 and from
256 to 512 GPUs, against the measured change. Every GPU does the same work at the three sizes
(tp 2, pp 4, 64 micro-batches, every expert padded to its capacity of ``2048·8/256`` tokens per
source rank); only the expert all-to-all's peers (ep 32 → 64) and the data-parallel group
(16 → 32 → 64) change. Readings: the model as is; §5.83's tray what-if (every all-to-all
between trays over the NICs, ``gb200_moe_2505.tray_cluster``); the model's step scaled by the
row's measured/modelled ratio (any per-GPU cost in proportion to the work); a host path per
local expert (``moe_time.EXPERT_HOST_S``: 8 local experts at ep 32, 4 at ep 64); the all-to-all
at one per-GPU rate wherever its peers sit (``per_gpu_rate_steps``, the rate that closes the
128-GPU row). The measured spread: the README's example run of the 128-GPU job, iterations
11-44, std 0.096 s.

Table 4: every GB200 MoE row of the reference files the reader runs on Megatron-Core's NCCL
``alltoall`` beyond one tray, its error as is and with its modelled all-to-all stretched to the
per-GPU rate that closes the 128-GPU DeepSeek-V3 row (``closing_rate``): which rows one NCCL
all-to-all rate on NVL72 would fit and which it would break.

Nothing is fitted and no cost changes (tables 3 and 4 are readings, not rules).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dgxc_deepseek_h100 import (A2A_PER_LAYER, breakdown_per_layer, deepseek_rows,  # noqa: E402
                                layer_microbatches, moe_layer)
from gb200_moe_2505 import container_of, tray_cluster  # noqa: E402

from strategies.cost.comm import NVLINK_EFFICIENCY  # noqa: E402
from strategies.cost.moe_time import EXPERT_HOST_S  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

ROW = "dgxc2505_deepseek_v3_671b_gb200_128_bf16"
GB200 = ("dgxc2505_deepseek_v3_671b_gb200_128_bf16", "dgxc2505_deepseek_v3_671b_gb200_256_bf16",
         "dgxc2505_deepseek_v3_671b_gb200_512_bf16")
#: the README's example of ``parse_train_timing.sh`` (v25.05.05 ``deepseek_v3/pretraining/
#: README.md``): the 128-GPU GB200 job, iterations 11-44, mean 34.229 s, std 0.096 s
README_STEP_STD_S = 0.096

LAUNCH = "dgxc-benchmarking v25.05.05 deepseek_v3/pretraining/launch.sh"
PERF = "NeMo 7a8f1cc scripts/performance/llm/pretrain_deepseek_v3.py"
UTILS = "NeMo 7a8f1cc scripts/performance/utils.py"
CSV = "NeMo 7a8f1cc recommended_model_configs/model_configs_gb200.csv"
MODEL = "NeMo 7a8f1cc nemo/collections/llm/gpt/model/deepseek.py"
RECIPE = "NeMo 7a8f1cc nemo/collections/llm/recipes/deepseek_v3.py"
TRAINER = "NeMo 7a8f1cc nemo/collections/llm/recipes/deepseek.py"
PLUGINS = "NeMo 7a8f1cc nemo/lightning/run/plugins.py"


def _p(name: str):
    return lambda j: getattr(j.plan, name)


#: (field, the GB200 job's value at 128 GPUs, source, the job's value, or None where the job
#: has no such field, and then what the model does instead)
FIELDS: tuple[tuple[str, Any, str, Any], ...] = (
    ("tp", 2, f"{LAUNCH} L109", _p("tp")),
    ("pp", 4, f"{LAUNCH} L110", _p("pp")),
    ("ep", 32, f"{LAUNCH} L111-115 (64 at 256/512)", _p("ep")),
    ("etp", 1, f"{LAUNCH} L117", _p("etp")),
    ("cp", 1, f"{LAUNCH} L88", _p("cp")),
    ("vpp", 1, f"{LAUNCH} L116; {UTILS} L352 (None when 1)", _p("vpp")),
    ("mbs", 1, f"{LAUNCH} L89", _p("mbs")),
    ("gbs", 1024, f"{LAUNCH} L92 (8 per GPU)", _p("gbs")),
    ("seq_len", 4096, f"{RECIPE} L102", lambda j: j.seq_len),
    ("layers", 61, f"{LAUNCH} L90", lambda j: j.model.num_layers),
    ("dtype", "bf16", f"{LAUNCH} L55", lambda j: j.dtype),
    ("first/last stage layers", (15, 14), f"{PERF} L73-77 (64/pp - 1, 64/pp - 2)",
     lambda j: (j.plan.first_stage_layers, j.plan.last_stage_layers)),
    ("MTP layers", 1, f"{RECIPE} L62 use_mtp=True, L49",
     lambda j: j.model.num_nextn_predict_layers),
    ("recompute", "selective", f"{PERF} L67-69; {UTILS} L411 (recompute_layers 0: no full)",
     _p("recompute")),
    ("recompute_modules", ("core_attn",), f"{LAUNCH} L119, L136; {UTILS} L440-441",
     _p("recompute_modules")),
    ("sequence parallel", True, f"{UTILS} L356 (tp > 1)", _p("sp")),
    ("distributed optimizer", 1, "NeMo 7a8f1cc recipes/optim/adam.py L47", _p("zero")),
    ("overlap_grad_reduce", True, f"{TRAINER} L78", _p("overlap_grad_reduce")),
    ("overlap_param_gather", True, f"{TRAINER} L79", _p("overlap_param_gather")),
    ("tp_comm_overlap", False, f"{PERF} L87-90", _p("tp_comm_overlap")),
    ("attention backend (flash_attn)", False,
     "TE v2.3 fused_attn.cpp L221, dot_product_attention/utils.py L475-479 (§5.44)",
     _p("flash_attn")),
    ("CUDA graphs", False, f"{CSV} L23-24 (0); no 512-GPU row: {UTILS} L269-270", _p("cuda_graph")),
    ("dispatcher", "alltoall", f"{MODEL} L86", _p("moe_dispatcher")),
    ("capacity factor", 1.0, f"{PERF} L40, L80-81; moe_token_drop.py L38",
     _p("moe_capacity_factor")),
    ("pad to capacity", True, "moe_token_drop.py L39", _p("moe_pad_to_capacity")),
    ("A2A/compute overlap (ep_overlap)", False,
     "not set by the recipe (Megatron-Core 0.12 default)", _p("ep_overlap")),
    ("activation offload", 0, f"{LAUNCH} L118, L136", None),
    ("moe_permute_fusion", True, f"{PERF} L66", None),
    ("moe_router_dtype", "fp32", f"{PERF} L71", None),
    ("moe_shared_expert_overlap", True, f"{MODEL} L88", None),
    ("apply_rope_fusion", False, f"{MODEL} L114", None),
    ("cross_entropy_fusion_impl", "te", f"{PERF} L70; {UTILS} L374", None),
    ("grad_reduce_in_fp32", True, f"{TRAINER} L77", None),
    ("use_precision_aware_optimizer", True, f"{UTILS} L422-423", None),
    ("CUDA_DEVICE_MAX_CONNECTIONS", 32, f"{PLUGINS} L398-399 (sm100, tp > 1; 1 on H100)", None),
    ("NCCL_NVLS_ENABLE / NCCL_NET_GDR_LEVEL", "0 / PHB", f"{UTILS} L75; {PERF} L194-195", None),
    ("Slurm segment", "16 trays", f"{UTILS} L114-120", None),
)

#: what the model does for each switch it has no field for
NOT_FIELDS = {
    "activation offload": "none modelled: agrees",
    "moe_permute_fusion": "one gather pass per permutation (moe_bytes.moe_permute_bytes): "
                          "the fused kernel's traffic",
    "moe_router_dtype": "router GEMM at the 16-bit rate; FP32 +0.43 ms, TF32 +0.01 ms per "
                        "MoE layer-mb (§5.47)",
    "moe_shared_expert_overlap": "shared expert serial on the main stream (§5.99: left)",
    "apply_rope_fusion": "rope passes unfused: agrees",
    "cross_entropy_fusion_impl": "one fused loss on the last stage: agrees",
    "grad_reduce_in_fp32": "once per step, dp_comm <= 0.04 ms per layer-mb on these rows",
    "use_precision_aware_optimizer": "once per step, optimizer <= 0.03 ms per layer-mb",
    "CUDA_DEVICE_MAX_CONNECTIONS": "not read (stream ordering; no TP overlap on these rows)",
    "NCCL_NVLS_ENABLE / NCCL_NET_GDR_LEVEL": "no NVLS in the model's collectives; GDR for IB only",
    "Slurm segment": "NVLink domains of 64 GPUs: each pp stage's 32/64 EP ranks in one domain",
}


def job_of(row_id: str) -> tuple[dict[str, Any], Job]:
    """(the reference entry, the job the reader builds for it)."""
    ds, rows = deepseek_rows()
    row = next(r for r in ds if r["id"] == row_id)
    return row, case_from_entry(row, rows).job


def field_table(job: Job) -> list[tuple[str, Any, str, Any, str]]:
    """``(field, recipe value, source, job value or '-', agrees)`` per ``FIELDS``; ``agrees``
    is ``yes``/``NO`` where the job has the field, else the model's treatment."""
    out = []
    for name, value, src, get in FIELDS:
        if get is None:
            out.append((name, value, src, "-", NOT_FIELDS[name]))
            continue
        got = get(job)
        same = tuple(got) == tuple(value) if isinstance(value, tuple) else got == value
        out.append((name, value, src, got, "yes" if same else "NO"))
    return out


def rest_per_layer(b: dict[str, float]) -> tuple[float, float]:
    """(``rest``, ``work``) ms per layer and micro-batch: the measured step less the modelled
    expert all-to-all, context-parallel, bubble, pipeline, data-parallel and optimizer terms;
    the modelled compute + recompute + TP (so ``rest - work`` is the miss)."""
    rest = (b["measured"] - b["ep_comm"] - b["cp_comm"] - b["bubble"] - b["pp_comm"]
            - b["dp_comm"] - b["optimizer"])
    return rest, b["compute"] + b["recompute"] + b["tp_comm"]


def expert_host_s(job: Job) -> float:
    """Host seconds per step of ``EXPERT_HOST_S`` per local expert, forward + backward, over
    the busiest stage's MoE layers (16, all MoE on a middle stage) and the micro-batches."""
    local = job.model.num_experts / job.plan.ep
    mb = job.plan.gbs // (job.plan.mbs * job.plan.dp)
    return local * sum(EXPERT_HOST_S) * (64 // job.plan.pp) * mb


def a2a_wire_bytes(layer: dict[str, float], ep: int) -> float:
    """Bytes each GPU puts on the wire in one MoE layer and micro-batch's four all-to-alls:
    ``(ep-1)/ep`` of each buffer (its own share stays local)."""
    return A2A_PER_LAYER * layer["a2a_bytes_each"] * (ep - 1) / ep


def per_gpu_rate_steps(gb: list[dict[str, Any]], rows: list[dict[str, Any]],
                       model: list[float]) -> list[float]:
    """Steps (s) of the GB200 rows ``gb`` (128-GPU first) if every all-to-all ran at one rate
    per GPU wherever its peers sit, the rate at which the 128-GPU row's miss is all all-to-all:
    ``R = W_128 / (A_128 + M_128)`` (``W`` wire bytes, ``A`` the model's four all-to-alls, ``M``
    the miss per layer and micro-batch, the busiest stage's 16 MoE layers x 64 micro-batches);
    each row's step ``model + n (W/R - A)``. A reading to test against the rows' flatness, not a
    rule: it is the 128-GPU row's measurement by construction."""
    n = [layer_microbatches(r) for r in gb]
    layers = [moe_layer(r, rows) for r in gb]
    w = [a2a_wire_bytes(ly, r["plan"]["ep"]) for ly, r in zip(layers, gb)]
    a = [A2A_PER_LAYER * ly["a2a_each"] for ly in layers]
    rate = closing_rate(gb[0], rows, model[0])
    return [model[i] + n[i] * (w[i] / rate - a[i]) for i in range(len(gb))]


def closing_rate(row: dict[str, Any], rows: list[dict[str, Any]], model_s: float) -> float:
    """Bytes/s per GPU at which ``row``'s four all-to-alls per MoE layer and micro-batch would
    take their modelled time plus the whole miss: ``W / (A + M)``."""
    ly = moe_layer(row, rows)
    miss = (row["measured"]["step_time_s"] - model_s) / layer_microbatches(row)
    return a2a_wire_bytes(ly, row["plan"]["ep"]) / (A2A_PER_LAYER * ly["a2a_each"] + miss)


def predictions() -> list[tuple[str, float, float]]:
    """``(reading, step(256) - step(128), step(512) - step(256))`` in s, the measurement first."""
    ds, rows = deepseek_rows()
    gb = [next(r for r in ds if r["id"] == i) for i in GB200]
    jobs = [case_from_entry(r, rows).job for r in gb]
    meas = [r["measured"]["step_time_s"] for r in gb]
    model = [float(estimate(j).step_time_s) for j in jobs]
    tray = [float(estimate(replace(j, cluster=tray_cluster(j.cluster))).step_time_s)
            for j in jobs]
    scaled = [model[i] * (meas[0] / model[0]) for i in range(3)]
    host = [model[i] + expert_host_s(jobs[i]) for i in range(3)]
    flat = per_gpu_rate_steps(gb, rows, model)

    def d(v: list[float]) -> tuple[float, float]:
        return v[1] - v[0], v[2] - v[1]
    return [("measured", *d(meas)), ("the model as is", *d(model)),
            ("§5.83 tray what-if (all-to-all between trays over the NICs)", *d(tray)),
            ("the model scaled by the 128-GPU row's measured/model", *d(scaled)),
            ("+ EXPERT_HOST_S per local expert, serial", *d(host)),
            ("the all-to-all at one per-GPU rate whatever the peers' place (the rate that "
             "closes the 128-GPU row)", *d(flat))]


#: reference files whose GB200 rows table 4 reads
OTHER_FILES = ("dgxc_2505", "nemo_performance_25", "published_2026", "megatron_bridge_2604",
               "heldout_2026b")


def other_alltoall_rows(rate: float) -> list[tuple]:
    """``(file, id, container, ep, ep_overlap, error %, ep_comm s, error % at rate)`` of every
    GB200 MoE row the reader runs on Megatron-Core's NCCL ``alltoall`` with its expert group
    beyond one tray (``ep > 1``, ``ep·etp > 4``): the row's error as is and with its modelled
    all-to-all seconds (``breakdown_s['ep_comm']``) stretched from the model's NVLink rate
    (``intra_node_bandwidth · NVLINK_EFFICIENCY``) to ``rate`` (bandwidth terms only: the
    buffers are megabytes)."""
    out = []
    for name in OTHER_FILES:
        for e in load_reference(os.path.join("strategies", "reference", "data", name + ".json")):
            case = case_from_entry(e)
            job = case.job
            if (job is None or case.measured_step_s is None or job.cluster.gpu.name != "GB200"
                    or not job.model.num_experts or job.plan.moe_dispatcher != "alltoall"
                    or job.plan.ep <= 1 or job.plan.ep * (job.plan.etp or job.plan.tp) <= 4):
                continue
            est = estimate(job)
            ms = case.measured_step_s
            ep_s = float(est.breakdown_s["ep_comm"])
            nvl = job.cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
            slow = float(est.step_time_s) + ep_s * (nvl / rate - 1.0)
            out.append((name, e["id"], container_of(e), job.plan.ep, bool(job.plan.ep_overlap),
                        100 * (float(est.step_time_s) / ms - 1), ep_s, 100 * (slow / ms - 1)))
    return out


def _md(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def main() -> int:
    _, job = job_of(ROW)
    print(f"Table 1: the GB200 job's switches against the reader's job ({ROW})\n")
    print(_md(["field", "recipe", "source", "reader's job", "agrees / model"],
              [[n, str(v), s, str(g), a] for n, v, s, g, a in field_table(job)]))
    ds, rows = deepseek_rows()
    print("\nTable 2: ms per layer and micro-batch of the busiest stage\n")
    body = []
    for r in ds:
        b = breakdown_per_layer(r, rows)
        rest, work = rest_per_layer(b)
        body.append([r["id"], str(layer_microbatches(r)), f"{b['measured']:.2f}",
                     f"{b['step']:.2f}", f"{b['ep_comm']:.2f}", f"{b['bubble']:.2f}",
                     f"{work:.2f}", f"{rest:.2f}", f"{rest / work:.2f}", f"{b['miss']:.2f}"])
    print(_md(["row", "layer-mb", "measured", "estimate", "ep_comm", "bubble", "work", "rest",
               "rest/work", "miss"], body))
    print("\nTable 3: the step's change with the GPU count (s), measured and as each reading "
          f"predicts; measured spread (README example, 128 GPUs) std {README_STEP_STD_S} s\n")
    print(_md(["reading", "256 - 128", "512 - 256"],
              [[n, f"{a:+.3f}", f"{b:+.3f}"] for n, a, b in predictions()]))
    row, job = job_of(ROW)
    ds, rows = deepseek_rows()
    rate = closing_rate(row, rows, float(estimate(job).step_time_s))
    print(f"\nTable 4: GB200 rows on NCCL's alltoall beyond a tray, as is and with the "
          f"all-to-all at {rate / 1e9:.1f} GB/s per GPU (the rate that closes {ROW})\n")
    print(_md(["file", "row", "container", "ep", "ep_overlap", "error", "ep_comm s",
               "error at that rate"],
              [[f, i, c, str(ep), str(eo), f"{a:+.1f} %", f"{t:.2f}", f"{b:+.1f} %"]
               for f, i, c, ep, eo, a, t, b in other_alltoall_rows(rate)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
