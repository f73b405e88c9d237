"""1F1B on uneven stages of one chunk per rank (docs/calibration.md §5.235): the estimate
takes the per-chunk path (``chunk_correction.by_chunk``), which replays the real stages'
order with each layer's own communication (TP, the expert all-to-all; ``a2a_shift``), so on
one pipeline its step and the busiest stage's ``compute``, ``tp_comm`` and ``ep_comm``
equal the contention-free simulation's to 1e-9, with and without experts, pp 2, 4 and 8,
a layout string and first/last-stage counts. Before, the per-stage path kept the even
composition's step: mixtral ``Et*5|t*10|t*9|t*8L`` 1.885477 against 1.893334 s (-0.42 %),
llama3-8b ``Et*10|t*8|t*7|t*7L`` 2.141181 against 2.149560 s (-0.39 %)."""
from __future__ import annotations

import pytest

import strategies.estimate.scalar as scalar
from experiments.dualpipe_uneven_breakdown import against_simulation
from experiments.offload_uneven_rows import case_job
from simulator.simulate import simulate
from strategies.estimate.chunk_correction import by_chunk
from strategies.estimate.scalar import estimate
from strategies.presets import model_preset

LLAMA, MIXTRAL = model_preset("llama3-8b"), model_preset("mixtral-8x7b")
QWEN = model_preset("qwen3-30b-a3b")
MX_UNEVEN = "tp=2,pp=4,ep=2,etp=1,dp=1,mbs=1,layout=Et*5|t*10|t*9|t*8L"
LL_UNEVEN = "tp=2,pp=4,dp=1,mbs=1,layout=Et*10|t*8|t*7|t*7L"
#: (model, cluster, plan): one pipeline (dp 1), 1F1B, one chunk per rank, uneven
CASES = [
    (MIXTRAL, "dgx-h100:1", MX_UNEVEN),
    (LLAMA, "dgx-h100:1", LL_UNEVEN),
    (QWEN, "dgx-h100:1", "tp=4,pp=2,ep=4,etp=1,dp=1,mbs=1,layout=Et*20|t*28L"),
    (LLAMA, "dgx-h100:1", "tp=4,pp=2,dp=1,mbs=1,first_stage_layers=14"),
    (LLAMA, "dgx-h100:1", "tp=1,pp=8,dp=1,mbs=1,first_stage_layers=2,last_stage_layers=6"),
    (MIXTRAL, "dgx-h100:1", "tp=1,pp=8,dp=1,mbs=1,first_stage_layers=2,last_stage_layers=6"),
]


@pytest.mark.parametrize("model,cluster,plan", CASES,
                         ids=[f"{m.name}-{p}" for m, _, p in CASES])
def test_step_and_layer_comm_are_the_contention_free_simulation(model, cluster, plan):
    """The step and the busiest stage's ``compute``, ``tp_comm``, ``ep_comm`` (1e-9), and
    the breakdown sums to the step."""
    job = case_job(model, cluster, plan, 16)
    assert by_chunk(job)
    assert against_simulation(job, ("compute", "tp_comm", "ep_comm")) == []


@pytest.mark.parametrize("model,plan,before", [(MIXTRAL, MX_UNEVEN, 1.888129),
                                               (LLAMA, LL_UNEVEN, 2.142070)])
def test_the_per_stage_path_kept_the_even_composition(model, plan, before, monkeypatch):
    """Routed through ``per_stage`` (the path before), the same plans keep the even
    composition's step, 0.4 % under the simulation: the gap the order closes."""
    job = case_job(model, "dgx-h100:1", plan, 16)
    sim = simulate(job, network="contention-free").step_time_s
    monkeypatch.setattr(scalar, "by_chunk", lambda j, c=None: False)
    old = estimate(job).step_time_s
    assert old == pytest.approx(before, abs=1e-6)
    assert old / sim - 1.0 < -3e-3


@pytest.mark.parametrize("schedule,routed", [("1f1b", True), ("gpipe", True),
                                             ("deepspeed-1f1b", True), ("zb-h1", False)])
def test_which_one_chunk_schedules_replay_the_order(schedule, routed):
    """Uneven one-chunk plans take the per-chunk path unless the backward is split (the
    zero-bubble orders keep ``per_stage``: ``a2a_shift`` prices none of their layers'
    communication, §5.52); an even split of one kind of layer takes neither."""
    uneven = case_job(LLAMA, "dgx-h100:1", f"{LL_UNEVEN},schedule={schedule}", 16)
    even = case_job(LLAMA, "dgx-h100:1", f"tp=2,pp=4,dp=1,mbs=1,schedule={schedule}", 16)
    assert by_chunk(uneven) is routed
    assert not by_chunk(even)
