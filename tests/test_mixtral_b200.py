"""The Mixtral 8x7B B200 finding (docs/calibration.md §5.100, experiments/mixtral_b200.py)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from strategies.estimate import estimate

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "mixtral_b200", os.path.join(_HERE, "experiments", "mixtral_b200.py"))
mx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mx)


@pytest.fixture(scope="module")
def cs():
    return mx.cases()


def test_expert_part_is_one_expert_per_rank_over_eight_nodes(cs):
    """ep 8 over 8 experts: each rank holds one expert of every layer, 3·h·ffn weights each,
    and that expert's copies are the 8 ranks that share its local index, one per node."""
    from strategies.cost import comm as cm
    from strategies.cost.stage import stage_costs
    c = cs[mx.MIXTRAL[0]]
    m, P, sc = c.job.model, c.job.plan, stage_costs(c.job)
    assert sc.expert_params_by_stage[0] == m.num_layers * 3 * 4096 * 14336
    (d, nd, _), (e, ne, se) = cm.dp_parts(sc.params_by_stage[0], sc.expert_params_by_stage[0],
                                          P.tp, P.cp, P.dp, P.ep, P.etp or 1)
    assert (nd, ne, se) == (64, 8, 8)
    assert d + e == sc.params_by_stage[0]


def test_compute_factor_closes_the_row(cs):
    """Scaling the estimate's compute by the printed factor, other terms held, gives the
    measured step (to floating-point precision)."""
    for i in (mx.MIXTRAL[0], mx.PIPELINED[0]):
        c = cs[i]
        e = estimate(c.job)
        comp = e.breakdown_s["compute"]
        closed = e.step_time_s - comp + comp * mx.compute_scale(c)
        assert closed == pytest.approx(c.measured_step_s, rel=1e-12)


def test_mixtral_pair_excess_lies_within_the_dense_pairs(cs):
    """The finding: the B200 Mixtral row's miss beyond its GB200 twin's is no larger than the
    dense tp 1 pairs' (Llama 3 8B on one node, Nemotron-4 15B), so no MoE term explains it."""
    rows = {r["b200"]: r for r in mx.pair_rows(cs)}
    dense = [rows[p[0]]["factor_ratio"] for p in mx.PAIRS[:2]]
    mix = rows[mx.MIXTRAL[0]]["factor_ratio"]
    assert min(dense) <= mix <= max(dense)
    assert all(r["ratio_meas"] > 1.15 > r["ratio_model"] for r in rows.values())
