"""MLA's down projections per Megatron-Core version on the reference rows with tp > 1
(docs/calibration.md §5.85): the layout the reader gives each row (``FrameworkProfile.
mla_down_proj`` from its NeMo container), the collectives the column-parallel layout adds per
layer and micro-batch (``cost.stage.attn_down_ops``: forward, backward) against the rope key's
own pair it no longer runs (``attn_rope_time``), the once-per-step tp all-reduce of the
SP-marked gradients (``sp_grad_allreduce_bytes``), and the row's estimate in both layouts.
Contention-free collective times, microseconds; steps in seconds.

    python experiments/mla_down_layouts.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import (attn_down_time, attn_rope_time,  # noqa: E402
                                   sp_grad_allreduce_bytes, stage_costs)
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import reference_cases  # noqa: E402


def main() -> None:
    for case in reference_cases():
        job = getattr(case, "job", None)
        if job is None or job.plan.tp < 2 or not job.model.kv_lora_rank:
            continue
        tp, sp, cl = job.plan.tp, bool(job.plan.sp), job.cluster

        def t(kind: str, nbytes: float) -> float:
            return float(cm.collective_time(kind, nbytes, tp, 1, cl))
        layout = job.framework.mla_down_proj
        col = replace(job, framework=replace(job.framework, mla_down_proj="column"))
        rep = replace(job, framework=replace(job.framework, mla_down_proj="replicated"))
        cc, cr = stage_costs(col), stage_costs(rep)
        layers = max(job.layers_of_stage(s) for s in range(job.plan.pp))
        print(f"{case.id}  tp {tp} sp {sp}  read as {layout}")
        print(f"    column adds fwd {float(attn_down_time(t, cc, sp, True)) * 1e6:7.1f}"
              f"  bwd {float(attn_down_time(t, cc, sp, False)) * 1e6:7.1f}"
              f"  less the rope pair {float(attn_rope_time(t, cr, True)) * 1e6:.1f}"
              f" + {float(attn_rope_time(t, cr, False)) * 1e6:.1f}")
        for name, c in (("replicated", cr), ("column", cc)):
            nb = float(sp_grad_allreduce_bytes(c, layers))
            print(f"    {name:10s} per-step tp all-reduce {nb / 1e6:8.2f} MB "
                  f"{t('allreduce', nb) * 1e3 if nb > 0 else 0.0:7.3f} ms")
        print(f"    step: replicated {estimate(rep).step_time_s:.3f} s, column "
              f"{estimate(col).step_time_s:.3f} s, measured {case.measured_step_s:.3f} s")


if __name__ == "__main__":
    main()
