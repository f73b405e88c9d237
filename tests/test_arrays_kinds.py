"""The search's arrays price a pipelined plan of a model that mixes kinds of layer (dense first
layers, multi-token prediction) as the scalar estimate does, to 1e-12 relative
(``strategies.estimate.kinds``, docs/calibration.md §5.51): seeded toy MoE models with 0-3
dense first layers and 0/1 MTP modules, pp 1/2/4 under 1F1B, GPipe, ZB-H1, interleaved and
DualPipe, ep 1-8, with and without recomputation. Before, the plan columns' mean layer on
every stage missed up to 32 % of the step (the dense layers on rank 0, the MTP module on
rank pp-1)."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost.stage.layers import mixes_kinds
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.kinds import kind_rows, with_kind_rows
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

SCHEDULES = ("1f1b", "gpipe", "zb-h1", "interleaved", "dualpipe")


def toy(rng: random.Random, dense: int, mtp: int):
    """A toy mixture of experts (8 experts, top 2) with ``dense`` dense first layers."""
    base = model_preset(rng.choice(["qwen3-30b-a3b", "mixtral-8x7b"]))
    h = rng.choice([256, 512])
    return replace(base, name="toy-moe", num_layers=rng.choice([8, 12]), hidden_size=h,
                   num_attention_heads=8, num_query_groups=4,
                   kv_channels=None if base.kv_channels is None else 64,
                   ffn_hidden_size=4 * h, moe_ffn_hidden_size=rng.choice([128, 256, 512]),
                   num_experts=8, moe_router_topk=2, vocab_size=8192,
                   seq_length=rng.choice([256, 512]), first_k_dense_replace=dense,
                   num_nextn_predict_layers=mtp)


def jobs_of(seed: int, n: int = 4):
    """``n`` valid jobs of one seeded toy model on two DGX H100 nodes (uniform)."""
    rng = random.Random(5100 + seed)
    m = toy(rng, seed % 4, (seed // 4) % 2)
    cl = cluster_preset("dgx-h100", 2)
    out = []
    while len(out) < n:
        pp, tp = rng.choice([1, 2, 4]), rng.choice([1, 2])
        parts = [f"tp={tp}", f"pp={pp}", f"ep={rng.choice([1, 2, 4, 8])}",
                 f"mbs={rng.choice([1, 2])}", f"gbs={rng.choice([4, 8]) * 32 // (tp * pp)}",
                 f"recompute={rng.choice(['none', 'selective', 'full'])}"]
        if pp > 1:
            s = rng.choice(SCHEDULES)
            parts.append(f"schedule={s}" + (",vpp=2" if s == "interleaved" else ""))
        if rng.random() < 0.3:
            parts.append("zero=1")
        try:
            out.append(make_job(m, cl, parse_plan(",".join(parts))))
        except SpecError:
            continue
    return m, cl, out


@pytest.mark.parametrize("seed", range(12))
def test_arrays_equal_scalar_on_mixed_kinds(seed):
    m, cl, jobs = jobs_of(seed)
    P = PlanArrays.from_plans([j.plan for j in jobs])
    raw = estimate_arrays(m, cl, "bf16", P)
    before = raw["step_time_s"].copy()
    a = with_kind_rows(m, cl, "bf16", P, raw, lambda i: jobs[i].plan)
    assert np.array_equal(raw["step_time_s"], before)        # the input is not changed
    for i, j in enumerate(jobs):
        e = estimate(j)
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
        for k in ("mfu", "hfu", "bubble_fraction", "tokens_per_s"):
            assert a[k][i] == pytest.approx(getattr(e, k), rel=1e-12, abs=1e-300)
        for k in BREAKDOWN_KEYS:
            assert a[k][i] == pytest.approx(e.breakdown_s[k], rel=1e-12, abs=1e-15)
        if j.plan.pp == 1:          # no pipeline: the plan columns were exact and are kept
            assert raw["step_time_s"][i] == a["step_time_s"][i]
    # (DualPipe's rows of a one-kind model too: its messages on the order, §5.225)
    pairs = np.array([j.plan.schedule == "dualpipe" for j in jobs])
    assert np.array_equal(kind_rows(m, P), np.flatnonzero(P.pp > 1) if mixes_kinds(m)
                          else np.flatnonzero((P.pp > 1) & pairs))


def test_the_mean_layer_missed_the_kinds():
    """The lead this file closes: a pipelined toy whose last rank holds the MTP module and
    whose first the dense layers, priced by the plan columns alone, is far from the scalar."""
    rng = random.Random(1)
    m = toy(rng, 3, 1)
    j = make_job(m, cluster_preset("dgx-h100", 2),
                 parse_plan("tp=1,pp=4,ep=2,mbs=1,gbs=32,schedule=1f1b"))
    raw = float(estimate_arrays(m, j.cluster, "bf16", PlanArrays.from_plans([j.plan]))
                ["step_time_s"][0])
    assert abs(raw / estimate(j).step_time_s - 1) > 0.05


def test_one_kind_models_unchanged():
    """A model of one kind of layer: no row is replaced, every array is the input's."""
    m, cl = model_preset("mixtral-8x7b"), cluster_preset("dgx-h100", 2)
    sp = enumerate_space(m, cl, 64, SpaceOptions(max_mbs=1, max_vpp=2))
    raw = estimate_arrays(m, cl, "bf16", sp.arrays)
    a = with_kind_rows(m, cl, "bf16", sp.arrays, raw, sp.plan)
    assert kind_rows(m, sp.arrays).size == 0
    for k, v in raw.items():
        assert a[k] is v


