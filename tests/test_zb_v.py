"""ZB-V (Qi et al., ICLR 2024, section 6): the V placement, the order of docs/schedules.md
(a golden row and a valid dependency order for every rank), the ``2p``-chunk stash on every
rank, the closed-form bubble against a free-communication simulation to floating-point
precision in the region it holds; plannable: the head on rank 0 in cost and memory, the
full simulator against the closed form, the bound below it."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.cost.stage import stage_costs
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.memory.scalar import memory_by_stage

from strategies.errors import SpecError
from strategies.plan import Plan, parse_plan
from strategies.search.plan_rows import columns_from_plans
from strategies.presets import model_preset
from strategies.schedules import get_schedule, head_rank, resolve_name
from strategies.schedules.analysis import (bubble_fraction_closed_form, free_comm_ranks,
                                           peak_stash, simulate_free_comm)
from topologies.cluster import cluster_preset
from tests.search_checks import assert_pruned_equals_exhaustive
from tests.schedule_checks import assert_exchanges_pair_up, assert_valid_order, balanced_costs

ZB = get_schedule("zb-v")


def test_v_placement():
    p = 4
    assert [ZB.virtual_stage(r, 0, p, 2) for r in range(p)] == [0, 1, 2, 3]
    assert [ZB.virtual_stage(r, 1, p, 2) for r in range(p)] == [7, 6, 5, 4]
    assert [ZB.rank_chunk(s, p, 2) for s in range(8)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1)]
    assert ZB.ends(p, 2) == (0, 0)                   # embedding and loss on the first rank
    assert ZB.peer(3, 0, 5, p, 2, "fwd", True) == 3  # the turn of the V stays on the rank
    assert ZB.peer(0, 1, 5, p, 2, "bwd", True) == 1
    assert resolve_name("zbv") == "zb-v"


def test_golden_p2_m4():
    """Rank 0 and rank 1 of p = 2 (torch's ``ScheduleZBVZeroBubble`` builds the same)."""
    row = lambda r: " ".join(map(str, ZB.steps(r, 2, 4, 2)))
    assert row(0) == ("F0.c0 F1.c0 F2.c0 F0.c1 B0.c1 W0.c1 F1.c1 B1.c1 W1.c1 F3.c0 B0.c0 W0.c0 "
                      "F2.c1 B2.c1 W2.c1 B1.c0 W1.c0 F3.c1 B3.c1 W3.c1 B2.c0 W2.c0 B3.c0 W3.c0")
    assert row(1) == ("F0.c0 F0.c1 F1.c0 F1.c1 B0.c1 W0.c1 F2.c0 B0.c0 W0.c0 F2.c1 B1.c1 W1.c1 "
                      "F3.c0 B1.c0 W1.c0 F3.c1 B2.c1 W2.c1 B2.c0 B3.c1 B3.c0 W2.c0 W3.c1 W3.c0")


@pytest.mark.parametrize("p,m", [(1, 1), (1, 3), (2, 1), (2, 3), (2, 6), (3, 2), (3, 5),
                                 (4, 4), (4, 7), (4, 10), (8, 15), (8, 16)])
def test_valid_dependency_order_and_stash(p, m):
    assert_valid_order("zb-v", p, m, 2)
    assert_exchanges_pair_up("zb-v", p, m, 2)
    for r in range(p):
        steps = ZB.steps(r, p, m, 2)
        assert ZB.in_flight(r, p, m, 2) == peak_stash(steps)
        if m >= 2 * p - 1:
            assert peak_stash(steps) == 2 * p        # balanced: p micro-batches' worth
        if m >= 2 * p:                               # a forward is left after the first B
            assert ZB.num_warmup(r, p, m, 2) == 2 * p - 1
            # §6: worker i = r+1 warms up with 2p-i forwards of chunk 0 and i-1 of chunk 1
            # (then the F1 that opens its first F1 B1 W1)
            head = steps[:next(k for k, s in enumerate(steps) if s.kind == "B")]
            assert [sum(s.chunk == c for s in head) for c in (0, 1)] == [2 * p - r - 1, r + 1]
    with pytest.raises(SpecError) as e:
        ZB.steps(0, p, m, 3)
    assert e.value.field == "vpp"


# chunk times (f, b, w): T_F = 2f, T_B = 2b (input gradient), T_W = 2w per stage
TIMES = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 1.0, 0.2), (0.5, 0.5, 0.5), (2.0, 2.0, 0.3)]


