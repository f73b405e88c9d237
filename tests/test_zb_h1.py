"""ZB-H1 (Qi et al., ICLR 2024, section 2.1): the order of docs/schedules.md, built here a
second way; 1F1B's stash; the closed-form bubble against a free-communication simulation to
floating-point precision; plans refuse it until the cost model splits the backward."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.studies.compare_schedules import parse_schedules, plan_with
from strategies.errors import SpecError
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.schedules import Step, get_schedule, schedule_code
from strategies.schedules.analysis import (bubble_fraction_closed_form, peak_stash,
                                           simulate_free_comm)
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

ZB = get_schedule("zb-h1")


def phases(r: int, p: int, m: int) -> list[str]:
    """The paper's phases (m >= p): p-1-r F; r x [F B]; m-p+1 x [F B W]; p-1-r x [B W]; r x W."""
    f, b, w, out = iter(range(m)), iter(range(m)), iter(range(m)), []
    out += [f"F{next(f)}" for _ in range(p - 1 - r)]
    for _ in range(r):
        out += [f"F{next(f)}", f"B{next(b)}"]
    for _ in range(m - p + 1):
        out += [f"F{next(f)}", f"B{next(b)}", f"W{next(w)}"]
    for _ in range(p - 1 - r):
        out += [f"B{next(b)}", f"W{next(w)}"]
    out += [f"W{next(w)}" for _ in range(r)]
    return out


def names(steps: list[Step]) -> list[str]:
    return [f"{s.kind}{s.microbatch}" for s in steps]


def test_golden_p4_m8():
    """Figure 3 (top) of the paper."""
    assert " ".join(names(ZB.steps(0, 4, 8))) == (
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7")
    assert " ".join(names(ZB.steps(3, 4, 8))) == (
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7")


@pytest.mark.parametrize("p,m", [(1, 1), (2, 2), (2, 7), (4, 4), (4, 9), (8, 8), (8, 20)])
def test_order_equals_the_phases_and_keeps_1f1b_stash(p, m):
    for r in range(p):
        steps = ZB.steps(r, p, m)
        assert names(steps) == phases(r, p, m)
        at = {(s.kind, s.microbatch): k for k, s in enumerate(steps)}
        assert len(at) == len(steps) == 3 * m
        assert all(at[("F", i)] < at[("B", i)] < at[("W", i)] for i in range(m))
        # W lags its B by exactly r micro-batches
        assert [s.microbatch for s in steps if s.kind == "W"][:max(m - r, 0)] == list(range(m - r))
        assert ZB.in_flight(r, p, m) == peak_stash(steps) == get_schedule("1f1b").in_flight(r, p, m)
        assert ZB.num_warmup(r, p, m) == get_schedule("1f1b").num_warmup(r, p, m)
    st = np.arange(p)
    assert ZB.in_flight_array(st, p, m, 1).tolist() == [ZB.in_flight(r, p, m) for r in range(p)]


TIMES = [(1.0, 1.0, 1.0), (1.0, 1.3, 0.7), (1.5, 1.0, 0.4), (0.7, 2.0, 0.7), (2.0, 0.9, 0.1)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(2, 2), (2, 5), (3, 3), (4, 4), (4, 8), (4, 11), (8, 8), (8, 16), (8, 24)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """``(p-1)(T_F + T_B - T_W)`` with ``T_B`` the input gradient, when ``m >= p`` and
    ``T_W <= T_F, T_B``: exact to floating-point precision."""
    t_f, t_bi, t_w = times
    t_b = t_bi + t_w                                  # the whole backward
    span = simulate_free_comm("zb-h1", p, m, 1, t_f, t_b, t_w=t_w)
    ideal = m * (t_f + t_b)
    assert span - ideal == pytest.approx((p - 1) * (t_f + t_bi - t_w), rel=1e-12, abs=1e-12)
    w_share = t_w / (t_f + t_b)
    assert (span - ideal) / ideal == pytest.approx(
        bubble_fraction_closed_form("zb-h1", p, m, 1, w_share), rel=1e-12, abs=1e-12)
    # 1F1B with the same passes (its backward unsplit) has the larger bubble (p-1)(T_F+T_B)
    span_1f1b = simulate_free_comm("1f1b", p, m, 1, t_f, t_b, t_w=t_w)
    assert span_1f1b - ideal == pytest.approx((p - 1) * (t_f + t_b), rel=1e-12)
    assert span <= span_1f1b


def test_equal_times_bubble_is_a_third_of_1f1b():
    """Table 2 of the paper: ``T_F = T_B = T_W``."""
    for p, m in [(4, 8), (8, 32)]:
        assert bubble_fraction_closed_form("zb-h1", p, m, 1, 1 / 3) == pytest.approx(
            bubble_fraction_closed_form("1f1b", p, m) / 3, rel=1e-15)


def test_exchanges_pair_up_and_weight_gradients_send_nothing():
    sent, received = [], []
    for r in range(4):
        acts = ZB.actions(r, 4, 6)
        assert [a for a in acts if isinstance(a, Step)] == ZB.steps(r, 4, 6)
        for a in acts:
            if not isinstance(a, Step):
                sent += [(d, i, c, r) for d, i, c in a.sends]
                received += [(d, i, c, ZB.peer(r, c, i, 4, 1, d, False)) for d, i, c in a.recvs]
    assert sent and sorted(sent) == sorted(received)
    assert len(sent) == 2 * 6 * 3          # one fwd and one bwd message per micro-batch and link


def test_plans_refuse_it_until_the_cost_model_splits_the_backward():
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=4,gbs=8,schedule=zb-h1")
    assert e.value.field == "schedule" and "B and W" in str(e.value)
    with pytest.raises(SpecError) as e:
        ZB.steps(0, 4, 8, vpp=2)
    assert e.value.field == "vpp"
    choice = parse_schedules("1f1b,zb-h1")[1]
    assert (choice.schedule, choice.vpp) == ("zb-h1", 1)
    with pytest.raises(SpecError):
        plan_with(Plan(tp=2, pp=4, gbs=8), choice)
    sp = enumerate_space(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1), 16,
                         SpaceOptions(max_mbs=2))
    assert not (sp.cols["sched"] == schedule_code("zb-h1")).any()
