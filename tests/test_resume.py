"""Kill a search with SIGKILL mid-way, resume it: no finished result is lost, none repeated."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# An exhaustive search of 143 plans (cp fixed to 1: the 357 of the unfixed space cost 2.5x the
# time and test nothing more: resuming reads the results file's keys, not what the plans are),
# killed after 25 results: over a hundred still to run when the kill lands.
ARGS = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch", "8",
        "--max-mbs", "1", "--max-vpp", "2", "--fix", "cp=1", "--exhaustive", "--workers", "1",
        "--json"]


def search(*extra: str, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "simulator.cli", *ARGS, *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
def test_kill_and_resume_loses_nothing_and_repeats_nothing(tmp_path):
    results = tmp_path / "results.jsonl"
    proc = search("--results", str(results), start_new_session=True)
    deadline = time.monotonic() + 60
    while len(lines(results)) < 25 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the search finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {json.loads(x)["key"]: x for x in lines(results)[:-1]}   # last may be torn
    assert len(before) >= 24

    done = search("--results", str(results), "--resume")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    report = json.loads(out)
    after = [json.loads(x) for x in lines(results)]
    keys = [r["key"] for r in after]
    assert len(keys) == len(set(keys)), "a result was simulated twice"
    by_key = dict(zip(keys, lines(results)))
    for k, line in before.items():
        assert by_key[k] == line, "a finished result was lost or changed"
    assert len(keys) == report["space"]["feasible"]          # exhaustive: every plan, once
    ex = report["execution"]
    assert ex["reused_from_results"] >= len(before)
    assert ex["simulations_run"] + ex["reused_from_results"] == len(keys)

    again = search("--results", str(results), "--resume")
    out2, _ = again.communicate(timeout=120)
    rep2 = json.loads(out2)
    assert rep2["execution"]["simulations_run"] == 0
    drop = ("wall_s", "execution")
    assert {k: v for k, v in rep2.items() if k not in drop} == \
        {k: v for k, v in report.items() if k not in drop}


def test_a_torn_last_line_is_cut_on_resume(tmp_path):
    from simulator.search.results_file import ResultsLog
    f = tmp_path / "r.jsonl"
    good = json.dumps({"key": "a", "context": "c", "result": {"step_time_s": 1.0}})
    f.write_text(good + "\n" + '{"key": "b", "cont')
    log = ResultsLog(str(f), "c", resume=True)
    assert list(log.done) == ["a"]
    log.write("b", {"step_time_s": 2.0})
    log.close()
    assert [json.loads(x)["key"] for x in f.read_text().splitlines()] == ["a", "b"]
