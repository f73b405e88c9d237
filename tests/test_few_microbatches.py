"""Split-backward schedules with too few micro-batches for their steady state (ZB-H1
``m < pp``, ZB-H2 and ZB-V ``m < 2pp - 1``): ``pipeline_span`` against the free-communication
simulation of the real per-rank order, to floating-point precision for balanced ranks, and
the estimate of such a plan above its lower bound (docs/calibration.md §5.109)."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.analysis import simulate_free_comm
from strategies.schedules.chain import chain_span
from topologies.cluster import parse_cluster_arg

#: ``(T_F, T_B, T_W)`` per stage and micro-batch, ``B`` the input gradient; ``T_W <= T_F <= T_B``
EXACT = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (0.8, 1.3, 0.4), (1.0, 1.0, 0.0)]
VPP = {"zb-h1": 1, "zb-h2": 1, "zb-v": 2}


def _span_and_order(name: str, pp: int, m: int, f: float, b: float, w: float
                    ) -> tuple[float, float]:
    t = f + b + w
    span = float(get_schedule(name).pipeline_span(m, t, pp * t, VPP[name], w / t, f / t, pp))
    return span, simulate_free_comm(name, pp, m, VPP[name], f, b + w, t_w=w)


@pytest.mark.parametrize("name", sorted(VPP))
@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("times", EXACT)
def test_span_equals_the_real_order_for_every_m(name, pp, times):
    """Every ``m`` up to ``2pp + 1``; ZB-V's steady form needs ``T_F = T_B`` beyond the
    fill (``ZBV.bubble_fraction``)."""
    steady_exact = name != "zb-v" or times[0] == times[1]
    for m in range(1, 2 * pp + 2 if steady_exact else 2 * pp - 1):
        span, order = _span_and_order(name, pp, m, *times)
        assert span == pytest.approx(order, rel=1e-12), (name, pp, m, times)


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2"])
def test_one_chunk_schedules_exact_with_a_slower_forward(name):
    for pp in (2, 4, 8):
        for m in range(1, 2 * pp + 2):
            span, order = _span_and_order(name, pp, m, 1.2, 1.0, 0.5)
            assert span == pytest.approx(order, rel=1e-12), (name, pp, m)


def test_the_chain_sets_the_span_below_the_steady_state_threshold():
    """ZB-H2, pp 4, ``T_F = T_B = 1``, ``T_W = 0.5``: ``(p + m - 1)·2 + 0.5`` up to
    ``m = 2p - 1`` (the steady form is below it there), the steady form from there on."""
    s, t = get_schedule("zb-h2"), 2.5
    for m in range(1, 10):
        steady = m * t + 3 * t * max(1 / 2.5, 1 - 3 * 0.2)
        chain = float(chain_span(m, t, 4 * t, 0.2))
        assert chain == pytest.approx((4 + m - 1) * 2 + 0.5, rel=1e-15)
        assert (chain > steady) == (m < 7)
        assert float(s.pipeline_span(m, t, 4 * t, 1, 0.2, 0.4, 4)) == max(chain, steady)


def test_zb_v_with_a_slower_forward_is_close_and_low():
    """``T_F = 2T_B``: outside the exact region the V's closed forms (``ZBV.closed_span``) are
    low by at most 7 %; its span, the order replayed (§5.111), is the order's."""
    s = get_schedule("zb-v")
    for pp in (2, 4, 8):
        for m in range(1, 2 * pp - 1):
            span, order = _span_and_order("zb-v", pp, m, 2.0, 1.0, 0.5)
            closed = float(s.closed_span(m, 3.5, pp * 3.5, 2, 0.5 / 3.5, 2.0 / 3.5, pp))
            assert 0.93 * order <= closed <= order * (1 + 1e-12), (pp, m)
            assert span == pytest.approx(order, rel=1e-12), (pp, m)


def test_dualpipev_has_no_few_microbatch_case():
    """DualPipeV refuses ``m < 2pp`` (DeepSeek's assertion), so its span needs no chain."""
    with pytest.raises(SpecError):
        get_schedule("dualpipev").check(4, 7, 2)
    get_schedule("dualpipev").check(4, 8, 2)


@pytest.mark.parametrize("sched", ["zb-v,vpp=2", "zb-h2", "zb-h1"])
def test_gpt3_plan_with_three_microbatches_estimate_above_bound(sched):
    """GPT-3 175B, ``tp4 pp4 dp64 mbs8``: 3 micro-batches per pipeline; the estimate was
    below its own lower bound (ZB-V 23.47 s against 28.19 s) before the chain."""
    mod, cl = model_preset("gpt3-175b"), parse_cluster_arg("dgx-a100:128")
    arr = PlanArrays.from_plans([parse_plan(
        "tp=4,pp=4,dp=64,mbs=8,gbs=1536,recompute=full,recompute_layers=9,sp=true,zero=2,"
        f"schedule={sched}")])
    est = estimate_arrays(mod, cl, "bf16", arr)
    bound = step_time_lower_bound(mod, cl, "bf16", arr, costs=est["stage_costs"])
    assert float(np.ravel(bound)[0]) <= float(np.ravel(est["step_time_s"])[0])
