#!/usr/bin/env python
"""DeepSeek-V3 in NVIDIA's DGX Cloud 25.05 recipe on H100: where the model's step goes and what
the miss would take, behind docs/calibration.md §5.47.

    python experiments/dgxc_deepseek_h100.py

Table 1, the five DeepSeek-V3 rows of ``dgxc_2505.json`` (2 on H100 over InfiniBand, 3 on GB200
inside NVL72): the estimate's breakdown (``strategies.estimate.scalar.estimate``,
``breakdown_s``), each part in ms per layer and micro-batch of the busiest stage (micro-batches
per pipeline x the script's ``64/pp`` middle-stage layers, as §5.44 counts them), the
simulated step (``simulator.studies.validate.simulated_step_time``, folded) and the measured
one.

Table 2, one MoE layer and micro-batch of each GPU's rows as the model prices it: the forward
GEMMs by part (``gemm_shapes.layer_gemm_parts``, ``gemm_time.gemms_time_fwd``), the core attention,
the permutations, the layer's forward and backward (``stage_costs``), and the four
all-to-alls (dispatch and combine, forward and backward: ``comm.collective_time``, the
estimate's), with the NIC rate each all-to-all would need to hold the measured miss alone.

Table 3, every MoE row whose expert-parallel group leaves the node and runs Megatron-Core's
NCCL ``alltoall`` (the dispatcher NeMo's script ran here): the estimate's error and the miss
over the modelled all-to-all (``miss/ep``: 0.6 means the all-to-all would have to take 1.6
times the model's time to explain the whole miss).

Then the pieces checked against the source, each priced with the model's own functions: the
FP32 router (``moe_router_dtype='fp32'``) at FP32 and TF32 rates, and GB200's all-to-all had it
crossed the trays' NICs. Nothing is fitted and no cost changes.
"""
from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.collectives import all_to_all  # noqa: E402
from strategies.cost import attention_time, comm, gemm_shapes, gemm_time, token_counts  # noqa: E402
from strategies.cost.comm.links import nic_rate  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILE = os.path.join("strategies", "reference", "data", "dgxc_2505.json")
#: the reference files whose MoE rows table 3 reads
MOE_FILES = ("dgxc_2505.json", "nemo_performance_25.json", "megatron_bridge_2604.json",
             "automodel_perf.json", "published_2026.json")
#: dispatch and combine, forward and backward: the all-to-alls of one MoE layer and
#: micro-batch (``estimate.analytic``: ``2 * t_a2a``, each ``t_a2a`` a forward's two)
A2A_PER_LAYER = 4


def deepseek_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the DeepSeek-V3 rows of ``FILE``, all its rows)."""
    rows = load_reference(FILE)
    return [r for r in rows if "_deepseek_v3_" in r["id"]], rows


def layer_microbatches(row: dict[str, Any]) -> int:
    """Micro-batches per pipeline x the script's ``64/pp`` middle-stage layers (§5.44)."""
    pl = row["plan"]
    return pl["global_batch"] // (pl["microbatch"] * pl["dp"]) * (64 // pl["pp"])


def breakdown_per_layer(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, float]:
    """The estimate's breakdown of ``row`` (s) and ``step``, ``measured``, ``miss``, each over
    ``layer_microbatches`` in ms."""
    est = estimate(case_from_entry(row, rows).job)
    n = layer_microbatches(row)
    out = {k: 1e3 * float(est.breakdown_s[k]) / n for k in BREAKDOWN_KEYS}
    out["step"] = 1e3 * float(est.step_time_s) / n
    out["measured"] = 1e3 * row["measured"]["step_time_s"] / n
    out["miss"] = out["measured"] - out["step"]
    return out


