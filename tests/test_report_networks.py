"""experiments/report_networks.py on a small input: its page, figure and JSON agree."""
from __future__ import annotations

import json

import pytest

from experiments import report_networks


@pytest.mark.slow
def test_networks_report(tmp_path):
    assert report_networks.main(["--nodes", "2", "--global-batch", "16", "--max-mbs", "1",
                                 "--fleet", "1024,16384", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "networks.md").read_text()
    data = json.loads((tmp_path / "networks.json").read_text())
    assert (tmp_path / "networks.png").stat().st_size > 0
    assert "python experiments/report_networks.py --nodes 2" in md
    rows = data["whatif"][0]["report"]["rows"]
    for r in rows:
        if r["feasible"]:
            assert f"{r['step_time_s']:.4g}" in md
    fleet = {(f["gpus"], f["network"]): f for f in data["fleet"]}
    assert "error" in fleet[(16384, "rail fat tree")]          # beyond two tiers
    ro = fleet[(1024, "rail-only")]
    assert ro["spine_switches"] == 0 and f"{ro['switches']:,} / {ro['transceivers']:,}" in md
