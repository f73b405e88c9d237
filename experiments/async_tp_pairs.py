#!/usr/bin/env python
"""torchtitan's async-TP rows beside their plain-TP twins: the model's async-TP credit against
the measured saving (docs/calibration.md §5.145).

    python experiments/async_tp_pairs.py

Each pair is one table's plain-TP row and its async-TP twin (same model, cluster, plan but
``tp_comm_overlap``). Per layer and micro-batch on the slowest stage (ms): ``raw`` the layer's
TP collectives as the plain row pays them (``n_tp · t_ar``, ``estimate.terms.layer_comm``),
``exp tp``/``exp as`` the exposed TP seconds of each row (the plain row's whole, the async
row's under §5.50's rule), ``credit`` their difference, and what async TP adds back on the
compute stream: ``pass`` its fused ops' HBM passes less the plain row's layout copies
(``async_tp.fused_pass_time``, ``tp_layout_copy_time``), ``gemm`` the chunked GEMMs and the
overlap clock (``gemm_time._tp_split``, ``OVERLAP_CLOCK_RATIO``, the separate projections
included). Then per step (s): the layers and micro-batches the layer figures multiply
(``slots·n``), the modelled saving (the two estimates' difference), the measured saving and
the two rows' errors.

Then the shares of the fused collectives ``R − U`` (``U`` the backward's two summed-dgrad
reduce-scatters the pass leaves unfused, §5.50) that each reading hides: ``rule`` §5.50's
(``max(R − U − 3·g, (R − U)/4)``: the quarter floor binds on every pair), ``per-op`` the pass
as the code runs it, each fused collective of ``C`` seconds beside its own matmuls of ``G``
seconds in ``tp`` pieces, ``max(C − G·(tp − 1)/tp, 0)`` exposed (``_pipelined_multi_all_gather_
and_consume``, ``_pipelined_produce_and_all2all``; the attention input's gather with the
three separate wq/wk/wv GEMMs and the feed-forward input's with w1/w3, ``split_projections.
projection_groups``; the backward's output-gradient gathers with wo's and w2's data
gradients; op SAC's rerun gathers with wk and w3 alone, full AC's with the forward's less w2's
reduce-scatter), and ``meas`` the share the measured saving implies with every other term as
modelled (``credit + (meas − model)/(slots·n)`` over ``R − U``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import comm_bytes, gemm_shapes, quantise  # noqa: E402
from strategies.cost.gemm_time import gemms_time_fwd  # noqa: E402
from strategies.cost.split_projections import projection_groups  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.scalar import plan_arrays  # noqa: E402
from strategies.estimate.terms.layer_comm import tp_collective_time  # noqa: E402

from experiments.titan_rows import row as titan_row  # noqa: E402

DATA = os.path.join("strategies", "reference", "data")
#: (file, plain-TP row, async-TP row)
PAIRS = (("heldout_2026b.json", "torchtitan_2506_8b_64gpu_bf16_tp",
          "torchtitan_2506_8b_64gpu_bf16_asynctp"),
         ("heldout_2026b.json", "torchtitan_2506_8b_64gpu_fp8tw_tp",
          "torchtitan_2506_8b_64gpu_fp8tw_asynctp"),
         ("heldout_2026b.json", "torchtitan_2506_70b_256gpu_bf16_tp",
          "torchtitan_2506_70b_256gpu_bf16_asynctp"),
         ("heldout_2026b.json", "torchtitan_2506_70b_256gpu_fp8tw_tp",
          "torchtitan_2506_70b_256gpu_fp8tw_asynctp"),
         ("published.json", "torchtitan_2412_70B_t4_2d", "torchtitan_2412_70B_t4_2d_asynctp"))


def _f(x) -> float:
    return float(np.ravel(x)[0])


def raw_tp(case) -> tuple[float, float]:
    """The layer's TP collectives as a plain row pays them, ``R = n_tp · t_ar``, and the
    backward's unfused share ``U`` (``estimate.terms.layer_comm.tp_exposed``), seconds per
    layer and micro-batch."""
    j = case.job
    P = plan_arrays(j.plan)
    r = estimate_arrays(j.model, j.cluster, j.dtype, P, j.framework, j.system)
    sc = r["stage_costs"]
    t_ar = tp_collective_time(sc, j.cluster, P.tp, P.sp)
    n = sc.tp_per_layer_fwd + sc.tp_per_layer_bwd + sc.tp_per_layer_recompute
    u = sc.tp_overlap_bwd_exposed * sc.tp_per_layer_bwd * t_ar
    return _f(n * t_ar), _f(u)


def per_op_exposed(case) -> tuple[float, float]:
    """(exposed seconds of the fused collectives per layer and micro-batch as the pass
    pipelines each beside its own matmuls, their whole seconds): module docstring."""
    j = case.job
    m, cl, p = j.model, j.cluster, j.plan
    tp, b, sy = p.tp, p.mbs, j.system

    def g(gemms: list[tuple]) -> float:
        return _f(gemms_time_fwd(gemms, tp, cl.gpu, j.dtype, True, sy))

    parts = [x for _, x in gemm_shapes.layer_gemm_parts(m, b, tp, p.cp, p.ep)]
    (_, qkv, _, _), (_, w13, _, _) = projection_groups(m, b, tp, p.cp)
    wo, w2 = g([parts[1]]), g([parts[3]])
    x = _f(comm_bytes.tp_comm_bytes_fwd(m, b, p.cp))
    ag = _f(cm.collective_time("allgather", x * _f(quantise.tp_allgather_bytes_factor(
        j.dtype, True)), tp, 1, cl))
    rs = _f(cm.collective_time("reduce_scatter", x, tp, 1, cl))

    def e(c: float, gs: float) -> float:
        return max(c - gs * (tp - 1) / tp, 0.0)
    fwd = [e(ag, g(qkv)), e(rs, wo), e(ag, g(w13)), e(rs, w2)]
    bwd = [e(ag, wo), e(ag, w2)]
    rc = {"full": fwd[:3], "op": [e(ag, g([qkv[1]])), e(ag, g([w13[1]]))]}.get(p.recompute, [])
    whole = 2 * (ag + rs) + 2 * ag + {"full": 2 * ag + rs, "op": 2 * ag}.get(p.recompute, 0.0)
    return sum(fwd) + sum(bwd) + sum(rc), whole


def pair(file: str, plain_id: str, async_id: str) -> dict:
    """One pair's figures (seconds; see the module docstring)."""
    cases = {c.id: c for c in load_cases(os.path.join(DATA, file), tiers=None)}
    a, b = titan_row(cases[plain_id]), titan_row(cases[async_id])
    k = a["slots"] * a["layers"]
    gemm = sum(b[x] - a[x] for x in ("gemm_f", "gemm_b", "gemm_w", "split_f", "split_b"))
    op, whole = per_op_exposed(cases[async_id])
    raw, u = raw_tp(cases[async_id])
    implied = a["layer_comm"] - b["layer_comm"] + (a["meas"] - b["meas"] - a["est"] + b["est"]) / k
    return {"id": async_id, "raw": raw, "exp_tp": a["layer_comm"],
            "exp_as": b["layer_comm"], "credit": a["layer_comm"] - b["layer_comm"],
            "pass": (b["copy_f"] + b["copy_b"]) - (a["copy_f"] + a["copy_b"]),
            "gemm": gemm, "k": k, "model": a["est"] - b["est"],
            "meas": a["meas"] - b["meas"], "err_tp": a["err"], "err_as": b["err"],
            "r_u": raw - u, "rule_exp": b["layer_comm"] - u, "op_exp": op, "op_whole": whole,
            "meas_exp": raw - u - implied}


