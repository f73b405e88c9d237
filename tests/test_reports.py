"""The report scripts (``experiments/report_*.py``) on small inputs: each writes its Markdown,
figures and JSON, names the command that regenerates it, and takes its numbers from the run."""
from __future__ import annotations

import json
import os

import pytest

from experiments import (report_analytic_vs_sim, report_generations, report_schedules,
                         report_speed, report_validation, report_whatif)
from experiments._report import ROOT, ReportWriter, md_table
from tests.test_validate_cli import ENTRIES


def _no_temporaries(folder) -> None:
    assert not [f for f in os.listdir(folder) if f.startswith(".")]


@pytest.mark.slow
def test_validation_report(tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps(ENTRIES))
    out = tmp_path / "r"
    assert report_validation.main(["--reference", str(ref), "--out", str(out),
                                   "--jobs", "1", "--also", str(ref)]) == 0
    md = (out / "validation.md").read_text()
    data = json.loads((out / "validation.json").read_text())
    assert "python experiments/report_validation.py" in md
    assert f"paraplan validate --plot {out / 'validation.png'}" in md
    assert f"{data['analytic']['mape_pct']:.2f} %" in md
    assert f"{data['simulated']['mape_pct']:.2f} %" in md
    assert "tiny_broken" in md and (out / "validation.png").stat().st_size > 10_000
    # The held-out file is simulated too (tiers all: the tier-2 run counts), with its own
    # simulated MAPE and each run's simulated seconds, error and method.
    (held,) = data["also"]
    sim = held["simulated"]
    assert sim["cases"] == 4 and held["analytic"]["cases"] == 4
    assert "## Held-out references (analytic and simulated)" in md
    assert (f"Simulated {sim['cases']} runs: MAPE {sim['mape_pct']:.2f} %, mean signed "
            f"{sim['mean_error_pct']:.2f} %, worst {sim['max_abs_error_pct']:.1f} %.") in md
    row = next(r for r in held["cases"] if r["id"] == "tiny_tier2")
    assert (f"| {row['simulated_step_time_s']:.3f} | {row['simulated_error_pct']:.1f} % | "
            f"{row['sim_method']} |") in md
    first = md
    # Same inputs, same page, bit for bit, apart from the wall-time line.
    assert report_validation.main(["--reference", str(ref), "--out", str(out),
                                   "--jobs", "1", "--also", str(ref)]) == 0
    strip = lambda t: [ln for ln in t.splitlines() if not ln.startswith("Wall time")]  # noqa: E731
    assert strip((out / "validation.md").read_text()) == strip(first)
    # --no-held-out-sim: the held-out file analytic only.
    assert report_validation.main(["--reference", str(ref), "--out", str(out), "--jobs", "1",
                                   "--also", str(ref), "--no-held-out-sim"]) == 0
    md = (out / "validation.md").read_text()
    held = json.loads((out / "validation.json").read_text())["also"][0]
    assert held["simulated"]["cases"] == 0 and held["analytic"]["cases"] == 4
    assert "## Held-out references (analytic)" in md and "Simulated 4 runs" not in md
    _no_temporaries(out)


