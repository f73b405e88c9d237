#!/usr/bin/env python
"""Llama 3.1 405B fp8 on GB300 (Megatron-Bridge 26.04/26.06) term by term against the GB200
fp8 rows the model fits (DGX Cloud 25.05) and the same stack's GB200 and H100 rows
(docs/calibration.md §5.173): each row's step by term, one layer and micro-batch per 1,000
tokens a rank holds, and the GEMM rate the measured layer asks for against the public
sustained fp8 GEMM harness (``AZURE_FP8_SUSTAINED``).

    python experiments/gb300_fp8_terms.py             # tables 1-2 (a few seconds)
    python experiments/gb300_fp8_terms.py --what-if   # also table 3: the overlap clock at 1
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.llama405_blackwell import cases, layer_parts, measured_layer  # noqa: E402
from strategies.cost import overlap_clock  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import Case  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402
from topologies.gpus.sustained import AZURE_FP8_SUSTAINED  # noqa: E402

#: the rows compared: GB300 fp8/mxfp8 (Bridge), GB200 fp8 (Bridge, and DGX Cloud's that fits),
#: H100 fp8 (Bridge)
ROWS = ("mbridge260401_llama31405b_gb300_256_fp8", "mbridge2606_llama31405b_gb300_256_fp8",
        "mbridge2511_llama405b_gb300_256_fp8cs", "mbridge260401_llama31405b_gb300_256_mxfp8",
        "mbridge260401_llama31405b_gb200_256_fp8", "mbridge2606_llama31405b_gb200_256_fp8",
        "dgxc2505_llama31_405b_gb200_256_fp8", "mbridge260401_llama31405b_h100_1024_fp8")
#: the step's terms as ``estimate`` names them, compute apart
STEP_TERMS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "recompute")
#: one layer's kernel classes as ``layer_parts`` names them
LAYER_TERMS = ("gemm", "attention", "casts", "elementwise", "launch")


def rank_tokens(job) -> float:
    """Tokens one rank's layer holds per micro-batch: ``mbs · seq / cp``."""
    P = job.plan
    return float(P.mbs * job.model.seq_length / P.cp)


def needed_gemm_rate(job, measured_s: float) -> float:
    """GEMM FLOP/s that closes one layer and micro-batch whose measured time is
    ``measured_s`` (seconds) with every non-GEMM kernel class as the model prices it:
    GEMM FLOPs / (measured − (layer total − GEMM time))."""
    p = layer_parts(job)
    return p["gemm_flops"] / (measured_s - (p["total"] - p["gemm"]))


def row_terms(case: Case) -> dict[str, float]:
    """One row: error (estimate/measured − 1), each step term's share of the estimate, the
    layer's classes and its measured time in µs per token a rank holds, the model's GEMM rate
    (FLOP/s, with the overlap clock), the rate the measured layer needs
    (``needed_gemm_rate``) and that over the harness's sustained 16384³ rate (None where
    the part has no harness figure)."""
    job, measured_step_s = case.job, case.measured_step_s
    e = estimate(job)
    t, bd = e.step_time_s, e.breakdown_s
    p = layer_parts(job)
    meas = measured_layer(case)[2]
    tok = rank_tokens(job)
    need = needed_gemm_rate(job, meas)
    harness = AZURE_FP8_SUSTAINED.get(job.cluster.gpu.name)
    out = {"error": t / measured_step_s - 1.0, "compute": bd["compute"] / t}
    out.update({k: bd[k] / t for k in STEP_TERMS})
    out.update({f"us_{k}": 1e6 * p[k] / tok for k in LAYER_TERMS})
    out.update({"us_model": 1e6 * p["total"] / tok, "us_measured": 1e6 * meas / tok,
                "gemm_rate": p["gemm_flops"] / p["gemm"], "needed_rate": need,
                "overlap_clock": 1.0 / p["slow"],
                "needed_over_harness": None if harness is None else need / (harness[0] * 1e12)})
    return out


def what_if_no_overlap_clock(case: Case) -> float:
    """Error (estimate/measured − 1) of ``case`` with ``overlap_clock.OVERLAP_CLOCK_RATIO`` at 1
    (no clock cost of communication beside the compute), restored after; a what-if, not a
    model."""
    saved = overlap_clock.OVERLAP_CLOCK_RATIO
    try:
        overlap_clock.OVERLAP_CLOCK_RATIO = 1.0
        return estimate(case.job).step_time_s / case.measured_step_s - 1.0
    finally:
        overlap_clock.OVERLAP_CLOCK_RATIO = saved


def main(argv: list[str]) -> None:
    cs = cases()
    rows = {rid: row_terms(cs[rid]) for rid in ROWS}
    print("Table 1: each row's estimate by term (share of the estimated step, %)\n")
    print("| row | error | compute | " + " | ".join(STEP_TERMS) + " |")
    print("|---|---:|---:|" + "---:|" * len(STEP_TERMS))
    for rid, r in rows.items():
        print(f"| {rid} | {100 * r['error']:+.1f} % | {100 * r['compute']:.1f} | "
              + " | ".join(f"{100 * r[k]:.2f}" for k in STEP_TERMS) + " |")
    print("\nTable 2: one layer and micro-batch, µs per token a rank holds (mbs · seq / cp); "
          "GEMM rates TFLOP/s\n")
    print("| row | " + " | ".join(LAYER_TERMS) + " | model | measured | GEMM rate (model) "
          "| overlap clock | GEMM rate needed | needed / harness |")
    print("|---|" + "---:|" * (len(LAYER_TERMS) + 6))
    for rid, r in rows.items():
        h = r["needed_over_harness"]
        print(f"| {rid} | " + " | ".join(f"{r['us_' + k]:.3f}" for k in LAYER_TERMS)
              + f" | {r['us_model']:.3f} | {r['us_measured']:.3f} | {r['gemm_rate'] / 1e12:.0f} "
              f"| {r['overlap_clock']:.2f} | {r['needed_rate'] / 1e12:.0f} "
              f"| {'-' if h is None else f'{h:.3f}'} |")


    g3, g2 = get_gpu("GB300"), get_gpu("GB200")
    model = (g3.peak("fp8") * g3.gemm_efficiency("fp8")
             / (g2.peak("fp8") * g2.gemm_efficiency("fp8")))
    h = [a / b for a, b in zip(AZURE_FP8_SUSTAINED["GB300"], AZURE_FP8_SUSTAINED["GB200"])]
    print(f"\nGB300/GB200 fp8 GEMM rate: catalog {model:.3f}; harness {h[0]:.3f} (16384^3), "
          f"{h[1]:.3f} (32768^3)")
    if "--what-if" in argv:
        print("\nTable 3: what-if, the overlap clock at 1 (error, %)\n")
        print("| row | error | overlap clock at 1 |")
        print("|---|---:|---:|")
        for rid, r in rows.items():
            print(f"| {rid} | {100 * r['error']:+.1f} % "
                  f"| {100 * what_if_no_overlap_clock(cs[rid]):+.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1:])
