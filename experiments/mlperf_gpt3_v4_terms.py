#!/usr/bin/env python
"""The MLPerf GPT-3 175B 32/64-node rows of v3.1, v4.0 and v4.1 term by term
(docs/calibration.md §5.232): what each release's config turns on that moves a term.

1. ``terms``: per row the measured step, the estimate, its terms (``breakdown_s``) and the
   step per sequence on 512 GPUs (the 32-node row's doubled GPUs: ``step x GPUs / 512 /
   global batch``), measured and estimated.
2. ``what_ifs``: every row of ``heldout_mlperf_gpt3.json`` as read (the deferral of the
   output layer's weight gradients where the config sets it), without the deferral, and with
   the gradients reduced in bf16 (``grad_buffer_bytes`` 2: Apex's DistributedFusedAdam keeps
   its contiguous gradient buffer in ``grad_sync_dtype``, bf16 in every submission's
   ``conf/optim/distributed_fused_adam.yaml``): signed error per row and the file's MAPE.

    python experiments/mlperf_gpt3_v4_terms.py      # ~10 s, analytic only
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "heldout_mlperf_gpt3.json")
ROWS = ("mlperf31_gpt3_nvidia_eos_n64", "mlperf40_gpt3_nvidia_eos_n64",
        "mlperf41_gpt3_nvidia_eos_n32", "mlperf41_gpt3_nvidia_eos_n64")
TERMS = ("compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")


def with_system(job: Job, **kw: float) -> Job:
    """``job`` with its system's fields ``kw`` replaced."""
    return make_job(job.model, job.cluster, job.plan, dtype=job.dtype, framework=job.framework,
                    system=replace(job.system, **kw))


def main() -> None:
    rows = load_reference(DATA)
    cases = {r["id"]: case_from_entry(r, rows) for r in rows}

    print("## 1. The four rows term by term (seconds)\n")
    print("| row | mbs | vp | M | measured | estimate | error | "
          + " | ".join(TERMS) + " | ms/sequence on 512 GPUs meas / est |")
    print("|---" * (10 + len(TERMS) - 3) + "|")
    for rid in ROWS:
        c = cases[rid]
        p, e = c.job.plan, estimate(c.job)
        m = c.measured_step_s
        per = c.job.cluster.num_gpus / 512 / p.gbs * 1e3
        print(f"| {rid} | {p.mbs} | {p.vpp} | {p.gbs // (p.mbs * p.dp)} | {m:.3f} | "
              f"{e.step_time_s:.3f} | {100 * (e.step_time_s / m - 1):+.1f} % | "
              + " | ".join(f"{e.breakdown_s[k]:.3f}" for k in TERMS)
              + f" | {m * per:.3f} / {e.step_time_s * per:.3f} |")

    print("\n## 2. Every row: as read, without the deferral, with bf16 gradients\n")
    print("| row | deferral | as read | no deferral | bf16 gradients |")
    print("|---|---|---|---|---|")
    tot = [0.0, 0.0, 0.0]
    for rid, c in cases.items():
        m, sy = c.measured_step_s, c.job.system
        jobs = (c.job, with_system(c.job, head_wgrad_deferral=0.0),
                with_system(c.job, grad_buffer_bytes=2.0))
        errs = [estimate(j).step_time_s / m - 1 for j in jobs]
        tot = [t + abs(x) for t, x in zip(tot, errs)]
        print(f"| {rid} | {sy.head_wgrad_deferral:g} | "
              + " | ".join(f"{100 * x:+.2f} %" for x in errs) + " |")
    n = len(cases)
    print("| **MAPE** | | " + " | ".join(f"{100 * t / n:.2f} %" for t in tot) + " |")


if __name__ == "__main__":
    main()
