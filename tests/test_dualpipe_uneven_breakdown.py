"""DualPipe and DualPipeV over uneven stages (docs/calibration.md §5.222): the estimate's
correction for stages that differ counts each rank's busy time at the micro-batches its order
runs through each chunk (``chunk_correction.chunk_shares``: ``m`` per chunk, ``m/2`` through
each of DualPipe's two copies, counted on the schedule's order), so its ``compute``,
``offload`` and, without expert parallelism, ``tp_comm`` and ``bubble`` entries are the
simulation's busiest stage's (``simulate``'s ``breakdown_s_by_stage``) to floating-point
precision; the step does not move, and its pipeline part is the free-communication
simulation's. Before, DualPipe's uneven ``compute`` counted ``m`` micro-batches per copy
(llama3-8b tp2 pp4 ``layout=Et*5|t*10|t*9|t*8L``: 1.7784 s against the simulation's
1.7399 s) and kept the even rank's ``tp_comm``."""
from __future__ import annotations

import pytest

from experiments.dualpipe_uneven_breakdown import (ATT, CASES, DP, LLAMA, UNEVEN,
                                                   V_UNEVEN, busiest_stage)
from experiments.offload_uneven_rows import case_job
from simulator.cli.main import main
from simulator.simulate import simulate, to_json
from strategies.estimate.chunk_correction import chunk_passes, chunk_shares
from strategies.estimate.scalar import estimate
from strategies.estimate.stage_cost_memo import StageCostMemo


@pytest.mark.parametrize("model,cluster,plan,gbs,uneven", CASES,
                         ids=[f"{m.name}-{p.split(',')[-1]}" for m, _, p, _, _ in CASES])
def test_breakdown_is_the_simulated_busiest_stages(model, cluster, plan, gbs, uneven):
    """``compute`` and ``offload`` equal the contention-free simulation's busiest stage's to
    1e-9, and ``tp_comm`` on an uneven layout (with expert parallelism too: the busiest
    rank's extra layers' share of the order's communication is theirs, not the all-to-all's,
    §5.225); the entries add up to the step. (``pp_comm`` and
    ``bubble``: ``tests/test_dualpipe_messages.py``, §5.225.)"""
    job = case_job(model, cluster, plan, gbs)
    e = estimate(job)
    be = e.breakdown_s
    bs = busiest_stage(to_json(simulate(job, network="contention-free"), job))
    assert be["compute"] == pytest.approx(bs["compute"], rel=1e-9)
    assert be["offload"] == pytest.approx(bs["offload"], rel=1e-9, abs=1e-12)
    if uneven:      # (with expert parallelism too since §5.225)
        assert be["tp_comm"] == pytest.approx(bs["tp_comm"], rel=1e-9)
    assert sum(be.values()) == pytest.approx(e.step_time_s, rel=1e-12)


