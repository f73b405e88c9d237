"""torchtitan's async-TP rows beside their plain-TP twins (docs/calibration.md §5.145):
the credit the model gives them is §5.50's rule at its quarter floor, and the per-op
reading of the pass (each fused collective beside its own matmuls) stays its closed form."""
from __future__ import annotations

import pytest

from experiments.async_tp_pairs import PAIRS, pair


@pytest.mark.parametrize("file,plain,asy", PAIRS)
def test_the_plain_twin_pays_every_collective_and_the_async_row_the_quarter_floor(
        file: str, plain: str, asy: str) -> None:
    t = pair(file, plain, asy)
    # the plain row exposes the layer's TP collectives whole (no TP overlap)
    assert t["exp_tp"] == pytest.approx(t["raw"], rel=1e-12)
    # async TP: max(R - U - 3g, (R - U)/4) + U with the floor binding on every pair
    assert t["rule_exp"] == pytest.approx(t["r_u"] / 4, rel=1e-12)
    assert t["credit"] == pytest.approx(0.75 * t["r_u"], rel=1e-12)
    # the per-op reading exposes no more than the fused collectives' whole seconds
    assert 0.0 <= t["op_exp"] <= t["op_whole"]


def test_one_config_measured_twice_gives_two_savings_the_model_cannot_tell_apart() -> None:
    by = {a: pair(f, p, a) for f, p, a in PAIRS}
    old = by["torchtitan_2412_70B_t4_2d_asynctp"]
    new = by["torchtitan_2506_70b_256gpu_fp8tw_asynctp"]
    # the same model, cluster, plan and float8 recipe: one modelled saving to 1e-12
    assert old["model"] == pytest.approx(new["model"], rel=1e-12)
    # the two tables measured savings 2.7x apart (Dec 2024 vs June 2025 PyTorch)
    assert new["meas"] > 2.5 * old["meas"]
