"""``experiments/fp8_attention_ratios.py``: the BF16/FP8 time ratio per pass over the shapes
that ran in both types (docs/calibration.md §5.90)."""
from __future__ import annotations

import pytest

from experiments.fp8_attention_ratios import KEY, ratios


def _row(dtype: str, t: float, pass_: str = "fwd", det: str = "False", seq: str = "4096",
         ok: str = "True") -> dict:
    r = {k: "x" for k in KEY}
    r.update(profile_pass=pass_, deterministic_bwd=det, q_seqlen=seq, data_type=dtype,
             time_ms=str(t), success=ok)
    return r


def test_ratio_is_bf16_over_fp8_per_shape_and_pass():
    rows = [_row("bfloat16", 3.0), _row("fp8", 2.0), _row("bfloat16", 5.0, "bwd"),
            _row("fp8", 4.0, "bwd"), _row("bfloat16", 9.0, "bwd", det="True"),
            _row("fp8", 1.0, "bwd", det="True"),          # deterministic: left out
            _row("fp8", 1.0, seq="8192"),                   # no bf16 twin: left out
            _row("bfloat16", 7.0, seq="2048"), _row("fp8", 1.0, seq="2048", ok="False")]
    out = ratios(rows)
    assert out["fwd"] == [pytest.approx(1.5, rel=1e-12)]
    assert out["bwd"] == [pytest.approx(1.25, rel=1e-12)]


def test_rows_of_another_layout_are_skipped():
    assert ratios([{"data_type": "fp8", "success": "True"}]) == {}
