#!/usr/bin/env python
"""What the model credits FP8 with on the MoE rows: every quantised MoE reference row against
its bf16 twin (the same plan, bf16), and NVIDIA's eager bf16 A/B of the Qwen3-30B-A3B H100
layout split into its precision and dispatcher parts (docs/calibration.md §5.137).

Run (about a minute, analytic only):

    python experiments/moe_fp8_twin.py      # Markdown tables on stdout

Table 1: the Qwen3-30B-A3B 16-H100 A/B as a 2 x 2 of estimates (precision fp8-current / bf16 x
dispatcher HybridEP / alltoall, the row's plan otherwise), with NVIDIA's two measurements on
their diagonal (``experiments/qwen3_h100_residual.py``: 29.26 s FP8 HybridEP, 41.36 s bf16
alltoall eager). The measured change is one number; the estimate's change splits exactly into
a precision part, a dispatcher part and their interaction (``ab_split``).

Table 2: the parts of one MoE layer and micro-batch (ms, forward + backward) that the
precision moves on that row: the GEMMs, the casts' bytes, the per-expert quantise launches
(``qwen3_h100_residual.recording``'s terms).

Table 3: the A/B's measured change against the estimate's dispatcher part at HybridEP's own
published H100 EP16 pace (``qwen3_h100_residual.hybrid_h100_ratios``: the BF16 dispatch's and
the combine's model/published ratios, kernel only and through the Torch API): what the
measurement leaves for the precision (``precision_room``).

Table 4: the one measured Hopper fp8 GEMM rate at the expert GEMMs' sizes: the H200 profile
(``docs/measurements/h200_2026-11-29/run2/default.yaml``, ``torch._scaled_mm`` with per-tensor
scales and PyTorch's default ``use_fast_accum=False``, i.e. Transformer Engine's split
accumulator of the backward GEMMs; ``torch.matmul`` in bf16), every shape measured in both
precisions up to ``SMALL_FLOPS`` with a side of at most 2048: the measured fp8/bf16 time against
the model's (``gemm_pairs``).

Table 5: every reference row of a MoE model in a quantised precision (``QUANTISED``): measured,
estimated, and the estimate of its bf16 twin (``dtype="bf16"``, FP8 attention off, everything
else the row's); ``fp8/bf16`` is the model's step ratio, the saving FP8 is credited with.
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from experiments import qwen3_h100_residual as q  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference, run_file_names  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")
#: the precisions whose MoE rows are compared with a bf16 twin
#: the data files that are not lists of reference rows
#: the H200 profile whose fp8 and bf16 GEMM points ``gemm_pairs`` reads
H200_PROFILE = os.path.join(os.path.dirname(__file__), "..", "docs", "measurements",
                            "h200_2026-11-29", "run2", "default.yaml")
#: the largest GEMM (FLOPs) ``gemm_pairs`` lists by default: the expert GEMMs of the
#: Qwen3-30B-A3B H100 row are 1.3e10-2.6e10 FLOPs, the profile's smallest paired ones 3.4e10
SMALL_FLOPS = 1.1e11
QUANTISED = ("fp8", "fp8-delayed", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4")


def bf16_twin(job):
    """``job`` in bf16: the same plan, FP8 attention off (it needs a quantised precision), the
    weights gathered in 16 bits (``SystemConfig.param_gather_bytes`` back to its default: a
    bf16 run has no FP8 weights to gather)."""
    return dataclasses.replace(job, dtype="bf16",
                               system=dataclasses.replace(job.system, param_gather_bytes=0.0),
                               plan=dataclasses.replace(job.plan, fp8_attention=False))


def with_dispatcher(job, dispatcher: str):
    """``job`` with ``dispatcher`` and no EP overlap or CUDA graph (the eager A/B's plan)."""
    return dataclasses.replace(job, plan=dataclasses.replace(
        job.plan, moe_dispatcher=dispatcher, ep_overlap=False, cuda_graph=False))


def ab_grid() -> dict[tuple[str, str], float]:
    """Estimated step seconds of the Qwen3-30B-A3B H100 row (26.04.01) for each
    ``(precision, dispatcher)`` of ``("fp8-current", "bf16") x ("hybridep", "alltoall")``."""
    job = case_from_entry(q._entry(*q.ROWS[0])).job
    out = {}
    for disp in ("hybridep", "alltoall"):
        j = with_dispatcher(job, disp)
        out[("fp8-current", disp)] = estimate(j).step_time_s
        out[("bf16", disp)] = estimate(bf16_twin(j)).step_time_s
    return out


def ab_split(grid: dict[tuple[str, str], float]) -> tuple[float, float, float]:
    """(precision part, dispatcher part, interaction) of the estimated change bf16 alltoall →
    fp8 HybridEP, seconds: precision at the alltoall dispatcher, dispatcher in bf16, and the
    rest; the three sum to ``grid[fp8, hybridep] − grid[bf16, alltoall]`` exactly."""
    a, b = grid[("bf16", "alltoall")], grid[("fp8-current", "alltoall")]
    c, d = grid[("bf16", "hybridep")], grid[("fp8-current", "hybridep")]
    return b - a, c - a, d - c - b + a


def precision_room(grid: dict[tuple[str, str], float], measured_change_s: float,
                   a2a_ms: float, n_layer_mb: int) -> list[tuple[str, float, float]]:
    """``(pace, dispatcher part s, precision room s)``: the estimate's dispatcher part (bf16,
    ``ab_split``) with the row's HybridEP all-to-all (``a2a_ms`` per MoE layer and
    micro-batch, ``n_layer_mb`` of them) at HybridEP's published H100 EP16 pace (the mean
    published/model factor of the BF16 dispatch and the combine, ``kernel only`` and ``Torch
    API``), and what the measured change then leaves for the precision and the interaction
    together: ``measured − dispatcher``."""
    _, d, _ = ab_split(grid)
    ratios = [r for r in q.hybrid_h100_ratios() if r[0] != "dispatch (FP8)"]
    out = [("model", d, measured_change_s - d)]
    for i, pace in ((1, "kernel only"), (2, "Torch API")):
        k = sum(1 / r[i] for r in ratios) / len(ratios)
        dd = d + (k - 1) * a2a_ms * 1e-3 * n_layer_mb
        out.append((pace, dd, measured_change_s - dd))
    return out


def gemm_pairs(max_flops: float = SMALL_FLOPS, max_side: int = 2048) -> list[tuple]:
    """``(FLOPs, M, N, K, measured fp8/bf16, model fp8/bf16)`` of every GEMM shape the H200
    profile measured in both fp8 and bf16 with at most ``max_flops`` FLOPs and a side of at most
    ``max_side``; the model's time is the catalog's (``gemm_compute`` at the catalog rate, K
    knee and waves, plus ``gemm_fixed_s``), without the profile's own correction."""
    from strategies.cost import gemm_kernel as gk
    from topologies.gpu_profile import load_gpu_profile
    from topologies.gpus import get_gpu
    gpu, prof = get_gpu("H200-SXM-141GB"), load_gpu_profile(H200_PROFILE)

    def model(dt: str, M: int, N: int, K: int) -> float:
        return float(gk.gemm_compute(M, N, K, gpu.peak(dt) * gpu.gemm_efficiency(dt),
                                     gk.k_knee(gpu, dt), gk.gemm_waves(gpu))) + gk.gemm_fixed_s(gpu)
    bf = {(p.m, p.n, p.k): p.seconds for p in prof.gemm_points("bf16")}
    out = []
    for p in prof.gemm_points("fp8"):
        key = (p.m, p.n, p.k)
        f = 2.0 * p.m * p.n * p.k
        if key in bf and f <= max_flops and min(key) <= max_side:
            out.append((f, *key, p.seconds / bf[key], model("fp8", *key) / model("bf16", *key)))
    return sorted(out)


def precision_parts(job) -> dict[str, float]:
    """ms per MoE layer and micro-batch (forward + backward) of the terms the precision moves
    on ``job``: GEMMs (data, weight), the casts' bytes, the per-expert quantise launches."""
    with q.recording() as r:
        stage_costs(job)
    gb = r["units_time_bwd"]
    return {"GEMMs": 1e3 * (q._s(r["units_time_fwd"]) + q._s(gb[0])),
            "casts (bytes)": 1e3 * sum(q._s(x) for x in r["cast_time"]),
            "per-expert quantise launches": 1e3 * sum(q._s(x) for x in
                                                      r["expert_quantise_time"])}


def twin_rows() -> list[tuple]:
    """``(file, id, GPU, dtype, measured s, estimated s, bf16 twin s, error %, fp8/bf16)`` of
    every quantised MoE reference row with a measured step."""
    out = []
    for name in run_file_names(DATA):
        for e in load_reference(os.path.join(DATA, name)):
            case = case_from_entry(e)
            job = case.job
            if (job is None or not job.model.is_moe or job.dtype not in QUANTISED
                    or not case.measured_step_s):
                continue
            est = estimate(job).step_time_s
            twin = estimate(bf16_twin(job)).step_time_s
            out.append((name, e["id"], job.cluster.gpu.name, job.dtype, case.measured_step_s,
                        est, twin, 100 * (est / case.measured_step_s - 1), est / twin))
    return out


def main() -> None:
    g = ab_grid()
    meas = {("fp8-current", "hybridep"): q._entry(*q.ROWS[0])["derived"]["step_time_s"],
            ("bf16", "alltoall"): q.EAGER_BF16_ALLTOALL_S}
    print("| Qwen3-30B-A3B, 16 H100, ep 16, mbs 1 | HybridEP est. s | alltoall est. s | "
          "measured s |\n|---|---|---|---|")
    for dt in ("fp8-current", "bf16"):
        m = meas.get((dt, "hybridep"), meas.get((dt, "alltoall")))
        print(f"| {dt} | {g[(dt, 'hybridep')]:.2f} | {g[(dt, 'alltoall')]:.2f} | {m:.2f} |")
    p, d, x = ab_split(g)
    tot = g[("fp8-current", "hybridep")] - g[("bf16", "alltoall")]
    print(f"\nEstimated change bf16 alltoall → fp8 HybridEP {tot:+.2f} s = precision {p:+.2f} s"
          f" + dispatcher {d:+.2f} s + interaction {x:+.2f} s; measured "
          f"{meas[('fp8-current', 'hybridep')] - q.EAGER_BF16_ALLTOALL_S:+.2f} s.")
    job = case_from_entry(q._entry(*q.ROWS[0])).job
    f8, b16 = precision_parts(job), precision_parts(bf16_twin(job))
    print("\n| part per MoE layer and micro-batch (ms) | fp8-current | bf16 | change |"
          "\n|---|---|---|---|")
    for k in f8:
        print(f"| {k} | {f8[k]:.3f} | {b16[k]:.3f} | {f8[k] - b16[k]:+.3f} |")
    print(f"| sum | {sum(f8.values()):.3f} | {sum(b16.values()):.3f} | "
          f"{sum(f8.values()) - sum(b16.values()):+.3f} |")
    row = q.row_table()[0]
    n = round((row[3]) / (row[6] * 1e-3))
    a2a = q.parts(q._entry(*q.ROWS[0]))[0]
    a2a_ms = dict(a2a)["expert all-to-all (HybridEP: 2 dispatch + 2 combine)"]
    print("\n| HybridEP pace | dispatcher part s | left for the precision s |\n|---|---|---|")
    for pace, dd, room in precision_room(g, meas[("fp8-current", "hybridep")] -
                                         q.EAGER_BF16_ALLTOALL_S, a2a_ms, n):
        print(f"| {pace} | {dd:+.2f} | {room:+.2f} |")
    print(f"\nThe model's precision part and interaction at the two dispatchers: {p + x:+.2f} s.")
    print("\n| FLOPs | M | N | K | measured fp8/bf16 | model fp8/bf16 | measured/model |"
          "\n|---|---|---|---|---|---|---|")
    for f, M, N, K, me, mo in gemm_pairs():
        print(f"| {f:.2e} | {M} | {N} | {K} | {me:.3f} | {mo:.3f} | {me / mo:.3f} |")
    print("\n| file | row | GPU | dtype | measured s | estimated s | bf16 twin s | error | "
          "model fp8/bf16 |\n|---|---|---|---|---|---|---|---|---|")
    for f, rid, gpu, dt, m, e, t, err, r in twin_rows():
        print(f"| {f} | {rid} | {gpu} | {dt} | {m:.2f} | {e:.2f} | {t:.2f} | {err:+.1f} % | "
              f"{r:.3f} |")


if __name__ == "__main__":
    main()
