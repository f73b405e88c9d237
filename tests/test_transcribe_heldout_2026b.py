"""``experiments/transcribe_heldout_2026b.py`` writes ``heldout_2026b.json`` byte for byte from
the inputs the repository keeps (no clone, no network), and, where the clones are here, those
inputs are what its reader takes from the two repositories."""
from __future__ import annotations

import copy
import json
import os

import pytest

from experiments import transcribe_heldout_2026b as tr

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
TITAN = "/work/.mirror/pytorch+torchtitan/repo"
BRIDGE = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"


def _inputs() -> dict:
    with open(os.path.join(ROOT, tr.INPUTS), encoding="utf-8") as f:
        return json.load(f)


def test_the_transcriber_writes_the_data_file() -> None:
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        committed = f.read()
    assert tr.dump(tr.transcribe(_inputs())) == committed


def test_moe_rows_state_forced_balancing_from_the_page_s_footnote() -> None:
    """``plan.moe_balance`` (calibration §5.73) on exactly the expert-parallel rows, first in
    the plan as the data file has it, and only while the page says so."""
    rows = tr.transcribe(_inputs())
    moe = [r for r in rows if r["plan"]["ep"] > 1]
    assert len(moe) == 13
    assert all(next(iter(r["plan"].items())) == ("moe_balance", "forced") for r in moe)
    assert not any("moe_balance" in r["plan"] for r in rows if r["plan"]["ep"] == 1)
    silent = copy.deepcopy(_inputs())
    silent["bridge_2606"]["force_balanced"] = False
    assert not any("moe_balance" in r["plan"] for r in tr.transcribe(silent))


@pytest.mark.skipif(not (os.path.isdir(TITAN) and os.path.isdir(BRIDGE)),
                    reason="no torchtitan / Megatron-Bridge clones (fetched mirrors)")
def test_the_kept_inputs_are_the_sources() -> None:
    from experiments.heldout_2026b_sources import read_sources
    assert read_sources(TITAN, BRIDGE) == _inputs()
