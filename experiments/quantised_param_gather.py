#!/usr/bin/env python
"""NVIDIA's performance scripts reduce gradients in bf16 and all-gather quantised weights at their
stored width (docs/calibration.md §5.95): each reference row the reader now gives either fact,
its analytic estimate without both, with the bf16 gradients only, and with both (the
reader's), and the data-parallel seconds the estimate leaves exposed.

NeMo 2's performance scripts (the NeMo 25.02-25.07 performance tables and the NeMo 2 rows of
dgxc-benchmarking v25.04.02 / v25.05.05) run FP8 with
``grad_reduce_in_fp32 = False`` and ``fp8_param_gather = True``; Megatron-Bridge's per-tensor
FP8 precisions (25.11-26.06 tables) set ``fp8_param_gather = True`` and its NVFP4 one
``fp4_param_gather = True`` (their bf16 gradients were already read, §5.61). Megatron-Core
keeps FP8 weights in a uint8 parameter buffer and NVFP4 weights packed two per byte, so the
distributed optimizer's all-gather moves one byte (half a byte) per quantised weight
(``strategies.reference.perf_harness``: ``NEMO_PERF_SOURCE``, ``PARAM_GATHER_SOURCE``).

    python experiments/quantised_param_gather.py            # every row that moves (seconds)
    python experiments/quantised_param_gather.py --sim ID   # also the simulator for row ID
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import Case, reference_cases  # noqa: E402


def moved(c: Case) -> bool:
    """Whether the reader gave ``c`` either fact: an FP8 gather, or a NeMo row's bf16
    gradients (its notes name the NeMo performance scripts)."""
    return c.job is not None and (c.job.system.param_gather_bytes > 0 or any(
        "NVIDIA/NeMo v2.2.0" in n for n in c.assumptions))


def main(argv: list[str]) -> None:
    sim = argv[argv.index("--sim") + 1:] if "--sim" in argv else []
    print("| row | dtype | plan | measured s | before s | bf16 grads s | after s "
          "| error before → after | dp exposed before → after s |")
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for c in reference_cases():
        if not moved(c):
            continue
        v = {k: estimate(j) for k, j in variants_of(c).items()}
        P, m = c.job.plan, c.measured_step_s
        t = {k: e.step_time_s for k, e in v.items()}
        print(f"| {c.id} | {c.job.dtype} | tp{P.tp} pp{P.pp} cp{P.cp} dp{P.dp} v{P.vpp} "
              f"z{P.zero} | {m:.3f} | {t['before']:.3f} | {t['bf16 grads']:.3f} "
              f"| {t['after']:.3f} | {100 * (t['before'] / m - 1):+.1f} → "
              f"{100 * (t['after'] / m - 1):+.1f} % | "
              f"{v['before'].breakdown_s['dp_comm']:.3f} → "
              f"{v['after'].breakdown_s['dp_comm']:.3f} |")
        if c.id in sim:
            from simulator.extend import extended_step_time
            print(f"|   simulated | | | | {extended_step_time(variants_of(c)['before'])[0]:.3f} "
                  f"| | {extended_step_time(c.job)[0]:.3f} | | |")


def variants_of(c: Case) -> dict[str, Job]:
    """``c``'s job as the reader builds it (``after``), without the FP8 gather (``bf16
    grads``) and without both (``before``: a NeMo row's gradients back in fp32, the stack
    default; a Megatron-Bridge row's stay bf16, read before this change, §5.61)."""
    job = c.job
    sy = job.system
    grads = replace(job, system=replace(sy, param_gather_bytes=0.0))
    nemo = any("NVIDIA/NeMo v2.2.0" in n for n in c.assumptions)
    before = replace(grads, system=replace(grads.system, grad_buffer_bytes=0.0)) \
        if nemo else grads
    return {"before": before, "bf16 grads": grads, "after": job}


if __name__ == "__main__":
    main(sys.argv[1:])
