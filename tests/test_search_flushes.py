"""``flushes`` and ``microbatch_group_size`` in the search (docs/search.md "The space").

* both are ``PlanArrays`` columns (``fl``, ``mgs``) that the arrays estimate, the memory
  rule, the lower bound and the feasibility mask read: every candidate's arrays estimate and
  peak memory equal the scalar ``estimate`` of its plan to 1e-12 with 2 and 4 flushes and a
  group size other than ``pp``;
* the mask applies the rules ``make_job`` raises (``flushes.flush_rules``, the schedule's own
  rules with the group), so every kept plan makes a job and a plan the rules refuse is pruned;
* ``--fix``/``--plan`` carry them into every candidate and ``plan_key`` (``--resume``);
  values a stack or schedule cannot run exit 2 naming stack, field, value and rule;
* the search's bound stays below the simulated step on a sample of flushed plans.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.fix_parse import FIX_KEYS, parse_fix
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

DENSE, CL = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)


def _space(text: str, gbs: int = 64, **kw):
    return enumerate_space(DENSE, CL, gbs, SpaceOptions(max_mbs=2, fixed=parse_fix(text),
                                                        **kw))


def _sample(sp, n: int = 8) -> list[int]:
    return list(range(0, sp.size, max(1, sp.size // n)))


def test_parse_fix_reads_both_keys():
    assert {"flushes", "microbatch_group_size"} <= set(FIX_KEYS)
    assert parse_fix("flushes=4,microbatch_group_size=8") == \
        {"flushes": 4, "microbatch_group_size": 8}
    with pytest.raises(SpecError) as e:
        parse_fix("schedule=1f1b,microbatch_group_size=8")
    assert "microbatch_group_size=8" in str(e.value) and "not 1f1b" in str(e.value)
    with pytest.raises(SpecError) as e:
        parse_fix("flushes=0")
    assert "flushes=0" in str(e.value) and ">= 1" in str(e.value)


@pytest.mark.parametrize("fix", ["flushes=2", "flushes=4", "microbatch_group_size=8",
                                 "flushes=2,microbatch_group_size=6"])
def test_candidates_price_as_their_plans(fix):
    """The arrays the search scores (estimate and peak memory) equal the scalar estimate of
    each candidate's plan (what ``estimate --plan`` prints), to 1e-12."""
    sp = _space(fix, layouts=False)
    assert sp.size > 0
    fx = parse_fix(fix)
    assert (sp.cols["fl"] == fx.get("flushes", 1)).all()
    if "microbatch_group_size" in fx:
        assert (sp.cols["mgs"] == fx["microbatch_group_size"]).all()
    a = estimate_arrays(DENSE, CL, "bf16", sp.arrays)
    peaks = peak_memory_arrays(DENSE, sp.arrays, "bf16", None, CL.gpu)
    for i in _sample(sp):
        p = sp.plan(i)
        assert p.flushes == fx.get("flushes", 1)
        assert p.microbatch_group_size == fx.get("microbatch_group_size")
        e = estimate(make_job(DENSE, CL, p))
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
        for k in ("mfu", "hfu", "tokens_per_s", "bubble_fraction"):
            assert a[k][i] == pytest.approx(getattr(e, k), rel=1e-12, abs=0)
        for k in BREAKDOWN_KEYS:
            assert a[k][i] == pytest.approx(e.breakdown_s[k], rel=1e-12, abs=1e-15)
        assert a["num_microbatches"][i] == e.num_microbatches
        assert peaks[i] == pytest.approx(e.memory.total, rel=1e-12, abs=0)
        assert sp.peak_memory[i] == pytest.approx(peaks[i], rel=1e-12, abs=0)


def _uneven_rows(m, sp) -> np.ndarray:
    from strategies.plan_arrays import rank_layers
    return np.flatnonzero(rank_layers(m.num_layers, sp.arrays)[4] & (sp.arrays.pp > 1))