def main() -> int:
    print("ms per layer and micro-batch: raw, exp tp, exp as, credit, pass, gemm; "
          "s per step: model/meas saving")
    hdr = (f"{'async row':42s} {'raw':>7s} {'exp tp':>7s} {'exp as':>7s} {'credit':>7s} "
           f"{'pass':>6s} {'gemm':>6s} {'slots*n':>8s} {'model s':>8s} {'meas s':>7s} "
           f"{'ratio':>6s} {'err tp':>7s} {'err as':>7s}")
    print(hdr)
    rows = []
    for f, p, a in PAIRS:
        t = pair(f, p, a)
        ratio = t["model"] / t["meas"] if t["meas"] else float("nan")
        print(f"{t['id']:42s} {1e3 * t['raw']:7.2f} {1e3 * t['exp_tp']:7.2f} "
              f"{1e3 * t['exp_as']:7.2f} {1e3 * t['credit']:7.2f} {1e3 * t['pass']:6.2f} "
              f"{1e3 * t['gemm']:6.2f} {t['k']:8.0f} {t['model']:8.3f} {t['meas']:7.3f} "
              f"{ratio:6.2f} {t['err_tp']:+6.1f}% {t['err_as']:+6.1f}%")
        rows.append(t)
    print("\nexposed ms of the fused collectives R - U per layer and micro-batch "
          "(share hidden in brackets)")
    print(f"{'async row':42s} {'R - U':>7s} {'rule':>14s} {'per-op':>14s} {'meas':>14s}")
    for t in rows:
        ru = t["r_u"]
        print(f"{t['id']:42s} {1e3 * ru:7.2f} "
              + " ".join(f"{1e3 * t[x]:7.2f} ({1 - t[x] / ru:4.2f})"
                         for x in ("rule_exp", "op_exp", "meas_exp")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