@pytest.mark.parametrize("p,m,times", [(p, m, t) for (p, m), t in itertools.product(
    [(1, 2), (2, 3), (2, 8), (3, 5), (4, 7), (4, 8), (4, 13), (8, 15), (8, 16)], TIMES)])
def test_closed_form_bubble_against_free_comm_simulation(p, m, times):
    """Region ``m >= 2p-1``, ``T_F = T_B``, ``T_W <= T_F``: the worst rank idles
    ``(p-1)(f + b - 2w)`` inside its span (zero when equal, the paper's claim) and one
    iteration's makespan exceeds the ideal by ``(p-1)·max(f, f + b - 2w)``."""
    f, b, w = times
    ranks = free_comm_ranks("zb-v", p, m, 2, 2 * f, 2 * (b + w), t_w=2 * w)
    work = 2 * m * (f + b + w)
    assert all(r.busy == pytest.approx(work, rel=1e-12) for r in ranks)
    bubble = max(r.bubble for r in ranks)
    assert bubble == pytest.approx((p - 1) * (f + b - 2 * w), rel=1e-12, abs=1e-12)
    assert max(r.end for r in ranks) - work == pytest.approx(
        (p - 1) * max(f, f + b - 2 * w), rel=1e-12, abs=1e-12)
    assert bubble / work == pytest.approx(bubble_fraction_closed_form(
        "zb-v", p, m, 2, w / (f + b + w)), rel=1e-12, abs=1e-12)


def test_outside_the_region_the_closed_form_does_not_hold():
    """``T_F != T_B``: the simulated bubble differs from the formula (larger here)."""
    f, b, w, p, m = 1.5, 1.0, 0.4, 4, 8
    ranks = free_comm_ranks("zb-v", p, m, 2, 2 * f, 2 * (b + w), t_w=2 * w)
    assert max(r.bubble for r in ranks) > (p - 1) * (f + b - 2 * w) + 0.5


def test_plans_accept_it_with_two_chunks_only():
    assert parse_plan("tp=2,pp=4,vpp=2,gbs=16,schedule=zb-v").schedule == "zb-v"
    with pytest.raises(SpecError) as e:
        parse_plan("tp=2,pp=4,vpp=4,gbs=16,schedule=zb-v")
    assert e.value.field == "vpp" and "vpp=2" in str(e.value)


# ---------------------------------------------------------------- plannable: the full stack
A100x2 = cluster_preset("dgx-a100", 2)


@pytest.mark.parametrize("model,tp,pp,gbs,extra", [
    ("gpt-1.7b", 2, 4, 32, {}), ("gpt-1.7b", 2, 4, 16, {}), ("gpt-1.7b", 2, 2, 16, {}),
    ("gpt-1.7b", 2, 4, 4, {}), ("llama3-8b", 2, 4, 16, {"recompute": "selective"}),
    ("llama3-8b", 1, 8, 32, {})])
def test_free_comm_simulation_equals_the_closed_form(model, tp, pp, gbs, extra):
    """The whole simulator (compiler, engine) with free communication and balanced ranks:
    the free-communication makespan of the order with the cost model's F, B and W; where the
    closed form holds (``m >= 2pp - 1``, ``T_F = T_B``, ``T_W <= T_F``) one iteration's
    makespan ``m·T + (pp-1)·max(T_F, T_F + T_B - 2T_W)/2`` to floating-point precision, and
    the estimate's ``pipeline_span`` equal to it."""
    job = make_job(model_preset(model), A100x2,
                   Plan(tp=tp, pp=pp, vpp=2, gbs=gbs, schedule="zb-v", **extra))
    m, L = job.num_microbatches, job.model.num_layers // pp
    for region in ("", "fb"):
        costs = balanced_costs(job, region)
        res = simulate(job, free_comm=True, costs=costs)
        t_f, t_w = L * costs.layer_fwd, L * costs.layer_wgrad
        t_b = L * (costs.layer_bwd + costs.layer_recompute)       # B + W, rank-level
        assert 0 < t_w <= t_f
        assert res.step_time_s == pytest.approx(
            simulate_free_comm("zb-v", pp, m, 2, t_f, t_b, t_w=t_w), rel=1e-9)
        if region and m >= 2 * pp - 1:
            assert t_b - t_w == pytest.approx(t_f, rel=1e-12)
            t = t_f + t_b
            closed = m * t + (pp - 1) * max(t_f, t_f + (t_b - t_w) - 2 * t_w) / 2
            assert res.step_time_s == pytest.approx(closed, rel=1e-9)
            assert ZB.pipeline_span(m, t, pp * t, 2, t_w / t, t_f / t) == pytest.approx(
                closed, rel=1e-12)


