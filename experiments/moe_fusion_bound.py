#!/usr/bin/env python
"""What a fused, fully graphed MoE stack could remove, by the model's own prices, against
what the rows miss and what NVIDIA measured such stacks to save (docs/calibration.md §5.17).

Run (a few seconds, analytic only):

    python experiments/moe_fusion_bound.py          # Markdown tables on stdout

NVIDIA's fused grouped MLP (technical blog "Boosting MoE Training Throughput with Advanced
Fusion Kernels", 2026-06-15; Transformer Engine's ``NVTE_CUTEDSL_FUSED_GROUPED_MLP``) names
three costs of the unfused expert path: memory-bound activation functions, CPU
synchronisation (the token counts the host needs before the grouped GEMM; removing it allows
a full-iteration CUDA graph) and separate quantisation passes. Table 1 prices, per MoE layer
and micro-batch of each 26.04 / 25.11 MoE row, everything the model charges that such a stack
removes: the routed experts' activation function (forward, and its backward at twice the
forward's bytes, ``layer_time``; gpt-oss's eager clamp with it), the routed activation casts
(``quantise``'s ``routed_unfused`` part, 0 in bf16), TE's per-expert quantisation padding
copies (``moe_time.expert_pad_time``, 0 in bf16), the token permutations, and the host
time the model exposes (the dispatcher's sync, ``moe_sync_time``, and the expert path's host
launches, ``moe_host_time``), beside the time the row still misses: "removable / missed"
below 1 means that even pricing these parts at twice their bandwidth cost would not close the
miss. They all scale with the tokens, where the miss does not (§5.17).

Table 2: NVIDIA's own A/B of the same rows, 26.04 (unfused, TE-scoped partial CUDA graphs)
against 26.08 (fused grouped MLP, HybridEP, EP overlap, full-iteration graph; the rows of
``moe_residuals.ROWS_2608`` whose ep and micro-batch equal the 26.04 entry's, so the
micro-batch count is the same): the time saved per MoE layer and micro-batch, measured and
estimated (the estimate switches the stated plan fields, MXFP8 attention among them, and the
fused casts, nothing else).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_residuals import FILES, ROWS_2608, residual_rows, rows_2608  # noqa: E402
from strategies.cost import elementwise_bytes, elementwise_time, hbm_rate, moe_time  # noqa: E402
from strategies.plan import DISPATCHERS  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.precision import get_precision  # noqa: E402


def removable_ms(job) -> dict[str, float]:
    """Milliseconds per MoE layer and micro-batch (forward + backward) the model charges for
    what a fused, fully graphed expert path removes (module doc), by part."""
    m, p, gpu, fw, dtype = job.model, job.plan, job.cluster.gpu, job.framework, job.dtype
    b, tp, cp, ep = p.mbs, p.tp, p.cp, p.ep
    share = m.layer_shares()["moe"]
    hbm = hbm_rate.usable_hbm(gpu)
    width = m.moe_router_topk * m.expert_ffn
    act = 3 * elementwise_bytes.activation_fn_bytes_fwd(m, b, tp, cp, width) / hbm
    clamp = sum(elementwise_time.eager_variant_time(m, b, tp, cp, gpu, 1.0, fw, rope=False)) / share
    prec, copies = get_precision(dtype), gpu.cast_copies(dtype)
    T = b * m.seq_length / cp
    elems = 3 * T * width / tp                      # fc2's input and fc1's gated dY
    cast = elems * (prec.cast_bytes(copies, False) - prec.cast_bytes(copies, True)) / hbm \
        if fw.grouped_mlp_casts else 0.0
    code = DISPATCHERS.index(p.moe_dispatcher)
    perm = sum(moe_time.moe_permute_time(m, b, tp, cp, ep, gpu, 1.0, code)) / share
    pad = sum(moe_time.expert_pad_time(m, b, tp, cp, gpu, dtype, fw=fw)) / share
    sync = moe_time.moe_sync_time(m, fw, gpu, code) / share
    host = sum(moe_time.moe_host_time(m, b=b, tp=tp, cp=cp, ep=ep, gpu=gpu, dtype=dtype, fw=fw)) \
        / share
    return {k: 1e3 * float(v) for k, v in (("activation", act + clamp), ("casts", cast),
                                           ("padding", pad), ("permute", perm),
                                           ("sync + host", sync + host))}


def table1() -> list[tuple]:
    """``(id, GPU, dtype, missed ms, activation, casts, padding, permute, sync + host,
    removable, removable / missed)`` of every MoE row with a positive miss."""
    out = []
    for path in FILES:
        entries = {e["id"]: e for e in load_reference(path)}
        for r in residual_rows(path):
            if r[7] <= 0:
                continue
            job = case_from_entry(entries[r[0]]).job
            parts = removable_ms(job)
            total = sum(parts.values())
            out.append((r[0], r[1], r[2], r[7], *parts.values(), total, total / r[7]))
    return out


def table2() -> list[tuple]:
    """``(26.04 id, measured 26.04 s, measured 26.08 s, saved ms measured, estimated 26.04 s,
    estimated 26.08 s, saved ms estimated)`` per MoE layer and micro-batch, for the 26.08 rows
    with the 26.04 entry's ep and micro-batch."""
    base = {e["id"]: e for e in load_reference(FILES[0])}
    r04 = {r[0]: r for r in residual_rows(FILES[0])}
    out = []
    for (rid, ep, mbs, gbs, *_), r in zip(ROWS_2608, rows_2608()):
        job = case_from_entry(base[rid]).job
        if (ep, mbs, gbs) != (job.plan.ep, job.plan.mbs, job.plan.gbs):
            continue
        n = (job.plan.gbs / (job.plan.dp * job.plan.mbs)) * job.model.num_moe_layers \
            / job.plan.pp
        m04, e04 = r04[rid][4], r04[rid][5]
        out.append((rid, m04, r[3], 1e3 * (m04 - r[3]) / n, e04, r[4],
                    1e3 * (e04 - r[4]) / n))
    return out


def main() -> None:
    print("| run | GPU | precision | missed ms | activation | casts | padding | permute | "
          "sync + host | removable ms | removable / missed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table1():
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | "
              f"{r[6]:.2f} | {r[7]:.2f} | {r[8]:.2f} | {r[9]:.2f} | {r[10]:.2f} |")
    print()
    print("| 26.04 entry | measured 26.04 s | measured 26.08 s | saved ms per MoE layer and "
          "micro-batch, measured | estimated 26.04 s | estimated 26.08 s | saved ms, estimated |")
    print("|---|---|---|---|---|---|---|")
    for r in table2():
        print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | "
              f"{r[6]:.2f} |")


if __name__ == "__main__":
    main()
