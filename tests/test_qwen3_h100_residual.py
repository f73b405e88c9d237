"""experiments/qwen3_h100_residual.py: its parts of one MoE layer and micro-batch add up to the
estimate, the wrapped cost functions are restored, and the A/B table is the estimate's."""
from __future__ import annotations

import math

from experiments import qwen3_h100_residual as q
from experiments.calibration_ablation import cost_holders
from strategies.cost import layer_time
from strategies.estimate import estimate
from strategies.reference.cases import case_from_entry


def test_parts_sum_to_the_estimate_and_the_functions_are_restored() -> None:
    before = {(m, n): getattr(m, n) for n in q.TERMS for m in cost_holders(layer_time, n)}
    assert len(before) > len(q.TERMS)          # each term's module and layer_time at least
    named, total = q.parts(q._entry(*q.ROWS[0]))
    assert all(getattr(m, n) is f for (m, n), f in before.items())
    assert math.isclose(sum(v for _, v in named), total, rel_tol=1e-12)
    d = dict(named)
    # current scaling's per-expert quantise launches are priced on this row (§5.59)
    assert d["per-expert quantise launches (current scaling)"] > 0
    assert d["expert all-to-all (HybridEP: 2 dispatch + 2 combine)"] > 0


def test_rows_and_ab_are_the_estimates() -> None:
    rid, dt, disp, m, e, err, mm, em, miss = q.row_table()[0]
    job = case_from_entry(q._entry(*q.ROWS[0])).job
    assert (dt, disp) == ("fp8-current", "hybridep") and e == estimate(job).step_time_s
    assert math.isclose(err, 100 * (e / m - 1), rel_tol=1e-12)
    mb, mf, eb, ef, xb, xf = q.ab_table()
    assert (mb, mf, ef) == (q.EAGER_BF16_ALLTOALL_S, m, e) and eb > ef


def test_hybrid_ratios_follow_the_readme_columns() -> None:
    for op, kernel, torch in q.hybrid_h100_ratios():
        t, k = next((t, k) for o, t, k in q.HYBRID_H100_EP16 if o == op)
        assert math.isclose(torch, kernel * t / k, rel_tol=1e-12) and torch < kernel
