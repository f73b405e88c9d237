#!/usr/bin/env python
"""Grouped (expert) GEMMs: public kernel measurements against the cost model, shape by shape,
and what the MoE reference rows would need from their expert GEMMs.

Run (a few seconds, analytic only):

    python experiments/grouped_gemm_check.py          # Markdown tables on stdout

Table 1: DeepGEMM's published rates on H800 SXM5 (FP8 with 1x128 / 128x128 scaling, NVCC
12.8; README "Performance" at commit 327ec92, 2025-04-09: its normal GEMMs and its M-grouped
GEMMs for MoE, contiguous and masked layouts, at DeepSeek-V3's shapes) beside the rate the
cost model gives the same GEMMs: ``groups`` GEMMs of ``(M, N, K)`` priced by
``gemm_time.gemms_time_fwd``, the very function that prices a layer's routed experts (``E/ep``
GEMMs of ``token_counts.expert_tokens`` rows each), in ``fp8-blockwise`` on ``H800-SXM5-80GB``.

Table 2: for every MoE row of ``megatron_bridge_2604.json`` and ``published_2026.json``, the routed experts' GEMMs as the
model runs them (per-group ``M``, the forward shapes), the model's time for them per MoE layer
and micro-batch (forward, data and weight gradients; ``gemm_time.gemms_time_fwd`` /
``gemms_time_bwd_split`` at the plan's ``tp``, ``etp``, TP overlap and routing load, without the
overlap clock factor), its rate, the time the estimate misses per MoE layer and micro-batch
(``moe_residuals.residual_rows``), and the rate the routed GEMMs would have to run at for
*all* of that miss to be theirs (FLOPs over model time + miss), as a share of the dtype's dense
peak ("-" where the estimate is too slow, a negative miss). The last column is the idle share of the last 128-row tile of each group (per-group tile
quantisation, ``ceil(M/128)·128/M - 1``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_residuals import BRIDGE_2604, FILES, residual_rows  # noqa: E402
from strategies.cost import gemm_kernel, gemm_shapes, gemm_time, token_counts  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

#: DeepGEMM README (deepseek-ai/DeepGEMM, commit 327ec92, 2025-04-09, "Performance"), H800
#: SXM5, FP8: (kind, groups, M per group, N, K, measured TFLOP/s)
DEEPGEMM_H800 = (
    ("dense", 1, 64, 2112, 7168, 206), ("dense", 1, 64, 24576, 1536, 289),
    ("dense", 1, 64, 32768, 512, 219), ("dense", 1, 64, 7168, 16384, 336),
    ("dense", 1, 64, 4096, 7168, 287), ("dense", 1, 64, 7168, 2048, 295),
    ("dense", 1, 128, 2112, 7168, 352), ("dense", 1, 128, 24576, 1536, 535),
    ("dense", 1, 128, 32768, 512, 358), ("dense", 1, 128, 7168, 16384, 645),
    ("dense", 1, 128, 4096, 7168, 533), ("dense", 1, 128, 7168, 2048, 510),
    ("dense", 1, 4096, 2112, 7168, 1127), ("dense", 1, 4096, 24576, 1536, 1212),
    ("dense", 1, 4096, 32768, 512, 775), ("dense", 1, 4096, 7168, 16384, 1520),
    ("dense", 1, 4096, 4096, 7168, 1410), ("dense", 1, 4096, 7168, 2048, 1168),
    ("contiguous", 4, 8192, 4096, 7168, 1346), ("contiguous", 4, 8192, 7168, 2048, 1214),
    ("contiguous", 8, 4096, 4096, 7168, 1346), ("contiguous", 8, 4096, 7168, 2048, 1214),
    ("masked", 1, 1024, 4096, 7168, 1233), ("masked", 1, 1024, 7168, 2048, 925),
    ("masked", 2, 512, 4096, 7168, 1040), ("masked", 2, 512, 7168, 2048, 916),
    ("masked", 4, 256, 4096, 7168, 932), ("masked", 4, 256, 7168, 2048, 815),
)
DEEPGEMM_GPU, DEEPGEMM_DTYPE = "H800-SXM5-80GB", "fp8-blockwise"
TILE_M = 128   # the M tile of the grouped kernels (DeepGEMM's contiguous-layout alignment)


def model_tflops(gpu_name: str, dtype: str, groups: int, M: float, N: float, K: float) -> float:
    """TFLOP/s the cost model gives ``groups`` GEMMs ``(M x K) @ (K x N)`` in ``dtype`` on
    ``gpu_name`` (``gemm_time.gemms_time_fwd``, as a layer's routed experts are priced), as one
    grouped kernel, as DeepGEMM runs them: one fixed time per kernel
    (``gemm_kernel.gemm_fixed_s``) where the layer pricing, per expert GEMM as Transformer
    Engine's ``GroupedLinear`` launches them (§5.29), counts ``groups``."""
    gpu = get_gpu(gpu_name)
    t = gemm_time.gemms_time_fwd([(groups, M, N, K, False)], 1, gpu, dtype) \
        - (groups - 1) * gemm_kernel.gemm_fixed_s(gpu)
    return 2.0 * groups * M * N * K / t / 1e12


def kernel_rows() -> list[tuple]:
    """``(kind, groups, M, N, K, measured, model, model/measured)`` of ``DEEPGEMM_H800``."""
    out = []
    for kind, g, M, N, K, meas in DEEPGEMM_H800:
        mod = model_tflops(DEEPGEMM_GPU, DEEPGEMM_DTYPE, g, M, N, K)
        out.append((kind, g, M, N, K, meas, mod, mod / meas))
    return out


def tile_waste(M: float, tile: int = TILE_M) -> float:
    """Idle share of a group's rows when its ``M`` rows are cut into ``tile``-row tiles on
    their own: ``ceil(M/tile)·tile/M - 1`` (0 when ``M`` is a multiple of ``tile``)."""
    return -(-M // tile) * tile / M - 1.0


def row_rows(path: str = BRIDGE_2604) -> list[tuple]:
    """Per MoE row of ``path``: ``(id, GPU, dtype, groups, M, shapes, model ms, model TFLOP/s,
    missed ms, needed TFLOP/s, needed share of peak, tile waste)``, times per MoE layer and
    micro-batch (routed GEMMs forward and backward)."""
    missed = {r[0]: r[7] for r in residual_rows(path)}
    out = []
    for entry in load_reference(path):
        case = case_from_entry(entry)
        job = case.job
        if job is None or not job.model.is_moe or entry["id"] not in missed:
            continue
        m, p, gpu = job.model, job.plan, job.cluster.gpu
        load = token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, m, p.mbs, p.tp, p.cp,
                                     p.expert_tp)
        parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, "moe", p.expert_tp, load)
        routed = [g for part, g in parts if part == "routed_mlp" and g[4] is not None]
        tpo = p.tp_comm_overlap
        t = gemm_time.gemms_time_fwd(routed, p.tp, gpu, job.dtype, tpo) \
            + gemm_time.gemms_time_bwd_split(routed, p.tp, gpu, job.dtype, tpo, job.framework)[0]
        flops = 3 * sum(2.0 * c * M * N * K for c, M, N, K, _ in routed)
        miss = missed[entry["id"]] * 1e-3
        need = flops / (t + miss) if miss > 0 else float("nan")   # nan: estimate too slow
        shapes = " ".join(f"({M:.0f},{N:.0f},{K:.0f})" for _, M, N, K, _ in routed)
        Me = routed[0][1]
        out.append((entry["id"], gpu.name, job.dtype, routed[0][0], Me, shapes, 1e3 * t,
                    flops / t / 1e12, 1e3 * miss, need / 1e12, need / gpu.peak(job.dtype),
                    tile_waste(Me)))
    return out


def main() -> None:
    print(f"| kind | groups | M per group | N | K | DeepGEMM H800 TFLOP/s | model TFLOP/s "
          f"({DEEPGEMM_DTYPE}) | model / measured |")
    print("|---|---|---|---|---|---|---|---|")
    for r in kernel_rows():
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]:.0f} | "
              f"{r[7]:.2f} |")
    print()
    print("| run | GPU | dtype | local experts | M per expert | forward shapes (M,N,K) | model "
          "ms | model TFLOP/s | missed ms | TFLOP/s to absorb the miss | share of peak | "
          "per-group tile waste |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in FILES:
        for r in row_rows(path):
            need = "-" if r[9] != r[9] else f"{r[9]:.0f}"
            share = "-" if r[10] != r[10] else f"{100 * r[10]:.0f} %"
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.0f} | {r[4]:.0f} | {r[5]} | "
                  f"{r[6]:.2f} | {r[7]:.0f} | {r[8]:.2f} | {need} | {share} | "
                  f"{100 * r[11]:.1f} % |")


if __name__ == "__main__":
    main()
