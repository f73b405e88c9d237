#!/usr/bin/env python
"""The fixed times of a grouped expert GEMM against public H100 measurements of Transformer
Engine's multi-stream grouped GEMM and a one-launch CUTLASS grouped kernel
(docs/calibration.md §5.42).

Run (about a second, analytic only):

    python experiments/expert_gemm_launch_check.py

The measurements: NVIDIA/TransformerEngine PR #2045 ("Add Cutlass GroupGEMM Support for
fine-grained MoE Model", merged 2025-09-18 as 8aee1bb77), the table its reviewer posted
(yaox12): ``general_grouped_gemm`` with TE 2.7 and CUDA 12.9 on H100, bf16, shapes
``(g, m, n, k)`` = ``g`` groups of ``m`` rows each (uniform splits), ``n`` out, ``k`` in,
throughput in TFLOP/s ``2·g·m·n·k / t``: TE's default path (``multi_stream_cublas_gemm``, one
cuBLASLt GEMM per group round-robin on 4 streams) and the CUTLASS grouped kernel
(``NVTE_USE_CUTLASS_GROUPED_GEMM=1``: one launch for all groups). ``m`` read as rows per group:
read as the total, every measured time (11.6-20.5 us) falls below even the one-launch model's
(18.9-26.0 us), which no kernel does.

Each row is priced as §5.37 fits XLA's tables (``gemm_fixed_time``): ``a·g·U + n·t0``, ``U``
the model's compute time of one group's GEMM without the fixed term (``gemm_kernel.gemm_compute``
at the catalog rate; the GEMMs are compute-bound: their HBM time is under half of ``U``),
``a`` the catalog's sustained/burst ratio (a short benchmark runs at the burst clock),
``t0 = gemm_kernel.gemm_fixed_s`` and ``n`` the fixed times one grouped GEMM pays
(``expert_gemm.ExpertGemmLaunch.fixed_times``): ``g`` per expert on one stream, ``ceil(g/4)``
on TE's 4 streams, 1 fused.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.gemm_fixed_time import sustained_over_burst  # noqa: E402
from strategies.cost import gemm_kernel, gemm_time  # noqa: E402
from strategies.stacks.expert_gemm import ExpertGemmLaunch  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

GPU = "H100-SXM5-80GB"
#: TE PR #2045, reviewer's table (TE 2.7, CUDA 12.9, H100, bf16): (g, m, n, k, multi-stream
#: TFLOP/s, CUTLASS grouped TFLOP/s)
TE_2045_H100_BF16 = ((8, 4096, 768, 2048, 627.903, 650.574),
                     (16, 2048, 768, 2048, 553.945, 636.927))
#: the launch rules priced against the measurements
RULES = (("per expert, 1 stream", ExpertGemmLaunch("per_expert", 1)),
         ("4 streams (TE)", ExpertGemmLaunch("multi_stream", 4)),
         ("fused (one launch)", ExpertGemmLaunch("fused", 1)))


def modelled_s(g: int, m: int, n: int, k: int, launch: ExpertGemmLaunch,
               gpu_name: str = GPU) -> float:
    """Seconds of one grouped GEMM of ``g`` groups ``(m x k) @ (k x n)`` in bf16 on
    ``gpu_name`` under ``launch``: ``a·g·U + fixed_times(g)·t0`` (module docstring)."""
    gpu = get_gpu(gpu_name)
    rate, kn = gemm_time._rates(gpu, "bf16")[0], gemm_kernel.k_knee(gpu, "bf16")
    U = float(gemm_kernel.gemm_compute(m, n, k, rate, kn, gemm_kernel.gemm_waves(gpu)))
    a = sustained_over_burst(gpu_name, "bf16")
    return a * g * U + float(launch.fixed_times(g)) * gemm_kernel.gemm_fixed_s(gpu)


def measured_s(g: int, m: int, n: int, k: int, tflops: float) -> float:
    """Seconds of the measured grouped GEMM at ``tflops`` TFLOP/s."""
    return 2.0 * g * m * n * k / (tflops * 1e12)


def rows() -> list[tuple]:
    """``(g, m, n, k, measured multi-stream s, measured CUTLASS s, {rule: model s})``."""
    return [(g, m, n, k, measured_s(g, m, n, k, ms), measured_s(g, m, n, k, cut),
             {name: modelled_s(g, m, n, k, launch) for name, launch in RULES})
            for g, m, n, k, ms, cut in TE_2045_H100_BF16]


def main() -> int:
    print("TE PR #2045 (H100, bf16, TE 2.7): measured against the model under each launch rule\n")
    print("| g, m, n, k | measured 4-stream us | measured CUTLASS us | "
          + " | ".join(f"{name} us (vs 4-stream, vs CUTLASS)" for name, _ in RULES) + " |")
    print("|---|---:|---:|" + "---:|" * len(RULES))
    for g, m, n, k, t_ms, t_cut, model in rows():
        cells = " | ".join(f"{model[name] * 1e6:.1f} ({model[name] / t_ms - 1:+.1%}, "
                           f"{model[name] / t_cut - 1:+.1%})" for name, _ in RULES)
        print(f"| {g}, {m}, {n}, {k} | {t_ms * 1e6:.1f} | {t_cut * 1e6:.1f} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
