"""The commands the docs show still run (experiments/doc_commands.py).

Every command extracted from README.md and docs/*.md is either run-able (a ``paraplan``
line the real parser accepts, or an experiment script that exists) or skipped with a reason;
the fast ones of README.md and docs/cli.md run and exit as the docs show, with no traceback.
"""
from __future__ import annotations

import os
import shlex
import tempfile

import pytest

from experiments.doc_commands import (ROOT, Command, _argv, _parse_error, doc_files, extract,
                                      main, run_one)


@pytest.fixture(scope="module")
def commands():
    return extract(doc_files())


def test_every_command_runs_or_is_skipped_with_a_reason(commands):
    assert len(commands) > 50
    for c in commands:
        assert c.where and all(":" in w for w in c.where)
        words = c.text.split()
        script = next((w for w in words if w.startswith("experiments/")), None)
        if script:      # run or not, the script exists and defines every flag shown
            with open(os.path.join(ROOT, script), encoding="utf-8") as f:
                src = f.read()
            assert all(f'"{w}"' in src for w in words if w.startswith("--")), c.text
        if c.skip:
            assert c.skip.strip(), c.text
            continue
        argv = _argv(c.text)
        if argv[:3] == ["python", "-m", "simulator.cli"]:
            if c.expect == 0:       # a shown refusal may be argparse's own
                assert _parse_error(argv) is None, (c.where, c.text)
        else:
            assert argv[0] == "python" and os.path.isfile(os.path.join(ROOT, argv[1])), c.text


def test_extraction_rules(commands):
    by_text = {c.text: c for c in commands}
    # pip, Ray and the real calibrate backend are skipped; the fake backend runs
    assert any(c.skip and "pip install" in c.skip for c in commands)
    assert any(c.skip and "Ray" in c.skip for c in commands)
    fake = [c for c in commands if "calibrate --backend fake" in c.text]
    assert fake and not fake[0].skip
    assert all(c.skip for c in commands if c.text.startswith("paraplan calibrate --out"))
    # a command the docs show refused is expected to exit 2 with the error line shown
    refused = by_text["paraplan estimate --model gpt-1.7b --cluster dgx-a100:1 "
                      "--plan tp=3,gbs=8"]
    assert refused.expect == 2 and refused.shown_error.startswith("paraplan: error: tp*pp*cp=3")
    # printed error lines, diagrams and bare subcommand names are not commands
    assert not any(c.text.startswith(("paraplan estimate:", "paraplan COMMAND:"))
                   or "─►" in c.text or c.text == "paraplan search" and c.inline
                   for c in commands)
    # a command shown twice runs once and lists both places
    presets = by_text["paraplan presets"]
    assert len(presets.where) >= 2


def _fast(c) -> bool:
    """README.md and docs/cli.md commands that finish in a few seconds on 2 cores."""
    if c.skip or not any(w.startswith(("README.md:", "docs/cli.md:")) for w in c.where):
        return False
    words = shlex.split(c.text)
    if words[0] != "paraplan":
        return False
    sub = words[1]
    return (sub in ("presets", "estimate", "goodput", "--help", "--version")
            or sub == "simulate" and "dgx-h100:1" in words)


@pytest.mark.slow
def test_fast_doc_commands_run(commands):
    fast = [c for c in commands if _fast(c)]
    assert len(fast) >= 10
    assert any(c.expect == 2 for c in fast)
    with tempfile.TemporaryDirectory() as tmp:
        written: dict[str, str] = {}
        for c in fast:
            r = run_one(c, tmp, written, timeout=60)
            assert r.status == "pass", (c.where, c.text, r.exit, r.error)
        # outputs went to the temporary folder, not the checkout
        assert written and all(v.startswith(tmp) for v in written.values())
        assert any(os.path.exists(v) for v in written.values())


@pytest.mark.slow
def test_a_command_that_does_not_print_what_the_doc_quotes_fails():
    with tempfile.TemporaryDirectory() as tmp:
        ok = Command("paraplan presets", where=["x.md:1"], shown_output=["Models"])
        assert run_one(ok, tmp, {}, timeout=60).status == "pass"
        bad = Command("paraplan presets", where=["x.md:1"], shown_output=["no such line"])
        r = run_one(bad, tmp, {}, timeout=60)
        assert r.status == "fail" and "no such line" in r.error
        refused = Command("paraplan estimate --model no-such-model --cluster dgx-a100:1 "
                          "--plan gbs=8", where=["x.md:1"])
        r = run_one(refused, tmp, {}, timeout=60)          # exit 2 where the doc shows 0
        assert r.status == "fail" and r.exit == 2 and "no-such-model" in r.error


def test_the_runner_runs_as_a_script_without_pythonpath():
    # `python experiments/doc_commands.py --list` puts experiments/ first on sys.path, not
    # the checkout; the parser check imports simulator.cli, so the script adds the checkout.
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "doc_commands.py"),
                            "--list"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "paraplan presets" in r.stdout and "fragment" in r.stdout   # the parser ran


def test_match_keeps_only_the_commands_that_hold_the_text(capsys):
    """--match re-runs a run's failures alone: each TEXT keeps the commands holding it."""
    assert main(["--list", "--match", "--model gpt-1t --cluster dgx-a100:1",
                 "--match", "cp_comm=a2a --framework jax-xla"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("2 distinct commands (2 shown), 2 to run"), out
    assert "[expect 2]" in out and "gpt-1t" in out and "jax-xla" in out
