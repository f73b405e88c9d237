#!/usr/bin/env python
"""Megatron-Bridge's MoE rows in pairs: the 26.04.01 row (eager, partial Transformer Engine
graphs, no EP overlap) against the 26.06 row of the same model and GPU (docs/calibration.md
§5.90). Nothing is fitted; no cost of the model changes here.

Run (a few seconds, analytic only):

    python experiments/moe_graph_pairs.py          # Markdown tables on stdout

Table 1, per pair: measured step of each row and their ratio; the estimate of each, the
26.06 row with and without Transformer Engine's fused grouped MLP its config runs
(``plan.fused_grouped_mlp``, ``variants.with_fused_grouped_mlp``), and the ratios; the time
each row misses per MoE layer and micro-batch on the busiest rank (``moe_residuals``'
``(measured - estimated) / (micro-batches x MoE layers per rank)``), and the eager row's miss
beyond the 26.06 row's. Pairs whose 26.06 config is eager too (no full-iteration graph, no EP
overlap) are the control.

Table 2, for the graphed pairs with the same ep, micro-batch and precision on both sides: the
eager row's extra miss per local expert and per expert-path kernel launch (``moe_expert_
launches.launches_per_expert``), beside the public host time of one PyTorch ``Linear``
forward on that host class (TransformerEngine issue #2053): what a per-launch host time
after the dispatcher's synchronisation would have to be to explain it.

Table 3 (``--host``, about a minute): the model's own host rule for the expert path
(``moe_time.moe_host_time``: exposed ``max(0, host - GPU)`` per MoE layer and pass) with each
launch of the unfused path (``moe_expert_launches.LAUNCHES``) charged one PyTorch ``Linear``
forward's host time on the row's host class, instead of ``EXPERT_HOST_S``: every MoE row of
``moe_residuals.FILES``, its error as the model stands and under that charge. A what-if, not
a fit: the model keeps ``EXPERT_HOST_S``.
"""
from __future__ import annotations

import copy
import os
import sys
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_expert_launches import (LAUNCHES, TORCH_LINEAR_HOST_S,  # noqa: E402
                                             host_cpu, launches_per_expert)
from experiments.moe_residuals import FILES  # noqa: E402
from strategies.cost import moe_time  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

EAGER = "strategies/reference/data/megatron_bridge_2604.json"
GRAPHED = "strategies/reference/data/heldout_2026b.json"
#: (26.04.01 row, 26.06 row): same model, GPU and GPU count
PAIRS = tuple((f"mbridge260401_{a}", f"mbridge2606_{b}") for a, b in (
    ("qwen330ba3b_gb300_8_mxfp8", "qwen330ba3b_gb300_8_mxfp8"),
    ("qwen330ba3b_gb200_8_mxfp8", "qwen330ba3b_gb200_8_mxfp8"),
    ("qwen330ba3b_b300_8_mxfp8", "qwen330ba3b_b300_8_mxfp8"),
    ("qwen3235ba22b_gb300_256_mxfp8", "qwen3235ba22b_gb300_256_mxfp8"),
    ("qwen3235ba22b_gb200_256_mxfp8", "qwen3235ba22b_gb200_256_mxfp8"),
    ("gptoss120b_gb300_64_bf16", "gptoss120b_gb300_64_mxfp8"),
    ("gptoss120b_gb200_64_bf16", "gptoss120b_gb200_64_mxfp8"),
    ("deepseekv3_gb300_256_mxfp8", "deepseekv3_gb300_256_mxfp8"),
    ("deepseekv3_gb200_256_mxfp8", "deepseekv3_gb200_256_mxfp8"),
    ("qwen330ba3b_h100_16_fp8", "qwen330ba3b_h100_16_fp8"),
    ("gptoss120b_b300_64_bf16", "gptoss120b_b300_64_mxfp8"),
    ("deepseekv3_b300_256_mxfp8", "deepseekv3_b300_256_mxfp8")))


def _miss_ms(case, step: float) -> float:
    """Milliseconds missed per MoE layer and micro-batch on the busiest rank."""
    job = case.job
    est = estimate(job)
    per_rank = job.model.num_moe_layers / job.plan.pp
    return 1e3 * (case.measured_step_s - step) / (est.num_microbatches * per_rank)


