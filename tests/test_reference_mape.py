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


def test_pooled_lines_weigh_each_run_once(monkeypatch, capsys):
    """The held-out pooled line pools every run of every file but published.json (each run
    once, not each file's MAPE); ``--pool PREFIX`` the files named so."""
    errs = {"published.json": [50.0], "heldout_a.json": [10.0, -20.0, 30.0],
            "heldout_b.json": [-4.0], "other.json": [2.0, 2.0]}
    import strategies.reference.cases as cases
    monkeypatch.setattr(cases, "run_file_names", lambda d=None: sorted(errs))
    monkeypatch.setattr(reference_mape, "file_cases", lambda f: [
        {"id": f"r{i}", "analytic_error_pct": e}
        for i, e in enumerate(errs[os.path.basename(f)])])
    reference_mape.main(["--pool", "heldout_"])
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == ("held-out pooled (every file but published.json): MAPE "
                       f"{(10 + 20 + 30 + 4 + 2 + 2) / 6:.2f} % over 6 runs")
    assert out[-1] == f"pooled over heldout_*: MAPE {(10 + 20 + 30 + 4) / 4:.2f} % over 4 runs"
