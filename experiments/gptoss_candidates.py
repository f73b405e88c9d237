#!/usr/bin/env python
"""What each named candidate for gpt-oss-120b's miss would have to be to hold it alone, per
MoE layer and micro-batch, for every Megatron-Bridge gpt-oss-120b reference row
(docs/calibration.md §5.175). Analytic, a few seconds.

    python experiments/gptoss_candidates.py

Columns, all from the model's own terms (``gptoss_layer_ops.layer_ops``, the estimate):

* ``miss``: (measured − estimated step) over micro-batches × layers on a stage, ms.
* ``attn``: the fused attention core (``attention_time_fwd``, forward + backward) and
  ``x attn``: how many times slower it would have to run to hold the miss alone; ``full``:
  the full-attention layers' part of it (the same model without its window, over the full
  layers' share ``(L − nw)/L``) and how many times slower they alone would have to run.
* ``unfused``: what Transformer Engine's UnfusedDotProductAttention would cost had it run:
  the bf16 probabilities it saves for the backward over the rank's layers (GB, against the
  GPU's memory) and its score tensors' HBM time per layer (``attention_counts.softmax_bytes_*``
  over the usable HBM rate, ms); ``unfused err``: the row's error had that HBM time replaced
  the fused core (a lower bound: the path's GEMMs over the whole square are left out).
* ``experts``: fc1 + fc2 (forward + backward) ms, the fraction of the dtype's peak the model
  prices them at, and the fraction they would run at if they held the miss.
* ``a2a``: the four expert all-to-alls (dispatch and combine, forward and backward) as the
  estimate times them (``comm.collective_time`` on the stage record's bytes, the call of
  ``layer_comm.ep_exposed``) and, in brackets, what the estimate leaves exposed (ms); their
  wire bytes per GPU (``ep_dispatch.ep_alltoall_bytes_fwd`` × (ep−1)/ep, MB); the rate the
  model's time implies and the rate at which they would hold the miss too (GB/s; with
  Megatron-Core's overlapped 1F1B, ``ep_overlap``, they would have to be slower still).
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.gptoss_layer_ops import layer_ops  # noqa: E402
from strategies.cost import attention_counts as ac  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import gemm_shapes  # noqa: E402
from strategies.cost.attention_time import attention_time_fwd  # noqa: E402
from strategies.cost.ep_dispatch import ep_alltoall_bytes_fwd  # noqa: E402
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.cost.moe_bytes import dispatch_element_bytes  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILES = ("strategies/reference/data/megatron_bridge_2604.json",
         "strategies/reference/data/heldout_2026b.json",
         "strategies/reference/data/published_2026.json")
#: the probabilities UnfusedDotProductAttention keeps for its backward, bytes per element (bf16)
SAVED_PROB_BYTES = 2.0


def gptoss_rows(files: tuple[str, ...] = FILES) -> list[tuple[str, object]]:
    """``(id, case)`` of every Megatron-Bridge gpt-oss-120b row of ``files``."""
    out = []
    for f in files:
        for e in load_reference(f):
            if "gptoss120b" in e["id"] and e["id"].startswith("mbridge"):
                out.append((e["id"], case_from_entry(e)))
    return out


def candidates(case) -> dict[str, float]:
    """The figures of one row (seconds, bytes, fractions; see the module docstring)."""
    job = case.job
    m, p, g, fw = job.model, job.plan, job.cluster.gpu, job.framework
    est = estimate(job)
    per = est.num_microbatches * m.num_layers / p.pp
    miss = (case.measured_step_s - est.step_time_s) / per
    a2a = est.breakdown_s["ep_comm"] / per
    rows, _ = layer_ops(job, a2a)
    by = {r[0]: r for r in rows}
    attn = sum(by[next(k for k in by if k.startswith("cuDNN fused attention"))][3:5])
    unwindowed = dataclasses.replace(m, sliding_window=None)
    full = sum(attention_time_fwd(unwindowed, p.mbs, p.tp, p.cp, p.flash_attn, g, 1.0, fw,
                                  job.system)) * (m.num_layers - m.num_windowed_layers) \
        / m.num_layers
    fc1 = sum(by[next(k for k in by if k.startswith("fc1 GroupedLinear"))][3:5])
    fc2 = sum(by[next(k for k in by if k.startswith("fc2 GroupedLinear"))][3:5])
    parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, None, p.etp,
                                         p.moe_imbalance)
    flops = 3 * sum(2 * c * M * N * K for part, (c, M, N, K, rp, *_) in parts
                    if part == "routed_mlp" and rp is not None)
    peak = g.peak(job.dtype)
    hbm = usable_hbm(g, job.system)
    unf_t = (ac.softmax_bytes_fwd(m, p.mbs, p.tp, p.cp, False)
             + ac.softmax_bytes_bwd(m, p.mbs, p.tp, p.cp, False)) / hbm
    saved = SAVED_PROB_BYTES * ac.score_elements_per_gpu(m, p.mbs, p.tp, p.cp) \
        * m.num_layers / p.pp
    disp = dispatch_element_bytes(fw.fp8_dispatch, job.dtype)
    wire = 2 * ep_alltoall_bytes_fwd(m, p.mbs, p.tp, p.cp, p.ep, p.moe_imbalance, disp) \
        * (p.ep - 1) / p.ep
    sc = stage_costs(job)
    etp = p.tp if p.etp is None else p.etp             # as gemm_shapes.layer_gemm_parts
    a2a_full = 2 * cm.collective_time("alltoall", sc.ep_bytes, p.ep, etp, job.cluster,
                                  sc.ep_remote_scale, sc.ep_nvlink_share)
    return {"miss": miss, "attn": attn, "attn_x": (attn + miss) / attn, "full": full,
            "full_x": (full + miss) / full,
            "unfused_saved": saved,
            "unfused_err": (est.step_time_s + (unf_t - attn) * per) / case.measured_step_s - 1, "gpu_mem": g.hbm_bytes, "unfused_t": unf_t,
            "experts": fc1 + fc2, "gemm_frac": flops / (fc1 + fc2) / peak,
            "gemm_frac_needed": flops / (fc1 + fc2 + miss) / peak,
            "a2a": a2a_full, "a2a_exposed": a2a, "a2a_bytes": wire,
            "a2a_rate": wire / a2a_full, "a2a_rate_needed": wire / (a2a_full + miss)}


def main() -> None:
    print("| row | miss ms | attn ms | x attn | full ms | x full | unfused saved GB / GPU GB | unfused ms | unfused err | "
          "experts ms | of peak → needed | a2a ms (exposed) | a2a MB | GB/s model → needed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rid, case in gptoss_rows():
        c = candidates(case)
        print(f"| {rid} | {1e3 * c['miss']:.2f} | {1e3 * c['attn']:.2f} | {c['attn_x']:.1f} | "
              f"{1e3 * c['full']:.2f} | {c['full_x']:.1f} | "
              f"{c['unfused_saved'] / 1e9:.0f} / {c['gpu_mem'] / 1e9:.0f} | "
              f"{1e3 * c['unfused_t']:.2f} | {100 * c['unfused_err']:+.0f} % | "
              f"{1e3 * c['experts']:.2f} | "
              f"{c['gemm_frac']:.2f} → {c['gemm_frac_needed']:.2f} | {1e3 * c['a2a']:.2f} "
              f"({1e3 * c['a2a_exposed']:.2f}) | "
              f"{c['a2a_bytes'] / 1e6:.0f} | {c['a2a_rate'] / 1e9:.0f} → "
              f"{c['a2a_rate_needed'] / 1e9:.0f} |")


if __name__ == "__main__":
    main()
