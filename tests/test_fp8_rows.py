"""experiments/fp8_rows.py: every quantised reference row with its casts and, for current
scaling, the same job priced with delayed scaling (docs/calibration.md §5.118)."""
from __future__ import annotations

from experiments import fp8_rows as fr


def test_families():
    assert fr.family("GB300") == "GB300" and fr.family("GB200") == "GB200"
    assert fr.family("H100-SXM5-80GB") == "H100" and fr.family("H100-96GB-500W") == "H100"
    assert fr.family("B200-SXM-180GB") == "B200" and fr.family("MI300X") == "AMD"
    assert fr.family("H800-SXM5-80GB") == "H800-SXM5-80GB"


def test_nemo_25_rows_are_all_quantised_and_current_rows_carry_their_delayed_twin():
    recs = fr.quantised_rows(("nemo_performance_25.json",))
    assert len(recs) == 21
    for r in recs:
        assert abs(r["est"] / r["meas"] - 1 - r["err"] / 100) < 1e-12
        assert (r["delayed"] is not None) == (r["dtype"] == "fp8-current")
        if r["casts"] is not None and r["dtype"] in ("fp8", "fp8-current"):
            assert 0.0 < r["casts"] < 10.0, r["id"]
