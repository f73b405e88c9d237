"""report_speed's same-run before/after: an earlier checkout timed by the same harness, case by
case right before the current one; a path that is not a checkout is refused."""
from __future__ import annotations

import json

import pytest

from experiments import report_speed
from experiments._report import ROOT


@pytest.mark.slow
def test_same_run_table_times_the_other_checkout(tmp_path):
    # this checkout stands in for the earlier one: the two sides must count the same events
    assert report_speed.main(["--cases", "175b-folded", "--out", str(tmp_path), "--no-search",
                              "--before-tree", str(ROOT), "--before-label", "itself"]) == 0
    data = json.loads((tmp_path / "speed.json").read_text())
    before, after = data["same_run_before"]["cases"][0], data["cases"][0]
    assert before["events"] == after["events"] and before["step_time_s"] == after["step_time_s"]
    assert 0 < after["vs_bare_cpu"] < 1 and after["bare_simpy_cpu_events_per_s"] > 0
    md = (tmp_path / "speed.md").read_text()
    assert "Before and after in this run, under the same load: itself" in md
    assert f"{before['wall_s']:.2f} | {after['wall_s']:.2f}" in md


def test_a_before_tree_that_is_not_a_checkout_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        report_speed.main(["--cases", "175b-folded", "--out", str(tmp_path), "--no-search",
                           "--before-tree", str(tmp_path)])
    assert err.value.code == 2
    assert "--before-tree" in capsys.readouterr().err and not list(tmp_path.iterdir())
