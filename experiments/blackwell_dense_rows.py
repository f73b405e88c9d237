#!/usr/bin/env python
"""Every dense Blackwell row (B200, B300, GB200, GB300; no routed experts) of the reference
files, with its plan, error and the analytic estimate's breakdown (docs/calibration.md §5.117).

Run (about a minute, analytic only):

    python experiments/blackwell_dense_rows.py          # Markdown tables on stdout
    python experiments/blackwell_dense_rows.py --knee   # what-if: B200 at §5.79's knee

Table 1: per row, the measured and estimated step (s), the error, the plan, the estimate's
breakdown as shares of its step (compute, tp, pp, dp, bubble, other) and the factor on the
compute seconds that would make the estimate the measurement, the other terms held.

Table 2: one layer and micro-batch of each row by kernel class, as ``layer_time`` prices them
(``experiments.llama405_blackwell.layer_parts``): GEMMs, attention, casts, memory-bound
elementwise, launches (ms), the GEMMs' modelled rate (TFLOP/s) and the layer's measured time
(the measured step less the model's non-compute terms, over the compute term's layers and
micro-batches).

Table 3: the rows' mean error per part and precision.

Table 4: the public B200 figures beside the catalog's: HBM bandwidth (NVIDIA's Blackwell
datasheet, the driver's bus width and memory clock), the bf16 node MSMF the catalog's GEMM
rate is, and Transformer Engine's fp8 ``te.Linear`` at 8192^3 (a burst: 30 warm-up and 200
timed calls, casts included) beside the model's rate at that shape.

``--knee``: the B200 rows' errors with B200's K knee at §5.79's fit to the public sm_100
shape tables (310 bf16, 620 fp8, ``python experiments/gemm_shapes_measured.py``) instead of
the scaled 337 / 674 (docs/calibration.md §6): a what-if, not the catalog.
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict

_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TREE)

from experiments.h100_gemm_shapes import model_tflops  # noqa: E402
from experiments.llama405_blackwell import layer_parts, measured_layer  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import (Case, case_from_entry, load_reference,  # noqa: E402
                                       run_file_names)
from topologies.gpus import get_gpu  # noqa: E402
from topologies.gpus.catalog import B200_HBM_BUS_BITS, B200_HBM_CLOCK_HZ  # noqa: E402

DATA = os.path.join(_TREE, "strategies", "reference", "data")
#: the catalog's Blackwell parts (``topologies.gpus``)
BLACKWELL = ("B200-SXM-180GB", "B300-SXM-288GB", "GB200", "GB300")
SHORT = {"B200-SXM-180GB": "B200", "B300-SXM-288GB": "B300", "GB200": "GB200", "GB300": "GB300"}
#: §5.79's K knee fitted to the public sm_100 tables, by dtype (a what-if, ``--knee``)
B200_KNEE_FIT = {"bf16": 310.0, "fp8": 620.0}
#: B200 bf16 node MSMF, slowest GPU of 8 (ml-engineering, the catalog's source, §3.1), TFLOP/s
B200_NODE_MSMF = 1421.0
#: NVIDIA/TransformerEngine issue #1747 (HGX B200, 2025-05-03): fp8 ``te.Linear`` (autocast,
#: no bias) at (m, n, k) = 8192^3, 30 warm-up and 200 timed calls, TFLOP/s
TE_1747_FP8_8192 = 2377.1


def dense_blackwell_cases() -> list[tuple[str, Case]]:
    """``(file, case)`` of every dense row on a Blackwell part that the reader can build, in
    file order (the schedule studies left out, as ``reference_mape``)."""
    out = []
    for name in run_file_names(DATA):
        rows = load_reference(os.path.join(DATA, name))
        for r in rows:
            c = case_from_entry(r, rows)
            if c.job is None or c.job.cluster.gpu.name not in BLACKWELL or c.job.model.is_moe:
                continue
            out.append((name, c))
    return out


def plan_text(c: Case) -> str:
    """The row's plan in short: widths, micro-batch, micro-batches per pipeline, schedule."""
    P = c.job.plan
    mb = P.gbs // (P.mbs * P.dp)
    v = f" v{P.vpp}" if P.vpp and P.vpp > 1 else ""
    return (f"tp{P.tp} pp{P.pp}{v} cp{P.cp} dp{P.dp} mbs{P.mbs} m{mb}"
            f"{' rc=' + P.recompute if P.recompute != 'none' else ''}"
            f"{' tpo' if P.tp_comm_overlap else ''}")


def row_record(name: str, c: Case) -> dict:
    """Table 1's and Table 2's figures of one row."""
    e = estimate(c.job)
    b, t = e.breakdown_s, e.step_time_s
    other = b["recompute"] + b["cp_comm"] + b["ep_comm"] + b["optimizer"]
    p = layer_parts(c.job)
    comp = b["compute"]
    return {"file": name, "id": c.id, "gpu": SHORT[c.job.cluster.gpu.name],
            "dtype": c.job.dtype, "plan": plan_text(c), "meas": c.measured_step_s, "est": t,
            "err": 100 * (t / c.measured_step_s - 1),
            "shares": [100 * x / t for x in (b["compute"], b["tp_comm"], b["pp_comm"],
                                              b["dp_comm"], b["bubble"], other)],
            "factor": (c.measured_step_s - (t - comp)) / comp,
            "layer": p, "layer_meas": measured_layer(c)[2]}


