#!/usr/bin/env python
"""What-if behind docs/calibration.md §5.18: the GB200 FP8 GEMM rate that would close the DGX
Cloud 25.05 recipes' FP8 miss, and what the same rate does to the 2026 stacks' GB200 FP8 rows.

    python experiments/dgxc_gb200_fp8.py

For each factor f, GB200's FP8 GEMM efficiency (``topologies.gpus``: MAMF x sustained ratio)
is scaled by f for the duration of the run only (the catalog is restored after), every GB200
FP8 row (delayed or current per-tensor scaling; not MXFP8) is estimated analytically, and the
mean signed error per family is printed: dgxc_2505.json's dense and MoE rows (DeepSeek-V3 is
bf16 only), published_2026.json's and megatron_bridge_2604.json's rows. Nothing is changed in
the model: a factor fitted to one release's rows is not a physical constant.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

import topologies.gpus as gpus
from strategies.estimate.scalar import estimate
from strategies.reference.cases import case_from_entry, load_reference

DATA = os.path.join("strategies", "reference", "data")
FILES = ("dgxc_2505.json", "published_2026.json", "megatron_bridge_2604.json")
FACTORS = (1.0, 0.9, 0.85, 0.82, 0.8)


@contextlib.contextmanager
def gb200_fp8_rate(factor: float) -> Iterator[None]:
    """GB200's FP8 GEMM efficiency times ``factor`` inside the block."""
    orig = gpus.GPU.gemm_efficiency

    def scaled(self, dtype, *a, **k):
        e = orig(self, dtype, *a, **k)
        return e * factor if self.name == "GB200" and self.rate_key(dtype) == "fp8" else e

    gpus.GPU.gemm_efficiency = scaled
    try:
        yield
    finally:
        gpus.GPU.gemm_efficiency = orig


def gb200_fp8_errors(path: str) -> dict[str, float]:
    """Analytic error (%) of every GB200 per-tensor FP8 row of a reference file."""
    rows = load_reference(path)
    out = {}
    for r in rows:
        prec = str(r.get("precision") or "").lower()
        gpu = str((r.get("hardware") or {}).get("gpu") or "")
        if "GB200" not in gpu or "fp8" not in prec or "mxfp8" in prec:
            continue
        c = case_from_entry(r, rows)
        if c.job is None or not c.measured_step_s:
            continue
        out[r["id"]] = (estimate(c.job).step_time_s / c.measured_step_s - 1) * 100
    return out


def family(case_id: str) -> str:
    """dgxc rows by family (``dgxc2505_llama31_...`` -> ``dgxc llama31``), others by id."""
    return f"dgxc {case_id.split('_')[1]}" if case_id.startswith("dgxc") else case_id


def main() -> int:
    print("| GB200 FP8 GEMM rate | " + " | ".join(FILES) + " |")
    print("|---|" + "---|" * len(FILES))
    for f in FACTORS:
        with gb200_fp8_rate(f):
            cells = []
            for name in FILES:
                groups: dict[str, list[float]] = {}
                for cid, err in gb200_fp8_errors(os.path.join(DATA, name)).items():
                    groups.setdefault(family(cid), []).append(err)
                cells.append("; ".join(f"{g} {sum(v) / len(v):+.1f} %"
                                       for g, v in groups.items()))
        print(f"| x{f:.2f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
