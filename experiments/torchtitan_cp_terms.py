#!/usr/bin/env python
"""torchtitan's December 2024 context-parallel rows (Tables 2 and 6 of
``benchmarks/llama3_h100_202412_torchtitan.md``) term by term (docs/calibration.md §5.186):
per row the measured and modelled step, and the model's attention core (the SDPA kernels),
the ring's exchanges (``ring_attention.torch_ring_stalls``), its merges
(``merge_bytes_fwd``) and backward accumulations (``accum_bytes_bwd``) and the rest, each
in seconds of the step; analytic.

A term's step seconds are the estimate less the estimate with that term at zero (the
pipeline's bubble included), so they add up to the step; the attention core's are its
per-layer seconds times the layer passes the merge's delta implies. The same per unit of
attention (``cp`` units of a 32k-token causal block per GPU; every other term per GPU is the
same across a table) gives the per-unit tables.

    python experiments/torchtitan_cp_terms.py
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
from typing import Iterator

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_time, hbm_rate, token_counts  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import ring_attention as ring  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import Case, case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data", "published.json")
#: the two tables' groups, cp 1, 2, 4, 8 each
GROUPS = ("torchtitan_2412_8B_t2_cp", "torchtitan_2412_405B_t6_cp")
#: ``ring_attention``'s functions a term's what-if sets to zero
TERMS = {"merge": "merge_bytes_fwd", "accum": "accum_bytes_bwd", "exchange": "torch_ring_stalls"}


def cases() -> dict[str, Case]:
    """The eight rows, by id, in table order."""
    rows = load_reference(DATA)
    return {r["id"]: case_from_entry(r, rows) for r in rows
            if any(r["id"].startswith(g) for g in GROUPS)}


@contextlib.contextmanager
def zeroed(name: str) -> Iterator[None]:
    """``ring_attention.<name>`` returns zeros (a tuple of two for the stalls) inside the
    block; restored after. A what-if, not a model."""
    saved = getattr(ring, name)
    setattr(ring, name, (lambda *a, **k: (0.0, 0.0)) if name == "torch_ring_stalls"
            else (lambda *a, **k: 0.0))
    try:
        yield
    finally:
        setattr(ring, name, saved)


def layer_core(case: Case) -> tuple[float, float, float, float]:
    """(core forward, core backward, merge forward, accumulation backward) seconds of one
    layer and micro-batch: the SDPA kernels (``attention_time_fwd`` at the plan's overlap
    clock, ``StageInputs.slow``, less the ring's HBM passes) and the ring's passes at the
    usable HBM rate."""
    job = case.job
    P, m, gpu = job.plan, job.model, job.cluster.gpu
    si = stage_inputs(m, job.cluster, job.dtype, PlanArrays.from_plans([P]), job.framework,
                      job.system)
    fw, sy, slow = si.fw, si.sy, float(si.slow[0])
    a_f, a_b = attention_time.attention_time_fwd(m, P.mbs, P.tp, P.cp, P.flash_attn, gpu, slow,
                                                 fw, sy)
    hbm = hbm_rate.usable_hbm(gpu, sy)
    mf = float(ring.merge_bytes_fwd(m, P.mbs, P.tp, P.cp, fw.cp_kv_heads)) / hbm
    ab = float(ring.accum_bytes_bwd(m, P.mbs, P.tp, P.cp, fw.cp_kv_heads,
                                    fw.attention_kernel)) / hbm
    return float(a_f) - mf, float(a_b) - ab, mf, ab


def row_terms(case: Case) -> dict[str, float]:
    """One row's step (seconds): measured, modelled, and the model's core, exchange, merge,
    accumulation and rest; the forward and backward layer passes the merge and accumulation
    deltas imply (0 where ``cp`` is 1; ``main`` gives every row its table's cp 2 row's)."""
    t = estimate(case.job).step_time_s
    out = {"measured": case.measured_step_s, "model": t}
    for k, fn in TERMS.items():
        with zeroed(fn):
            out[k] = t - estimate(case.job).step_time_s
    c_f, c_b, mf, ab = layer_core(case)
    out["passes_f"] = out["merge"] / mf if mf else 0.0
    out["passes_b"] = out["accum"] / ab if ab else 0.0
    out["core_f"], out["core_b"] = c_f, c_b
    return out


def main() -> None:
    cs = cases()
    rows = {rid: row_terms(c) for rid, c in cs.items()}
    for g in GROUPS:   # one schedule a table: every row takes the cp 2 row's layer passes
        r2 = rows[g + "2"]
        for c in (1, 4, 8):
            rows[f"{g}{c}"]["passes_f"], rows[f"{g}{c}"]["passes_b"] = (r2["passes_f"],
                                                                        r2["passes_b"])
    for r in rows.values():
        r["core"] = r["passes_f"] * r["core_f"] + r["passes_b"] * r["core_b"]
        r["rest"] = r["model"] - r["core"] - r["exchange"] - r["merge"] - r["accum"]
    print("Table 1: each row's step, seconds (model terms add up to the model's step)\n")
    print("| row | measured | model | error | attention core | ring exchanges | merges (fwd) "
          "| accumulations (bwd) | rest | layer passes fwd / bwd |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rid, r in rows.items():
        print(f"| {rid} | {r['measured']:.3f} | {r['model']:.3f} "
              f"| {100 * (r['model'] / r['measured'] - 1):+.1f} % | {r['core']:.3f} "
              f"| {r['exchange']:.3f} | {r['merge']:.3f} | {r['accum']:.3f} | {r['rest']:.3f} "
              f"| {r['passes_f']:.1f} / {r['passes_b']:.1f} |")
    print("\nTable 2: seconds per added unit of attention (cp k -> 2k adds k units per GPU)\n")
    print("| table | step | measured | model | core | exchanges | merges | accumulations "
          "| rest |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for g in GROUPS:
        for a, b in ((1, 2), (2, 4), (4, 8)):
            ra, rb = rows[f"{g}{a}"], rows[f"{g}{b}"]
            d = {k: (rb[k] - ra[k]) / a for k in ("measured", "model", "core", "exchange",
                                                  "merge", "accum", "rest")}
            print(f"| {g.split('_')[2]} | cp {a} -> {b} | {d['measured']:.3f} | {d['model']:.3f} "
                  f"| {d['core']:.3f} | {d['exchange']:.3f} | {d['merge']:.3f} "
                  f"| {d['accum']:.3f} | {d['rest']:.3f} |")
    print("\nTable 3: seconds per unit of attention the step leaves once the model's rest is "
          "taken off ((step - rest) / cp), and that over the table's cp 1 row\n")
    print("| row | measured | model | measured / cp 1 | model / cp 1 |")
    print("|---|---:|---:|---:|---:|")
    for g in GROUPS:
        one = rows[g + "1"]
        m1, o1 = one["measured"] - one["rest"], one["model"] - one["rest"]
        for c in (1, 2, 4, 8):
            r = rows[f"{g}{c}"]
            m, o = (r["measured"] - r["rest"]) / c, (r["model"] - r["rest"]) / c
            print(f"| {g}{c} | {m:.3f} | {o:.3f} | {m / m1:.3f} | {o / o1:.3f} |")
    print("\nTable 4: one layer's ring traffic against one step's attention core, ms "
          "(``torch_ring_stalls``' inputs: the K/V all-gather G, the fp32 dK/dV hop S, one "
          "step's forward and backward core)\n")
    print("| row | G | S | step fwd | step bwd | stall fwd | stall bwd |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rid, c in cs.items():
        if c.job.plan.cp > 1:
            g = ring_traffic(c)
            print(f"| {rid} | " + " | ".join(f"{1e3 * v:.1f}" for v in g) + " |")
    print("\nTable 5: the closest any model of the code's form comes, t(c) = t(1) + d + B(c - 1) "
          "with d, B >= 0 and t(1) the cp 1 row's measurement (minimax relative error over "
          "cp 2, 4, 8; a diagnostic, not a model)\n")
    print("| table | d s | B s | errors cp 2 / 4 / 8 | max | the model's errors |")
    print("|---|---:|---:|---|---:|---|")
    for g in GROUPS:
        meas = [rows[f"{g}{c}"]["measured"] for c in (2, 4, 8)]
        e, d, b = affine_floor(rows[g + "1"]["measured"], (2, 4, 8), meas)
        errs = [(rows[g + "1"]["measured"] + d + b * (c - 1)) / m - 1
                for c, m in zip((2, 4, 8), meas)]
        model = [rows[f"{g}{c}"]["model"] / rows[f"{g}{c}"]["measured"] - 1 for c in (2, 4, 8)]
        print(f"| {g.split('_')[2]} | {d:.3f} | {b:.3f} | "
              + " / ".join(f"{100 * x:+.1f}" for x in errs) + f" % | {100 * e:.2f} % | "
              + " / ".join(f"{100 * x:+.1f}" for x in model) + " % |")


def affine_floor(t1: float, cps: tuple[int, ...], measured: list[float]
                 ) -> tuple[float, float, float]:
    """(e, d, B): the least e such that some ``d, B >= 0`` put ``t1 + d + B·(c - 1)`` within
    relative error ``e`` of every ``measured`` step (seconds) at its ``c`` in ``cps``; the
    minimax linear programme solved exactly at its vertices (every three of its constraints
    tight, the feasible one with the least e)."""
    rows, rhs = [], []
    for c, m in zip(cps, measured):   # ±(t1 + d + B(c-1) - m) <= e·m
        for sg in (1.0, -1.0):
            rows.append((sg, sg * (c - 1), -m))
            rhs.append(-sg * (t1 - m))
    rows += [(-1.0, 0.0, 0.0), (0.0, -1.0, 0.0)]   # d >= 0, B >= 0
    rhs += [0.0, 0.0]
    A, y = np.array(rows), np.array(rhs)
    best = (np.inf, 0.0, 0.0)
    for idx in itertools.combinations(range(len(rows)), 3):
        sub = A[list(idx)]
        if abs(np.linalg.det(sub)) < 1e-12:
            continue
        x = np.linalg.solve(sub, y[list(idx)])
        if np.all(A @ x <= y + 1e-9) and x[2] < best[0]:
            best = (float(x[2]), float(x[0]), float(x[1]))
    return best


def ring_traffic(case: Case) -> tuple[float, ...]:
    """(G, S, step forward, step backward, stall forward, stall backward) seconds of one
    layer: ``torch_ring_stalls``' all-gather of ``cp`` K/V blocks over the context-parallel
    group and fp32 dK/dV hop (``comm.collective_time``, ``comm.p2p_time``), ``attn/cp`` of
    the layer's attention (core and ring passes, as the estimate passes it), and the stalls."""
    job = case.job
    P, m, cl = job.plan, job.model, job.cluster
    si = stage_inputs(m, cl, job.dtype, PlanArrays.from_plans([P]), job.framework, job.system)
    fw, sy, slow = si.fw, si.sy, float(si.slow[0])
    a_f, a_b = attention_time.attention_time_fwd(m, P.mbs, P.tp, P.cp, P.flash_attn, cl.gpu,
                                                 slow, fw, sy)
    block = token_counts.ACT_BYTES * float(ring.kv_block_elements(m, P.mbs, P.tp, P.cp,
                                                                  fw.cp_kv_heads))
    g = float(cm.collective_time("allgather", block * P.cp, P.cp, P.tp, cl))
    s = float(cm.p2p_time(ring.DKV_SCALE * block, cl, P.tp))
    st_f, st_b = ring.torch_ring_stalls(m, P.mbs, P.tp, P.cp, a_f, a_b, cl, fw.cp_kv_heads)
    return g, s, float(a_f) / P.cp, float(a_b) / P.cp, float(st_f), float(st_b)


if __name__ == "__main__":
    main()