def test_head_and_embedding_on_rank_0():
    """The V puts the embedding and the LM head on rank 0: the cost record's parameters,
    memory and the placement rule agree; the ring keeps the head on rank ``pp - 1``. GPT-3's
    word embedding is tied: on rank 0 the head is the embedding's own tensor, so the V's
    rank 0 holds 1F1B's rank 0 plus the final norm only (tests/test_tied_vshape.py)."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8)
    job = make_job(m, cl, parse_plan("tp=8,pp=8,vpp=2,mbs=1,schedule=zb-v"), global_batch=64)
    one = make_job(m, cl, parse_plan("tp=8,pp=8,mbs=1"), global_batch=64)
    assert head_rank("zb-v", 8, 2) == 0 and head_rank("1f1b", 8, 1) == 7
    assert head_rank("interleaved", 8, 2) == 7
    c, c1 = stage_costs(job), stage_costs(one)
    assert m.tie_word_embeddings
    word = m.vocab_size * m.hidden_size / 8
    assert c.params_by_stage[0] == pytest.approx(c1.params_by_stage[0] + c1.head_params - word,
                                                 rel=1e-12)
    assert c.head_params == pytest.approx(c1.head_params - word, rel=1e-12)
    assert c.params_by_stage[7] == c.params_by_stage[3] == c1.params_by_stage[3]
    by, by1 = memory_by_stage(job), memory_by_stage(one)
    assert by[0].params > by[1].params == by[7].params
    assert by[0].params == pytest.approx(by1[0].params + by1[7].params - by1[3].params
                                         - word * job.system.param_bytes, rel=1e-12)


def test_activation_memory_is_2p_chunks_on_every_rank():
    """Every rank stashes ``2p`` chunks' activations (``p`` micro-batches' worth, 1F1B's
    first-stage peak) and ``memory_by_stage`` says so (the simulated peak against the model:
    tests/test_simulate.py)."""
    from strategies.memory.activations import activation_bytes_per_chunk, stage_activation_bytes
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 8)
    job = make_job(m, cl, parse_plan("tp=8,pp=8,vpp=2,mbs=1,schedule=zb-v"), global_batch=64)
    by = memory_by_stage(job)
    for r in range(8):
        assert ZB.in_flight(r, 8, job.num_microbatches, 2) == 16
        chunk = activation_bytes_per_chunk(job, r)
        pending = ZB.pending_weight_grads(r, 8, job.num_microbatches, 2)
        assert stage_activation_bytes(job, r) >= 16 * chunk
        if pending == 0 and r > 0:
            assert stage_activation_bytes(job, r) == pytest.approx(16 * chunk, rel=1e-12)
    assert all(by[r].activations == by[1].activations for r in range(2, 8))
    assert by[0].activations > by[1].activations        # the embedding's and the logits'


BOUND = [("llama3-8b", "dgx-a100", 1, "tp=1,pp=8,mbs=1", 16),
         ("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=4,mbs=1,zero=1", 64),
         ("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=2,mbs=1,cp=2,recompute=full", 32),
         ("llama3-8b", "dgx-h100", 1, "tp=2,pp=4,mbs=1", 32),
         ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=4,ep=2,mbs=1", 16)]


@pytest.mark.parametrize("name,cl_name,nodes,plan,gbs", BOUND)
def test_bound_never_beats_the_simulation(name, cl_name, nodes, plan, gbs):
    """The search's lower bound holds for ZB-V (the head on rank 0)."""
    mod, cl = model_preset(name), cluster_preset(cl_name, nodes)
    job = make_job(mod, cl, parse_plan(plan + ",vpp=2,schedule=zb-v"), global_batch=gbs)
    (b,) = step_time_lower_bound(mod, cl, "bf16", columns_from_plans([job.plan]))
    t = simulate(job).step_time_s
    assert b <= t, (b, t)


