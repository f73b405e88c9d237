"""experiments/llama405_releases.py (docs/calibration.md §5.95): one job published by two
Megatron-Bridge releases is one estimate, its measurements are not; the anchor reads 1."""
import pytest

from experiments.llama405_releases import ANCHOR, release_rows


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in release_rows()}


def test_anchor_is_one(rows):
    assert rows[ANCHOR]["meas_rel"] == 1.0 and rows[ANCHOR]["model_rel"] == 1.0


def test_same_job_two_releases_one_estimate(rows):
    # (26.06's row is read with fp32 gradients, ``GRAD_REDUCE_CONTAINERS``: another job)
    same = [rows[i] for i in ("mbridge2511_llama405b_gb200_256_fp8cs",
                              "mbridge260401_llama31405b_gb200_256_fp8")]
    assert len({r["plan"] for r in same}) == 1
    assert len({r["est_s"] for r in same}) == 1
    meas = [r["meas"] for r in same]
    assert max(meas) / min(meas) > 1.05
    # every Bridge release measures more above the NeMo 25.04 anchor than the model's plan
    # change gives
    assert all(r["meas_rel"] > r["model_rel"] * 1.10 for r in same)
