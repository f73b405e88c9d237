"""``experiments/moe_graph_pairs.py`` (docs/calibration.md §5.90): the 26.04.01 / 26.06 pairs
as the reader builds them, and the what-if's patch of the host constant undone."""
from __future__ import annotations

import pytest

from experiments import moe_graph_pairs as mgp
from strategies.cost import moe_time


@pytest.fixture(scope="module")
def rows():
    return mgp.pair_rows()


def test_pairs_resolve_with_their_switches(rows):
    assert len(rows) == len(mgp.PAIRS) == 12
    graphed = [r for r in rows if r["graph"]]
    assert len(graphed) == 9
    for r in graphed:         # every graphed 26.06 config overlaps and runs the fused MLP
        assert r["overlap"] and r["fused"]
        ea, eb0, eb = r["est"]
        assert eb < eb0        # the fused MLP only removes work
    for r in rows:
        if not r["graph"]:     # the control pairs: eager on both sides, nothing fused
            assert not r["overlap"] and not r["fused"]
            assert r["est"][1] == r["est"][2] and r["miss"][1] == r["miss"][2]


def test_miss_is_the_residual_per_moe_layer_and_micro_batch(rows):
    from strategies.estimate import estimate
    from strategies.reference.cases import case_from_entry, load_reference
    e = {x["id"]: x for x in load_reference(mgp.EAGER)}
    r = rows[0]
    case = case_from_entry(e[r["eager"]])
    est = estimate(case.job)
    layers = case.job.model.num_moe_layers / case.job.plan.pp
    want = 1e3 * (case.measured_step_s - est.step_time_s) / (est.num_microbatches * layers)
    assert r["miss"][0] == pytest.approx(want, rel=1e-12)
    assert r["meas"][0] == case.measured_step_s


def test_the_host_whatif_restores_the_constant():
    kept = moe_time.EXPERT_HOST_S
    with mgp._expert_host(1.0, 2.0):
        assert moe_time.EXPERT_HOST_S == (1.0, 2.0)
    assert moe_time.EXPERT_HOST_S == kept
    with pytest.raises(RuntimeError):
        with mgp._expert_host(3.0, 4.0):
            raise RuntimeError("inside")
    assert moe_time.EXPERT_HOST_S == kept