def test_mtp_on_a_one_kind_model_prices():
    """An MoE model without dense layers but with an MTP module (and a dense one with MTP):
    priced, and the arrays equal the scalar (the per-rank parameters of such a model once
    raised, ``cost.stage.stage_params.stage_params_split``)."""
    rng = random.Random(2)
    for moe in (True, False):
        m = toy(rng, 0, 1)
        if not moe:
            m = replace(model_preset("llama3-8b"), name="toy-dense", num_layers=8,
                        hidden_size=512, num_attention_heads=8, num_query_groups=4,
                        ffn_hidden_size=2048, vocab_size=8192, seq_length=256,
                        num_nextn_predict_layers=1)
        j = make_job(m, cluster_preset("dgx-h100", 1),
                     parse_plan("tp=1,pp=2,mbs=1,gbs=16,schedule=1f1b"))
        e = estimate(j)
        a = with_kind_rows(m, j.cluster, "bf16", PlanArrays.from_plans([j.plan]),
                           estimate_arrays(m, j.cluster, "bf16",
                                           PlanArrays.from_plans([j.plan])),
                           lambda i: j.plan)
        assert a["step_time_s"][0] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)


def test_search_rows_of_a_mixed_kind_model():
    """The search's own call (``simulator.search.run``): rows of a space of a toy with dense
    first layers and MTP, priced as the scalar estimate prices each plan."""
    m = toy(random.Random(3), 2, 1)
    cl = cluster_preset("dgx-h100", 1)
    sp = enumerate_space(m, cl, 32, SpaceOptions(max_mbs=1, max_vpp=2, layouts=False))
    raw = estimate_arrays(m, cl, "bf16", sp.arrays)
    rows = kind_rows(m, sp.arrays)
    pick = rows[:: max(1, rows.size // 6)][:6]
    sub = sp.subset(pick)
    P = PlanArrays.from_columns(sub)
    a = with_kind_rows(m, cl, "bf16", P, estimate_arrays(m, cl, "bf16", P),
                       lambda i: sp.plan(int(pick[i])))
    assert pick.size > 0
    for n, i in enumerate(pick.tolist()):
        e = estimate(make_job(m, cl, sp.plan(i)))
        assert a["step_time_s"][n] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
    assert raw["step_time_s"].shape == (sp.size,)


def test_only_prices_the_rows_asked():
    """``only``: the rows asked get the same figures as when every row is priced; the others
    keep the plan columns' (the search prices just the rows its report shows)."""
    m = toy(random.Random(4), 3, 1)
    cl = cluster_preset("dgx-h100", 1)
    sp = enumerate_space(m, cl, 32, SpaceOptions(max_mbs=1, max_vpp=2))
    rows = kind_rows(m, sp.arrays)[:8]
    P = PlanArrays.from_columns(sp.subset(rows))
    raw = estimate_arrays(m, cl, "bf16", P)
    full = with_kind_rows(m, cl, "bf16", P, raw, lambda i: sp.plan(int(rows[i])))
    part = with_kind_rows(m, cl, "bf16", P, raw, lambda i: sp.plan(int(rows[i])), only={1, 5})
    for i in range(rows.size):
        want = full if i in (1, 5) else raw
        assert part["step_time_s"][i] == want["step_time_s"][i]


def test_search_report_shows_the_scalar_figure():
    """A search of a toy with dense first layers and MTP (one DGX H100): every reported
    plan's ``analytic_step_time_s`` is the scalar estimate's of that plan."""
    from simulator.search.run import SearchConfig, run_search
    m = toy(random.Random(3), 2, 1)
    cl = cluster_preset("dgx-h100", 1)
    rep = run_search(SearchConfig(model=m, cluster=cl, gbs=32, k=3, workers=1,
                                  options=SpaceOptions(max_mbs=1, max_vpp=2,
                                                       fixed={"tp": 1, "pp": 2})))
    rows = rep["plans"] + [rep["recommended"]]
    assert all(r["plan"]["pp"] == 2 for r in rows)
    for r in rows:
        e = estimate(make_job(m, cl, parse_plan(r["key"])))
        assert r["analytic_step_time_s"] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
