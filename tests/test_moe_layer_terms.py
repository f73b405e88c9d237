"""experiments/moe_layer_terms.py (docs/calibration.md §5.171): its terms of one MoE layer and
micro-batch sum to the estimate, the GEMM split is the layer's GEMMs, the wrapped function is
restored, and the finding: the GPU-rate terms' cross-GPU ratio is what the graphed rows
measure, the eager rows' is not, and the Grace-hosted eager row misses more than its x86 twin."""
from __future__ import annotations

import glob
import math
from types import SimpleNamespace

import pytest

from experiments import moe_layer_terms as t
from experiments.calibration_ablation import cost_holders
from experiments.qwen3_h100_residual import parts
from strategies.cost import layer_time
from strategies.reference.cases import case_from_entry, load_reference


@pytest.fixture(scope="module")
def rows() -> dict:
    return {lab: t.row_terms(f, rid) for f, rid, lab in t.ROWS}


def test_terms_sum_to_the_estimate_and_the_gemms_split(rows) -> None:
    for f, rid, lab in t.ROWS:
        terms, total, meas, facts = rows[lab]
        assert math.isclose(sum(v for _, v in terms), total, rel_tol=1e-9)
        d = dict(terms)
        whole = dict(parts(t._entry(f, rid))[0])[t.GEMMS]
        split = sum(d[k] for k in t.RATE_TERMS[:3])
        slow = t.gemm_split(t._entry(f, rid))[3]
        assert slow >= 1.0
        assert math.isclose(split, slow * whole, rel_tol=1e-9)
        assert d[t.REST] > 0
        assert d[t.RATE_TERMS[2]] > d[t.RATE_TERMS[0]] > d[t.RATE_TERMS[1]] > 0
        assert meas > 0 and facts["local"] in (8, 16)


def test_the_wrapped_function_is_restored() -> None:
    before = [getattr(m, "moe_host_time") for m in cost_holders(layer_time, "moe_host_time")]
    t.gemm_split(t._entry(*t.ROWS[0][:2]))
    after = [getattr(m, "moe_host_time") for m in cost_holders(layer_time, "moe_host_time")]
    assert before == after


def test_mxfp8_eager_rows_carry_the_split_quantise_launches(rows) -> None:
    key = "per-expert quantise launches (split_quantize)"
    for lab in ("26040 gb300", "26040 b300", "26040 gb200", "26040 b200"):
        assert dict(rows[lab][0])[key] > 0            # 16 local experts, unfused GroupedLinear
    for lab in ("2606 gb300", "2606 b300", "2606 gb200"):
        assert dict(rows[lab][0])[key] == 0.0         # TE's fused grouped MLP


def test_finding_graphed_ratios_hold_eager_grace_ratios_do_not(rows) -> None:
    pairs = {(a, b): (meas, model, rate) for a, b, meas, model, rate in t.table2(rows)}
    # the graphed same-chip pair: the model's GPU-rate ratio within 3 % of the measured one
    meas, model, rate = pairs[("2606 gb300", "2606 b300")]
    assert abs(meas / rate - 1) < 0.03 and abs(meas / model - 1) < 0.03
    meas, model, rate = pairs[("2606 gb300", "2606 gb200")]
    assert abs(meas / model - 1) < 0.02
    # eager, Grace against x86 on the same chip and plan: the Grace row is slower than modelled
    for pair in (("26040 gb300", "26040 b300"), ("26040 gb200", "26040 b200")):
        meas, model, _ = pairs[pair]
        assert meas / model > 1.02
    # and the Grace row misses more per MoE layer and micro-batch than its x86 twin
    miss = {lab: rows[lab][2] - rows[lab][1] for lab in rows}
    assert miss["26040 gb300"] > miss["26040 b300"] + 0.3
    assert miss["26040 gb200"] > miss["26040 b200"] + 0.3
    # the graphed rows are priced within half a millisecond per MoE layer and micro-batch
    assert all(abs(miss[lab]) < 0.5 for lab in ("2606 gb300", "2606 b300", "2606 gb200"))


@pytest.mark.slow
def test_by_gpu_reads_reference_mape_rows(monkeypatch) -> None:
    """``--by-gpu`` over every file that holds a B300 MoE entry (the rows asserted on, each
    one priced; GB200 dense rows are among them), the other files not priced (by_gpu's
    GPU and kind come from each entry's job, read here for every file): no file holds an
    A100 MoE entry, so none of by_gpu's rows can be one."""
    kinds = {}
    for f in sorted(glob.glob(t.DATA + "*.json")):
        if f.endswith("/published.json") or "schedule_studies" in f:  # as by_gpu
            continue
        jobs = [case_from_entry(e).job for e in load_reference(f)]
        kinds[f] = {("moe" if j.model.is_moe else "dense", j.cluster.gpu.name)
                    for j in jobs if j is not None}
    assert not any(k == "moe" and g.startswith("A100") for ks in kinds.values() for k, g in ks)
    b300_files = [f for f, ks in kinds.items() if ("moe", "B300-SXM-288GB") in ks]
    monkeypatch.setattr(t, "glob", SimpleNamespace(glob=lambda pattern: b300_files))
    acc = t.by_gpu()
    b300 = acc[("moe", "B300-SXM-288GB")]
    assert len(b300) >= 5 and all(e < 0 for e in b300)   # every B300 MoE row too fast
    assert ("dense", "GB200") in acc
    assert not any(g.startswith("A100") for k, g in acc if k == "moe")
