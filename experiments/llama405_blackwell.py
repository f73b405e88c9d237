#!/usr/bin/env python
"""Llama 3.1 405B on GB200/GB300 in Megatron-Bridge's tables, decomposed (docs/calibration.md
§5.61): each Llama row's analytic breakdown, one layer and micro-batch by kernel class, and the
split of two same-precision rows' measured layer time into the model's GEMM and non-GEMM parts.

    python experiments/llama405_blackwell.py          # tables 1-3 (a few seconds)
    python experiments/llama405_blackwell.py --sim    # also estimate vs simulator (table 4)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_time, elementwise_bytes, elementwise_time  # noqa: E402
from strategies.cost import flop_counts, gemm_shapes, gemm_time, grad_time, hbm_rate  # noqa: E402
from strategies.cost import layer_time, overlap_clock, qkv_split  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import Case, case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data")
FILES = ("megatron_bridge_2604.json", "heldout_2026b.json", "published_2026.json",
         "dgxc_2505.json")
#: the rows table 2 decomposes: 405B GB200 fp8, its same-container 70B and H100 comparators
LAYER_ROWS = ("mbridge260401_llama31405b_gb200_256_fp8", "mbridge260401_llama370b_gb200_64_mxfp8",
              "mbridge260401_llama370b_gb200_64_fp8", "mbridge260401_llama31405b_h100_1024_fp8")
#: same precision, same container, no CPU offloading: (405B row, 70B row)
PAIRS = (("mbridge260401_llama31405b_gb200_256_mxfp8", "mbridge260401_llama370b_gb200_64_mxfp8"),
         ("mbridge260401_llama31405b_gb300_256_mxfp8", "mbridge260401_llama370b_gb300_64_mxfp8"))


def cases() -> dict[str, Case]:
    """The Llama rows of Megatron-Bridge's tables and DGX Cloud's 405B GB200 rows, by id."""
    out = {}
    for name in FILES:
        rows = load_reference(os.path.join(DATA, name))
        for r in rows:
            rid = r["id"]
            bridge = rid.startswith("mbridge") and "llama" in rid
            if bridge or (rid.startswith("dgxc2505_llama31_405b_gb200")):
                c = case_from_entry(r, rows)
                if c.job is not None:
                    out[rid] = c
    return out


def _slow(job) -> float:
    P = job.plan
    mb = P.gbs / (P.mbs * P.dp)
    whole = overlap_clock.dp_overlaps_whole_step(P.dp * P.cp, mb, P.overlap_grad_reduce)
    return float(overlap_clock.overlap_slowdown(P.tp, P.tp_comm_overlap, P.cp, P.zero, whole,
                                                False))


def layer_parts(job) -> dict[str, float]:
    """Seconds of one dense layer and micro-batch by kernel class, as ``layer_time.layer_time``
    prices them (GEMMs with the overlap clock factor, attention, casts, memory-bound
    elementwise, launch gaps; the weight-gradient accumulation is fused, 0); ``total`` is
    ``layer_time``'s fwd + bwd itself."""
    P, m, gpu, fw, dt = job.plan, job.model, job.cluster.gpu, job.framework, job.dtype
    sy, slow = job.system, _slow(job)
    parts = gemm_shapes.layer_gemm_parts(m, P.mbs, P.tp, P.cp, 1, None, None, 1.0)
    units = gemm_time.gemm_units([g for _, g in parts], P.tp, gpu, dt, P.tp_comm_overlap, fw, sy,
                                 shares=gemm_time.fixed_shares(parts, m, 1, fw))
    n = [g[0] for _, g in parts]
    a_f, a_b = attention_time.attention_time_fwd(m, P.mbs, P.tp, P.cp, P.flash_attn, gpu, slow,
                                                 fw, sy)
    c_f, c_b = elementwise_time.cast_time(m, P.mbs, P.tp, P.cp, P.sp, gpu, dt, sy, fw)
    e = elementwise_bytes.elementwise_bytes_fwd(m, P.mbs, P.tp, P.cp, P.sp,
                                                fw.elementwise_kernels) \
        / hbm_rate.usable_hbm(gpu, sy)
    shard = grad_time.accum_shard(P.dp * P.cp, P.zero)
    lt = layer_time.layer_time(m, b=P.mbs, tp=P.tp, cp=P.cp, ep=1, sp=P.sp, flash=P.flash_attn,
                               recompute=0, gpu=gpu, dtype=dt, tpo=P.tp_comm_overlap, fw=fw,
                               slow=slow, shard=shard, system=sy)
    return {"gemm": slow * (gemm_time.units_time_fwd(n, units)
                            + gemm_time.units_time_bwd(n, units)[0]),
            "attention": a_f + a_b, "casts": c_f + c_b,
            # and the QKV split's copies and backward cat (§5.167)
            "elementwise": 3 * e + sum(qkv_split.qkv_split_time(m, P.mbs, P.tp, P.cp,
                                                                P.flash_attn, gpu, fw, sy)),
            "launch": 3 * elementwise_time.launch_time(fw, gpu=gpu),
            "accumulation": float(lt.wgrad - slow * gemm_time.units_time_bwd(n, units)[1]),
            "total": float(lt.fwd + lt.bwd),
            "gemm_flops": 3 * float(flop_counts.gemm_flops_fwd(m, P.mbs, P.tp, P.cp)), "slow": slow}


