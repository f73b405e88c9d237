"""``experiments/release_spread.py`` on a tiny synthetic reference file: which rows group (the
same workload and layout, two releases or more), and the floor in closed form: one
prediction per group at the 1/m-weighted median of its measured steps, each row's error
``|m - p| / m``."""
from __future__ import annotations

import copy
import json
import os

import pytest

from experiments.release_spread import (best_prediction, floor_errors, groups, pooled,
                                        read_rows, release)

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")


def _template(name: str, rid: str) -> dict:
    return next(r for r in json.load(open(os.path.join(DATA, name))) if r["id"] == rid)


def _row(t: dict, rid: str, step: float, **plan) -> dict:
    r = copy.deepcopy(t)
    r["id"], r["measured"] = rid, {"step_time_s": step}
    r.pop("derived", None)
    r["plan"].update(plan)
    return r


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    """Dense: three releases of one layout (10, 20, 40 s), two rows of one release sharing
    another, one row of a third layout (gbs 256); MoE: two releases of one layout (6, 9 s),
    the second starred (its notes say the table and the config disagree)."""
    d = _template("heldout_2026e.json", "mbridge2511_llama38b_gb200_8_fp8cs")
    m = _template("megatron_bridge_2604.json", "mbridge260401_qwen330ba3b_gb300_8_mxfp8")
    gbs = d["plan"]["global_batch"]
    rows = [_row(d, "relA_dense", 10.0), _row(d, "relB_dense", 20.0),
            _row(d, "relC_dense", 40.0),
            _row(d, "relA_twin1", 5.0, global_batch=2 * gbs),
            _row(d, "relA_twin2", 6.0, global_batch=2 * gbs),
            _row(d, "relB_other", 7.0, global_batch=4 * gbs),
            _row(m, "relA_moe", 6.0), _row(m, "relB_moe", 9.0)]
    rows[-1]["notes"] = "cells differ: ep 8 vs 16 (table vs config)"
    p = tmp_path_factory.mktemp("spread") / "synthetic.json"
    p.write_text(json.dumps(rows))
    return str(p)


def test_best_prediction_is_the_weighted_median_in_closed_form() -> None:
    assert best_prediction([20.0, 10.0]) == 10.0
    assert floor_errors([10.0, 20.0]) == [0.0, 0.5]           # (1 - m1/m2) / 2 per row: 0.25
    # weights 0.1, 0.05, 0.025: the first already holds more than half of 0.175
    assert best_prediction([40.0, 10.0, 20.0]) == 10.0
    # weights 1/4, 1/5, 1/6, 1/8 (total 0.7417): 1/4 + 1/5 = 0.45 first reaches half
    assert best_prediction([4.0, 5.0, 6.0, 8.0]) == 5.0
    assert floor_errors([4.0, 5.0, 6.0, 8.0]) == pytest.approx([0.25, 0.0, 1 / 6, 3 / 8])
    # the floor is the minimum: no other prediction does better on the group
    ms = [4.0, 5.0, 6.0, 8.0]
    best = sum(floor_errors(ms))
    for p in (3.9, 4.0, 4.5, 5.5, 6.0, 7.0, 8.0):
        assert sum(abs(m - p) / m for m in ms) >= best - 1e-12


def test_the_synthetic_file_groups_by_workload_layout_and_release(synthetic: str) -> None:
    rows = read_rows(synthetic)
    assert [r.id for r in rows] == ["relA_dense", "relB_dense", "relC_dense", "relA_twin1",
                                    "relA_twin2", "relB_other", "relA_moe", "relB_moe"]
    assert release("relA_twin1") == "relA"
    gs = groups(rows)
    # the twins share a key but one release: no group; the gbs-256 row has no partner
    assert [[r.id for r in g] for g in gs] == [["relA_dense", "relB_dense", "relC_dense"],
                                               ["relA_moe", "relB_moe"]]
    assert rows[3].key == rows[4].key != rows[0].key != rows[5].key
    assert [g[0].moe for g in gs] == [False, True]
    assert [r.cells_disputed for r in gs[1]] == [False, True]
    for g in gs:        # one plan, one estimate
        assert len({r.estimate_s for r in g}) == 1


def test_the_pooled_floor_in_closed_form(synthetic: str) -> None:
    rows = read_rows(synthetic)
    out = pooled(rows, groups(rows))
    n, n_read, fl, _, share, model_all = out["dense"]
    assert (n, n_read) == (3, 6)
    assert fl == pytest.approx((0 + 0.5 + 0.75) / 3)          # p = 10 s
    assert share == pytest.approx((0 + 0.5 + 0.75) / 6)
    n, n_read, fl, model, share, _ = out["MoE"]
    assert (n, n_read) == (2, 2)
    assert fl == pytest.approx((0 + 1 / 3) / 2) and share == pytest.approx(fl)   # p = 6 s
    est = rows[-1].estimate_s
    assert model == pytest.approx((abs(est - 6) / 6 + abs(est - 9) / 9) / 2)
    n, n_read, fl, _, share, _ = out["all"]
    assert (n, n_read) == (5, 8)
    assert fl == pytest.approx((1.25 + 1 / 3) / 5) and share == pytest.approx((1.25 + 1 / 3) / 8)
    assert model_all > 0
