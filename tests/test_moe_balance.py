"""The MoE routing imbalance (``strategies.moe_balance``, docs/calibration.md §5.73): the
sampling excess of forced balancing against closed forms, exhaustive enumeration and a
Monte Carlo of Megatron-Core's random routing; the default rule and its published constant;
the reader's per-row router; estimate, memory and simulator reading the same load."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from strategies.cost import token_counts
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.moe_balance import (AUX_LOSS_MAXVIO_GLOBAL, LOSS_FREE_MAXVIO_GLOBAL,
                                    default_imbalance, expected_max_normal, forced_imbalance,
                                    rank_copy_moments, rank_skew)
from strategies.plan import Plan, parse_plan
from strategies.plan.choices import DEFAULT_MOE_IMBALANCE
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

QWEN = model_preset("qwen3-30b-a3b")          # 128 experts, top-8
DSV3 = model_preset("deepseek-v3")            # 256 experts, top-8, 8 groups, 4 chosen


def test_expected_max_of_normals_closed_forms():
    """``E[max]`` of 1, 2, 3 standard normals: 0, 1/√π, 3/(2√π); of 5: 1.16296447."""
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-13)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-12)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-12)
    assert expected_max_normal(5) == pytest.approx(1.1629644736, rel=1e-9)


def _enumerate(E: int, k: int, ranks: int, G: int | None = None,
               M: int | None = None) -> tuple[float, float]:
    """Mean and variance of rank 0's copies over every equally likely routing: the ``k``-subsets
    of the experts (of the chosen groups' experts, each ``M``-subset of groups alike)."""
    c = E // ranks
    xs = []
    groups = [tuple(range(E))] if not G else [
        tuple(e for g in gs for e in range(g * E // G, (g + 1) * E // G))
        for gs in itertools.combinations(range(G), M)]
    for pool in groups:
        for pick in itertools.combinations(pool, k):
            xs.append(sum(1 for e in pick if e < c))
    x = np.array(xs, dtype=float)
    return float(x.mean()), float(x.var())


@pytest.mark.parametrize("E,k,ranks,G,M", [(8, 2, 4, None, None), (12, 3, 6, None, None),
                                           (8, 2, 8, 4, 2), (8, 2, 4, 4, 2), (8, 3, 2, 4, 2),
                                           (12, 2, 2, 6, 3)])
def test_rank_copy_moments_match_enumeration(E, k, ranks, G, M):
    mean, var = rank_copy_moments(E, k, ranks, G, M)
    want = _enumerate(E, k, ranks, G, M)
    assert mean == pytest.approx(k / ranks, rel=1e-12)
    assert (mean, var) == pytest.approx(want, rel=1e-12)


def test_forced_imbalance_matches_a_monte_carlo_of_random_routing():
    """Megatron-Core's forced balancing (random logits, top-k: a uniform ``k``-subset per
    token): the hottest of ``ep`` ranks' expected load over the mean, simulated over 4,000
    micro-batches (``ep`` ranks of 512 tokens, 16 experts, top-2), within 2 % of the excess
    the closed form gives."""
    m = dataclasses.replace(QWEN, num_experts=16, moe_router_topk=2, seq_length=512)
    ep, trials = 4, 4000
    N = 512 * ep                                          # the expert group's tokens
    rng = np.random.default_rng(0)
    first = rng.integers(0, 16, size=(trials, N), dtype=np.int16)
    second = (first + 1 + rng.integers(0, 15, size=(trials, N), dtype=np.int16)) % 16
    ranks = np.concatenate([first, second], axis=1) // (16 // ep)
    flat = (np.arange(trials)[:, None] * ep + ranks).ravel()
    rank_load = np.bincount(flat, minlength=trials * ep).reshape(trials, ep)
    sim = rank_load.max(axis=1).mean() / (N * 2 / ep)
    got = float(forced_imbalance(m, 1, 1, 1, ep))
    assert got - 1 == pytest.approx(sim - 1, rel=0.02)
    assert got > 1.02                                     # a visible excess at this size


def test_forced_imbalance_shrinks_with_tokens_and_is_one_without_ranks():
    a = forced_imbalance(QWEN, 1, 1, 1, 8)
    b = forced_imbalance(QWEN, 4, 1, 1, 8)
    assert b - 1 == pytest.approx((a - 1) / 2, rel=1e-12)       # 1/sqrt(N)
    assert forced_imbalance(QWEN, 1, 1, 1, 1) == 1.0
    arr = forced_imbalance(QWEN, np.array([1, 4]), 1, 1, np.array([8, 8]))
    assert np.array_equal(arr, np.array([a, b]))                  # vectorised, bit for bit


def test_default_is_sampling_plus_the_published_loss_free_skew():
    """Wang et al. 2024 (arXiv:2408.15664) Table 2: MaxVio_global 0.04 with loss-free
    balancing, 0.72 / 0.52 with the auxiliary loss; per rank ``MaxVio·ep/E``."""
    assert LOSS_FREE_MAXVIO_GLOBAL == 0.04
    assert AUX_LOSS_MAXVIO_GLOBAL == {"1B": 0.72, "3B": 0.52}
    assert rank_skew(DSV3, 64) == pytest.approx(0.04 * 64 / 256, rel=1e-15)
    assert rank_skew(DSV3, 1) == 0.0
    assert default_imbalance(DSV3, 1, 1, 1, 64) == pytest.approx(
        forced_imbalance(DSV3, 1, 1, 1, 64) + 0.01, rel=1e-15)


def test_plan_default_is_the_rule_and_contiguous_routing_is_balanced():
    assert math.isnan(Plan().imbalance) and Plan().imbalance is DEFAULT_MOE_IMBALANCE
    assert Plan(moe_routing="contiguous").imbalance == 1.0
    assert Plan(moe_imbalance=1.2).imbalance == 1.2
    cols = PlanArrays.from_plans([Plan(ep=8, dp=8, gbs=8), Plan(ep=8, dp=8, gbs=8,
                                                                moe_routing="contiguous")])
    assert math.isnan(cols.moe_imbalance[0]) and cols.moe_imbalance[1] == 1.0
    with pytest.raises(ValueError, match="needs the model"):
        token_counts.moe_load(8, float("nan"))
    with pytest.raises(SpecError, match="moe_imbalance"):
        parse_plan("ep=8,gbs=8,moe_imbalance=nan")


def test_estimate_memory_and_simulator_read_the_same_default_load():
    """A plan without ``moe_imbalance`` prices exactly as one stating the default rule's value,
    in the stage record (all-to-all bytes and layer time), the memory estimate, the scalar
    estimate and the simulated step; and ``ι`` times the balanced plan's all-to-all bytes."""
    from simulator.simulate import simulate
    from strategies.estimate.scalar import estimate
    from strategies.memory.scalar import peak_memory
    m = dataclasses.replace(QWEN, num_layers=2, seq_length=1024)
    cl = cluster_preset("hgx-h800", 2)
    imb = float(default_imbalance(m, 1, 1, 1, 16))
    jobs = [make_job(m, cl, parse_plan(f"ep=16,gbs=16{x}"))
            for x in ("", f",moe_imbalance={imb!r}", ",moe_imbalance=1")]
    a, b, one = (stage_costs(j) for j in jobs)
    assert a.ep_bytes == b.ep_bytes and a.layer_fwd == b.layer_fwd
    assert a.ep_bytes == pytest.approx(imb * one.ep_bytes, rel=1e-12)
    assert a.layer_fwd > one.layer_fwd
    assert peak_memory(jobs[0]) == peak_memory(jobs[1])
    assert estimate(jobs[0]).step_time_s == estimate(jobs[1]).step_time_s
    assert simulate(jobs[0]).step_time_s == simulate(jobs[1]).step_time_s
    assert simulate(jobs[0]).step_time_s > simulate(jobs[2]).step_time_s


def test_reader_sets_the_forced_rows_and_leaves_the_others_to_the_rule():
    from strategies.reference.cases import case_from_entry, load_reference
    rows = load_reference("strategies/reference/data/megatron_bridge_2604.json")
    row = next(r for r in rows if r["id"] == "mbridge260401_qwen330ba3b_gb200_8_mxfp8")
    assert row["plan"]["moe_balance"] == "forced"
    case = case_from_entry(row, rows)
    p, mdl = case.job.plan, case.job.model
    assert p.moe_imbalance == float(forced_imbalance(mdl, p.mbs, p.tp, p.cp, p.ep, p.expert_tp))
    assert any("force-balances its router" in n for n in case.assumptions)
    pub = load_reference("strategies/reference/data/published_2026.json")
    ds = case_from_entry(next(r for r in pub if r["id"] == "deepseekv3_report_h800_2048"), pub)
    assert ds.job.plan.moe_imbalance is None
    assert any("default rule" in n for n in ds.assumptions)
    bad = dict(row, plan=dict(row["plan"], moe_balance="sometimes"))
    skipped = case_from_entry(bad, rows)
    assert skipped.job is None and "plan.moe_balance" in skipped.skipped