@pytest.mark.slow
@pytest.mark.parametrize("fix", ["flushes=2,microbatch_group_size=8",
                                 "flushes=2,schedule=1f1b", "schedule=interleaved",
                                 "schedule=1f1b"])
def test_uneven_layouts_price_as_their_plans(fix):
    """The search's uneven-layout rows (first/last stage layers, slots) of a one-kind model,
    interleaved and 1F1B, with and without flushes and a group: the search's arrays
    (``estimate.kinds.with_kind_rows`` of ``estimate_arrays_mixed``, what ``run_search``
    reports) and the peak memory equal the scalar ``estimate`` of each plan to 1e-12
    (docs/search.md "Uneven pipeline layouts"); the even rows keep the columns' figures."""
    from strategies.estimate.kinds import kind_rows, with_kind_rows
    from strategies.estimate.mixed import estimate_arrays_mixed
    sp = _space(fix, layouts=True)
    rows = _uneven_rows(DENSE, sp)
    assert rows.size
    assert np.array_equal(kind_rows(DENSE, sp.arrays), rows)
    P = sp.arrays
    raw = estimate_arrays_mixed(DENSE, CL, "bf16", P)
    a = with_kind_rows(DENSE, CL, "bf16", P, raw, sp.plan)
    even = np.setdiff1d(np.arange(sp.size), rows)
    assert np.array_equal(a["step_time_s"][even], raw["step_time_s"][even])
    peaks = peak_memory_arrays(DENSE, P, "bf16", None, CL.gpu)
    for i in rows.tolist():
        e = estimate(make_job(DENSE, CL, sp.plan(i)))
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0), i
        for k in ("mfu", "hfu", "tokens_per_s", "bubble_fraction"):
            assert a[k][i] == pytest.approx(getattr(e, k), rel=1e-12, abs=0)
        for k in BREAKDOWN_KEYS:
            assert a[k][i] == pytest.approx(e.breakdown_s[k], rel=1e-12, abs=1e-15)
        assert peaks[i] == pytest.approx(e.memory.total, rel=1e-12, abs=0)


