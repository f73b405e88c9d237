#!/usr/bin/env python
"""Blackwell sustained GEMM rates per precision: each public figure beside the catalog's
(docs/calibration.md §5.77).

Run (a few seconds, analytic only):

    python experiments/blackwell_rates.py            # Markdown tables on stdout
    python experiments/blackwell_rates.py --pairs    # + NeMo 25.02 B200 / 25.04 GB200 pairs
    python experiments/blackwell_rates.py --fp4-what-if  # + every nvfp4 row under the fp4 rules

Table 1: per part and precision, the datasheet dense peak, mamf-finder's burst (MAMF), the
public sustained measurements (B200's node MSMF, the Azure harness's cuBLASLt runs) and the
catalog's sustained large-GEMM rate (``peak · gemm_efficiency``), TFLOP/s.

Table 2: the rules that could carry a measured sustained ratio from one part or precision to
another, each checked where a measurement exists: the bf16 power rule applied to fp8, GB200's
measured fp8 ratio carried by the power rule (``sm100_fp8_ratio``; adopted for B200, the same
sm_100 die), and the fp4 = fp8-fraction rule against the harness's fp4 runs (the catalog's
for GB200; GB300's catalog fp4 is the fp8 fraction times the harness's fp4-over-fp8 fraction,
§5.178).

``--pairs``: the same model on B200 (NeMo 25.02) and GB200 (NeMo 25.04), measured and modelled
GB200 speed-up (analytic estimate).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topologies.gpus import get_gpu  # noqa: E402
from topologies.gpus.sustained import (AZURE_FP4_SUSTAINED,  # noqa: E402
                                       AZURE_FP8_SUSTAINED, B200_FP8_MAMF,
                                       B200_SUSTAINED_RATIO, GB200_FP8_SUSTAINED_RATIO,
                                       HOPPER_FP8, HOPPER_FP8_PEAK, fp4_over_fp8_fraction,
                                       harness_ratio, sm100_fp8_ratio, sustained_ratio)

#: mamf-finder bursts, TFLOP/s (ml-engineering 744d01e, compute/accelerator/README.md, the
#: "Maximum Achievable Matmul FLOPS" tables; torch 2.7.1+cu128 on B200, 2.9.1+cu130 on B300,
#: 2.10.0.dev20250916+cu130 on GB200; no GB300 row)
MAMF = {("B200-SXM-180GB", "bf16"): 1745.0, ("B200-SXM-180GB", "fp8"): B200_FP8_MAMF,
        ("B300-SXM-288GB", "bf16"): 1769.0, ("B300-SXM-288GB", "fp8"): 3353.3,
        ("GB200", "bf16"): 1822.0, ("GB200", "fp8"): 3615.6}
#: B200's bf16 node MSMF, slowest GPU of 8 (the catalog's source, §3.1), TFLOP/s
B200_NODE_MSMF = 1421.0
# the Azure harness's NVFP4 runs (``AZURE_FP4_SUSTAINED``, topologies.gpus.sustained):
# Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md @2a370be6, CUDA 12.8;
# egmsft/AI-benchmarking-guide Azure_Results/ND_GB300_v6_results.md @18e80a21, CUDA 13.0
#: other public Blackwell figures (burst, not sustained): flashinfer PR #2256 (B200, batch
#: 128 x 512 x 512 x 4096) MXFP8 vs per-tensor fp8, TFLOP/s; DeepGEMM PR #348 (B200, CUDA 12.9,
#: 8192^3) MXF4 x MXF4: DeepGEMM and cuBLAS (cublasTest 13.3), TFLOP/s
FLASHINFER_MXFP8_VS_FP8 = (2347.7, 2369.0)
DEEPGEMM_B200_MXF4_8192 = (5702.0, 5239.0)
PARTS = ("B200-SXM-180GB", "B300-SXM-288GB", "GB200", "GB300")


def catalog_tflops(part: str, dtype: str) -> float:
    """The catalog's sustained large-GEMM rate of ``part`` in ``dtype`` (TFLOP/s)."""
    g = get_gpu(part)
    return g.peak(dtype) * g.gemm_efficiency(dtype) / 1e12