def test_dualpipe_copies_run_half_the_microbatches_each():
    """The count, from DualPipe's order: each copy runs ``m/2`` micro-batches, DualPipeV's
    two chunks and 1F1B's one ``m`` each."""
    m = 16
    dp = case_job(LLAMA, "dgx-h100:1", f"{DP},{UNEVEN}", m)
    dv = case_job(LLAMA, "dgx-h100:1", CASES[3][2], m)
    one = case_job(LLAMA, "dgx-h100:1", "tp=2,pp=4,dp=1,mbs=1," + UNEVEN, m)
    for r in range(4):
        assert chunk_passes(dp, r) == [m // 2, m // 2] and chunk_shares(dp, r) == [0.5, 0.5]
        assert chunk_passes(dv, r) == [m, m] and chunk_shares(dv, r) == [1.0, 1.0]
        assert chunk_passes(one, r) == [m]


def test_uneven_dualpipe_compute_closed_form():
    """``layout=Et*5|t*10|t*9|t*8L``, pp 4: the busiest rank, 1, holds stages 1 and 2 (19
    layers, no embedding or head), ``m/2`` micro-batches through each: its compute is
    ``m/2 · 19`` layers' forward + backward (1.7399 s; before, 1.7784 s: the even plan's
    busiest rank's plus ``m · 3`` layers' over the even split), its ``tp_comm`` the even
    rank's ``19/16`` (before: the even rank's)."""
    even = case_job(LLAMA, "dgx-h100:1", DP, 16)
    job = case_job(LLAMA, "dgx-h100:1", f"{DP},{UNEVEN}", 16)
    c = StageCostMemo(job)()
    per = c.layer_fwd + c.layer_bwd + c.layer_recompute
    m = job.num_microbatches
    e, e0 = estimate(job).breakdown_s, estimate(even).breakdown_s
    assert m == 16 and per > 0
    assert e["compute"] == pytest.approx(m / 2 * 19 * per, rel=1e-12)
    assert e["compute"] == pytest.approx(1.7399, abs=5e-5)
    assert e["tp_comm"] == pytest.approx(e0["tp_comm"] * 19 / 16, rel=1e-12)


@pytest.mark.parametrize("plan", [
    "tp=1,pp=4,dp=2,mbs=1,schedule=dualpipe,layout=Et*5|t*10|t*9|t*8L",
    f"tp=1,pp=4,dp=2,mbs=1,schedule=dualpipe,{ATT},layout=Et*5|t*10|t*9|t*8L",
    "tp=1,pp=4,dp=2,mbs=1,schedule=dualpipe,first_stage_layers=6,last_stage_layers=10",
    f"tp=1,pp=4,dp=2,mbs=1,schedule=dualpipev,vpp=2,{V_UNEVEN}",
    f"tp=1,pp=4,dp=2,mbs=1,schedule=dualpipev,vpp=2,{ATT},{V_UNEVEN}",
    "tp=1,pp=4,dp=2,mbs=1,schedule=dualpipe",
    f"tp=1,pp=4,dp=2,mbs=1,schedule=dualpipev,vpp=2,{ATT}"])
def test_step_pipeline_part_is_the_simulated_pipeline(plan):
    """Without layer communication (tp 1) the estimate's pipeline part (the step less the
    data-parallel tail and the optimizer) is the contention-free simulation's pipeline end
    (its latest pass, 1e-12), with and without offloading: the step reads the order's
    makespan with its messages (§5.225; before, the free order's plus the closed-form
    message count), never the busy count."""
    job = case_job(LLAMA, "dgx-h100:1", plan, 32)
    e = estimate(job)
    b = e.breakdown_s
    s = simulate(job, network="contention-free")
    end = max(r.end for r in s.records if r.stream == "compute" and r.kind != "optimizer")
    assert e.step_time_s - b["dp_comm"] - b["optimizer"] == pytest.approx(end, rel=1e-12)


def test_simulate_json_has_every_stages_breakdown(capsys):
    """``simulate --json``'s ``breakdown_s_by_stage``: each stage's entries add up to the
    step, the critical rank's stage's is ``breakdown_s``, and the busiest stage's offload
    is ``estimate``'s where the rank that ends last is not the busiest (7 layers and the
    head on the last stage, 9 on the middle ones: 0.4313 s against 0.5546 s)."""
    plan = f"tp=2,pp=4,dp=1,mbs=1,gbs=16,{ATT},layout=Et*7|t*9|t*9|t*7L"
    rc = main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan", plan,
               "--json"])
    import json
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    stages, step = out["breakdown_s_by_stage"], out["step_time_s"]
    assert len(stages) == 4 and all(sum(b.values()) == pytest.approx(step, rel=1e-12)
                                    for b in stages)
    crit = out["critical_rank"] // 2            # tp 2, dp 1: two ranks per stage
    assert stages[crit] == out["breakdown_s"] and crit == 3
    job = case_job(LLAMA, "dgx-h100:1", plan, 16)
    est = estimate(job).breakdown_s["offload"]
    assert busiest_stage(out) is stages[1]
    assert stages[1]["offload"] == pytest.approx(est, rel=1e-9)
    assert out["breakdown_s"]["offload"] == pytest.approx(est * 7 / 9, rel=1e-9)
