"""``paraplan search`` end to end: the JSON contract, determinism across worker counts, the
table, CSV, exports, references, progress and the error paths."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simulator.cli.main import build_parser, main

SMALL = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16"]
VOLATILE = ("wall_s", "execution")


def run(capsys, *extra):
    rc = main([*SMALL, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def stable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in VOLATILE}


def test_json_contract(capsys):
    rc, out, err = run(capsys, "--json", "--workers", "1")
    assert rc == 0
    rep = json.loads(out)
    for key in ("plans", "recommended", "pruned", "evaluated", "wall_s", "references"):
        assert key in rep
    assert 1 <= len(rep["plans"]) <= 5
    times = [p["step_time_s"] for p in rep["plans"]]
    assert times == sorted(times)
    for p in rep["plans"]:
        assert p["simulated"] is True and p["reasons"]
        for key in ("plan", "step_time_s", "mfu", "tokens_per_s", "bubble_fraction",
                    "exposed_comm_s", "analytic_step_time_s", "lower_bound_s"):
            assert key in p
        assert 0 < p["memory"]["peak_gib"] <= rep["inputs"]["memory_limit_gib"]
        assert p["lower_bound_s"] <= p["step_time_s"]
    assert rep["recommended"]["why"]
    assert rep["recommended"]["step_time_s"] <= (1.03 + 1e-9) * times[0]
    assert rep["evaluated"]["analytic"] == rep["space"]["feasible"]
    assert rep["space"]["raw"] == rep["space"]["feasible"] + sum(rep["pruned"].values())


def test_same_json_whatever_the_worker_count(capsys):
    reps = []
    for w in ("1", "2"):
        rc, out, _ = run(capsys, "--json", "--workers", w, "--max-mbs", "2")
        assert rc == 0
        reps.append(stable(json.loads(out)))
    assert reps[0] == reps[1]


def test_table_csv_and_reference(capsys, tmp_path):
    csv = tmp_path / "top.csv"
    rc, out, _ = run(capsys, "--workers", "1", "--top", "3", "--csv", str(csv),
                     "--reference", "tp=2,pp=2,mbs=1")
    assert rc == 0
    assert "Recommended:" in out and "exposed comm" in out and "ref" in out
    assert "Pruned (first rule broken):" in out
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("rank,key,step_time_s") and len(lines) == 4


def test_exports(capsys):
    rc, out, _ = run(capsys, "--workers", "1", "--export", "megatron")
    assert rc == 0 and "--tensor-model-parallel-size" in out and "pretrain_gpt.py" in out
    rc, out, _ = run(capsys, "--workers", "1", "--json", "--export", "deepspeed")
    assert rc == 0
    cfg = json.loads(json.loads(out)["export"]["text"])
    assert cfg["train_batch_size"] == 16 and "zero_optimization" in cfg
    rc, out, err = run(capsys, "--workers", "1", "--export", "deepspeed",
                       "--fix", "schedule=interleaved")
    assert rc == 2 and "interleaved" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, words", [
    (["--fix", "tp=x"], "--fix"),
    (["--fix", "tq=2"], "--fix"),
    (["--resume"], "--results"),
    (["--memory-limit", "1"], "no plan passes"),
    (["--tolerance", "-1"], "--tolerance"),
])
def test_errors_are_one_line(capsys, extra, words):
    rc, out, err = run(capsys, "--workers", "1", *extra)
    assert rc == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_results_file_is_not_overwritten_without_resume(capsys, tmp_path):
    f = tmp_path / "r.jsonl"
    assert run(capsys, "--workers", "1", "--results", str(f))[0] == 0
    n = len(f.read_text().splitlines())
    assert n > 0
    rc, _, err = run(capsys, "--workers", "1", "--results", str(f))
    assert rc == 2 and "--resume" in err
    rc, out, _ = run(capsys, "--workers", "1", "--results", str(f), "--resume", "--json")
    assert rc == 0 and json.loads(out)["execution"]["simulations_run"] == 0
    assert len(f.read_text().splitlines()) == n
    other = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "32"]
    assert main([*other, "--workers", "1", "--results", str(f), "--resume"]) == 2
    assert "another search" in capsys.readouterr().err


def test_ray_missing_is_a_clean_error(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    rc, out, err = run(capsys, "--backend", "ray")
    assert rc == 2 and "pip install" in err and "ray" in err


def test_progress_goes_to_stderr(capsys):
    rc, out, err = run(capsys, "--workers", "1", "--json", "--progress")
    assert rc == 0 and json.loads(out) and "simulated" in err


def test_defaults_are_the_paper_setting():
    from simulator.cli.search import config_from_args
    cfg = config_from_args(build_parser().parse_args(["search"]))
    assert (cfg.model.name, cfg.cluster.name, cfg.gbs, cfg.k) == \
        ("gpt3-175b", "dgx-a100:128", 1536, 5)
    assert cfg.tolerance == pytest.approx(0.03)
    assert [p.tp * p.pp for _, p in cfg.references] == [64, 64]
    none = config_from_args(build_parser().parse_args(["search", "--reference", "none"]))
    assert none.references == []


def test_help_through_the_console_entry():
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "search", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--exhaustive" in out and "--backend" in out and "--export" in out
