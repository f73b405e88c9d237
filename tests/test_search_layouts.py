"""The uneven pipeline layouts the search proposes (strategies.search.layouts, issue 13): the
closed-form choice, the per-rank layer counts the array model reads, the bound at or below
the simulation on such plans, the pruned search equal to the exhaustive one, and the even
plans of the space untouched."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.scalar import memory_by_stage
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays, rank_layers
from strategies.presets import model_preset
from strategies.search.layouts import (Candidate, LayerCosts, busiest, candidate_layout,
                                       first_last, layer_costs, slot_vpps)
from strategies.search.plan_rows import columns_from_plans, plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset
from tests.search_checks import assert_pruned_equals_exhaustive


def test_slots_where_layers_plus_two_divide():
    c = LayerCosts(1.0, 0.01, 0.6)
    assert candidate_layout(126, 8, 8, c) == Candidate(account=True)   # NeMo's 405B recipe
    assert candidate_layout(126, 8, 1, c) == Candidate(account=True)
    assert candidate_layout(96, 8, 1, c) is None      # even split, LM head under one layer
    assert candidate_layout(96, 1, 1, c) is None
    assert slot_vpps(126, None) == [4, 8, 16, 32, 64, 128]
    assert slot_vpps(126, 8) == [4, 8]


def test_first_last_balances_the_lm_head_exactly():
    # max(f, k, l + 3) with f + 2k + l = 61: all equal at B with 4B - 3 = 61, B = 16
    c = LayerCosts(1.0, 0.0, 3.0)
    assert first_last(61, 4, 1, c) == (16, 16, 13)
    assert candidate_layout(61, 4, 1, c) == Candidate(first=16, last=13)
    assert busiest(16, 16, 13, 4, c) == 16.0
    # brute force over every split with each count a multiple of vpp
    for L, pp, v, c in [(61, 4, 1, LayerCosts(0.3, 0.05, 0.4)), (62, 5, 2, LayerCosts(1, 0, 1.7)),
                        (30, 2, 3, LayerCosts(1, 0.2, 0.9))]:
        best = min(busiest(f, k, L - f - (pp - 2) * k, pp, c)
                   for k in (range(v, L + 1, v) if pp > 2 else [0])
                   for f in range(v, L + 1, v)
                   if L - f - (pp - 2) * k >= v and (L - f - (pp - 2) * k) % v == 0)
        f, k, la = first_last(L, pp, v, c)
        assert f + la + (pp - 2) * k == L and f % v == la % v == k % v == 0
        assert busiest(f, k, la, pp, c) == best
    # a big LM head moves layers off the last rank even where the layers divide
    assert candidate_layout(64, 4, 1, LayerCosts(1.0, 0.0, 4.0)) == Candidate(first=17, last=13)


def test_rank_layers_closed_forms():
    plans = [parse_plan("tp=1,pp=8,dp=1,gbs=8,schedule=interleaved,vpp=8,"
                        "account_embedding=true,account_loss=true"),
             parse_plan("tp=1,pp=4,dp=1,gbs=8,first_stage_layers=16,last_stage_layers=13"),
             parse_plan("tp=1,pp=4,dp=1,gbs=8,first_stage_layers=13"),
             parse_plan("tp=1,pp=4,dp=1,gbs=8")]
    first, mid, last, least, uneven = rank_layers(61, PlanArrays.from_plans(plans[1:]))
    assert first.tolist() == [16, 13, 15.25] and mid.tolist() == [16, 16, 15.25]
    assert last.tolist() == [13, 16, 15.25] and least.tolist() == [13, 13, 15]
    assert uneven.tolist() == [True, True, False]
    got = [x.tolist() for x in rank_layers(126, PlanArrays.from_plans(plans[:1]))]
    assert got == [[15], [16], [15], [1], [True]]


def test_explicit_even_layout_prices_like_the_even_plan():
    """first/last given as the even counts: the array estimate, the bound and the memory are
    the even plan's to the last bit (the per-rank path reads the same record)."""
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    even = parse_plan("tp=2,pp=4,dp=2,mbs=1,gbs=32")
    given = replace(even, first_stage_layers=8, last_stage_layers=8)
    a, b = (columns_from_plans([p]) for p in (even, given))
    ea, eb = estimate_arrays(m, cl, "bf16", a), estimate_arrays(m, cl, "bf16", b)
    for k in ("step_time_s", "stage_time_s", "bubble", "dp_comm"):
        assert float(ea[k][0]) == float(eb[k][0])
    assert float(step_time_lower_bound(m, cl, "bf16", a)[0]) == \
        float(step_time_lower_bound(m, cl, "bf16", b)[0])
    assert float(peak_memory_arrays(m, a)[0]) == float(peak_memory_arrays(m, b)[0])