def harness_fraction(rates: tuple[float, ...], part: str, dtype: str) -> float:
    """A harness run read as a fraction of ``part``'s ``dtype`` peak through the Hopper anchors
    (``harness_ratio``'s transfer: rate / Hopper fp8 rate x Hopper catalog fp8 rate), mean of
    both shapes and both Hopper parts."""
    peak = get_gpu(part).peak(dtype) / 1e12
    return statistics.mean(a / b * eff * HOPPER_FP8_PEAK / peak
                           for ref, eff in HOPPER_FP8.items()
                           for a, b in zip(rates, AZURE_FP8_SUSTAINED[ref]))


def rate_rows() -> list[tuple]:
    """``(part, dtype, peak, MAMF or None, sustained measurement text, catalog)`` (TFLOP/s)."""
    out = []
    for part in PARTS:
        for dtype in ("bf16", "fp8", "fp4"):
            g = get_gpu(part)
            meas = "-"
            if part == "B200-SXM-180GB" and dtype == "bf16":
                meas = f"node MSMF {B200_NODE_MSMF:.0f}"
            elif dtype == "fp8" and part in AZURE_FP8_SUSTAINED:
                meas = "Azure " + " / ".join(f"{x:.1f}" for x in AZURE_FP8_SUSTAINED[part])
            elif dtype == "fp4" and part in AZURE_FP4_SUSTAINED:
                meas = "Azure " + " / ".join(f"{x:.1f}" for x in AZURE_FP4_SUSTAINED[part])
            out.append((part, dtype, g.peak(dtype) / 1e12, MAMF.get((part, dtype)), meas,
                        catalog_tflops(part, dtype)))
    return out


def rule_rows() -> list[tuple]:
    """``(check, predicted, measured, predicted / measured - 1)``: each carrying rule where a
    measurement tests it (sustained/burst ratios for fp8; fractions of the fp4 peak for fp4)."""
    gb300 = get_gpu("GB300")
    h300 = harness_ratio("GB300", MAMF[("GB200", "fp8")])   # GB300 takes GB200's burst
    out = [("GB200 fp8: bf16 power rule", sustained_ratio(1200, 148),
            GB200_FP8_SUSTAINED_RATIO),
           ("GB300 fp8: bf16 power rule (catalog)", sustained_ratio(1400, 160), h300),
           ("GB300 fp8: GB200's fp8 carried by the power rule",
            sustained_ratio(gb300.tdp_w, gb300.sm_count, GB200_FP8_SUSTAINED_RATIO, 1200, 148),
            h300)]
    for part in AZURE_FP4_SUSTAINED:
        g = get_gpu(part)
        meas = harness_fraction(AZURE_FP4_SUSTAINED[part], part, "fp4")
        out.append((f"{part} fp4: the fp8 fraction" + (" (catalog)" if part == "GB200" else ""),
                    g.gemm_efficiency("fp8"), meas))
        if g.fp4_matmul_efficiency is not None:
            out.append((f"{part} fp4: the fp8 fraction x the harness's fp4/fp8 (catalog)",
                        g.gemm_efficiency("fp4"), meas))
    return [(name, p, m, p / m - 1) for name, p, m in out]


def fp4_over_fp8() -> list[tuple]:
    """``(part, harness fp4 / fp8 rate, datasheet fp4 / fp8 peak)``: one run, one GPU."""
    out = []
    for part in AZURE_FP4_SUSTAINED:
        g = get_gpu(part)
        p8, p4 = g.peak("fp8") / 1e12, g.peak("fp4") / 1e12
        out.append((part, fp4_over_fp8_fraction(part, p8, p4) * p4 / p8, p4 / p8))
    return out


