"""experiments/reference_mape.py: one reference file's rows as validate reports them, and the
MAPE line the script prints is the mean of their absolute analytic errors."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import reference_mape  # noqa: E402


def test_rows_and_mape_of_one_file(capsys):
    rows = reference_mape.file_rows(
        os.path.join(ROOT, "strategies/reference/data/automodel_perf.json"))
    assert rows and all(not c.get("skipped") for c in rows)
    for c in rows:
        est, meas = c["analytic_step_time_s"], c["measured_step_s"]
        assert abs(c["analytic_error_pct"] - 100 * (est - meas) / meas) < 1e-6
    mape = sum(abs(c["analytic_error_pct"]) for c in rows) / len(rows)
    assert 0 < mape < 100
