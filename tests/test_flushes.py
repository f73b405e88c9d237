"""Pipeline flushes per optimizer step (plan ``flushes``, ``strategies.flushes``,
docs/calibration.md §5.43): the closed form in the simulator and the estimate, the optimizer
once per step, the stack and plan rules, and the AutoModel reference rows that state them."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.flushes import flush_job, flushed_breakdown, flushed_step_s
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from tests.test_simulate import A100x2, _balanced, _job
from topologies.cluster import cluster_preset

AUTOMODEL = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                         "automodel_perf.json")


@pytest.mark.parametrize("sched,pp,vpp,gbs,k", [
    ("1f1b", 4, 1, 32, 1), ("1f1b", 4, 1, 32, 2), ("1f1b", 4, 1, 32, 4), ("1f1b", 8, 1, 32, 4),
    ("gpipe", 4, 1, 16, 2), ("interleaved", 4, 2, 32, 2)])
def test_k_flushes_pay_k_bubbles_in_the_simulator(sched, pp, vpp, gbs, k):
    """Instant messages, no optimizer: k flushes of m/k micro-batches take
    ``k·(m/k + (p−1)/v)·(t_f + t_b)``; the bubble is ``k·(p−1)/v·(t_f + t_b)``."""
    job = _job(tp=2, pp=pp, schedule=sched, vpp=vpp, gbs=gbs, flushes=k)
    costs = _balanced(job)
    res = simulate(job, free_comm=True, costs=costs)
    m, L = job.num_microbatches, job.model.num_layers // pp
    t = L * (costs.layer_fwd + costs.layer_bwd)
    assert res.step_time_s == pytest.approx(k * (m // k + (pp - 1) / vpp) * t, rel=1e-9)
    assert res.step_time_s - m * t == pytest.approx(k * (pp - 1) / vpp * t, rel=1e-9)
    assert res.metrics["flushes" if k > 1 else "step_time_s"] == (k if k > 1 else res.step_time_s)


def test_optimizer_runs_once_and_the_estimate_composes_one_flush():
    """``T(k) = k·(T_1 − t_opt) + t_opt``, every other part k times, in the estimate and the
    simulator alike; the breakdown still sums to the step."""
    k = 4
    job = _job(tp=2, pp=4, gbs=32, flushes=k)
    one_job = flush_job(job)
    assert (one_job.plan.gbs, one_job.plan.flushes, job.num_microbatches) == (8, 1, 16)
    one, est = estimate(one_job), estimate(job)
    opt = one.breakdown_s["optimizer"]
    assert opt > 0
    assert est.step_time_s == pytest.approx(k * (one.step_time_s - opt) + opt, rel=1e-12)
    assert est.breakdown_s["optimizer"] == opt
    for key in ("compute", "bubble", "pp_comm", "dp_comm", "tp_comm"):
        assert est.breakdown_s[key] == pytest.approx(k * one.breakdown_s[key], rel=1e-12)
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    assert est.tokens_per_s == pytest.approx(32 * job.seq_len / est.step_time_s, rel=1e-12)
    assert est.mfu == pytest.approx(one.mfu * k * one.step_time_s / est.step_time_s, rel=1e-12)
    sim_one, sim = simulate(one_job), simulate(job)
    s_opt = sim_one.metrics["breakdown_s"]["optimizer"]
    assert sim.step_time_s == pytest.approx(flushed_step_s(sim_one.step_time_s, s_opt, k),
                                            rel=1e-12)
    assert sum(sim.metrics["breakdown_s"].values()) == pytest.approx(sim.step_time_s, rel=1e-9)
    # flushes=1 is the plan without the field, bit for bit
    base = estimate(_job(tp=2, pp=4, gbs=32))
    assert estimate(_job(tp=2, pp=4, gbs=32, flushes=1)).step_time_s == base.step_time_s
    assert flushed_breakdown({"bubble": 1.5, "optimizer": 2.0}, 3) == {"bubble": 4.5,
                                                                       "optimizer": 2.0}


def test_flush_rules():
    with pytest.raises(SpecError, match="flushes=2.*pipeline parallelism"):
        _job(tp=2, pp=1, gbs=32, flushes=2)
    with pytest.raises(SpecError, match="flushes=3.*must divide the 8 micro-batches"):
        _job(tp=2, pp=4, gbs=16, flushes=3)
    with pytest.raises(SpecError, match="flushes"):
        Plan(flushes=0)
    # a stack with one schedule per step refuses it; AutoModel runs it
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 2)
    plan = parse_plan("pp=2,ep=8,mbs=1,gbs=64,zero=2,flushes=2")
    with pytest.raises(SpecError, match="megatron-core runs one pipeline schedule"):
        make_job(m, cl, plan, framework="megatron-core")
    job = make_job(m, cl, plan, framework="automodel")
    assert "flushes2" in job.plan.short()
    # AutoModel asserts local_batch_size // pp_microbatch_size >= pp_size: 8/8 = 1 < 2
    with pytest.raises(SpecError, match="pp=2: automodel needs at least pp micro-batches"):
        make_job(m, cl, parse_plan("pp=2,ep=8,mbs=1,gbs=64,zero=2,flushes=8"),
                 framework="automodel")
    # the search's mask reads the same rule on its arrays (flushes = 1 there)
    from strategies.framework import get_profile
    from strategies.stacks.rules import stack_mask
    from strategies.plan_arrays import PlanArrays
    P = PlanArrays.from_plans([replace(plan, flushes=1, gbs=g, dp=8) for g in (8, 16, 64)])
    assert stack_mask(get_profile("automodel"), P).tolist() == [False, True, True]
    assert parse_plan("pp=2,flushes=4").flushes == 4


def test_cli_refusal_exits_2(capsys):
    rc = main(["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--plan",
               "tp=2,pp=4,mbs=1,gbs=32,flushes=2", "--framework", "megatron-core"])
    assert rc == 2
    assert "flushes=2" in capsys.readouterr().err


def test_automodel_rows_state_their_flushes():
    """gbs/(local_batch_size·dp): DeepSeek-V3 on 1,024 GPUs 8192/(8·256) = 4 flushes, on 256
    512/(8·64) = 1; Kimi K2 512/(8·32) = 2; without pipelining none."""
    rows = load_reference(AUTOMODEL)
    got = {c["id"]: case_from_entry(c, rows).job.plan.flushes for c in rows}
    assert got == {"automodel_deepseekv3_h100_1024": 4, "automodel_deepseekv3_h100_256": 1,
                   "automodel_kimik2_h100_256": 2, "automodel_qwen330ba3b_h100_8": 1,
                   "automodel_gptoss20b_h100_8": 1}
    for c in rows:
        pl = c["plan"]
        if pl["pp"] > 1:
            assert got[c["id"]] == pl["grad_accum"]     # the table's GA column


def test_torchtitan_runs_flushes_without_automodels_assert():
    """torchtitan since 8570415c3 (2025-06-05) calls ``pp_schedule.step()`` once per
    gradient-accumulation step (docs/calibration.md §5.46): it accepts ``flushes``, and
    with fewer than pp micro-batches per flush it only warns (``build_pipeline_schedule``)."""
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    job = make_job(m, cl, parse_plan("tp=2,pp=4,dp=2,mbs=1,gbs=32,zero=2,flushes=2"),
                   framework="torchtitan")
    assert job.plan.flushes == 2
    # 32/(1·2·8) = 2 micro-batches per flush < pp = 4: run (AutoModel refuses it)
    plan = parse_plan("tp=2,pp=4,dp=2,mbs=1,gbs=32,zero=2,flushes=8")
    assert make_job(m, cl, plan, framework="torchtitan").plan.flushes == 8
    with pytest.raises(SpecError, match="megatron-core runs one pipeline schedule"):
        make_job(m, cl, plan, framework="megatron-core")


def test_torchtitan_rows_state_one_flush_and_ga_would_state_more():
    """The torchtitan rows (torchtitan 9dec370, December 2024: no gradient accumulation, one
    ``pp_schedule.step()`` per step) give ``gbs = local_batch_size · dp``: one flush each;
    an entry with twice the global batch would hold two."""
    import json
    here = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")
    n = 0
    for name in ("published.json", "published_2026.json"):
        rows = load_reference(os.path.join(here, name))
        for c in rows:
            if "torchtitan" not in c["id"] or c["plan"].get("pp", 1) == 1:
                continue
            try:
                case = case_from_entry(c, rows)
            except SpecError:
                continue
            if case is None or case.job is None \
                    or not case.job.framework.name.startswith("torchtitan"):
                continue
            assert case.job.plan.flushes == 1, c["id"]
            n += 1
            pl = c["plan"]
            if pl.get("local_batch_size") and pl.get("global_batch"):
                twice = json.loads(json.dumps(c))
                twice["plan"]["global_batch"] = 2 * pl["global_batch"]
                assert case_from_entry(twice, rows).job.plan.flushes == 2, c["id"]
    assert n >= 4


def test_validate_simulates_one_flush_not_an_extension():
    """``validate`` (``extended_step_time``) and the search (``simulate_figures``) never extend
    a job with several flushes from short runs: they simulate one flush and compose it."""
    from simulator.extend import can_extend, extended_step_time, simulate_figures
    job = _job(tp=2, pp=2, gbs=64, flushes=2)
    assert job.num_microbatches == 16 and can_extend(_job(tp=2, pp=2, gbs=64))
    assert not can_extend(job)
    t, how = extended_step_time(job)
    assert how == "full" and t == simulate(job).step_time_s
    assert simulate_figures(job)["step_time_s"] == t
