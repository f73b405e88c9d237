#!/usr/bin/env python
"""Megatron-LM 2021's tier-2 rows and the BLOOM prototype's rows, term by term beside their
nearest tier-1 twin (docs/calibration.md §5.143).

Run (a few seconds, analytic only):

    python experiments/t2_rows.py

Table 1, the rows and their sources: each row of the families ``narayanan2021_t2`` (tiers
2-3: Narayanan et al. 2021, SC21, Table 2 and Figure 10, §5.2 "Comparison to ZeRO-3") and
``bloom_prequel_181B`` / ``_zero0`` (``chronicles-prequel.md``), its plan, its measured and
estimated step, and its twin: the row of the same table or cluster that tier 1 holds with
the same stack and schedule where one exists (the 530B PTD-P rows for the PTD-P 175B rows and
for the ZeRO-3 rows, BLOOM 176B for the prototype), with what differs between the two.

Table 2, the step decomposed: ``estimate(job).breakdown_s`` (the bounding rank's compute,
recomputation, TP, pipeline, data-parallel / ZeRO-3 communication, bubble, optimizer), and
the layers' part of compute plus recomputation split by kernel kind (``layer_parts``: GEMMs,
attention, elementwise passes, kernel-boundary gaps, gradient accumulation, ZeRO-3's
copy-out), then per slot (one micro-batch's forward and backward on a stage, ``m + p − 1``
of them) measured over estimated, for the row and its twin.

Table 3, the ZeRO-3 rows' scaling pairs: Table 2 doubles the GPUs at a fixed global batch,
so each GPU runs one micro-batch of half the sequences; the measured step less the model's
compute (``compute + recompute``) is what the rows leave for ZeRO-3's communication, and its
growth from one ring size to the next is set beside the model's own growth, per call and
rank and per wire byte (``comm.per_tensor_time``'s calls, ``zero3_deepspeed_2021``'s bytes).

Table 4, the BLOOM prototype's provenance checks from the chronicle's own figures: the
product TFLOP/s × s/it of one model is the same for every row measured with one TFLOP/s
formula (BigScience's ``TFLOPs calculation improved`` note: Megatron-DeepSpeed PR 251 raised
the reported figure by about 3 %), and the same layout re-measured on later days.

Table 5, the ZeRO-3 rows' stack: the reader runs them under ``megatron-deepspeed`` (DeepSpeed's
per-tensor ZeRO-3); the paper ran Megatron-LM 2021's code with DeepSpeed's ZeRO-3 in it; the
estimate under ``megatron-lm-2021``'s profile with the same ZeRO-3 beside it.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import attention_time, elementwise_bytes  # noqa: E402
from strategies.cost.elementwise_time import cast_time, launch_time  # noqa: E402
from strategies.cost.gemm_time import (fixed_shares, gemm_units, units_time_bwd,  # noqa: E402
                                       units_time_fwd, whole_split)
from strategies.cost import gemm_shapes, param_counts  # noqa: E402
from strategies.cost.grad_time import (bf16_optimizer_launch_time,  # noqa: E402
                                       gather_copy_out_time, grad_accum_time,
                                       sharded_grad_pass_time)
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.cost.qkv_split import qkv_split_time  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.cost.stage.layers import layer_times  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import Case  # noqa: E402
# every row of published.json and classic_papers.json with a job, by id; a pipeline's slots
from experiments.deepspeed_family_gap import cases, slots  # noqa: E402,F401

#: (row, its tier-1 twin): the same table's 530B PTD-P rows (Megatron-LM 2021, tp 8 pp 35
#: 1F1B, tier 1) at the nearest GPU count for Table 2's PTD-P 175B and ZeRO-3 rows; BLOOM
#: 176B (Megatron-DeepSpeed, tp 8 pp 12 dp 4 mbs 2 on the same 48 Jean Zay nodes, tier 1)
#: for the prototype's rows
TWINS = (
    ("narayanan2021_t2_zero3_175B_384gpu", "narayanan2021_t2_ptdp_530B_560gpu"),
    ("narayanan2021_t2_zero3_175B_768gpu", "narayanan2021_t2_ptdp_530B_1120gpu"),
    ("narayanan2021_t2_zero3_175B_1536gpu", "narayanan2021_t2_ptdp_530B_2240gpu"),
    ("narayanan2021_t2_zero3_530B_640gpu", "narayanan2021_t2_ptdp_530B_560gpu"),
    ("narayanan2021_t2_zero3_530B_1120gpu", "narayanan2021_t2_ptdp_530B_1120gpu"),
    ("narayanan2021_t2_zero3_530B_2240gpu", "narayanan2021_t2_ptdp_530B_2240gpu"),
    ("narayanan2021_t2_ptdp_175B_384gpu", "narayanan2021_t2_ptdp_530B_560gpu"),
    ("narayanan2021_t2_ptdp_175B_768gpu", "narayanan2021_t2_ptdp_530B_1120gpu"),
    ("narayanan2021_t2_ptdp_175B_1536gpu", "narayanan2021_t2_ptdp_530B_2240gpu"),
    ("bloom_prequel_181B_dp4_pp12_mbs1", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp4_pp12_mbs2", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp4_pp12_mbs4", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp4_pp12_mbs8", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp8_pp6_mbs1", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp8_pp6_mbs2", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_dp8_pp6_mbs4", "bloom176B_final_384gpu"),
    ("bloom_prequel_181B_zero0", "bloom176B_final_384gpu"),
)

#: Table 2's ZeRO-3 scaling pairs: the same model and global batch, twice the GPUs, half the
#: micro-batch (one micro-batch per GPU on both sides)
ZERO3_PAIRS = (
    ("narayanan2021_t2_zero3_175B_384gpu", "narayanan2021_t2_zero3_175B_768gpu"),
    ("narayanan2021_t2_zero3_175B_768gpu", "narayanan2021_t2_zero3_175B_1536gpu"),
    ("narayanan2021_t2_zero3_530B_640gpu", "narayanan2021_t2_zero3_530B_1120gpu"),
    ("narayanan2021_t2_zero3_530B_1120gpu", "narayanan2021_t2_zero3_530B_2240gpu"),
)

STEP_TERMS = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")
PART_NAMES = ("gemm", "attention", "elementwise", "gaps", "grad_accum", "z3_copy_out", "rest")


@dataclass(frozen=True)
class LayerParts:
    """Seconds of one mean layer for one micro-batch on one GPU, by kernel kind, for each
    pass: ``fwd``, ``bwd`` and ``recompute`` map ``PART_NAMES`` to seconds; ``rest`` is the
    layer's price (``layer_time``) less the named parts (0 for a dense layer without async
    TP or sequence-dim layout copies: every term these rows run is named)."""

    fwd: dict
    bwd: dict
    recompute: dict


def layer_parts(job: Job) -> LayerParts:
    """The mean layer of ``job`` split as ``strategies.cost.layer_time.layer_time`` sums it
    (its GEMM units, ``attention_time_fwd``, the elementwise and cast passes, ``launch_time``,
    the gradient accumulation and ZeRO-3's gather copy-out), each at the stage inputs the
    estimate reads (``stage_inputs``: the overlap slowdown, the accumulation shard); the
    recomputation is the forward again where the plan recomputes the whole layer, the part
    ``layer_time`` reports otherwise (left in ``rest``). Dense models only (a MoE layer's
    expert terms would land in ``rest``)."""
    m, p = job.model, job.plan
    si = stage_inputs(m, job.cluster, job.dtype, PlanArrays.from_plans([p]), job.framework,
                      job.system)
    fw, sy, gpu, dtype = si.fw, si.sy, si.gpu, si.dtype
    P = si.P
    tp, cp, ep, b, sp = P.tp, P.cp, P.ep, P.mbs, P.sp
    slow, etp = si.slow, P.etp
    total = layer_times(m, si)
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, si.load,
                                         whole_split(tp, sp, fw))
    units = gemm_units([g for _, g in parts], tp, gpu, dtype, P.tp_comm_overlap, fw, sy,
                       shares=fixed_shares(parts, m, ep, fw))
    counts = [g[0] for _, g in parts]
    g_f = slow * units_time_fwd(counts, units)
    g_b, _ = units_time_bwd(counts, units)     # the data and weight gradients together
    a_f, a_b = attention_time.attention_time_fwd(m, b, tp, cp, P.flash_attn, gpu, slow, fw, sy)
    c_f, c_b = cast_time(m, b, tp, cp, sp, gpu, dtype, sy, fw)
    e_plain = elementwise_bytes.elementwise_bytes_fwd(m, b, tp, cp, sp, fw.elementwise_kernels) \
        / usable_hbm(gpu, sy)
    layer_w = param_counts.layer_params_per_gpu(m, tp, ep, etp)
    acc = grad_accum_time(layer_w / si.shard_acc, gpu, dtype, fw, sy) \
        + bf16_optimizer_launch_time(m, fw, dtype, gpu) \
        + sharded_grad_pass_time(layer_w, si.shard_acc, gpu, dtype, fw, sy)
    gap = launch_time(fw, gpu=gpu)
    gco = gather_copy_out_time(layer_w, (P.zero == 3) & (si.copies > 1), gpu, fw, sy)

    def scalar(x) -> float:          # the one plan's entry of a broadcast column
        return float(np.asarray(x, dtype=float).reshape(-1)[0])

    qs_f, qs_b = qkv_split_time(m, b, tp, cp, P.flash_attn, gpu, fw, sy)    # §5.167
    fwd = {"gemm": scalar(g_f), "attention": scalar(a_f),
           "elementwise": scalar(e_plain + c_f + qs_f),
           "gaps": scalar(gap), "grad_accum": 0.0, "z3_copy_out": scalar(gco)}
    bwd = {"gemm": scalar(slow * g_b), "attention": scalar(a_b),
           "elementwise": scalar(2 * e_plain + c_b + qs_b), "gaps": scalar(2 * gap),
           "grad_accum": scalar(acc), "z3_copy_out": scalar(gco)}
    fwd["rest"] = scalar(total.fwd) - sum(fwd.values())
    bwd["rest"] = scalar(total.bwd) - sum(bwd.values())
    rc_total = scalar(total.recompute)
    if p.recompute == "full":
        # the whole forward again, less ZeRO-3's copy-out (the recomputation reads the
        # parameters its backward gathers) and the last GEMM an early-stopping checkpoint
        # saves (in ``rest``, negative)
        rc = {k: v for k, v in fwd.items() if k != "rest"}
        rc["z3_copy_out"] = 0.0
        rc["rest"] = rc_total - sum(rc.values())
    else:
        rc = {k: 0.0 for k in PART_NAMES[:-1]}
        rc["rest"] = rc_total
    return LayerParts(fwd=fwd, bwd=bwd, recompute=rc)


def layers_on_rank(job: Job) -> float:
    """Layers on the bounding rank: ``L / pp`` (the rows' stages are even)."""
    return job.model.num_layers / job.plan.pp


def step_parts(job: Job) -> dict:
    """Seconds per step of the layers' kernels on the bounding rank by kind: the mean
    layer's ``layer_parts`` (forward, backward and recomputation) times its layers and the
    ``m`` micro-batches, a first-order split of ``compute + recompute`` (the embedding, the
    head and the loss are the difference, ``other``)."""
    lp = layer_parts(job)
    k = layers_on_rank(job) * job.num_microbatches
    out = {n: k * (lp.fwd[n] + lp.bwd[n] + lp.recompute[n]) for n in PART_NAMES}
    e = estimate(job).breakdown_s
    out["other"] = e["compute"] + e["recompute"] - sum(out.values())
    return out


def plan_text(job: Job) -> str:
    p = job.plan
    z = f" z{p.zero}" if p.zero else ""
    sched = f" {p.schedule}" if p.pp > 1 else ""
    return f"tp{p.tp} pp{p.pp} dp{p.dp} mbs{p.mbs}{sched}{z}"


def differences(a: Job, b: Job) -> str:
    """What differs between two jobs, in words: the plan's fields, the micro-batches, the
    model's shape, the GPUs, the stack and its switches."""
    out = []
    for f in ("tp", "pp", "dp", "mbs", "zero", "schedule"):
        va, vb = getattr(a.plan, f), getattr(b.plan, f)
        if va != vb:
            out.append(f"{f} {va}/{vb}")
    if a.num_microbatches != b.num_microbatches:
        out.append(f"m {a.num_microbatches}/{b.num_microbatches}")
    for f, name in (("num_layers", "layers"), ("hidden_size", "h"),
                    ("num_attention_heads", "heads")):
        va, vb = getattr(a.model, f), getattr(b.model, f)
        if va != vb:
            out.append(f"{name} {va}/{vb}")
    if a.cluster.num_gpus != b.cluster.num_gpus:
        out.append(f"GPUs {a.cluster.num_gpus}/{b.cluster.num_gpus}")
    if a.framework.name != b.framework.name:
        out.append(f"stack {a.framework.name}/{b.framework.name}")
    if a.framework.bf16_optimizer != b.framework.bf16_optimizer:
        out.append(f"BF16 optimizer {a.framework.bf16_optimizer}/{b.framework.bf16_optimizer}")
    if a.dtype != b.dtype:
        out.append(f"dtype {a.dtype}/{b.dtype}")
    return ", ".join(out) or "none"


def source_text(c: Case) -> str:
    s = c.raw.get("source") or {}
    return f"{s.get('table', '')}".replace("|", "/")


def rows_table(cs: dict[str, Case]) -> None:
    print("## 1. The rows, their sources and their tier-1 twins\n")
    print("| row | tier | stack | plan | source | measured s | estimated s | error | twin "
          "(tier 1) | twin's error | what differs (row/twin) |")
    print("|---|---:|---|---|---|---:|---:|---:|---|---:|---|")
    for rid, tid in TWINS:
        c, t = cs[rid], cs[tid]
        e, et = estimate(c.job).step_time_s, estimate(t.job).step_time_s
        print(f"| {rid} | {c.tier} | {c.job.framework.name} | {plan_text(c.job)} | "
              f"{source_text(c)} | {c.measured_step_s:.3f} | {e:.3f} | "
              f"{100 * (e / c.measured_step_s - 1):+.1f} % | {tid} ({t.tier}) | "
              f"{100 * (et / t.measured_step_s - 1):+.1f} % | {differences(c.job, t.job)} |")


def decomposition_table(cs: dict[str, Case]) -> None:
    print("\n## 2. The step decomposed (seconds per step on the bounding rank), row | twin\n")
    ids = []
    for rid, tid in TWINS:
        ids.append(rid)
        if tid not in ids:
            ids.append(tid)
    head = " | ".join(STEP_TERMS) + " | " + " | ".join(f"{n} (layers)" for n in PART_NAMES) \
        + " | other"
    print(f"| row | {head} | slots | per slot est. ms | per slot meas. ms | meas./est. |")
    print("|---|" + "---:|" * (len(STEP_TERMS) + len(PART_NAMES) + 5))
    for rid in ids:
        c = cs[rid]
        e = estimate(c.job)
        sp = step_parts(c.job)
        n = slots(c.job)
        cells = [f"{e.breakdown_s[k]:.3f}" for k in STEP_TERMS]
        cells += [f"{sp[k]:.3f}" for k in PART_NAMES] + [f"{sp['other']:.3f}"]
        pe, pm = 1e3 * e.step_time_s / n, 1e3 * c.measured_step_s / n
        print(f"| {rid} | " + " | ".join(cells) + f" | {n} | {pe:.1f} | {pm:.1f} | "
              f"{pm / pe:.3f} |")


def zero3_left(c: Case) -> float:
    """Seconds a ZeRO-3 row's measured step leaves beside the model's compute and
    recomputation: what its measurement asks of ZeRO-3's communication and the rest."""
    b = estimate(c.job).breakdown_s
    return c.measured_step_s - b["compute"] - b["recompute"]


def zero3_model(c: Case) -> float:
    """The model's seconds for the same: the step less its compute and recomputation."""
    e = estimate(c.job)
    return e.step_time_s - e.breakdown_s["compute"] - e.breakdown_s["recompute"]


def zero3_calls_bytes(job: Job) -> tuple[float, float]:
    """(calls per step, bytes each GPU puts on the wire per step) of ``job``'s per-tensor
    ZeRO-3 (one micro-batch per GPU on every Table 2 row), as the model counts them
    (``param_counts.zero3_tensor_gathers``: the forward's, the recomputation's and the
    backward's gathers and every gradient's reduce-scatter, 16-bit): a ring moves
    ``(n − 1)/n`` of each tensor through every rank."""
    m, n = job.model, job.plan.dp
    z = param_counts.zero3_tensor_gathers(m, 1, 1, 1, job.plan.recompute == "full",
                                          job.framework.zero3_reuse_params)
    calls = float(z["fwd_n"] + z["bwd_n"] + z["rs_n"])
    wire = (n - 1) / n * 2.0 * float(z["fwd_params"] + z["bwd_params"] + z["rs_params"])
    return calls * job.num_microbatches, wire * job.num_microbatches


def zero3_pairs_table(cs: dict[str, Case]) -> None:
    print("\n## 3. ZeRO-3 at twice the GPUs, the same global batch (Table 2 / Figure 10)\n")
    print("| from → to | ring doublings | measured step s | model compute s | left s (measured) "
          "| model's comm s | growth of left s | growth of model's s | measured growth "
          "per doubling, ps per wire byte | model's growth per doubling, ps per wire byte | "
          "model's growth per call and rank added, µs |")
    print("|---|---:|---|---|---|---|---:|---:|---:|---:|---:|")
    for a_id, b_id in ZERO3_PAIRS:
        a, b = cs[a_id], cs[b_id]
        na, nb = a.job.cluster.num_gpus, b.job.cluster.num_gpus
        dbl = math.log2(nb / na)
        ca = estimate(a.job).breakdown_s
        cb = estimate(b.job).breakdown_s
        la, lb = zero3_left(a), zero3_left(b)
        ma, mb = zero3_model(a), zero3_model(b)
        calls, wire = zero3_calls_bytes(b.job)
        print(f"| {na} → {nb} | {dbl:.2f} | "
              f"{a.measured_step_s:.2f} → {b.measured_step_s:.2f} | "
              f"{ca['compute'] + ca['recompute']:.2f} → {cb['compute'] + cb['recompute']:.2f} | "
              f"{la:.2f} → {lb:.2f} | {ma:.2f} → {mb:.2f} | {lb - la:+.2f} | {mb - ma:+.2f} | "
              f"{1e12 * (lb - la) / wire / dbl:.2f} | {1e12 * (mb - ma) / wire / dbl:.2f} | "
              f"{1e6 * (mb - ma) / calls / (nb - na):.2f} |")


#: the chronicle's figures for the 02-21 prototype (NHIDDEN=14336, NLAYERS=72, 64 heads):
#: (label, s/it, TFLOP/s); the "Trying with ZeRO_STAGE=0/1" table's two rows as printed
CHRONICLE_0221 = (
    ("dp4 pp12 mbs1", 143.31, 112.49), ("dp4 pp12 mbs2", 134.02, 120.29),
    ("dp4 pp12 mbs4", 123.69, 130.34), ("dp4 pp12 mbs8", 129.26, 124.72),
    ("dp8 pp6 mbs1", 139.82, 115.31), ("dp8 pp6 mbs2", 131.02, 123.05),
    ("dp8 pp6 mbs4", 121.48, 132.71),
    ("ZS=1 dp4 pp12 mbs2 (as printed)", 120.29, 134.02),
    ("ZS=0 dp4 pp12 mbs2", 137.34, 113.02),
)
#: the same layout (dp 4, pp 12, tp 8, 64 heads, h 14336) re-measured: (date, layers, mbs,
#: s/it, note); 02-28 runs the BF16 optimizer and 70 layers with the embeddings in the
#: partition (``Rebalancing layers``)
SAME_LAYOUT = (
    ("02-21", 72, 2, 134.02, "48 node contenders"),
    ("02-25", 72, 2, 128.82, "GBS Variations, after the PCIe/NUMA fix"),
    ("02-28", 70, 2, 121.63, "Rebalancing layers: BF16 optimizer, type:transformer|embedding"),
)


def provenance_table() -> None:
    print("\n## 4. The prototype's figures against each other (chronicles-prequel.md)\n")
    ref = CHRONICLE_0221[0][1] * CHRONICLE_0221[0][2]
    print("| row | s/it | TFLOP/s | s/it × TFLOP/s | against dp4 pp12 mbs1 |")
    print("|---|---:|---:|---:|---:|")
    for label, s, tf in CHRONICLE_0221:
        print(f"| {label} | {s:.2f} | {tf:.2f} | {s * tf:.0f} | "
              f"{100 * (s * tf / ref - 1):+.2f} % |")
    print("\n| date | layers | mbs | s/it | per layer, against 02-21 | note |")
    print("|---|---:|---:|---:|---:|---|")
    base = SAME_LAYOUT[0][3] / SAME_LAYOUT[0][1]
    for date, layers, mbs, s, note in SAME_LAYOUT:
        print(f"| {date} | {layers} | {mbs} | {s:.2f} | {100 * (s / layers / base - 1):+.1f} % "
              f"| {note} |")


def as_megatron_lm_2021(job: Job) -> Job:
    """``job`` under Megatron-LM 2021's profile with DeepSpeed's per-tensor ZeRO-3 in it: the
    paper's own reading of its ZeRO-3 rows ("We integrated ZeRO into our codebase using the
    DeepSpeed Python library", Sec. 5.2), against the reader's ``megatron-deepspeed``."""
    from dataclasses import replace
    from strategies.framework import get_profile
    lm = get_profile("megatron-lm-2021")
    fw = replace(lm, zero_stages=tuple(sorted(set(lm.zero_stages) | {3})),
                 zero3_gather=job.framework.zero3_gather)
    return replace(job, framework=fw)


def stack_table(cs: dict[str, Case]) -> None:
    print("\n## 5. The ZeRO-3 rows under either 2021 stack's profile\n")
    print("| row | megatron-deepspeed s | megatron-lm-2021 + per-tensor ZeRO-3 s | difference |")
    print("|---|---:|---:|---:|")
    for rid, c in cs.items():
        if not rid.startswith("narayanan2021_t2_zero3"):
            continue
        a = estimate(c.job).step_time_s
        b = estimate(as_megatron_lm_2021(c.job)).step_time_s
        print(f"| {rid} | {a:.3f} | {b:.3f} | {100 * (b / a - 1):+.3f} % |")


def main() -> int:
    cs = cases()
    rows_table(cs)
    decomposition_table(cs)
    zero3_pairs_table(cs)
    provenance_table()
    stack_table(cs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
