#!/usr/bin/env python
"""torchtitan's async TP rows: the model's exposed TP seconds per layer against a per-op
reading of Inductor's micro-pipeline pass (docs/calibration.md §5.84, a what-if; the model is
not changed by it).

    python experiments/async_tp_windows.py

The pass (pytorch ``torch/_inductor/fx_passes/micro_pipeline_tp.py``) fuses an all-gather
with the matmuls that read the gathered tensor as their left operand
(``_find_consumer_matmuls``) and a reduce-scatter with the one matmul producing its input
(``_find_producer_matmul``); ``symm_mem``'s ``_pipelined_all_gather_and_consume`` then overlaps
each shard's copy with the previous shard's matmul, so a fused collective of ``C`` seconds
beside its own matmuls of ``G`` seconds exposes about ``max(C - G·(tp-1)/tp, 0)``. Per layer
and micro-batch: forward, the attention input's all-gather beside wq/wk/wv, wo's
reduce-scatter beside wo, the feed-forward input's all-gather beside w1/w3, w2's
reduce-scatter beside w2; backward, the output gradients' all-gathers beside wo's and w2's
data-gradient GEMMs (the weight gradient reads the gathered tensor transposed: not a
consumer), the two summed-dgrad reduce-scatters unfused (whole); recomputation, full AC the
forward's less w2's reduce-scatter (early stop), op SAC the two all-gathers beside the
matmuls its policy reruns (every second ``mm`` of the block: wk, w3). The model's rule
instead pools the fused collectives behind three forward-GEMM windows with a quarter
exposed (``tp_overlap_chunks``, §5.50). Columns: ms per layer and micro-batch, and the step
seconds the per-op reading would add (``layers/pp · micro-batches``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import comm_bytes, gemm_shapes, gemm_time  # noqa: E402
from strategies.cost import quantise  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.scalar import plan_arrays  # noqa: E402

DATA = os.path.join("strategies", "reference", "data")
FILES = ("heldout_2026b.json", "published.json", "published_2026.json")


def _f(x) -> float:
    return float(np.ravel(x)[0])


def exposed(c: float, g: float, tp: int) -> float:
    """A fused collective of ``c`` seconds beside its own matmuls of ``g`` seconds."""
    return max(c - g * (tp - 1) / tp, 0.0)


def row(case) -> dict:
    j = case.job
    m, cl, p = j.model, j.cluster, j.plan
    tp, b = p.tp, p.mbs
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, p.cp, p.ep)
    g = [_f(gemm_time.gemms_time_fwd([x], tp, cl.gpu, j.dtype, True, j.system)) for _, x in parts]
    qkv, wo, w13, w2 = g[0], g[1], g[2], g[3]
    x = _f(comm_bytes.tp_comm_bytes_fwd(m, b, p.cp))
    ag = _f(cm.collective_time("allgather", x * _f(quantise.tp_allgather_bytes_factor(
        j.dtype, True)), tp, 1, cl))
    rs = _f(cm.collective_time("reduce_scatter", x, tp, 1, cl))
    kv = m.kv_heads * m.head_dim
    fwd = [exposed(ag, qkv, tp), exposed(rs, wo, tp), exposed(ag, w13, tp),
           exposed(rs, w2, tp)]
    bwd = [exposed(ag, wo, tp), exposed(ag, w2, tp), rs, rs]
    if p.recompute == "full":
        rc = fwd[:3]
    elif p.recompute == "op":
        rc = [exposed(ag, qkv * kv / (m.hidden_size + 2 * kv), tp), exposed(ag, w13 / 2, tp)]
    else:
        rc = []
    r = estimate_arrays(m, cl, j.dtype, plan_arrays(p), j.framework)
    model = _f(r["layer_comm_s"])
    per_op = sum(fwd) + sum(bwd) + sum(rc)
    steps = m.num_layers / p.pp * p.gbs / (b * p.dp)
    return {"id": case.id, "rc": p.recompute, "model": model, "per_op": per_op,
            "fwd": sum(fwd), "bwd": sum(bwd), "rc_s": sum(rc),
            "step": steps * (per_op - model)}


def main() -> int:
    print(f"{'row':44s} {'rc':4s} {'model ms':>8s} {'per-op':>7s} {'fwd':>6s} {'bwd':>6s} "
          f"{'rerun':>6s} {'step +s':>8s}")
    for name in FILES:
        for c in load_cases(os.path.join(DATA, name), tiers=None):
            if "torchtitan" not in c.id or c.job is None or not c.job.plan.tp_comm_overlap:
                continue
            t = row(c)
            print(f"{t['id']:44s} {t['rc']:4s} {1e3 * t['model']:8.3f} {1e3 * t['per_op']:7.3f} "
                  f"{1e3 * t['fwd']:6.3f} {1e3 * t['bwd']:6.3f} {1e3 * t['rc_s']:6.3f} "
                  f"{t['step']:+8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