def test_compare_gpt3_175b(capsys):
    """``paraplan compare --schedules 1f1b,zb-h1,zb-h2,zb-v`` on GPT-3 175B with 8 stages:
    every row valid, ZB-V's step at or below 1F1B's."""
    assert main(["compare", "--json", "--model", "gpt3-175b", "--cluster", "dgx-a100:8",
                 "--plan", "tp=8,pp=8,mbs=1,gbs=64", "--schedules", "1f1b,zb-h1,zb-h2,zb-v"]) == 0
    rows = {r["schedule"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == {"1f1b", "zb-h1", "zb-h2", "zb-v:2"}
    assert all(r["valid"] for r in rows.values())
    assert rows["zb-v:2"]["step_time_s"] <= rows["1f1b"]["step_time_s"]


@pytest.mark.slow
def test_search_with_the_schedule_fixed_equals_exhaustive():
    """``search --fix schedule=zb-v`` enumerates it with two chunks (``fixed_search_vpps``;
    the default search leaves it out), and the bound-ordered search returns the exhaustive
    search's top plans: the bound is valid for it on the whole space."""
    from strategies.schedules import schedule_code
    from strategies.search.space import SpaceOptions, enumerate_space
    mod, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    opts = SpaceOptions(max_mbs=1, fixed={"schedule": "zb-v"})
    sp = enumerate_space(mod, cl, 16, opts)
    assert sp.size and (sp.cols["sched"] == schedule_code("zb-v")).all()
    assert (sp.cols["vpp"] == 2).all()
    assert not (enumerate_space(mod, cl, 16, SpaceOptions(max_mbs=1)).cols["sched"]
                == schedule_code("zb-v")).any()
    cfg = dict(model=mod, cluster=cl, gbs=16, options=opts, workers=2, k=5)
    _, full = assert_pruned_equals_exhaustive(cfg)
    assert all("schedule=zb-v" in p["key"] for p in full["plans"])


def test_reduce_window_counted_on_the_order():
    """After a rank's first chunk completes its gradients (its last W) ZB-V runs at most
    ``pp`` more B steps on that rank, exactly ``pp`` on rank 0: the window the lower bound
    lets the gradient reduction hide in (``reduce_window_steps``), counted on the order."""
    s = get_schedule("zb-v")

    def after_first_chunk(r, pp, m):
        acts = s.steps(r, pp, m, 2)
        done = min(max(i for i, a in enumerate(acts) if a.kind == "W" and a.chunk == c)
                   for c in (0, 1))
        return sum(a.kind == "B" for a in acts[done + 1:])

    for pp in (2, 3, 4, 8):
        for m in (pp, 2 * pp, 4 * pp):
            assert after_first_chunk(0, pp, m) == pp
            assert max(after_first_chunk(r, pp, m) for r in range(pp)) == pp
        assert float(s.reduce_window_steps(pp, 2)) == pp


def test_bound_below_simulation_with_short_microbatches():
    """Llama 3 8B at seq 1024 on 16 H100s, ZB-V, dp 8 with 16 micro-batches: the gradient
    all-reduce is long against a micro-batch's backward, and the bound (which let it hide
    under one backward step only, 0.912 s) stays below the simulated step (0.898 s)."""
    import numpy as np
    from strategies.plan_arrays import PlanArrays
    mod = replace(model_preset("llama3-8b"), seq_length=1024)
    cl = cluster_preset("dgx-h100", 2)
    job = make_job(mod, cl, parse_plan("tp=1,pp=2,dp=8,mbs=1,gbs=128,schedule=zb-v,vpp=2,"
                                       "zero=0"))
    lb = float(np.asarray(step_time_lower_bound(mod, cl, "bf16",
                                                PlanArrays.from_plans([job.plan]))).ravel()[0])
    assert lb <= simulate(job).step_time_s
