#!/usr/bin/env python
"""The NeMo 25.02 B200 rows without tensor or pipeline parallelism, lead by lead
(docs/calibration.md §5.126): what the 25.02 scripts ran at tp 1 pp 1, priced as what-ifs on
the row's own job, beside the same jobs in later containers on GB200 and the same release's
tp 1 pp 1 rows on H100.

Run (under a minute, analytic only):

    python experiments/b200_tp1_leads.py

Table 1, per row (the two dense B200 rows and their GB200 twins): the measured and estimated
step (s) and the error; then the error with each lead applied to the row's job alone:
the data-parallel overlaps off (``overlap_grad_reduce``, ``overlap_param_gather``: every
reduce-scatter and gather exposed), ZeRO-0 (plain DDP all-reduce, no distributed optimizer),
CUDA graphs toggled (the 25.02 scripts capture them for Nemotron-4 15B on B200, not for
Llama 3 8B), and tp 2 dp 32 with sequence parallelism (the Nemotron-4 15B script's B200
userbuffers config is a tp 2 one and its CSV row says dp 32 on 64 GPUs; the page prints TP 1).

Table 2: the same release's tp 1 pp 1 rows on H100 (DGX Cloud benchmarking v25.04.02,
NeMo 25.02.01, Llama 3.1 8B, seq 8192, cp 2; FP8 delayed scaling and bf16): the release's
tp 1 pp 1 code path on Hopper, error by GPU count.

Table 3, per row of Table 1: one layer and micro-batch as the model prices it (GEMMs,
attention, the rest; ``experiments.llama405_blackwell.layer_parts``), the measured layer
(``measured_layer``: the measured step less the model's other terms), and the factor one
kernel class alone would need to close the row: if one class were what the row misses, both
B200 rows would need about the same factor.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TREE)

from experiments.llama405_blackwell import layer_parts, measured_layer  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import Case, case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(_TREE, "strategies", "reference", "data")
#: the two dense NeMo 25.02 B200 rows at tp 1 pp 1 and their GB200 twins (25.04, 25.07)
ROWS = ("nemo2502_llama38b_b200_8", "nemo2502_nemotron15b_b200_64",
        "nemo2504_llama38b_gb200_8", "nemo2507_llama38b_gb200_8",
        "nemo2504_nemotron15b_gb200_64")
#: the same release's tp 1 pp 1 rows on H100 (DGX Cloud, NeMo 25.02.01)
H100_PREFIX = "dgxc2504_llama31_8b_h100_"


def _cases(name: str) -> dict[str, Case]:
    rows = load_reference(os.path.join(DATA, name))
    return {r["id"]: case_from_entry(r, rows) for r in rows}


def error_pct(c: Case, **plan) -> float:
    """The analytic estimate's error (%) of case ``c`` with its plan's fields ``plan``
    replaced (none: the row as read)."""
    job = replace(c.job, plan=replace(c.job.plan, **plan)) if plan else c.job
    return 100.0 * (estimate(job).step_time_s / c.measured_step_s - 1.0)


def leads(c: Case) -> dict[str, float | None]:
    """Table 1's what-ifs of one row, each the error (%); tp 2 only where the GPU count
    divides."""
    p = c.job.plan
    out: dict[str, float | None] = {
        "as read": error_pct(c),
        "DP overlaps off": error_pct(c, overlap_grad_reduce=False, overlap_param_gather=False),
        "ZeRO-0": error_pct(c, zero=0),
        "graphs toggled": error_pct(c, cuda_graph=not p.cuda_graph),
        "tp2 dp/2 sp": None}
    if p.tp == 1 and p.dp % 2 == 0 and p.gbs % (p.mbs * p.dp // 2) == 0:
        out["tp2 dp/2 sp"] = error_pct(c, tp=2, dp=p.dp // 2, sp=True)
    return out


def main() -> None:
    cases = _cases("nemo_performance_25.json")
    head = ["row", "measured s", "est s", "as read", "DP overlaps off", "ZeRO-0",
            "graphs toggled", "tp2 dp/2 sp"]
    print("\nTable 1: the tp 1 pp 1 B200 rows of NeMo 25.02 and their GB200 twins, error (%) "
          "with each lead\n")
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for rid in ROWS:
        c = cases[rid]
        w = leads(c)
        cells = [f"{v:+.1f}" if v is not None else "" for v in w.values()]
        print(f"| {rid} | {c.measured_step_s:.3f} | {estimate(c.job).step_time_s:.3f} | "
              + " | ".join(cells) + " |")
    dgxc = _cases("dgxc_2505.json")
    print("\nTable 2: the same release on H100 at tp 1 pp 1 (NeMo 25.02.01, Llama 3.1 8B)\n")
    print("| row | plan | measured s | error |")
    print("|---|---|---:|---:|")
    for rid, c in dgxc.items():
        if not rid.startswith(H100_PREFIX) or c.job is None:
            continue
        p = c.job.plan
        print(f"| {rid} | tp{p.tp} pp{p.pp} cp{p.cp} dp{p.dp} mbs{p.mbs} {c.job.dtype} | "
              f"{c.measured_step_s:.3f} | {error_pct(c):+.1f} % |")

    print("\nTable 3: one layer and micro-batch (ms), and the factor one kernel class alone "
          "would need\n")
    print("| row | GEMM | attention | other | model | measured | GEMM alone | attention alone |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for rid in ROWS:
        g, a, rest, total, meas = layer_split(cases[rid])
        print(f"| {rid} | {1e3 * g:.2f} | {1e3 * a:.2f} | {1e3 * rest:.2f} | "
              f"{1e3 * total:.2f} | {1e3 * meas:.2f} | {(meas - total + g) / g:.3f} | "
              f"{(meas - total + a) / a:.3f} |")


def layer_split(c: Case) -> tuple[float, float, float, float, float]:
    """``(GEMM, attention, rest, model total, measured)`` seconds of one layer and
    micro-batch of case ``c``."""
    p = layer_parts(c.job)
    g, a, total = p["gemm"], p["attention"], p["total"]
    return g, a, total - g - a, total, measured_layer(c)[2]


if __name__ == "__main__":
    main()