def moe_layer(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, float]:
    """One MoE layer and micro-batch of ``row`` as the model prices it (s; bytes; B/s)."""
    job = case_from_entry(row, rows).job
    m, p, cl, fw, sy = job.model, job.plan, job.cluster, job.framework, job.system
    gpu = cl.gpu
    etp = p.expert_tp
    parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, "moe", etp, 1.0,
                                         gemm_time.whole_split(p.tp, p.sp, fw))
    out: dict[str, float] = {}
    for name, g in parts:
        t = float(gemm_time.gemms_time_fwd([g], p.tp, gpu, job.dtype, False, sy,
                                           gemm_time.fixed_shares([(name, g)], m, p.ep, fw)))
        key = "router" if g[-1] is None else name
        out[f"gemm_{key}"] = out.get(f"gemm_{key}", 0.0) + t
    a_f, a_b = attention_time.attention_time_fwd(m, p.mbs, p.tp, p.cp, p.flash_attn, gpu, 1.0, fw,
                                                 sy)
    out["attn_core_fwd"], out["attn_core_bwd"] = float(a_f), float(a_b)
    moe = stage_costs(job).by_kind["moe"]
    out["layer_fwd"], out["layer_bwd"] = moe.layer_fwd, moe.layer_bwd
    out["layer_recompute"] = moe.layer_recompute
    # one forward's dispatch + combine, as the estimate prices it (strategies.estimate.analytic)
    t_pair = float(comm.collective_time("alltoall", moe.ep_bytes, p.ep, etp, cl))
    out["a2a_each"] = t_pair / 2
    out["a2a_bytes_each"] = moe.ep_bytes / 2
    k = min(p.ep * etp, cl.gpus_per_node) // etp
    out["a2a_remote_bytes_each"] = moe.ep_bytes / 2 * (p.ep - k) / p.ep
    out["nic_rate"] = float(nic_rate(cl))
    return out


def needed_rate(layer: dict[str, float], miss_s: float) -> float:
    """Bytes/s across nodes at which each of the layer's four all-to-alls would take its
    modelled time plus a quarter of ``miss_s`` (the miss per layer and micro-batch)."""
    return layer["a2a_remote_bytes_each"] / (layer["a2a_each"] + miss_s / A2A_PER_LAYER)