def test_uneven_layouts_of_mixed_kinds_price_as_their_plans():
    """A model of dense first layers, MoE layers and an MTP module: its uneven-layout rows
    (with flushes) in the search's arrays equal the scalar estimate of each plan to 1e-12."""
    import random

    from strategies.estimate.kinds import with_kind_rows
    from strategies.estimate.mixed import estimate_arrays_mixed
    from tests.test_arrays_kinds import toy
    m = toy(random.Random(5107), 2, 1)
    cl = cluster_preset("dgx-h100", 2)
    checked = 0
    for fix in ("flushes=2", "schedule=interleaved"):
        sp = enumerate_space(m, cl, 64, SpaceOptions(max_mbs=2, fixed=parse_fix(fix),
                                                     layouts=True))
        rows = _uneven_rows(m, sp)
        rows = rows[:: max(1, rows.size // 6)]
        a = with_kind_rows(m, cl, "bf16", sp.arrays,
                           estimate_arrays_mixed(m, cl, "bf16", sp.arrays), sp.plan,
                           only=rows.tolist())
        for i in rows.tolist():
            e = estimate(make_job(m, cl, sp.plan(i)))
            assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0), i
            for k in BREAKDOWN_KEYS:
                assert a[k][i] == pytest.approx(e.breakdown_s[k], rel=1e-12, abs=1e-15)
            checked += 1
    assert checked


def test_flushes_compose_one_flush_and_cost_time():
    """``k`` flushes: ``k·(T_1 − t_opt) + t_opt`` of the plan with ``gbs/k`` (one flush), each
    flush paying its own fill and drain, so the step is longer than one flush of ``gbs``;
    ``flushes=1`` is bit-identical to no column."""
    plans = [parse_plan(f"tp=2,pp=4,dp=1,mbs=1,gbs=64,flushes={k}") for k in (1, 2, 4)]
    a = estimate_arrays(DENSE, CL, "bf16", PlanArrays.from_plans(plans))
    one = estimate_arrays(DENSE, CL, "bf16", PlanArrays.from_plans(
        [parse_plan(f"tp=2,pp=4,dp=1,mbs=1,gbs={64 // k}") for k in (1, 2, 4)]))
    for j, k in enumerate((1, 2, 4)):
        t1, o = one["step_time_s"][j], one["optimizer"][j]
        assert a["step_time_s"][j] == pytest.approx(k * (t1 - o) + o, rel=1e-15)
    assert a["step_time_s"][0] < a["step_time_s"][1] < a["step_time_s"][2]
    plain = estimate_arrays(DENSE, CL, "bf16", PlanArrays.from_plans(plans[:1]))
    assert plain["step_time_s"][0] == a["step_time_s"][0]


def test_a_larger_group_holds_more_and_runs_as_long():
    """Megatron's ``microbatch_group_size_per_vp_stage`` above ``pp``: more warm-up forwards,
    so more stashed micro-batches, and the same pipeline span; the step longer only by the
    warm-up's and cool-down's waited sends, ``2(v − 1)(g − pp)`` messages more
    (docs/calibration.md §5.207)."""
    plans = [parse_plan(f"tp=1,pp=4,dp=2,mbs=1,gbs=64,schedule=interleaved,vpp=2{g}")
             for g in ("", ",microbatch_group_size=8", ",microbatch_group_size=16")]
    pa = PlanArrays.from_plans(plans)
    peaks = peak_memory_arrays(DENSE, pa, "bf16", None, CL.gpu)
    assert peaks[0] < peaks[1] < peaks[2]
    r = estimate_arrays(DENSE, CL, "bf16", pa)
    span = r["step_time_s"] - r["pp_comm"]
    assert span[1] == pytest.approx(span[0], rel=1e-12)
    assert span[2] == pytest.approx(span[0], rel=1e-12)
    for k, g in ((1, 8), (2, 16)):
        assert r["pp_comm"][k] - r["pp_comm"][0] == pytest.approx(
            2 * (2 - 1) * (g - 4) * r["p2p_time_s"][k], rel=1e-9)


def test_the_mask_applies_the_job_rules():
    """Every kept plan makes a job; a grid of plans the rules refuse is pruned."""
    sp = _space("flushes=4", gbs=32)
    for i in _sample(sp, 12):
        make_job(DENSE, CL, sp.plan(i))
    assert (sp.cols["pp"] > 1).all()            # flushes need pipelining
    m = sp.cols["gbs"] // (sp.cols["mbs"] * sp.cols["dp"])
    assert (m % 4 == 0).all()
    inter = sp.cols["mgs"] > 0
    assert not inter.any()                      # no group named: the default
    sp = _space("microbatch_group_size=6", gbs=48)
    assert sp.size and (sp.cols["mgs"] == 6).all()
    for i in _sample(sp, 12):
        make_job(DENSE, CL, sp.plan(i))
    m = sp.cols["gbs"] // (sp.cols["mbs"] * sp.cols["dp"])
    assert ((m >= 6) & ((m % 6 == 0) | (m % 6 >= sp.cols["pp"]))).all()
    assert (sp.cols["pp"] <= 6).all()


def test_keys_round_trip():
    sp = _space("flushes=2,microbatch_group_size=8")
    for i in _sample(sp):
        p = sp.plan(i)
        key = plan_key(p)
        assert ",flushes=2" in key and ",microbatch_group_size=8" in key
        back = parse_plan(key)
        assert back == p and plan_key(back) == key


def test_bound_below_simulation():
    """The search's bound (one flush's, composed: ``lower_bound._flushed_bound``) is below the
    simulated step on a sample of flushed and grouped plans."""
    from simulator.simulate import simulate
    texts = ["tp=2,pp=2,mbs=1,gbs=64,schedule=gpipe,flushes=2",
             "tp=2,pp=2,mbs=1,gbs=64,flushes=4",
             "tp=1,pp=8,mbs=1,gbs=64,flushes=4,zero=1",
             "tp=2,pp=4,mbs=1,gbs=64,schedule=interleaved,vpp=2,microbatch_group_size=8,"
             "flushes=2",
             "tp=1,pp=4,mbs=1,gbs=48,schedule=interleaved,vpp=2,microbatch_group_size=6"]
    jobs = [make_job(DENSE, CL, parse_plan(t)) for t in texts]
    b = step_time_lower_bound(DENSE, CL, "bf16", PlanArrays.from_plans([j.plan for j in jobs]))
    for t, j, x in zip(texts, jobs, b.tolist()):
        assert x <= simulate(j).step_time_s, t


def _search(capsys, *argv):
    code = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--max-mbs",
                 "2", "--top", "2", "--workers", "1", "--reference", "none", *argv])
    return code, *capsys.readouterr()


