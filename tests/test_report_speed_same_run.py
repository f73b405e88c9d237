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


def test_search_only_repeats_alternate_and_give_least_and_median(tmp_path, monkeypatch):
    """``--search-only --search-repeat 3``: the simulate cases come from the speed.json already
    there, the default search runs 3 times per side, the earlier checkout first each time,
    and the page gives the least and the median (the target is checked on the median)."""
    prev = json.loads((ROOT / "docs" / "reports" / "speed.json").read_text())
    cases_same = {"label": "the cases' own earlier checkout", "tree": "/x",
                  "cases": prev["cases"], "default_search": None}
    (tmp_path / "speed.json").write_text(json.dumps({**prev, "same_run_before": cases_same,
                                                     "cases_same_run_before": None}))
    (tmp_path / "simulator").mkdir()
    calls = []
    walls = iter([20.0, 14.0, 18.0, 12.0, 30.0, 16.5])

    def fake(tree=None):
        calls.append(tree)
        return {"case": "default-search", "wall_s": next(walls), "cpu_s": 25.0 - len(calls),
                "load_1min": 1.0, "simulations": 14, "simulated": 12, "recommended": "tp4"}
    monkeypatch.setattr(report_speed, "default_search", fake)
    monkeypatch.setattr(report_speed, "replay", lambda: {
        "scoring_cpu_s": 0.9, "simulations_measured": 14, "simulation_cpu_s": 23.9,
        "load_1min": 4.3, "replays": {"in dispatch order": {"wall_s": 16.61, "simulations": 14},
                                      "as finished": {"wall_s": 13.16, "simulations": 14}}})
    assert report_speed.main(["--search-only", "--search-repeat", "3", "--out", str(tmp_path),
                              "--before-tree", str(tmp_path), "--before-label", "old",
                              "--replay"]) == 0
    assert calls == [str(tmp_path), None] * 3
    data = json.loads((tmp_path / "speed.json").read_text())
    after, before = data["default_search"], data["same_run_before"]["default_search"]
    assert (after["wall_min_s"], after["wall_s"]) == (12.0, 14.0)
    assert (before["wall_min_s"], before["wall_s"]) == (18.0, 20.0)
    assert (after["cpu_min_s"], after["cpu_s"]) == (19.0, 21.0)
    md = (tmp_path / "speed.md").read_text()
    assert "| old | 3 | 18.00 | 20.00 |" in md and "| this checkout | 3 | 12.00 | 14.00 |" in md
    assert "`default-search` meets its target (14.00 s median of 3 runs, least 12.00 s" in md
    assert "copied from an earlier run" in md
    # the copied cases keep their own same-run table, under their own label
    assert "in that run, under the same load: the cases' own earlier checkout (`/x`)" in md
    assert "under the same load: old" not in md
    assert "taken in dispatch order: 16.61 s (14 simulations); as finished: 13.16 s" in md
