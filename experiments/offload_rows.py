"""The reference rows that offload activations (plan ``offload_modules``; docs/calibration.md
§5.209): each row's measured and estimated step, the estimate with the key dropped, the peak
memory over HBM with and without it, and one MoE layer's offload: its group's bytes per
micro-batch, the copy's seconds over the GPU's host link, the forward and backward windows it
overlaps (``cost.stage.offload_time``) and what is exposed.

Run: python experiments/offload_rows.py
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost.offload import copy_seconds  # noqa: E402
from strategies.cost.stage.cost_arrays import stage_cost_arrays  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.cost.stage.offload_time import expert_mlp_bwd, offload_exposed  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.memory.offload_saved import routed_offload_bytes  # noqa: E402
from strategies.memory.saved_precision import (activation_cache_bytes,  # noqa: E402
                                               expert_input_bytes, runs_te_experts)
from strategies.memory.scalar import peak_memory  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402


def windows(job) -> tuple[float, ...]:
    """``(group bytes, forward period, backward period, module backward, exposed forward,
    exposed backward)`` of one MoE layer (seconds; the periods as ``offload_time.
    with_offload`` reads them, from the record without the key)."""
    m, cl, fw, dt = job.model, job.cluster, job.framework, job.dtype
    off = PlanArrays.of_plan(replace(job.plan, offload_modules=None))
    rec = stage_cost_arrays(m, cl, dt, off, fw)
    counts = {k: n for k, n in m.layer_counts().items() if n}
    mk = m.of_kind("moe") if len(counts) > 1 else m
    kinds = rec.by_kind if len(counts) > 1 else {"moe": rec}
    per_f = sum(n * float(kinds[k].layer_fwd) for k, n in counts.items()) / counts["moe"]
    per_b = sum(n * float(kinds[k].layer_bwd) for k, n in counts.items()) / counts["moe"]
    si = stage_inputs(m, cl, dt, PlanArrays.of_plan(job.plan), fw)
    P = si.P
    g = routed_offload_bytes(mk, mk.seq_length, P.mbs, P.tp, P.cp, P.sp, P.etp, si.load,
                             P.recompute, P.recompute_modules, P.offload_modules,
                             activation_cache_bytes(fw.fp8_activation_cache, dt),
                             expert_input_bytes(runs_te_experts(fw), dt, fw.te_version,
                                                cl.gpu.fp8_tn_only))
    ex = offload_exposed(mk, si, per_f, per_b)
    return float(g), per_f, per_b, float(expert_mlp_bwd(mk, si)), float(ex[0]), float(ex[1])


def main() -> None:
    print("| row | measured s | est. s (err) | est. without key | peak/HBM | without key | "
          "group GB | copy ms (bw GB/s) | fwd window ms | bwd window ms | exposed ms f/b |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        if "schedule_studies" in f:             # not a list of runs (reference_mape skips it)
            continue
        for e in load_reference(f):
            if not (e.get("plan") or {}).get("offload_modules"):
                continue
            c = case_from_entry(e)
            job = c.job
            bare = replace(job, plan=replace(job.plan, offload_modules=None))
            hbm = job.cluster.min_hbm_bytes
            est, est0 = estimate(job).step_time_s, estimate(bare).step_time_s
            meas = c.measured_step_s
            g, wf, wb, mb, xf, xb = windows(job)
            bw = job.cluster.gpu.host_link_bandwidth
            print(f"| {e['id']} | {meas:.3f} | {est:.3f} ({100 * (est / meas - 1):+.1f} %) | "
                  f"{est0:.3f} | {peak_memory(job)[1].total / hbm:.2f} | "
                  f"{peak_memory(bare)[1].total / hbm:.2f} | {g / 1e9:.2f} | "
                  f"{1e3 * float(copy_seconds(g, bw)):.1f} ({bw / 1e9:.0f}) | {1e3 * wf:.1f} | "
                  f"{1e3 * (wb - mb):.1f} | {1e3 * xf:.1f}/{1e3 * xb:.1f} |")


if __name__ == "__main__":
    main()
