"""ZB-H2 (Qi et al., ICLR 2024, section 2.2): the order of docs/schedules.md against the
paper's Figure 3 and its phases built a second way; the ``(2p-1)`` stash; the closed-form
bubble (per rank, and the makespan of one iteration) against a free-communication simulation
to floating-point precision in the region it holds, alone and through the full simulator with
the cost model's B and W; plans accept it; more memory than 1F1B; ``compare`` on GPT-3 175B."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.memory.scalar import memory_by_stage
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.schedules import Schedule, Step, get_schedule
from strategies.schedules.analysis import (bubble_fraction_closed_form, free_comm_ranks,
                                           peak_stash, simulate_free_comm)
from topologies.cluster import cluster_preset
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order, balanced_free_comm

ZB = get_schedule("zb-h2")


def names(steps: list[Step]) -> str:
    return " ".join(f"{s.kind}{s.microbatch}" for s in steps)


def test_golden_p4_m8():
    """Figure 3 (bottom) of the paper: rank 0 and rank 3."""
    assert names(ZB.steps(0, 4, 8)) == (
        "F0 F1 F2 F3 F4 F5 F6 B0 W0 F7 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7")
    assert names(ZB.steps(3, 4, 8)) == (
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 W0 F7 B7 W1 W2 W3 W4 W5 W6 W7")


def phases(r: int, p: int, m: int) -> list[str]:
    """The paper's phases when ``m >= 2p-1``: ``2(p-r)-1`` F; ``2r`` x [B F];
    ``m-2p+1`` x [B W F]; [B W] until every B has run; the ``2r`` deferred W's."""
    warm = 2 * (p - r) - 1
    out = [f"F{i}" for i in range(warm)]
    out += sum(([f"B{k}", f"F{warm + k}"] for k in range(2 * r)), [])
    nb = 2 * r
    out += sum(([f"B{nb + k}", f"W{k}", f"F{2 * p - 1 + k}"] for k in range(m - 2 * p + 1)), [])
    nb, nw = m - 2 * p + 1 + 2 * r, m - 2 * p + 1
    out += sum(([f"B{nb + k}", f"W{nw + k}"] for k in range(m - nb)), [])
    out += [f"W{k}" for k in range(nw + m - nb, m)]
    return out


@pytest.mark.parametrize("p,m", [(1, 1), (1, 4), (2, 2), (2, 3), (2, 7), (3, 3), (4, 4),
                                 (4, 7), (4, 9), (8, 8), (8, 15), (8, 20)])
def test_order_is_a_valid_dependency_order_and_stash(p, m):
    assert_valid_order("zb-h2", p, m, 1)
    assert_exchanges_pair_up("zb-h2", p, m, 1)
    for r in range(p):
        steps = ZB.steps(r, p, m)
        at = {(s.kind, s.microbatch): k for k, s in enumerate(steps)}
        assert len(at) == len(steps) == 3 * m
        assert all(at[("F", i)] < at[("B", i)] < at[("W", i)] for i in range(m))
        for kind in "FBW":   # each pass in micro-batch order
            assert [s.microbatch for s in steps if s.kind == kind] == list(range(m))
        if m >= 2 * p - 1:
            assert names(steps).split() == phases(r, p, m)
        assert ZB.in_flight(r, p, m) == peak_stash(steps) == min(2 * (p - r) - 1, m)
        assert ZB.num_warmup(r, p, m) == Schedule.num_warmup(ZB, r, p, m)   # from the order
    assert ZB.in_flight(0, p, m) >= get_schedule("zb-h1").in_flight(0, p, m)
    st = np.arange(p)
    assert ZB.in_flight_array(st, p, m, 1).tolist() == [ZB.in_flight(r, p, m) for r in range(p)]