def test_array_memory_reads_each_rank():
    """The search's peak memory of a slot layout is the scalar model's busiest stage (which
    builds the layout)."""
    m, cl = model_preset("llama3.1-405b"), cluster_preset("dgx-h100", 8)
    plan = parse_plan("tp=8,pp=8,dp=1,mbs=1,gbs=16,schedule=interleaved,vpp=8,"
                      "account_embedding=true,account_loss=true")
    job = make_job(m, cl, plan)
    want = max(s.total for s in memory_by_stage(job))
    got = float(peak_memory_arrays(m, columns_from_plans([job.plan]))[0])
    assert got == pytest.approx(want, rel=1e-9)


def _bound_and_sim(m, cl, text):
    from simulator.simulate import simulate
    job = make_job(m, cl, parse_plan(text))
    bound = float(step_time_lower_bound(m, cl, "bf16", columns_from_plans([job.plan]))[0])
    return job, bound, simulate(job).step_time_s


def test_bound_below_simulation_405b_slots():
    m, cl = model_preset("llama3.1-405b"), cluster_preset("dgx-h100", 8)
    c = layer_costs(m, cl)
    assert candidate_layout(m.num_layers, 8, 8, c) == Candidate(account=True)
    job, bound, sim = _bound_and_sim(m, cl, "tp=8,pp=8,dp=1,mbs=1,gbs=16,schedule=interleaved,"
                                     "vpp=8,account_embedding=true,account_loss=true")
    assert job.layout.layers_per_stage == (15, 16, 16, 16, 16, 16, 16, 15)
    assert 0.0 < bound <= sim


def test_bound_below_simulation_61_layer_moe_pp4():
    """DeepSeek-V3 (61 layers, the first 3 dense, an MTP module) on pp 4: only an uneven
    layout runs it; the bound stays below the simulation and the array memory is the
    scalar model's busiest stage (read by layer kind)."""
    m, cl = model_preset("deepseek-v3"), cluster_preset("dgx-h100", 4)
    cand = candidate_layout(61, 4, 1, layer_costs(m, cl))
    assert cand is not None and not cand.account and cand.first + cand.last < 61
    job, bound, sim = _bound_and_sim(
        m, cl, f"tp=1,pp=4,dp=8,ep=8,mbs=1,gbs=32,first_stage_layers={cand.first},"
               f"last_stage_layers={cand.last}")
    assert sum(job.layout.layers_per_stage) == 61
    assert 0.0 < bound <= sim
    want = max(s.total for s in memory_by_stage(job))
    got = float(peak_memory_arrays(m, columns_from_plans([job.plan]))[0])
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.slow
def test_space_proposes_the_layouts_405b():
    m, cl = model_preset("llama3.1-405b"), cluster_preset("dgx-h100", 64)
    sp = enumerate_space(m, cl, 2048)
    c = sp.cols
    pairs = set(zip(c["pp"][c["acc"]].tolist(), c["vpp"][c["acc"]].tolist()))
    assert (8, 8) in pairs and (16, 1) in pairs
    assert np.all(c["lf"][c["acc"]] == 0)
    # every row is either even or carries exactly one layout, which parses back
    i = int(np.flatnonzero(c["acc"] & (c["pp"] == 8) & (c["vpp"] == 8))[0])
    assert parse_plan(sp.key(i)) == sp.plan(i) and plan_key(sp.plan(i)) == sp.key(i)
    off = enumerate_space(m, cl, 2048, SpaceOptions(layouts=False))
    assert not np.any(off.cols["acc"]) and not np.any(off.cols["pp"] == 8)


