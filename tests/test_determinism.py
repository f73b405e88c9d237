"""Determinism (issue 6): the same inputs give byte-identical output, whatever the process,
its hash seed (which changes set and dict-of-str iteration in some programs) or the order of
earlier work in the same process. Only the wall-clock field ``wall_s`` may differ.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate, to_json
from simulator.output.chrome_trace import dumps_chrome_trace
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ROOT = Path(__file__).resolve().parents[1]
WALL = re.compile(r'^\s*"wall_s": [^\n]*\n', re.MULTILINE)
# Pipeline, interleaving, tensor and data parallelism, ZeRO, two nodes: every part of the
# simulator takes part.
JOB = ["--model", "llama3-8b", "--cluster", "dgx-h100:2",
       "--plan", "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=32,zero=1,sp=true"]
YAML_CLUSTER = str(ROOT / "docs" / "examples" / "cluster.yaml")


def _cli(args: list[str], seed: str, tmp: Path | None = None) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=tmp or ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    return p.stdout


def _less_wall(text: str) -> str:
    out = WALL.sub("", text)
    assert "wall_s" not in out
    return out


def test_simulate_json_is_byte_identical_across_processes_and_hash_seeds(tmp_path):
    runs = []
    for seed in ("0", "1", "4242"):
        trace = tmp_path / f"trace-{seed}.json"
        out = _cli(["simulate", *JOB, "--json", "--trace", str(trace)], seed)
        runs.append((out, trace.read_bytes()))
    first_out, first_trace = runs[0]
    d = json.loads(first_out)
    assert d["simulated"] is True and d["step_time_s"] > 0 and "wall_s" in d
    for out, trace in runs[1:]:
        assert _less_wall(out).encode() == _less_wall(first_out).encode()
        assert trace == first_trace            # the Chrome trace has no wall clock at all


def test_simulate_full_and_heterogeneous_are_byte_identical():
    """Unfolded, on the mixed H100/A100 cluster of docs/examples (symmetry broken)."""
    args = ["simulate", "--model", "gpt-1.7b", "--cluster", YAML_CLUSTER, "--plan",
            "tp=4,pp=2,gbs=64", "--full", "--json"]
    a, b = _cli(args, "7"), _cli(args, "99")
    assert _less_wall(a) == _less_wall(b)


def test_estimate_json_is_byte_identical():
    args = ["estimate", *JOB, "--json"]
    a, b = _cli(args, "0"), _cli(args, "31337")
    assert "wall_s" not in a
    assert a.encode() == b.encode()


def test_same_process_repeats_and_orders_do_not_matter(capsys):
    """In one process: a run, other work (which fills caches), then the same run again."""
    def run(argv):
        assert main(argv) == 0
        return capsys.readouterr().out
    first = run(["simulate", *JOB, "--json"])
    run(["simulate", "--model", "gpt-1.7b", "--cluster", "dgx-h100:2", "--plan",
         "tp=2,pp=2,gbs=16", "--json"])
    run(["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:4", "--plan",
         "tp=8,pp=2,gbs=32", "--json"])
    again = run(["simulate", *JOB, "--json"])
    assert _less_wall(first) == _less_wall(again)


@pytest.mark.parametrize("fold", [True, False])
def test_results_and_traces_identical_in_process(fold):
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                   Plan(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=2, zero=1))
    a, b = simulate(job, fold=fold), simulate(job, fold=fold)
    assert a.records == b.records and a.events == b.events
    ja, jb = to_json(a, job), to_json(b, job)
    ja.pop("wall_s"), jb.pop("wall_s")
    assert json.dumps(ja) == json.dumps(jb)
    assert dumps_chrome_trace(a, 8, "t") == dumps_chrome_trace(b, 8, "t")
    assert estimate(job).to_json() == estimate(job).to_json()
