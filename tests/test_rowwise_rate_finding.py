"""The two scripts of docs/calibration.md §5.168 (torchao's rowwise GEMM rate, a finding):
the in-process slowing of the rowwise GEMMs touches nothing else and is undone, the step is
linear in it, and the speedup-table reading is consistent with itself."""
import sys
from pathlib import Path

import pytest

from strategies.estimate import estimate
from strategies.reference.cases import reference_cases

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import rowwise_implied_rate as implied  # noqa: E402
import rowwise_linear_bench as bench  # noqa: E402

ROW = "torchtitan_2506_8b_64gpu_fp8rw_tp"


@pytest.fixture(scope="module")
def cases() -> dict:
    return {c.id: c for c in reference_cases([implied.FILE])}


def test_slowing_is_rowwise_only_and_undone(cases) -> None:
    rw, tw = cases[ROW].job, cases[ROW.replace("fp8rw", "fp8tw")].job
    bf = cases[ROW.replace("fp8rw", "bf16")].job
    before = [estimate(j).step_time_s for j in (rw, tw, bf)]
    with implied.slowed(3.0, forward_only=False):
        slowed = [estimate(j).step_time_s for j in (rw, tw, bf)]
    assert slowed[0] > before[0]
    assert slowed[1:] == before[1:]                  # tensorwise and bf16 untouched
    assert [estimate(j).step_time_s for j in (rw, tw, bf)] == before   # patch undone


@pytest.mark.parametrize("forward_only", [True, False])
def test_step_linear_in_the_slowing(cases, forward_only: bool) -> None:
    job = cases[ROW].job
    t1, t2, t4 = (implied.step(job, s, forward_only) for s in (1.0, 2.0, 4.0))
    assert t1 == pytest.approx(estimate(job).step_time_s, rel=1e-12)
    assert t4 - t1 == pytest.approx(3.0 * (t2 - t1), rel=1e-9)
    assert t2 > t1


def test_bench_reading_closes_on_the_model() -> None:
    # a measured speedup equal to the model's leaves no excess and implies the model's rates
    model, *_ = bench.cell("H100-SXM5-80GB", 32768, 8192, 1024, 1.0)
    s, all3, fwd, excess_us, share = bench.cell("H100-SXM5-80GB", 32768, 8192, 1024,
                                                float(model))
    assert s == pytest.approx(model, rel=1e-12)
    assert all3 == pytest.approx(1.0, rel=1e-9)
    assert fwd == pytest.approx(1.0, rel=1e-9)
    assert excess_us == pytest.approx(0.0, abs=1e-6)
    # a slower measurement leaves a positive excess
    assert bench.cell("H100-SXM5-80GB", 32768, 8192, 1024, 0.63)[3] > 0.0


def test_table_as_transcribed() -> None:
    assert len(bench.TABLE) == 8 and all(len(r) == len(bench.NS) for r in bench.TABLE.values())
    assert bench.TABLE[(32768, 8192)][:4] == (0.63, 0.87, 1.11, 1.41)