def router_fp32_extra(row: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Seconds per MoE layer and micro-batch the router GEMM (forward + the backward's two)
    would add at the FP32 and at the TF32 rate over the model's 16-bit one (peak x the GPU's
    ``matmul_efficiency``; NeMo's script sets ``moe_router_dtype='fp32'``), on the rows the
    model prices it (the rank's sequence shard under SP, §5.99: ``gemm_time.whole_split``)."""
    job = case_from_entry(row, rows).job
    m, p, gpu = job.model, job.plan, job.cluster.gpu
    T = token_counts.tokens_per_gpu(p.mbs, m.seq_length, p.cp) \
        / gemm_time.whole_split(p.tp, p.sp, job.framework)[0]
    flops = 3 * 2.0 * T * m.hidden_size * m.num_experts

    def at(dtype: str) -> float:
        return flops / (gpu.peak_flops[dtype] * gpu.matmul_efficiency)
    return at("fp32") - at("bf16"), at("tf32") - at("bf16")


def gb200_over_nics(row: dict[str, Any], rows: list[dict[str, Any]]) -> float:
    """Seconds per MoE layer and micro-batch of the four all-to-alls of a GB200 row had they
    crossed each tray's NICs (4 GPUs per tray, the node's NIC rate) instead of NVLink."""
    job = case_from_entry(row, rows).job
    p, cl = job.plan, job.cluster
    moe = stage_costs(job).by_kind["moe"]
    tray = 4
    bw_in = cl.intra_node_bandwidth * comm.NVLINK_EFFICIENCY
    t = all_to_all.two_level_time(moe.ep_bytes / 2, p.ep, tray, bw_in, nic_rate(cl),
                                  cl.inter_node_latency, False)
    return A2A_PER_LAYER * float(t)


def ib_alltoall_rows() -> list[tuple]:
    """``(id, GPU, dtype, ep, error %, miss / modelled all-to-all)`` of every MoE row of
    ``MOE_FILES`` whose expert group (``ep x etp`` GPUs) spans nodes, on NCCL's ``alltoall``."""
    out = []
    for f in MOE_FILES:
        rows = load_reference(os.path.join("strategies", "reference", "data", f))
        for r in rows:
            case = case_from_entry(r, rows)
            job = case.job
            if job is None or not job.model.is_moe or case.measured_step_s is None:
                continue
            p = job.plan
            if p.moe_dispatcher != "alltoall" or p.ep * p.expert_tp <= job.cluster.gpus_per_node:
                continue
            est = estimate(job)
            ep_s = float(est.breakdown_s["ep_comm"])
            out.append((r["id"], job.cluster.gpu.name, job.dtype, p.ep,
                        100 * (est.step_time_s / case.measured_step_s - 1),
                        (case.measured_step_s - est.step_time_s) / ep_s))
    return out


def main() -> int:
    from simulator.studies.validate import simulated_step_time
    ds, rows = deepseek_rows()
    print("Table 1: the estimate's breakdown, ms per layer and micro-batch of the busiest "
          "stage\n")
    keys = [k for k in BREAKDOWN_KEYS if k != "cp_comm"]
    print("| row | layer-mb | " + " | ".join(keys) + " | estimate | simulated | measured |"
          " miss |")
    print("|---|---:|" + "---:|" * (len(keys) + 4))
    for r in ds:
        b = breakdown_per_layer(r, rows)
        n = layer_microbatches(r)
        sim, _ = simulated_step_time(case_from_entry(r, rows).job)
        cells = " | ".join(f"{b[k]:.2f}" for k in keys)
        print(f"| {r['id']} | {n} | {cells} | {b['step']:.2f} | {1e3 * sim / n:.2f} | "
              f"{b['measured']:.2f} | {b['miss']:.2f} |")

    print("\nTable 2: one MoE layer and micro-batch (ms)\n")
    picks = [r for r in ds if r["id"].endswith(("h100_512_bf16", "gb200_256_bf16"))]
    print("| part | " + " | ".join(r["id"] for r in picks) + " |")
    print("|---|" + "---:|" * len(picks))
    layers = [moe_layer(r, rows) for r in picks]
    for key in [k for k in layers[0] if k.startswith("gemm_")] + [
            "attn_core_fwd", "attn_core_bwd", "layer_fwd", "layer_bwd", "layer_recompute",
            "a2a_each"]:
        print(f"| {key} | " + " | ".join(f"{1e3 * x[key]:.3f}" for x in layers) + " |")
    print("| 4 all-to-alls | " + " | ".join(
        f"{1e3 * A2A_PER_LAYER * x['a2a_each']:.2f}" for x in layers) + " |")
    for r, x in zip(picks, layers):
        miss = breakdown_per_layer(r, rows)["miss"] / 1e3
        print(f"\n{r['id']}: all-to-all {x['a2a_bytes_each'] / 1e6:.1f} MB each, "
              f"{x['a2a_remote_bytes_each'] / 1e6:.1f} MB across nodes, "
              f"{1e3 * x['a2a_each']:.3f} ms")
        if x["a2a_remote_bytes_each"] > 0:
            need = needed_rate(x, miss)
            line = x["nic_rate"] / comm.NETWORK_EFFICIENCY
            print(f"  at {x['nic_rate'] / 1e9:.1f} GB/s per GPU's NIC; the miss alone would "
                  f"need {need / 1e9:.1f} GB/s ({need / line:.2f} of the line rate)")
        f32, t32 = router_fp32_extra(r, rows)
        print(f"  FP32 router: +{1e3 * f32:.3f} ms per MoE layer-mb at the FP32 rate, "
              f"+{1e3 * t32:.3f} ms at TF32")

    print("\nGB200 rows, the four all-to-alls had they crossed the trays' NICs "
          "(ms per MoE layer-mb):")
    for r in ds:
        if "gb200" in r["id"]:
            print(f"  {r['id']}: {1e3 * gb200_over_nics(r, rows):.2f}")

    print("\nTable 3: MoE rows on NCCL's alltoall across nodes\n")
    print("| row | GPU | dtype | ep | error | miss / modelled all-to-all |")
    print("|---|---|---|---:|---:|---:|")
    for rid, g, dt, ep, err, ratio in ib_alltoall_rows():
        print(f"| {rid} | {g} | {dt} | {ep} | {err:+.1f} % | {ratio:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