def knee_what_if() -> list[tuple[str, float, float]]:
    """``(row, error %, error % at B200_KNEE_FIT)`` of every dense B200 row: the catalog's
    estimate, then the same job with ``gemm_time``'s K knee replaced on B200 alone."""
    from unittest import mock

    from strategies.cost import gemm_kernel, gemm_time
    b200 = [c for _, c in dense_blackwell_cases() if SHORT[c.job.cluster.gpu.name] == "B200"]
    base = {c.id: 100 * (estimate(c.job).step_time_s / c.measured_step_s - 1) for c in b200}

    def knee(gpu, dtype):
        if gpu.name == "B200-SXM-180GB":
            return B200_KNEE_FIT["fp8" if gpu.peak(dtype) > gpu.peak("bf16") else "bf16"]
        return gemm_kernel.k_knee(gpu, dtype)

    with mock.patch.object(gemm_time, "k_knee", knee):
        alt = {c.id: 100 * (estimate(c.job).step_time_s / c.measured_step_s - 1) for c in b200}
    return [(i, base[i], alt[i]) for i in base]


def table(title: str, head: list[str], rows: list[list[str]], left: int = 1) -> None:
    """Print one Markdown table: ``title``, the header, ``left`` left-aligned columns then
    right-aligned ones, and ``rows`` (cells already formatted)."""
    print(f"\n{title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < left else "---:" for i in range(len(head))) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main() -> None:
    if "--knee" in sys.argv[1:]:
        table("B200 rows at §5.79's K knee (310 bf16 / 620 fp8)",
              ["row", "error", "at the fitted knee"],
              [[i, f"{a:+.1f} %", f"{b:+.1f} %"] for i, a, b in knee_what_if()])
        return
    recs = [row_record(n, c) for n, c in dense_blackwell_cases()]
    table("Table 1: dense Blackwell rows, analytic estimate (shares of the estimated step, %)",
          ["file", "row", "part", "dtype", "plan", "measured s", "est s", "error", "compute",
           "tp", "pp", "dp", "bubble", "other", "compute factor"],
          [[r["file"][:-5], r["id"], r["gpu"], r["dtype"], r["plan"], f"{r['meas']:.3f}",
            f"{r['est']:.3f}", f"{r['err']:+.1f} %", *(f"{x:.1f}" for x in r["shares"]),
            f"{r['factor']:.3f}"] for r in recs], left=5)
    table("Table 2: one layer and micro-batch (ms); GEMM rate = GEMM FLOPs / GEMM time",
          ["row", "gemm", "attention", "casts", "elementwise", "launch", "total",
           "GEMM TFLOP/s", "measured"],
          [[r["id"], f"{1e3 * p['gemm']:.2f}", f"{1e3 * p['attention']:.2f}",
            f"{1e3 * p['casts']:.3f}", f"{1e3 * p['elementwise']:.2f}",
            f"{1e3 * p['launch']:.3f}", f"{1e3 * p['total']:.2f}",
            f"{p['gemm_flops'] / p['gemm'] / 1e12:.0f}", f"{1e3 * r['layer_meas']:.2f}"]
           for r in recs for p in (r["layer"],)])
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in recs:
        groups[(r["gpu"], r["dtype"])].append(r["err"])
    table("Table 3: mean error by part and precision (rows)",
          ["part", "dtype", "rows", "mean error", "mean abs error"],
          [[g, d, str(len(e)), f"{sum(e) / len(e):+.1f} %",
            f"{sum(abs(x) for x in e) / len(e):.1f} %"] for (g, d), e in sorted(groups.items())],
          left=2)
    table("Table 4: public B200 figures against the catalog",
          ["quantity", "public", "source", "catalog / model", "model / public"],
          [[q, f"{pub:.1f}", src, f"{mod:.1f}", f"{mod / pub:.3f}"]
           for q, pub, src, mod in public_checks()])


def public_checks() -> list[tuple[str, float, str, float]]:
    """Table 4's rows: ``(quantity, public figure, source, the catalog's or model's figure)``,
    HBM in GB/s, GEMM rates in TFLOP/s."""
    b200 = get_gpu("B200")
    driver = B200_HBM_BUS_BITS / 8 * B200_HBM_CLOCK_HZ * 2
    return [
        ("HBM3e peak, GB/s", 7700.0, "NVIDIA Blackwell datasheet, HGX B200",
         b200.hbm_bandwidth / 1e9),
        ("HBM3e peak, GB/s", driver / 1e9, "driver: 7680-bit bus x 3996 MHz x 2 "
         "(pytorch/ao #4002)", b200.hbm_bandwidth / 1e9),
        ("bf16 large GEMM, TFLOP/s", B200_NODE_MSMF, "node MSMF, slowest of 8",
         b200.peak("bf16") * b200.gemm_efficiency("bf16") / 1e12),
        ("fp8 te.Linear 8192^3, TFLOP/s (burst)", TE_1747_FP8_8192, "TransformerEngine #1747",
         model_tflops("B200-SXM-180GB", "fp8", 1, 8192, 8192, 8192)),
    ]


if __name__ == "__main__":
    main()
