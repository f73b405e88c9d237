"""report_speed's best of N runs: the run with the least wall time, over the fastest bare
SimPy rate seen in any of the runs; ops per second beside events per second."""
from __future__ import annotations

import pytest

from experiments import report_speed


def _run(wall, cpu, bare, bare_cpu):
    return {"case": "c", "events": 1000, "records": 1500, "wall_s": wall, "cpu_s": cpu,
            "bare_simpy_events_per_s": bare, "bare_simpy_cpu_events_per_s": bare_cpu}


def test_best_of_keeps_the_fastest_run_against_the_fastest_bare_rate():
    best = report_speed.best_of([_run(2.0, 1.9, 10_000.0, 11_000.0),
                                 _run(1.0, 1.0, 8_000.0, 9_000.0),
                                 _run(4.0, 1.5, 9_000.0, 12_000.0)])
    assert best["wall_s"] == 1.0 and best["cpu_s"] == 1.0 and best["runs"] == 3
    assert best["wall_s_all"] == [2.0, 1.0, 4.0]
    assert best["events_per_s"] == 1000.0 and best["vs_bare"] == 1000.0 / 10_000.0
    assert best["vs_bare_cpu"] == 1000.0 / 12_000.0
    assert best["ops_per_s"] == 1500.0 and best["ops_vs_bare"] == 1500.0 / 10_000.0


def test_repeat_below_one_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        report_speed.main(["--cases", "175b-folded", "--out", str(tmp_path), "--no-search",
                           "--repeat", "0"])
    assert err.value.code == 2
    assert "--repeat 0" in capsys.readouterr().err and not list(tmp_path.iterdir())