def measured_layer(c: Case) -> tuple[float, float, float]:
    """(layers on the busiest stage, micro-batches, measured seconds of one layer and
    micro-batch): the measured step less the model's non-compute terms, over the model's
    compute term's layer-micro-batches."""
    e = estimate(c.job)
    bd = e.breakdown_s
    P = c.job.plan
    mb = P.gbs / (P.mbs * P.dp)
    layer = layer_parts(c.job)["total"]
    layers = bd["compute"] / (mb * layer)
    return layers, mb, (c.measured_step_s - (e.step_time_s - bd["compute"])) / (layers * mb)


def split(a: Case, b: Case) -> tuple[float, float]:
    """(GEMM factor, non-GEMM factor) x, y with ``x·G + y·N`` = each row's measured layer time
    (``measured_layer``), G and N the model's GEMM and other seconds (``layer_parts``)."""
    rows, rhs = [], []
    for c in (a, b):
        p = layer_parts(c.job)
        rows.append([p["gemm"], p["total"] - p["gemm"]])
        rhs.append(measured_layer(c)[2])
    x = np.linalg.solve(np.array(rows), np.array(rhs))
    return float(x[0]), float(x[1])


def _plan(job) -> str:
    P = job.plan
    return (f"tp{P.tp} pp{P.pp} cp{P.cp} dp{P.dp} v{P.vpp} mb{P.gbs // (P.mbs * P.dp)}"
            f"{' tpo' if P.tp_comm_overlap else ''}")


def main(argv: list[str]) -> None:
    cs = cases()
    print("Table 1: each row's analytic estimate (share of the step, %)\n")
    print("| row | dtype | plan | measured s | est s | error | compute | tp | pp | bubble |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for rid, c in cs.items():
        e = estimate(c.job)
        b, t = e.breakdown_s, e.step_time_s
        print(f"| {rid} | {c.job.dtype} | {_plan(c.job)} | {c.measured_step_s:.2f} | {t:.2f} "
              f"| {100 * (t / c.measured_step_s - 1):+.1f} % | {100 * b['compute'] / t:.1f} "
              f"| {100 * b['tp_comm'] / t:.1f} | {100 * b['pp_comm'] / t:.1f} "
              f"| {100 * b['bubble'] / t:.1f} |")
    print("\nTable 2: one layer and micro-batch (ms); GEMM rate = GEMM FLOPs / GEMM time\n")
    print("| row | gemm | attention | casts | elementwise | launch | total | GEMM TFLOP/s "
          "| overlap clock | measured |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rid in LAYER_ROWS:
        p = layer_parts(cs[rid].job)
        meas = measured_layer(cs[rid])[2]
        print(f"| {rid} | {1e3 * p['gemm']:.2f} | {1e3 * p['attention']:.2f} "
              f"| {1e3 * p['casts']:.3f} | {1e3 * p['elementwise']:.2f} "
              f"| {1e3 * p['launch']:.3f} | {1e3 * p['total']:.2f} "
              f"| {p['gemm_flops'] / p['gemm'] / 1e12:.0f} | {1 / p['slow']:.2f} "
              f"| {1e3 * meas:.2f} |")
    print("\nTable 3: measured layer time split into the model's GEMM (x) and other (y) parts")
    print("(two rows, two unknowns; a lead, not a calibration)\n")
    print("| 405B row | 70B row | x (GEMM) | y (other) |")
    print("|---|---|---:|---:|")
    for a, b in PAIRS:
        x, y = split(cs[a], cs[b])
        print(f"| {a} | {b} | {x:.3f} | {y:.3f} |")
    if "--sim" in argv:
        from simulator.extend import extended_step_time
        print("\nTable 4: estimate against the simulator\n")
        print("| row | measured s | est s | sim s | est/sim - 1 | how |")
        print("|---|---:|---:|---:|---:|---|")
        for rid in LAYER_ROWS:
            c = cs[rid]
            s, how = extended_step_time(c.job)
            t = estimate(c.job).step_time_s
            print(f"| {rid} | {c.measured_step_s:.2f} | {t:.2f} | {s:.2f} "
                  f"| {100 * (t / s - 1):+.2f} % | {how} |")


if __name__ == "__main__":
    main(sys.argv[1:])