@pytest.fixture(scope="module")
def gpt3_readme_search():
    """The README's main job searched once, ``(report, space)``: ``paraplan search --json``
    with no arguments (GPT-3 175B on dgx-a100:128, gbs 1536, every core, the paper's two
    reference plans), run in this process; ``report`` is its JSON, ``space`` the one
    ``run_search`` enumerated (``enumerate_space(m, cl, 1536)`` with the default options,
    captured, not built again). Read by the three tests below (one search, not three: the
    CLI contract's no-argument search was the same job run again in a subprocess)."""
    import contextlib
    import io
    import json
    import simulator.search.run as run_mod
    from simulator.cli.main import main
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    seen = []

    def captured(*args, **kw):
        # the call the old test made itself: default options, no stack, bf16
        assert args[3:] == (SpaceOptions(),) and kw.get("framework") is None
        assert kw.get("dtype", "bf16") == "bf16" and kw.get("system") is None
        seen.append(enumerate_space(*args, **kw))
        return seen[-1]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        mp.setattr(run_mod, "enumerate_space", captured)
        assert main(["search", "--json"]) == 0, err.getvalue()
    (sp,) = seen
    assert (sp.model, sp.cluster, sp.gbs) == (m, cl, 1536)
    return json.loads(out.getvalue()), sp


@pytest.mark.slow
def test_the_main_job_search_with_no_arguments(gpt3_readme_search):
    """``paraplan search``, the README's main job: GPT-3 175B on 128 DGX A100 nodes at
    global batch 1536, with the Megatron-LM paper's plans beside the result (moved from
    test_cli_contract, where it ran the same search in a subprocess; ``python -m
    simulator.cli`` itself is run by test_search_cli's and test_cli_contract's subprocess
    tests)."""
    rep = gpt3_readme_search[0]
    i = rep["inputs"]
    assert (i["model"]["name"], i["cluster"], i["gpus"], i["global_batch"]) == \
        ("gpt3-175b", "dgx-a100:128", 1024, 1536)
    assert len(rep["plans"]) == 5 and len(rep["references"]) == 2
    assert all(p["step_time_s"] <= r["step_time_s"] for p in rep["plans"][:1]
               for r in rep["references"])


@pytest.mark.slow
def test_even_rows_untouched_gpt3_default(gpt3_readme_search):
    """The README job (GPT-3 175B, 96 layers): the even rows, their bounds and estimates are
    those of the space without layouts, bit for bit."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    on, off = gpt3_readme_search[1], enumerate_space(m, cl, 1536, SpaceOptions(layouts=False))
    even = ~((on.cols["lf"] > 0) | (on.cols["ll"] > 0) | on.cols["acc"])
    for k, v in off.cols.items():
        assert np.array_equal(on.cols[k][even], v), k
    assert np.array_equal(on.peak_memory[even], off.peak_memory)
    sub = on.subset(np.flatnonzero(even))
    assert np.array_equal(step_time_lower_bound(m, cl, "bf16", sub),
                          step_time_lower_bound(m, cl, "bf16", off.cols))
    assert np.array_equal(estimate_arrays(m, cl, "bf16", sub)["step_time_s"],
                          estimate_arrays(m, cl, "bf16", off.cols)["step_time_s"])


@pytest.mark.slow
def test_gpt3_default_answer_unchanged(gpt3_readme_search):
    """No uneven plan can enter the README search's top 5 or its recommendation pool: each
    one's lower bound is above the 5th best and (1 + tolerance) times the best simulated
    time, so (the search being exact, and the even rows untouched) the answer is the one
    of the space without layouts."""
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    rep, sp = gpt3_readme_search
    times = [p["step_time_s"] for p in rep["plans"]]
    assert all("first_stage_layers" not in p["key"] and "account" not in p["key"]
               for p in rep["plans"])
    uneven = np.flatnonzero((sp.cols["lf"] > 0) | (sp.cols["ll"] > 0) | sp.cols["acc"])
    assert len(uneven)
    bounds = step_time_lower_bound(m, cl, "bf16", sp.subset(uneven))
    assert float(bounds.min()) > max(times[-1], 1.03 * times[0])


@pytest.mark.slow
def test_pruned_search_equals_exhaustive_uneven_model():
    m = replace(model_preset("llama3-8b"), num_layers=30, name="llama3-8b (30 layers)")
    cfg = dict(model=m, cluster=cluster_preset("dgx-h100", 1), gbs=8,
               options=SpaceOptions(max_mbs=1, max_vpp=2), workers=2, k=5)
    sp = enumerate_space(m, cfg["cluster"], 8, cfg["options"])
    assert np.any(sp.cols["acc"])                   # pp 4 and pp 8 only through slots
    assert_pruned_equals_exhaustive(cfg)