TIMES = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 1.3, 0.7), (1.5, 1.0, 0.4), (0.7, 2.0, 0.7),
         (2.0, 0.9, 0.1), (1.0, 0.3, 0.9)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(2, 3), (2, 6), (3, 5), (4, 7), (4, 8), (4, 13), (8, 15), (8, 16), (8, 24)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """Region ``m >= 2p-1`` and ``T_W <= T_F`` (``T_B``, the input gradient, any): the worst
    rank idles ``(p-1)·max(0, T_F + T_B - 2T_W)`` inside its span and one iteration's
    makespan exceeds the ideal by ``(p-1)·max(T_F, T_F + T_B - 2T_W)``."""
    t_f, t_bi, t_w = times
    ranks = free_comm_ranks("zb-h2", p, m, 1, t_f, t_bi + t_w, t_w=t_w)
    work = m * (t_f + t_bi + t_w)
    assert all(r.busy == pytest.approx(work, rel=1e-12) for r in ranks)
    bubble = max(r.bubble for r in ranks)
    assert bubble == pytest.approx((p - 1) * max(0.0, t_f + t_bi - 2 * t_w), rel=1e-12,
                                   abs=1e-12)
    assert max(r.end for r in ranks) - work == pytest.approx(
        (p - 1) * max(t_f, t_f + t_bi - 2 * t_w), rel=1e-12)
    w_share = t_w / (t_f + t_bi + t_w)
    assert bubble / work == pytest.approx(
        bubble_fraction_closed_form("zb-h2", p, m, 1, w_share), rel=1e-12, abs=1e-12)
    # never worse than ZB-H1 per rank
    h1 = free_comm_ranks("zb-h1", p, m, 1, t_f, t_bi + t_w, t_w=t_w)
    assert bubble <= max(r.bubble for r in h1) + 1e-12


def test_outside_the_region_the_bubble_is_larger():
    """``T_W > T_F`` (0.5, 1.0, 1.0), ``p = 4``: the formula clamps at zero, the simulation
    idles rank 0 for 1.5 s."""
    ranks = free_comm_ranks("zb-h2", 4, 8, 1, 0.5, 2.0, t_w=1.0)
    assert max(0.0, 0.5 + 1.0 - 2 * 1.0) == 0.0
    assert max(r.bubble for r in ranks) == pytest.approx(3 * 0.5, rel=1e-12)


def test_equal_times_zero_bubble():
    """Table 2 of the paper: ``T_F = T_B = T_W`` gives no bubble."""
    assert bubble_fraction_closed_form("zb-h2", 8, 16, 1, 1 / 3) == pytest.approx(0, abs=1e-15)
    assert max(r.bubble for r in free_comm_ranks("zb-h2", 8, 16, 1, 1, 2, t_w=1)) == 0


def test_plans_accept_it_with_one_chunk():
    assert parse_plan("tp=2,pp=4,gbs=8,schedule=zb-h2").schedule == "zb-h2"
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=4,gbs=8,schedule=zb-h2,vpp=2")
    assert e.value.field == "vpp"
    with pytest.raises(SpecError) as e:
        ZB.steps(0, 4, 8, vpp=2)
    assert e.value.field == "vpp"


A100x2 = cluster_preset("dgx-a100", 2)


@pytest.mark.parametrize("model,tp,pp,gbs,extra", [
    ("gpt-1.7b", 2, 4, 32, {}), ("gpt-1.7b", 2, 4, 16, {}), ("gpt-1.7b", 2, 8, 16, {}),
    ("gpt-1.7b", 2, 4, 4, {}), ("llama3-8b", 2, 4, 16, {"recompute": "selective"}),
    ("gpt-1.7b", 2, 4, 16, {"recompute": "full", "zero": 1})])
def test_free_comm_simulation_equals_the_closed_form(model, tp, pp, gbs, extra):
    """The whole simulator with free communication and balanced stages: one iteration's
    makespan ``m·T + (pp-1)·max(T_F, T_F + T_B - 2T_W)`` (``T_B`` the input gradient, the
    cost model's ``T_W``; ``m >= 2pp - 1``, ``T_W <= T_F``) to floating-point precision, the
    free-communication makespan of the order otherwise, below 1F1B's on the same costs, and
    the estimate's ``pipeline_span`` equal to it."""
    job = make_job(model_preset(model), A100x2, Plan(tp=tp, pp=pp, gbs=gbs, schedule="zb-h2",
                                                    **extra))
    res, costs, m, t_f, t_b, t_w = balanced_free_comm(job)
    assert res.step_time_s == pytest.approx(simulate_free_comm("zb-h2", pp, m, 1, t_f, t_b,
                                                               t_w=t_w), rel=1e-9)
    one = simulate(make_job(job.model, A100x2, replace(job.plan, schedule="1f1b")),
                   free_comm=True, costs=costs)
    assert res.step_time_s <= one.step_time_s
    if m >= 2 * pp - 1:
        t = t_f + t_b
        closed = m * t + (pp - 1) * max(t_f, t_f + (t_b - t_w) - 2 * t_w)
        assert res.step_time_s == pytest.approx(closed, rel=1e-9)
        assert ZB.pipeline_span(m, t, pp * t, 1, t_w / t, t_f / t) == pytest.approx(closed,
                                                                                  rel=1e-12)