def pair_rows() -> list[tuple]:
    """``(model, dtype B200, dtype GB200, measured GB200 speed-up, model's)`` of every NeMo 25.02
    B200 row with a 25.04 GB200 twin (same model and GPU count) in nemo_performance_25.json."""
    from simulator.studies.validate import load_cases
    from strategies.estimate.scalar import estimate

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "strategies", "reference", "data", "nemo_performance_25.json")
    cases = {c.id: c for c in load_cases(path, tiers=None)
             if c.job is not None and c.measured_step_s is not None}
    out = []
    for cid, c in sorted(cases.items()):
        if not cid.startswith("nemo2502_") or "_b200_" not in cid:
            continue
        twin = cases.get(cid.replace("nemo2502_", "nemo2504_").replace("_b200_", "_gb200_"))
        if twin is None:
            continue
        out.append((cid, c.job.dtype, twin.job.dtype,
                    c.measured_step_s / twin.measured_step_s,
                    estimate(c.job).step_time_s / estimate(twin.job).step_time_s))
    return out


def sm100_fp4_ratio_rows() -> list[tuple]:
    """The sm_100 fp4 fraction over fp8's by source: GB200's harness runs (sustained, one
    harness) and B200's burst MXF4 GEMMs at 8192³ (DeepGEMM PR #348) over B200's fp8 MAMF
    fraction: ``(source, ratio)``."""
    b200 = get_gpu("B200")
    fp8_burst = B200_FP8_MAMF / (b200.peak("fp8") / 1e12)
    p4 = b200.peak("fp4") / 1e12
    return [("GB200, Azure harness (sustained, 16384³ / 32768³)",
             fp4_over_fp8_fraction("GB200", 5000.0, 10000.0)),
            ("B200, DeepGEMM MXF4 8192³ / fp8 MAMF (burst)",
             DEEPGEMM_B200_MXF4_8192[0] / p4 / fp8_burst),
            ("B200, cuBLAS MXF4 8192³ / fp8 MAMF (burst)",
             DEEPGEMM_B200_MXF4_8192[1] / p4 / fp8_burst)]


