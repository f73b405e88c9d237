"""torchao's published rowwise speedup table beside the cost model's rowwise linear
(docs/calibration.md §5.168; a finding, no cost-model change).

The table: pytorch/ao fdddb2cfa (#2312, 2025-06-06) ``docs/static/fp8-rowwise-perf.png``,
"Speedup observed vs bfloat16 for LayerNorm -> Linear -> Sigmoid fwd + bwd by forward M, K,
N, dynamic row-wise scaling, PyTorch version 2.8.0a0+git48807d5" (NVIDIA H100, the README
says; the variant is not named): ``benchmarks/float8/float8_roofline.py`` at that commit,
the sum of the GPU kernels' times of a compiled ``LNLinearSigmoid`` fwd + bwd (profiler),
bf16 over ``Float8LinearConfig.from_recipe_name("rowwise")``. Its cells at the two largest
M, transcribed below (``TABLE``), are the public per-shape figures nearest the rows' GEMMs
(M = 98,304 and 131,072 tokens; ``python experiments/rowwise_implied_rate.py``).

The model's side, per cell: the three GEMMs at the per-tensor rates (``gemm_time.units_in``,
bf16 and ``fp8-rowwise``; the weight gradient written once in 16 bits, the stack's
``grad_accum_fusion`` off as torchtitan's), the rowwise casts of one linear
(``rowwise_casts.linear_cast_bytes``: the input's cast written by the norm, the output
gradient's by the sigmoid's backward, the data gradient's rescale absorbed by the norm's
backward, as Inductor fuses them) at the usable HBM rate, and the norm and the sigmoid,
forward and backward, as HBM passes of both jobs alike: 2 + 2 B per element forward, 2 + 2
+ 2 B backward, over ``M x K`` and ``M x N``. Model speedup ``(E + G16) / (E + G8 + C)``;
the rowwise GEMM seconds the measured speedup leaves once the model's other terms are
taken, ``(E + G16) / measured - E - C``, over the model's: the fraction of the per-tensor
fp8 rate the table implies for the three GEMMs, and, the two backward GEMMs held at the
per-tensor rate (they are cuBLAS's per-tensor kernel), for the forward alone; and the most
of the measured excess (``(E + G16) / measured - (E + G8 + C)``) the forward GEMM could
explain at the floor of pytorch/pytorch#147971's tail (half the per-tensor rate: one more
forward GEMM time).

    python experiments/rowwise_linear_bench.py
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strategies.cost import gemm_time, rowwise_casts  # noqa: E402
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from topologies.gpus import GPUS  # noqa: E402

NS = (1024, 2048, 4096, 8192, 16384, 32768)
#: (M, K) -> measured speedup vs bf16 at each N of ``NS`` (the table's cells, as printed)
TABLE: dict[tuple[int, int], tuple[float, ...]] = {
    (16384, 1024): (0.48, 0.58, 0.73, 0.86, 0.85, 0.89),
    (16384, 2048): (0.51, 0.70, 0.90, 1.05, 1.07, 1.15),
    (16384, 4096): (0.57, 0.79, 1.02, 1.20, 1.26, 1.40),
    (16384, 8192): (0.61, 0.87, 1.08, 1.33, 1.39, 1.49),
    (32768, 1024): (0.51, 0.62, 0.77, 0.87, 0.88, 0.94),
    (32768, 2048): (0.54, 0.73, 0.91, 1.08, 1.14, 1.27),
    (32768, 4096): (0.59, 0.81, 1.04, 1.28, 1.35, 1.49),
    (32768, 8192): (0.63, 0.87, 1.11, 1.41, 1.50, 1.62),
}
ELEMENTWISE_BYTES = 4.0 + 6.0     # norm or sigmoid: forward read + write, backward 2 reads + write
FW = dataclasses.replace(get_profile("torchtitan"), grad_accum_fusion=False)


def cell(gpu_name: str, M: int, K: int, N: int, measured: float) -> tuple[float, ...]:
    """(model speedup, implied all-GEMM rate fraction, implied forward rate fraction, excess
    microseconds, share of the excess a forward GEMM at half rate explains) of one cell on
    ``gpu_name``."""
    gpu = GPUS[gpu_name]
    hbm = usable_hbm(gpu)
    gemm = [(1, float(M), float(N), float(K), False)]
    (_, f16, _, d16, w16), = gemm_time.units_in(gemm, 1, gpu, "bf16", fw=FW)
    (_, f8, _, d8, w8), = gemm_time.units_in(gemm, 1, gpu, rowwise_casts.ROWWISE, fw=FW)
    g16, g8 = f16 + d16 + w16, f8 + d8 + w8
    c = sum(rowwise_casts.linear_cast_bytes(M, K, N, x_fused=True, dy_fused=True,
                                            dgrad_rescaled=False)) / hbm
    e = ELEMENTWISE_BYTES * M * (K + N) / hbm
    left = (e + g16) / measured - e - c          # rowwise GEMM seconds the measurement leaves
    excess = left - g8
    return ((e + g16) / (e + g8 + c), g8 / left, f8 / (left - d8 - w8), 1e6 * excess,
            f8 / excess)


def main() -> None:
    for gpu_name in ("H100-SXM5-80GB", "H100-96GB-500W"):
        print(f"## {gpu_name}")
        print("| M | K | N | measured | model | implied rate, 3 GEMMs | implied rate, forward "
              "| excess us | share a half-rate forward explains |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for (M, K), row in TABLE.items():
            for N, meas in zip(NS, row):
                if N > 8192:
                    continue
                s, a, f, ex, sh = cell(gpu_name, M, K, N, meas)
                fwd = f"{f:.2f}" if f > 0 else "none left"
                print(f"| {M} | {K} | {N} | {meas:.2f} | {float(s):.2f} | {float(a):.2f} | {fwd} "
                      f"| {float(ex):.0f} | {float(sh):.2f} |")
        print()


if __name__ == "__main__":
    main()