def test_the_cli_search_carries_them(capsys):
    code, out, _ = _search(capsys, "--global-batch", "64", "--plan",
                           "flushes=2,microbatch_group_size=8,pp=2", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["inputs"]["fixed"] == {"flushes": 2, "microbatch_group_size": 8, "pp": 2}
    for row in (*rep["plans"], rep["recommended"]):
        assert ",flushes=2" in row["key"] and ",microbatch_group_size=8" in row["key"]
    assert rep["plans"][0]["plan"]["flushes"] == 2
    assert rep["plans"][0]["plan"]["microbatch_group_size"] == 8


@pytest.mark.parametrize("argv,words", [
    (["--fix", "flushes=2", "--framework", "megatron-core"],
     ["--fix='flushes=2'", "megatron-core runs one pipeline schedule over a step's "
      "micro-batches (flushes=1)"]),
    (["--fix", "flushes=0"], ["--fix='flushes=0'", "must be an integer >= 1"]),
    (["--fix", "schedule=1f1b,microbatch_group_size=8"],
     ["--fix='microbatch_group_size=8'", "only applies to schedule=interleaved, not 1f1b"]),
    (["--plan", "microbatch_group_size=4,gbs=64", "--framework", "hai-llm"],
     ["microbatch_group_size=4", "hai-llm runs schedule", "none of which takes a micro-batch "
      "group"]),
])
def test_bad_values_exit_2(capsys, argv, words):
    code, out, err = _search(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def test_mixed_kind_rows_price_as_their_plans():
    """A model of dense first layers, MoE layers and an MTP module (the rows the search prices
    by the scalar's own path, ``estimate.kinds``): with flushes and a group, the arrays equal
    the scalar estimate of each plan to 1e-12."""
    import random

    from strategies.estimate.kinds import with_kind_rows
    from tests.test_arrays_kinds import toy
    m = toy(random.Random(5107), 2, 1)
    cl = cluster_preset("dgx-h100", 2)
    texts = ["tp=2,pp=2,ep=4,mbs=1,gbs=64,flushes=2",
             "tp=1,pp=4,ep=2,mbs=1,gbs=64,schedule=gpipe,flushes=4",
             "tp=1,pp=2,ep=8,mbs=2,gbs=128,schedule=interleaved,vpp=2,microbatch_group_size=4,"
             "flushes=2",
             "tp=2,pp=4,ep=2,mbs=1,gbs=64,schedule=interleaved,vpp=2,microbatch_group_size=8"]
    jobs = [make_job(m, cl, parse_plan(t)) for t in texts]
    P = PlanArrays.from_plans([j.plan for j in jobs])
    a = with_kind_rows(m, cl, "bf16", P, estimate_arrays(m, cl, "bf16", P),
                       lambda i: jobs[i].plan)
    peaks = peak_memory_arrays(m, P, "bf16", None, cl.gpu)
    for i, j in enumerate(jobs):
        e = estimate(j)
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0), texts[i]
        for k in BREAKDOWN_KEYS:
            assert a[k][i] == pytest.approx(e.breakdown_s[k], rel=1e-12, abs=1e-15)
        assert peaks[i] == pytest.approx(e.memory.total, rel=1e-12, abs=0), texts[i]


def test_least_group_where_the_default_refuses():
    """An interleaved row whose micro-batches are not a multiple of pp takes the least group
    ``g > pp`` the schedule's rules accept (``fitting.least_group``), every smaller one refused;
    the recommendation says so."""
    from strategies.schedules import get_schedule
    from strategies.schedules.validity import all_ok
    sp = _space("schedule=interleaved,pp=8", gbs=36)
    assert sp.size
    inter = get_schedule("interleaved")
    for i in range(sp.size):
        p = sp.plan(i)
        m = p.gbs // (p.mbs * p.dp)
        assert m % p.pp and p.microbatch_group_size is not None
        g = p.microbatch_group_size
        assert all_ok(inter.rules(p.pp, m, p.vpp, g))
        assert not any(all_ok(inter.rules(p.pp, m, p.vpp, x)) for x in range(p.pp, g))
        make_job(DENSE, CL, p)
    # a multiple of pp keeps the default group
    sp = _space("schedule=interleaved", gbs=64)
    assert (sp.cols["mgs"] == 0).all()


def test_fewest_flushes_that_fit_under_a_flushing_stack():
    """Under torchtitan (``pipeline_flushes``) a pipelined row that does not fit with one
    flush takes the fewest (a power of two) that fit: it fits, and with half as many it does
    not fit or a rule refuses it; megatron-core, which runs one flush, has none."""
    from dataclasses import replace

    from strategies.framework import get_profile
    from strategies.plan import Plan
    fw = get_profile("torchtitan")
    sp = enumerate_space(DENSE, CL, 48, SpaceOptions(max_mbs=2, layouts=False), framework=fw)
    rows = np.flatnonzero(sp.cols["fl"] > 1)
    assert rows.size
    for i in rows[:: max(1, rows.size // 8)].tolist():
        p = sp.plan(i)
        job = make_job(DENSE, CL, p, framework=fw)
        assert estimate(job).memory.total <= sp.memory_limit
        fewer = replace(p, flushes=p.flushes // 2) if p.flushes > 2 else replace(p, flushes=1)
        try:
            half = make_job(DENSE, CL, fewer, framework=fw)
        except SpecError:
            continue
        assert estimate(half).memory.total > sp.memory_limit
    assert not (enumerate_space(DENSE, CL, 48, SpaceOptions(max_mbs=2, layouts=False),
                                framework=get_profile("megatron-core")).cols["fl"] > 1).any()
    assert Plan().flushes == 1


def test_the_recommendation_says_why(capsys):
    code, out, _ = _search(capsys, "--global-batch", "36", "--fix",
                           "schedule=interleaved,pp=8,vpp=4", "--json")
    assert code == 0
    rec = json.loads(out)["recommended"]
    assert rec["plan"]["microbatch_group_size"] == 9
    assert any(w.startswith("micro-batch group (microbatch_group_size 9): 36 micro-batches")
               for w in rec["why"])


def test_search_report_shows_the_scalar_figure_of_uneven_rows():
    """A search of a one-kind model whose even split is refused (14 layers on pp 4: the
    layouts' rows only, docs/search.md "Uneven pipeline layouts"): every reported plan's
    ``analytic_step_time_s`` is the scalar estimate's of that plan."""
    from dataclasses import replace

    from simulator.search.run import SearchConfig, run_search
    m = replace(DENSE, name="llama-14l", num_layers=14)
    rep = run_search(SearchConfig(model=m, cluster=CL, gbs=32, k=3, workers=1,
                                  options=SpaceOptions(max_mbs=1, max_vpp=2,
                                                       fixed={"tp": 1, "pp": 4})))
    rows = rep["plans"] + [rep["recommended"]]
    for r in rows:
        p = parse_plan(r["key"])
        assert p.pp == 4 and (p.first_stage_layers or p.last_stage_layers
                              or p.account_embedding or p.account_loss), r["key"]
        e = estimate(make_job(m, CL, p))
        assert r["analytic_step_time_s"] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
