"""A profile's usable HBM bandwidth is its streaming kernels' (copy, add), not a norm
kernel's (docs/calibration.md §5.128)."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from strategies.cost.hbm_rate import usable_hbm
from topologies.gpu_profile import (LARGE_BYTES, GemmPoint, GpuProfile, MemoryPoint,
                                    load_gpu_profile)
from topologies.gpus import get_gpu

GEMM = (GemmPoint("bf16", 64, 64, 64, 1e-6),)
MIB = 1024 ** 2


def _mem(kernel: str, nbytes: int, tbps: float) -> MemoryPoint:
    return MemoryPoint(kernel, nbytes, nbytes / (tbps * 1e12))


def test_the_norm_kernel_is_left_out_of_the_median():
    pts = (_mem("copy", 64 * MIB, 3.5), _mem("copy", 1024 * MIB, 4.2),
           _mem("add", 64 * MIB, 3.7), _mem("add", 1024 * MIB, 4.3),
           _mem("layernorm", 64 * MIB, 2.0), _mem("layernorm", 1024 * MIB, 2.4),
           _mem("copy", 16 * MIB, 1.8))              # below LARGE_BYTES: left out
    prof = GpuProfile(gemm=GEMM, memory=pts)
    assert prof.hbm_bandwidth == pytest.approx(0.5 * (3.7e12 + 4.2e12), rel=1e-12)
    g = replace(get_gpu("H200"), profile=prof)
    assert usable_hbm(g) == prof.hbm_bandwidth
    # without a streaming kernel, the kernels it has; without a large one, every size
    only_norm = GpuProfile(gemm=GEMM, memory=pts[4:6])
    assert only_norm.hbm_bandwidth == pytest.approx(2.2e12, rel=1e-12)
    small = GpuProfile(gemm=GEMM, memory=(_mem("copy", 16 * MIB, 1.8), pts[4]))
    assert 16 * MIB < LARGE_BYTES and small.hbm_bandwidth == pytest.approx(1.8e12, rel=1e-12)


def test_h200_measured_streaming_rate():
    """run2's default sweep: copy and add at 64 MiB - 1 GiB, median 4.10 TB/s (the catalog's
    0.85 · 4.8 = 4.08 TB/s); its layer_norm at the same sizes 1.98-2.39 TB/s."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "measurements", "h200_2026-11-29", "run2", "default.yaml")
    prof = load_gpu_profile(path)
    big = sorted(p.bandwidth for p in prof.memory
                 if p.kernel in ("copy", "add") and p.bytes >= LARGE_BYTES)
    assert len(big) == 6
    assert prof.hbm_bandwidth == pytest.approx(0.5 * (big[2] + big[3]), rel=1e-12)
    assert 4.0e12 < prof.hbm_bandwidth < 4.2e12
    norm = [p.bandwidth for p in prof.memory if p.kernel == "layernorm" and p.bytes >= LARGE_BYTES]
    assert max(norm) < 0.6 * prof.hbm_bandwidth
