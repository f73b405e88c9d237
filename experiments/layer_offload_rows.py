"""The held-out rows whose Megatron-Bridge configs set ``cpu_offloading_num_layers``
(docs/calibration.md §5.211), with the config's N set on the row's plan here (the data file
does not state it): the step and peak/HBM without and with it, and one group's copy against
Transformer Engine's windows (``cost.layer_offload``).

Run: python experiments/layer_offload_rows.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost.layer_offload import offload_exposed_total, window_spans  # noqa: E402
from strategies.cost.stage.cost_arrays import stage_cost_arrays  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.memory.offload_saved import dense_layer_stash_bytes  # noqa: E402
from strategies.memory.saved_precision import activation_cache_bytes  # noqa: E402
from strategies.memory.scalar import peak_memory  # noqa: E402
from strategies.memory.te_linear_saved import job_te_linear_inputs  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

#: row -> the config's N: Megatron-Bridge v0.2.0 scripts/performance/configs/llama3/
#: workload_base_configs.py L47, L77; v0.1.0rc3 configs/llama3/llama3_70b_llm_pretrain.yaml
#: L146, configs/llama31/llama31_405b_llm_pretrain.yaml L123
ROWS = {"mbridge2511_llama370b_gb300_64_fp8cs": 20, "mbridge2511_llama370b_gb200_64_fp8cs": 40,
        "mbridge2509_llama370b_gb200_64_fp8cs": 40, "mbridge2509_llama31405b_gb200_128_fp8cs": 95}


def copy_figures(job, n: int) -> tuple[float, float, float, float, list[int], float, float]:
    """``(group bytes, copy s, layer fwd s, layer bwd s, spans, exposed fwd s, exposed bwd s)``
    per micro-batch, the layer times from the record without the key."""
    m, cl, fw, dt = job.model, job.cluster, job.framework, job.dtype
    P = PlanArrays.of_plan(job.plan)
    rec = stage_cost_arrays(m, cl, dt, P, fw)
    g = float(dense_layer_stash_bytes(m, P.mbs, P.tp, P.cp, P.sp, P.recompute, P.flash_attn,
                                      P.recompute_modules, fw.remat_named,
                                      activation_cache_bytes(fw.fp8_activation_cache, dt),
                                      job_te_linear_inputs(fw, dt, cl.gpu.fp8_tn_only), False))
    bw = cl.gpu.host_link_bandwidth
    f, b = offload_exposed_total(g, bw, float(rec.layer_fwd), float(rec.layer_bwd),
                                 m.num_layers, n)
    return (g, g / bw, float(rec.layer_fwd), float(rec.layer_bwd),
            sorted(set(window_spans(m.num_layers, n).tolist())), float(f), float(b))


def main() -> None:
    print("| row | config N | measured s | est. (err) without | peak/HBM without | est. (err) "
          "with | peak/HBM with | group GB | copy ms (bw GB/s) | layer fwd/bwd ms | spans | "
          "exposed ms f/b per micro-batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    path = os.path.join(ROOT, "strategies/reference/data/heldout_2026e.json")
    for e in load_reference(path):
        if e["id"] not in ROWS:
            continue
        c = case_from_entry(e)
        job, meas, n = c.job, c.measured_step_s, ROWS[e["id"]]
        hbm = job.cluster.min_hbm_bytes
        on = replace(job, plan=replace(job.plan, cpu_offloading_num_layers=n))
        cells = []
        for j in (job, on):
            est = estimate(j).step_time_s
            cells += [f"{est:.3f} ({100 * (est / meas - 1):+.1f} %)",
                      f"{peak_memory(j)[1].total / hbm:.2f}"]
        g, cs, lf, lb, spans, xf, xb = copy_figures(job, n)
        bw = job.cluster.gpu.host_link_bandwidth
        print(f"| {e['id']} | {n} | {meas:.3f} | " + " | ".join(cells)
              + f" | {g / 1e9:.2f} | {1e3 * cs:.1f} ({bw / 1e9:.0f}) | {1e3 * lf:.1f}/"
              f"{1e3 * lb:.1f} | {', '.join(map(str, spans))} | {1e3 * xf:.1f}/{1e3 * xb:.1f} |")


if __name__ == "__main__":
    main()
