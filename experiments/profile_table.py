"""A measured GPU profile against the catalog model, in detail (docs/calibration.md §7.5).

``paraplan calibrate`` prints medians; this prints the breakdown behind them for one or more
profile files: per GEMM precision, measured over modelled seconds by decade of FLOPs (the
catalog model of the profile's GPU, the same function ``calibrate``'s summary uses); per
attention kernel, the fraction of the bf16 peak forward and backward at each (sequence,
heads) measured; per memory kernel, bytes/s at each size; the launch gap.

    python experiments/profile_table.py docs/measurements/h200_2026-11-29/run2/default.yaml
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_time, gemm_kernel  # noqa: E402
from strategies.cost.measured import attention_flops_fwd  # noqa: E402
from topologies.gpu_profile import load_gpu_profile  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def gemm_rows(profile, gpu) -> list[str]:
    out = ["| dtype | FLOPs | shapes | measured / model, median | min | max |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for dtype in sorted({p.dtype for p in profile.gemm}):
        rate = gpu.peak(dtype) * gpu.gemm_efficiency(dtype)
        kn, waves = gemm_kernel.k_knee(gpu, dtype), gemm_kernel.gemm_waves(gpu)
        bins: dict[int, list[float]] = {}
        for p in profile.gemm_points(dtype):
            model = gemm_kernel.gemm_compute(p.m, p.n, p.k, rate, kn, waves) \
                + gemm_kernel.gemm_fixed_s(gpu)
            bins.setdefault(int(math.floor(math.log10(p.flops))), []).append(p.seconds / model)
        for d, v in sorted(bins.items()):
            out.append(f"| {dtype} | 1e{d}-1e{d + 1} | {len(v)} | {median(v):.3f} | "
                       f"{min(v):.3f} | {max(v):.3f} |")
    return out


def attention_rows(profile, gpu) -> list[str]:
    peak = gpu.peak("bf16")
    out = []
    for kernel in sorted({p.kernel for p in profile.attention}):
        pts = profile.attention_points(kernel)
        heads = sorted({p.batch * p.heads for p in pts})
        seqs = sorted({p.seq for p in pts})
        out += [f"\n{kernel} (catalog: forward {gpu.flash_efficiency(kernel):.3f}, backward "
                f"{gpu.flash_efficiency(kernel) * attention_time.FLASH_BWD_EFFICIENCY:.3f}); "
                "forward / backward fraction of the bf16 peak, rows: sequence, columns: "
                "batch x heads", "",
                "| seq | " + " | ".join(str(h) for h in heads) + " |",
                "| ---: |" + " ---: |" * len(heads)]
        for s in seqs:
            cells = []
            for h in heads:
                p = next((q for q in pts if q.seq == s and q.batch * q.heads == h), None)
                if p is None:
                    cells.append("-")
                    continue
                f = attention_flops_fwd(p.batch, p.heads, p.seq, p.head_dim, p.causal)
                cells.append(f"{f / p.fwd_seconds / peak:.2f} / "
                             f"{attention_time.FLASH_BWD_FACTOR * f / p.bwd_seconds / peak:.2f}")
            out.append(f"| {s} | " + " | ".join(cells) + " |")
    return out


def memory_rows(profile, gpu) -> list[str]:
    out = ["| kernel | " + " | ".join(f"{m.bytes >> 20} MiB" for m in profile.memory
                                      if m.kernel == profile.memory[0].kernel) + " |"]
    out.append("| --- |" + " ---: |" * (out[0].count("|") - 2))
    for k in dict.fromkeys(m.kernel for m in profile.memory):
        out.append(f"| {k} | " + " | ".join(f"{m.bytes / m.seconds / 1e12:.2f}"
                                            for m in profile.memory if m.kernel == k) + " |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", help="profile files (.yaml, .yml, .json)")
    a = ap.parse_args()
    for path in a.profiles:
        profile = load_gpu_profile(path)
        gpu = get_gpu(profile.gpu)
        print(f"## {path}: {profile.device} as {gpu.name}\n")
        print("\n".join(gemm_rows(profile, gpu)))
        print("\n".join(attention_rows(profile, gpu)))
        print("\nMemory kernels, TB/s (bytes read + written / seconds):\n")
        print("\n".join(memory_rows(profile, gpu)))
        hbm = profile.hbm_bandwidth
        print(f"\nHBM rate the cost model reads: {hbm / 1e12:.3f} TB/s (catalog "
              f"{gpu.hbm_bandwidth / 1e12:.2f} TB/s datasheet); launch gap "
              f"{profile.launch_gap_s * 1e6:.2f} us\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