def test_more_activation_memory_than_1f1b():
    """``2(p-r)-1`` micro-batches stashed on rank ``r`` against 1F1B's ``p-r``."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8)
    by = {s: memory_by_stage(make_job(m, cl, parse_plan(f"tp=8,pp=8,mbs=1,schedule={s}"),
                                      global_batch=64))
          for s in ("1f1b", "zb-h2")}
    assert all(a.activations > b.activations for a, b in zip(by["zb-h2"][:-1], by["1f1b"]))
    assert max(x.total for x in by["zb-h2"]) > max(x.total for x in by["1f1b"])
    # the paper's (2p-2r-1)·M_B + 2r·M_W on rank r (§2.3), with M_B and M_W of the model
    from strategies.memory.activations import (activation_bytes_per_chunk, layer_wgrad_bytes,
                                               stage_activation_bytes)
    job = make_job(m, cl, parse_plan("tp=8,pp=8,mbs=1,schedule=zb-h2"), global_batch=64)
    m_w = (m.num_layers // 8) * layer_wgrad_bytes(m, m.seq_length, 1, 8, False, 1)
    for r in range(8):
        want = (2 * 8 - 2 * r - 1) * activation_bytes_per_chunk(job, r) + 2 * r * m_w
        extra = stage_activation_bytes(job, r) - want       # the last stage's logits
        assert extra == (0.0 if r < 7 else pytest.approx(
            by["1f1b"][7].activations - activation_bytes_per_chunk(job, 7), rel=1e-12))


def test_compare_gpt3_175b_zb_h2_at_or_below_zb_h1_and_1f1b(capsys):
    """``paraplan compare --schedules 1f1b,zb-h1,zb-h2`` on GPT-3 175B with 8 stages: steps
    ordered ZB-H2 <= ZB-H1 <= 1F1B, ZB-H2 with more memory."""
    assert main(["compare", "--json", "--model", "gpt3-175b", "--cluster", "dgx-a100:8",
                 "--plan", "tp=8,pp=8,mbs=1,gbs=64", "--schedules", "1f1b,zb-h1,zb-h2"]) == 0
    rows = {r["schedule"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert all(r["valid"] for r in rows.values())
    assert rows["zb-h2"]["step_time_s"] <= rows["zb-h1"]["step_time_s"] \
        <= rows["1f1b"]["step_time_s"]
    assert rows["zb-h2"]["memory"]["peak_gib"] > rows["1f1b"]["memory"]["peak_gib"]


@pytest.mark.parametrize("p,m", [(2, 3), (4, 7), (4, 16), (8, 15), (8, 32)])
def test_per_worker_memory_of_the_paper(p, m):
    """§2.3: rank ``r`` (0-indexed) holds ZB-H1 ``(p-r)M_B + r·M_W`` and ZB-H2
    ``(2p-2r-1)M_B + 2r·M_W`` at its peak: the stash and the weight gradients still to run
    when the stash peaks. ZB-V defers ``W`` only once forwards are done (none waits at the
    stash peak); DualPipeV's stash peaks at the end of an overlapped pair, whose ``W`` runs
    last (one waits), except on the turning rank; unsplit schedules have none."""
    h1 = get_schedule("zb-h1")
    for r in range(p):
        assert (ZB.in_flight(r, p, m), ZB.pending_weight_grads(r, p, m)) == (2 * p - 2 * r - 1,
                                                                            2 * r)
        assert (h1.in_flight(r, p, m), h1.pending_weight_grads(r, p, m)) == (p - r, r)
        assert get_schedule("1f1b").pending_weight_grads(r, p, m) == 0
        assert get_schedule("zb-v").pending_weight_grads(r, p, m, 2) == 0
        if m >= 2 * p:
            assert get_schedule("dualpipev").pending_weight_grads(r, p, m, 2) == \
                (0 if r == p - 1 else 1)
