"""The leads checked for the Megatron-Core README's weak-scaling rows without pipelining
(docs/calibration.md §3.20): the step error under other micro-batch readings, and each
data-parallel bucket's gather and reduce-scatter against the compute they hide behind.

Run:
    python experiments/mcore_pp1_leads.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.scalar import plan_arrays  # noqa: E402


def _f(x) -> float:
    return float(np.squeeze(x))


def main() -> None:
    for c in load_cases(tiers=(1,)):
        if not c.id.startswith("megatron_core_h100_weak") or c.job is None:
            continue
        j, p = c.job, c.job.plan
        row = []
        for mbs in (1, 2, 4):
            if p.gbs % (mbs * p.dp):
                continue
            r = estimate_arrays(j.model, j.cluster, j.dtype, plan_arrays(replace(p, mbs=mbs)),
                                j.framework, j.system)
            row.append(f"mbs{mbs} {100 * (_f(r['step_time_s']) / c.measured_step_s - 1):+.1f} %"
                       f" (dp exposed {1e3 * _f(r['dp_comm']):.0f} ms)")
        print(f"{c.id}  {p.short()}  measured {c.measured_step_s:.3f} s: " + "; ".join(row))
        if p.pp > 1:
            continue
        r = estimate_arrays(j.model, j.cluster, j.dtype, plan_arrays(p), j.framework, j.system)
        sc = r["stage_costs"]
        bucket = max(40e6, 1e6 * p.dp)   # Megatron-Core r0.8.0 DistributedDataParallel default
        ag = _f(cm.dp_collective_time("allgather", sc.param_bytes, bucket, 0.0, p.tp, p.cp,
                                      p.dp, p.ep, p.etp, j.cluster))
        rs = _f(cm.dp_collective_time("reduce_scatter", sc.grad_bytes, bucket, 0.0, p.tp, p.cp,
                                      p.dp, p.ep, p.etp, j.cluster))
        params = _f(sc.params_first)
        per_layer = (params - _f(sc.embedding_params)) / j.model.num_layers
        fwd, bwd = (bucket / per_layer * _f(t) for t in (sc.layer_fwd, sc.layer_bwd))
        print(f"    {bucket / 1e6:.0f}M-parameter buckets ({int(np.ceil(params / bucket))}): "
              f"gather {1e3 * ag:.2f} ms vs {1e3 * fwd:.2f} ms of forward, reduce-scatter "
              f"{1e3 * rs:.2f} ms vs {1e3 * bwd:.2f} ms of backward per bucket; step's traffic "
              f"{1e3 * (ag + rs) * params / bucket:.0f} ms")


if __name__ == "__main__":
    main()