@pytest.mark.slow
def test_schedules_report(tmp_path):
    assert report_schedules.main(["--model", "gpt-1.7b", "--cluster", "dgx-a100:1",
                                  "--plan", "tp=2,pp=4,gbs=8", "--schedules",
                                  "gpipe,1f1b,interleaved:2", "--sweep-microbatches", "4,8",
                                  "--pair-gbs", "8", "--no-papers", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "schedules.md").read_text()
    data = json.loads((tmp_path / "schedules.json").read_text())
    for cmd in data["commands"]:
        assert f"`{cmd}`" in md
        assert cmd.startswith("paraplan compare --model gpt-1.7b")
    rows = {r["schedule"]: r for r in data["compare"]["rows"]}
    assert f"peak {rows['gpipe']['memory']['peak_gib']:.1f} GiB" in md
    assert "it shrinks with every added chunk" in md
    zb = {r["schedule"]: r for r in data["zero_bubble"]["rows"]}
    assert f"ZB-H1: step {zb['zb-h1']['step_time_s']:.3f} s" in md
    assert zb["zb-h1"]["step_time_s"] <= zb["1f1b"]["step_time_s"]
    assert f"ZB-V: step {zb['zb-v:2']['step_time_s']:.3f} s" in md    # in the default list
    for png in ("timeline", "sweep", "1f1b_vs_interleaved", "zero_bubble"):
        assert (tmp_path / f"schedules_{png}.png").stat().st_size > 10_000
    _no_temporaries(tmp_path)


def test_analytic_vs_sim_report(tmp_path):
    assert report_analytic_vs_sim.main(["--quick", "--jobs", "1", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "analytic_vs_sim.md").read_text()
    data = json.loads((tmp_path / "analytic_vs_sim.json").read_text())
    s = data["summary"]
    assert "python experiments/report_analytic_vs_sim.py --quick" in md
    assert "--jobs" not in md.split("\n")[2]
    assert s["plans"] == len(data["plans"]) > 3
    assert f"median |difference| {s['median_abs_diff_pct']:.2f} %" in md
    for r in data["plans"]:   # the parts add up to the step-time difference
        total = sum(r["diff_parts_s"].values())
        assert total == pytest.approx(r["simulated_step_time_s"] - r["analytic_step_time_s"],
                                      abs=1e-6)
    assert (tmp_path / "analytic_vs_sim.png").stat().st_size > 10_000
    _no_temporaries(tmp_path)


def test_plan_space_is_valid_plans_only():
    plans = list(report_analytic_vs_sim.plan_space(report_analytic_vs_sim.QUICK_GRID))
    assert plans and all(p.pp > 1 or p.schedule == "1f1b" for p in plans)


@pytest.mark.slow
def test_speed_report(tmp_path):
    base = ROOT / "docs" / "reports" / "speed_before.json"
    assert report_speed.main(["--cases", "175b-folded", "--out", str(tmp_path), "--no-search",
                              "--baseline", str(base)]) == 0
    md = (tmp_path / "speed.md").read_text()
    data = json.loads((tmp_path / "speed.json").read_text())
    case = data["cases"][0]
    assert case["case"] == "175b-folded" and case["events"] > 0
    assert 0 < case["vs_bare"] < 1 and case["cpu_s"] > 0
    assert f"{case['events']:,}" in md and "python experiments/report_speed.py" in md
    before = json.loads(base.read_text())["cases"][0]
    assert f"{before['events']:,} -> {case['events']:,}" in md     # the before/after table
    _no_temporaries(tmp_path)


@pytest.mark.slow
def test_whatif_report(tmp_path):
    # --max-vpp 1 (the script's "smaller space" knob): no interleaved plans to search, the
    # same report (62.9 -> 22.1 s of CPU on the shared host)
    assert report_whatif.main(["--model", "gpt-1.7b", "--nodes", "2", "--global-batch", "16",
                               "--max-mbs", "1", "--max-vpp", "1", "--inter-gbps", "25,400",
                               "--gpu-hour-cost", "3", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "whatif.md").read_text()
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert "python experiments/report_whatif.py --model gpt-1.7b" in md
    for cmd in data["commands"]:
        assert f"`{cmd}`" in md and cmd.startswith("paraplan whatif --model gpt-1.7b")
    gpus, bw = data["gpus"], data["bandwidth"]
    assert [r["cluster"] for r in gpus["rows"]] == ["dgx-a100", "dgx-h100", "dgx-h200"]
    assert [r["inter_node_gbps"] for r in bw["rows"]] == [25, 400]
    assert "every GPU-hour costs 3 USD" in md
    for r in gpus["rows"] + bw["rows"]:     # the table's numbers are the run's
        assert f"| {r['step_time_s']:.4g} |" in md
        assert f"| {r['cost_per_million_tokens']:.3f} |" in md
    a100, h100 = gpus["rows"][:2]
    assert f"{a100['step_time_s'] / h100['step_time_s']:.2f}x the speed" in md
    assert bw["checks"]["bandwidth_monotone"]["ok"]
    assert bw["rows"][1]["step_time_s"] <= bw["rows"][0]["step_time_s"]
    assert "the step time never rises" in md
    for png in ("gpus", "bandwidth"):
        assert (tmp_path / f"whatif_{png}.png").stat().st_size > 10_000
    _no_temporaries(tmp_path)


def test_report_writer_is_all_or_nothing(tmp_path):
    (tmp_path / "a.md").write_text("old")
    with pytest.raises(RuntimeError):
        with ReportWriter(tmp_path) as w:
            w.text("a.md", "new")
            raise RuntimeError("the run failed")
    assert (tmp_path / "a.md").read_text() == "old"
    _no_temporaries(tmp_path)
    with ReportWriter(tmp_path) as w:
        w.text("a.md", "new")
        w.commit()
    assert (tmp_path / "a.md").read_text() == "new\n"


def test_report_writer_stopped_by_sigterm_leaves_nothing(tmp_path):
    """SIGTERM while a report waits on a child: the child is killed, the old report stays
    whole, no temporary file is left (the report scripts' stop rule)."""
    import signal
    import subprocess
    import sys
    import time
    (tmp_path / "a.md").write_text("old")
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys\n"
        "from experiments._report import ReportWriter\n"
        f"with ReportWriter({str(tmp_path)!r}) as w:\n"
        "    w.text('a.md', 'new')\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "    try:\n"
        "        p.wait()\n"
        "    finally:\n"
        "        p.kill(); p.wait()\n"
        "    w.commit()\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert (tmp_path / "a.md").read_text() == "old"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_md_table_escapes_pipes():
    t = md_table(["a", "b"], [["x|y", 1]])
    assert "x\\|y" in t and t.count("\n") == 2


@pytest.mark.slow
def test_generations_report(tmp_path):
    assert report_generations.main(["--model", "llama3-8b", "--gpus", "8", "--global-batch",
                                    "16", "--max-mbs", "1", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "generations.md").read_text()
    data = json.loads((tmp_path / "generations.json").read_text())
    assert data["command"].startswith("paraplan whatif --model llama3-8b")
    assert f"`{data['command']}`" in md
    rows = data["whatif"]["rows"]
    assert [r["job"]["gpus"] for r in rows] == [8, 8, 8]
    assert [r["cluster"] for r in rows] == ["dgx-h100", "dgx-b200", "gb200-nvl72"]
    for r in rows:
        assert f"{r['step_time_s']:.4g}" in md
    assert (tmp_path / "generations.png").stat().st_size > 0
