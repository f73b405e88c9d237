"""experiments/hybrid_step_terms.py (docs/calibration.md §5.172): the Nemotron 3 rows' step
decomposed, and the finding's claims about how their misses compare across GPUs."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))

import hybrid_step_terms as hs  # noqa: E402
from moe_expert_launches import TORCH_LINEAR_HOST_S  # noqa: E402

B300 = ("mbridge2606_nemotron3super_b300_64_mxfp8", "mbridge2606_nemotron3super_b300_64_nvfp4")
GRACE_SUPER = ("mbridge2608_nemotron3super_gb300_64_mxfp8",
               "mbridge2608_nemotron3super_gb300_64_nvfp4",
               "mbridge2608_nemotron3super_gb200_64_mxfp8",
               "mbridge2608_nemotron3super_gb200_64_nvfp4")


@pytest.fixture(scope="module")
def rows():
    return {rid: hs.row(rid, *v) for rid, v in hs.rows().items()
            if rid in B300 + GRACE_SUPER}


def test_kinds_and_rest_add_up_to_the_modelled_compute(rows):
    for r in rows.values():
        parts = sum(r[k] for k in hs.KINDS) + r["other"]
        assert parts == pytest.approx(r["compute"], rel=1e-12)
        assert min(r[k] for k in hs.KINDS) > 0 and r["other"] > 0


def test_layers_per_step_counts_the_pattern_and_both_mtp_depths(rows):
    job = hs.rows()[B300[0]][1]
    assert job.model.num_layers == 88 and job.num_microbatches == 8
    assert hs.layers_per_step(job) == (88 + 2 * 2) * 8


def test_host_what_if_is_the_launch_count_times_a_linear_host_path():
    job = hs.rows()[B300[0]][1]
    f, b = hs.host_per_launch(job)
    assert (f, b) == (4 * TORCH_LINEAR_HOST_S["x86"], 6 * TORCH_LINEAR_HOST_S["x86"])
    grace = hs.rows()[GRACE_SUPER[0]][1]
    assert hs.host_per_launch(grace)[0] == 4 * TORCH_LINEAR_HOST_S["grace"]


def test_the_b300_rows_miss_twice_per_layer_what_the_grace_rows_miss(rows):
    worst_grace = max(rows[g]["miss_ms"] for g in GRACE_SUPER)
    best_grace = min(rows[g]["miss_ms"] for g in GRACE_SUPER)
    assert best_grace > 0 and worst_grace / best_grace < 1.2    # GB200 and GB300 alike
    for h in B300:
        # 3.65 / 4.01 ms against 2.00 since §5.171 prices the MXFP8 split-quantize launches
        assert rows[h]["miss_ms"] > 1.8 * worst_grace


def test_no_data_parallel_what_if_closes_the_b300_rows(rows):
    for h in B300:
        r = rows[h]
        assert r["no_overlap"] / r["measured"] - 1 < -0.25     # every DP byte exposed (-26.4 / -30.9 %)
        assert r["one_domain"] <= r["estimate"]                # the NICs are not the miss
        assert r["host_launch"] / r["measured"] - 1 > -0.20    # the host what-if moves them


def test_excess_is_the_twin_scaled_closed_form():
    r = {"measured": 8.0, "estimate": 5.0, "moe_layers": 336.0, "local": 64}
    twin = {"measured": 6.0, "estimate": 5.0, "local": 8}
    s, per_layer, per_expert = hs.excess(r, twin)
    assert s == pytest.approx(8.0 - 5.0 * 6.0 / 5.0, rel=1e-15)
    assert per_layer == pytest.approx(1e3 * 2.0 / 336.0, rel=1e-15)
    assert per_expert == pytest.approx(1e3 * per_layer / 56, rel=1e-15)
    assert hs.excess(twin | {"moe_layers": 1.0}, twin)[2] is None


def test_the_grace_rows_miss_per_micro_batch_not_per_token(rows):
    # GB200 (tp 2) runs twice GB300's micro-batches over the same tokens per GPU
    for d in ("mxfp8", "nvfp4"):
        gb200 = rows[f"mbridge2608_nemotron3super_gb200_64_{d}"]
        gb300 = rows[f"mbridge2608_nemotron3super_gb300_64_{d}"]
        assert gb200["moe_layers"] == 2 * gb300["moe_layers"] == 2 * 42 * 8
        assert gb200["miss"] / gb300["miss"] == pytest.approx(2.0, rel=0.06)
