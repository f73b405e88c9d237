"""experiments/blackwell_release_pairs.py (docs/calibration.md §5.55): the GB300/GB200 pairs of
one software release against the Azure harness's GB300/GB200 fp8 ratio."""
import json
import os

import pytest

from experiments.blackwell_release_pairs import harness_gb300_over_gb200, pair_rows
from topologies.gpus.sustained import AZURE_FP8_SUSTAINED

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data")


def test_harness_ratio_by_hand():
    by_hand = (3308.5 / 2906.9 + 3271.3 / 2825.6) / 2
    assert AZURE_FP8_SUSTAINED["GB300"] == (3308.5, 3271.3)
    assert harness_gb300_over_gb200() == pytest.approx(by_hand, rel=1e-14)


def test_pairs_of_megatron_bridge_2604():
    rows = pair_rows(("megatron_bridge_2604.json",))
    ids = [r[1] for r in rows]
    assert len(ids) == 10 and all("gb200" in i for i in ids)
    with open(os.path.join(DATA, "megatron_bridge_2604.json")) as fh:
        d = json.load(fh)
    cases = d if isinstance(d, list) else d["cases"]
    step = {c["id"]: c["derived"]["step_time_s"] for c in cases if "derived" in c}
    r = next(x for x in rows if x[1] == "mbridge260401_llama31405b_gb200_256_fp8")
    want = step["mbridge260401_llama31405b_gb200_256_fp8"] / \
        step["mbridge260401_llama31405b_gb300_256_fp8"]
    assert r[3] == pytest.approx(want, rel=1e-3)
    assert r[2] == "fp8-current" and r[5].startswith("tp4 pp16") and r[6].startswith("tp4 pp8")
    # the finding (§5.55): on one release GB300/GB200 reads above the harness's CUDA 12.8/13.0
    # ratio, and the model's ratio is below the measured one
    assert r[3] > harness_gb300_over_gb200()
    assert r[4] < r[3]
    assert pair_rows(("megatron_bridge_2604.json",)) == rows   # deterministic