def fp4_what_if() -> list[tuple]:
    """Analytic error of every nvfp4 row of the 2026 Megatron-Bridge files with the catalog's
    fp4 rates, with every Blackwell part's fp4 at its fp8 fraction (the catalog before
    §5.178), and with B200's and GB200's too at GB200's harness ratio (1.32, not adopted), by
    replacing catalog entries: ``(file, run, now %, fp8 fraction %, sm_100 at 1.32 %)``."""
    import dataclasses

    import topologies.gpus.catalog as gp
    from simulator.studies.validate import load_cases
    from strategies.estimate.scalar import estimate

    r100 = fp4_over_fp8_fraction("GB200", 5000.0, 10000.0)
    base = {n: gp.GPUS[n] for n in PARTS}
    variants = [{n: dataclasses.replace(g, fp4_matmul_efficiency=None) for n, g in base.items()},
                {n: dataclasses.replace(g, fp4_matmul_efficiency=g.fp8_matmul_efficiency * r100)
                 if g.fp4_matmul_efficiency is None else g for n, g in base.items()}]
    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "strategies", "reference", "data")
    def errors(path: str) -> dict[str, float]:
        """Each nvfp4 row's analytic error (%), its GPUs read from the catalog at load."""
        return {c.id: 100 * (estimate(c.job).step_time_s / c.measured_step_s - 1)
                for c in load_cases(path, tiers=None)
                if c.job is not None and c.measured_step_s is not None
                and c.job.dtype == "nvfp4"}

    out = []
    for f in ("megatron_bridge_2604.json", "heldout_2026b.json", "hybrid_2026.json"):
        path = os.path.join(data, f)
        errs = [errors(path)]
        for v in variants:
            gp.GPUS.update(v)
            try:
                errs.append(errors(path))
            finally:
                gp.GPUS.update(base)
        out += [(f, i, *(e[i] for e in errs)) for i in errs[0]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="store_true",
                    help="NeMo 25.02 B200 / 25.04 GB200 pairs: measured and model speed-up")
    ap.add_argument("--fp4-what-if", action="store_true",
                    help="every nvfp4 row now, at the fp8 fraction, and with sm_100 at 1.32")
    args = ap.parse_args(argv)

    print("Table 1: public figures and the catalog's sustained rate, TFLOP/s\n")
    print("| part | dtype | datasheet | MAMF (burst) | sustained, measured (16384³ / 32768³) "
          "| catalog sustained | catalog / MAMF |")
    print("|---|---|---:|---:|---|---:|---:|")
    for part, dtype, peak, mamf, meas, cat in rate_rows():
        m = f"{mamf:.1f}" if mamf else "-"
        r = f"{cat / mamf:.3f}" if mamf else "-"
        print(f"| {part} | {dtype} | {peak:.0f} | {m} | {meas} | {cat:.0f} | {r} |")

    print("\nTable 2: carrying rules against the measurements (sustained/burst ratio; fp4: "
          "fraction of the fp4 peak)\n")
    print("| check | predicted | measured | predicted / measured - 1 |")
    print("|---|---:|---:|---:|")
    for name, p, m, e in rule_rows():
        print(f"| {name} | {p:.3f} | {m:.3f} | {100 * e:+.1f} % |")

    print("\nTable 3: fp4 over fp8 on one harness run\n")
    print("| part | harness fp4 / fp8 rate | datasheet fp4 / fp8 peak | catalog fp4 / fp8 rate |")
    print("|---|---:|---:|---:|")
    for part, h, d in fp4_over_fp8():
        cat = catalog_tflops(part, "fp4") / catalog_tflops(part, "fp8")
        print(f"| {part} | {h:.3f} | {d:.3f} | {cat:.3f} |")

    b200, gb200 = catalog_tflops("B200-SXM-180GB", "fp8"), catalog_tflops("GB200", "fp8")
    old = B200_FP8_MAMF * B200_SUSTAINED_RATIO
    print(f"\nB200 fp8 sustained ratio: {sm100_fp8_ratio(1000, 148):.4f} "
          f"(GB200's {GB200_FP8_SUSTAINED_RATIO:.4f} carried to 1000 W); the bf16 ratio it "
          f"replaces: {B200_SUSTAINED_RATIO:.4f}")
    print(f"B200 / GB200 sustained fp8: {b200:.0f} / {gb200:.0f} TFLOP/s = {b200 / gb200:.3f} "
          f"(with B200's bf16 ratio: {old:.0f} / {gb200:.0f} = {old / gb200:.3f})")
    mx, pt = FLASHINFER_MXFP8_VS_FP8
    print(f"MXFP8 / per-tensor fp8 GEMM, B200 (flashinfer PR #2256): {mx} / {pt} = "
          f"{mx / pt:.3f}; B200 MXF4 8192³ (DeepGEMM PR #348, burst): "
          f"{DEEPGEMM_B200_MXF4_8192[0]:.0f} DeepGEMM, {DEEPGEMM_B200_MXF4_8192[1]:.0f} cuBLAS "
          f"of {get_gpu('B200').peak('fp4') / 1e12:.0f}")

    print("\nTable 5: sm_100's fp4 fraction over its fp8 fraction, by source\n")
    print("| source | fp4 / fp8 fraction |")
    print("|---|---:|")
    for src, r in sm100_fp4_ratio_rows():
        print(f"| {src} | {r:.3f} |")

    if args.fp4_what_if:
        print("\nTable 6: nvfp4 rows (analytic error): catalog; every part at the fp8 fraction "
              "(before §5.178); B200 and GB200 also at GB200's harness ratio (not adopted)\n")
        print("| file | run | catalog | fp8 fraction | + sm_100 at 1.32 |")
        print("|---|---|---:|---:|---:|")
        for f, i, now, frac, s100 in fp4_what_if():
            print(f"| {f} | {i} | {now:+.1f} % | {frac:+.1f} % | {s100:+.1f} % |")

    if args.pairs:
        print("\nTable 4: NeMo 25.02 (B200) against 25.04 (GB200), same model and GPU count\n")
        print("| B200 run | dtype B200 ; GB200 | measured GB200 speed-up | model |")
        print("|---|---|---:|---:|")
        for cid, d2, d4, meas, mod in pair_rows():
            print(f"| {cid} | {d2} ; {d4} | {meas:.3f} | {mod:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
