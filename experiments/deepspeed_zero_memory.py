#!/usr/bin/env python
"""DeepSpeed's ZeRO-1 optimizer memory on the BLOOM prototype's rows (docs/calibration.md §5.119).

For each ``bloom_prequel`` row of ``published.json`` that runs ZeRO-1 (DeepSpeed v0.5.10's
``DeepSpeedZeroOptimizer``, 16-bit gradients), on the peak stage of the model: the backward's
peak (model state with the ``g·P`` gradients, activations with fragmentation, ``other``), the
reduction's (``g·P`` plus the flat bucket ``min(5e8, P)·g``, activations freed) and the step's
(``(2g + 4)·P/d``: the partition's 16-bit gradients, their flat copy, the fp32 partition), each
the model state without gradients plus the fixed allowance plus its own bytes
(``strategies.memory.deepspeed_zero``). ``norm``: a transient the model does not hold, the step's
``g.double()`` of the largest gradient tensor in the partition (``get_grad_norm_direct``; the
word embedding's ``V/t·h`` slice, at most ``P/d``, on the ranks holding it), with the
partition's 16-bit gradients beside it. ``step reserve``: the segments the caching allocator
keeps after the step (``deepspeed_zero.step_reserve_bytes``, §5.129), under every later peak;
the backward, reduction and step columns are allocated bytes without it, the model peak
with it. GiB.

Run (a few seconds):

    python experiments/deepspeed_zero_memory.py
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.studies.validate import load_cases                      # noqa: E402
from strategies.cost import param_counts                                # noqa: E402
from strategies.memory import deepspeed_zero as dsz                     # noqa: E402
from strategies.memory.scalar import memory_components, peak_memory     # noqa: E402
from strategies.stacks.profile import stack_system                      # noqa: E402
from topologies.gpus import GIB                                         # noqa: E402

DATA = os.path.join(ROOT, "strategies", "reference", "data", "published.json")


def phases(job) -> dict[str, float]:
    """Bytes of the peak stage at the backward, the reduction, the step and the norm."""
    s, mem = peak_memory(job)
    parts = memory_components(job, s)
    sy = stack_system(job.framework, job.system)
    g, d = sy.main_grad_bytes(job.dtype), job.plan.dp
    dense, expert = param_counts.stage_params_split(job.model, job.plan.tp, job.plan.ep,
                                                    job.plan.pp, s)
    P = float(dense + expert)
    act = sum(p.activations for p in parts.values())
    grads = sum(p.grads for k, p in parts.items() if k != "other")
    # the step's reserved segments (§5.129): ``other`` beyond the allowance and fragmentation
    reserve = parts["other"].other - sy.fixed_other_bytes - sy.fragmentation * act
    base = mem.total - parts["other"].grads - grads - (1 + sy.fragmentation) * act - reserve
    m = job.model
    emb = m.vocab_size * m.hidden_size / job.plan.tp if s in (0, job.plan.pp - 1) else 0.0
    largest = min(max(emb, m.hidden_size * m.ffn_hidden_size / job.plan.tp), P / d)
    return {"stage": s, "P": P, "peak": mem.total, "act": act, "reserve": reserve,
            "backward": mem.total - parts["other"].grads - reserve,
            "reduce": base + g * P + float(dsz.zero1_reduce_bytes(sy.dp_bucket_params(d), P, g)),
            "step": base + float(dsz.step_bytes(P / d, g)),
            "norm": base + g * P / d + 8.0 * largest}


def main() -> int:
    print("| row | stage | P (1e9) | activations | backward | reduction | step | norm (not held) "
          "| step reserve | model peak | measured |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for c in load_cases(DATA, None):
        if not c.raw["id"].startswith("bloom_prequel") or c.job is None or c.job.plan.zero != 1:
            continue
        f = phases(c.job)
        meas = (c.raw.get("measured") or {}).get("memory_gb")
        print(f"| {c.raw['id']} | {f['stage']} | {f['P'] / 1e9:.3f} | {f['act'] / GIB:.2f} | "
              + " | ".join(f"{f[k] / GIB:.2f}" for k in ("backward", "reduce", "step", "norm",
                                                          "reserve", "peak"))
              + f" | {meas} GB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
