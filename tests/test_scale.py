"""Scale (issue 6): simulating the Llama 3.1 405B-like job on 16,384 H100 stays within the
memory budget that docs/robustness.md states (experiments/bench_scale.py measures it)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_16k_gpus_within_memory_budget():
    p = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_scale.py"), "--check",
                        "--json"], capture_output=True, text=True, timeout=600)
    row = json.loads(p.stdout.strip().splitlines()[-1])
    assert row["gpus"] == 16384 and row["simulated_ranks"] < 64
    assert p.returncode == 0 and row["within_budget"], row
