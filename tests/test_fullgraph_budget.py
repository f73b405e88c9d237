"""experiments/fullgraph_budget.py: the 26.06 full-iteration-graph rows' per-rank budget
(docs/calibration.md §5.182)."""
from __future__ import annotations

import os
import subprocess

import pytest

from experiments.fullgraph_budget import (PAD_MULTIPLE, RANK_CF, graphed_rows, rank_budget,
                                          row_table)

MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"


def test_rank_budget_closed_form() -> None:
    b = rank_budget(16384, 4, 1.5, 128, 16)
    assert (b.routed, b.budget, b.align) == (65536, 98304, 8 * (PAD_MULTIPLE - 1))
    assert b.sigma == pytest.approx(4 * 128.0, rel=1e-15)
    assert b.headroom == pytest.approx(98304 / (65536 + 2040), rel=1e-15)
    assert b.z == pytest.approx((98304 - 65536 - 2040) / 512, rel=1e-15)
    # int(1000·3·1.2) = 3600, rounded up to the next multiple of 256
    assert rank_budget(1000, 3, 1.2, 8, 8).budget == 3840


@pytest.mark.parametrize("args, field", [((0, 4, 1.5, 128, 16), "tokens"),
                                         ((16, 4, -1.0, 128, 16), "cf"),
                                         ((16, 4, 1.5, 128, 0), "ep")])
def test_rank_budget_refuses_bad_sizes(args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match=rf"{field}=.* must be > 0"):
        rank_budget(*args)


def test_rank_budget_refuses_ep_not_dividing_experts() -> None:
    with pytest.raises(ValueError, match="ep=3 must divide experts=128"):
        rank_budget(16, 4, 1.5, 128, 3)


def test_graphed_rows_read_dropless_with_room_to_spare() -> None:
    rows = graphed_rows()
    assert len(rows) == 10
    for row, sib in rows:
        t = row_table(row, sib)
        assert not t["pad"] and t["capacity"] is None, t["id"]
        assert t["budget"].headroom > 1.3 and t["budget"].z > 20, t["id"]
        # padding every expert to a per-expert capacity at the rank factor would be slower
        assert t["padded"] > 1.05 * t["read"], t["id"]


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge clone")
def test_rank_cf_is_the_tags() -> None:
    for cf, where in RANK_CF.values():
        path, lines = where.split(" L")
        last = int(lines.split(" ")[0].split("-")[-1])
        text = subprocess.run(["git", "-C", MIRROR, "show",
                               f"v0.5.0:scripts/performance/configs/{path}"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        assert f"moe_expert_rank_capacity_factor = {cf}" in text[last - 1], where