def pair_rows() -> list[dict]:
    """One dict per ``PAIRS`` entry: both rows' facts, measurements and estimates."""
    eager = {e["id"]: e for e in load_reference(EAGER)}
    graphed = {e["id"]: e for e in load_reference(GRAPHED)}
    out = []
    for a, b in PAIRS:
        ca, cb = case_from_entry(eager[a]), case_from_entry(graphed[b])
        off = copy.deepcopy(graphed[b])
        off["plan"]["fused_grouped_mlp"] = False
        ea, eb = estimate(ca.job).step_time_s, estimate(cb.job).step_time_s
        eb0 = estimate(case_from_entry(off).job).step_time_s
        pa, pb = ca.job.plan, cb.job.plan
        out.append(dict(
            eager=a, graphed=b, gpu=ca.job.cluster.gpu.name, graph=pb.cuda_graph,
            overlap=pb.ep_overlap, fused=cb.job.framework.fused_grouped_mlp,
            same=(pa.ep, pa.mbs, ca.job.dtype) == (pb.ep, pb.mbs, cb.job.dtype),
            ep=pa.ep, mbs=pa.mbs, dtype=ca.job.dtype,
            local=ca.job.model.num_experts // pa.ep,
            meas=(ca.measured_step_s, cb.measured_step_s), est=(ea, eb0, eb),
            miss=(_miss_ms(ca, ea), _miss_ms(cb, eb0), _miss_ms(cb, eb))))
    return out


@contextmanager
def _expert_host(fwd_s: float, bwd_s: float):
    """``moe_time.EXPERT_HOST_S`` set to ``(fwd_s, bwd_s)`` inside the block, restored after."""
    kept = moe_time.EXPERT_HOST_S
    moe_time.EXPERT_HOST_S = (fwd_s, bwd_s)
    try:
        yield
    finally:
        moe_time.EXPERT_HOST_S = kept


def host_whatif_rows() -> list[tuple[str, float, float]]:
    """``(id, error %, error % with each expert-path launch at a PyTorch Linear's host
    time)`` of every MoE row of ``moe_residuals.FILES`` that resolves (Table 3)."""
    out = []
    for path in FILES:
        for e in load_reference(path):
            case = case_from_entry(e)
            job = case.job
            if job is None or not job.model.is_moe or case.measured_step_s is None:
                continue
            base = estimate(job).step_time_s
            n_f, n_b = LAUNCHES[job.dtype if job.dtype in LAUNCHES else job.dtype.split("-")[0]]
            h = TORCH_LINEAR_HOST_S[host_cpu(job.cluster.gpu.name)]
            with _expert_host(n_f * h, n_b * h):
                what = estimate(job).step_time_s
            m = case.measured_step_s
            out.append((e["id"], 100 * (base / m - 1), 100 * (what / m - 1)))
    return out


def main() -> None:
    rows = pair_rows()
    print("| 26.04.01 row -> 26.06 row | 26.06: graph, EP overlap, fused MLP | measured s "
          "(ratio) | estimated s, 26.06 unfused / fused (ratio unfused / fused) | missed ms "
          "per MoE layer and micro-batch: 26.04 / 26.06 unfused / 26.06 fused | 26.04 miss "
          "beyond 26.06 fused, ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        (ma, mb), (ea, eb0, eb), (xa, xb0, xb) = r["meas"], r["est"], r["miss"]
        sw = "/".join("yes" if r[k] else "no" for k in ("graph", "overlap", "fused"))
        print(f"| {r['eager'][14:]} -> {r['graphed'][12:]} | {sw} | {ma:.2f} -> {mb:.2f} "
              f"({ma / mb:.2f}) | {ea:.2f} -> {eb0:.2f} / {eb:.2f} ({ea / eb0:.2f} / "
              f"{ea / eb:.2f}) | {xa:.2f} / {xb0:.2f} / {xb:.2f} | {xa - xb:.2f} |")
    print()
    print("| graphed pair, same ep, mbs and precision | host | local experts | launches per "
          "expert | extra ms per MoE layer and micro-batch | µs per local expert | µs per "
          "launch | PyTorch Linear host µs (#2053) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not (r["graph"] and r["same"]):
            continue
        extra = r["miss"][0] - r["miss"][2]
        n = launches_per_expert(r["dtype"])
        host = host_cpu(r["gpu"])
        print(f"| {r['eager'][14:]} | {host} | {r['local']} | {n} | {extra:.2f} | "
              f"{1e3 * extra / r['local']:.0f} | {1e3 * extra / (r['local'] * n):.1f} | "
              f"{1e6 * TORCH_LINEAR_HOST_S[host]:.2f} |")
    if "--host" not in sys.argv[1:]:
        return
    print()
    print("| MoE row | error, the model | error, each expert-path launch at a PyTorch Linear's "
          "host time |")
    print("|---|---|---|")
    res = host_whatif_rows()
    for rid, a, b in res:
        print(f"| {rid} | {a:+.1f} % | {b:+.1f} % |")
    mape = [sum(abs(r[i]) for r in res) / len(res) for i in (1, 2)]
    print(f"| all {len(res)} MoE rows, MAPE | {mape[0]:.2f} % | {mape[1]:.2f} % |")


if __name__ == "__main__":
    main()
