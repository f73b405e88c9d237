"""DualPipe and DualPipeV with expert parallelism on one pipeline (docs/calibration.md §5.231):
with ``SystemConfig.dualpipe_ep_order`` on, the estimate's step is the contention-free
simulation's to 1e-9, even and uneven, ep 2, 4 and 8, with the all-to-all hidden (NVLink) and
exposed (PCIe), and ``compute``, ``tp_comm``, ``ep_comm`` and ``pp_comm`` are the simulated
busiest stage's. Three pieces make it so: the even split replays its order with each pass's
own all-to-all (before: the even composition, mixtral DualPipe -0.16 %, DualPipeV +0.74 %),
each overlapped ``F&B&W`` group is timed layer by layer as the simulator's builder runs it
(``pair_layers.dual_pairs``; before: ``pair / 2`` a layer on each member, qwen3 on PCIe
``Et*9|t*14|t*13|t*12L`` -0.22 %), and a receive's tensor-parallel all-gather waits for the
previous pass's collectives (``message_replay``; DualPipeV's turn on rank ``pp - 1``, -3e-5).
``ep_comm`` is the busiest rank's own exposed all-to-all on the order (``pair_layers.order_a2a``), with
the switch off too (before: the order's shift, 0 against 0.0078 s). 1F1B on uneven stages of
one chunk: ``tp_comm`` and ``ep_comm`` are the busiest stage's layers' (the step unchanged)."""
from __future__ import annotations

import dataclasses

import pytest

from experiments.dualpipe_uneven_breakdown import (MIXTRAL, V_UNEVEN, against_simulation,
                                                   busiest_stage)
from experiments.offload_uneven_rows import case_job
from simulator.simulate import simulate, to_json
from strategies.cost.system import SystemConfig
from strategies.estimate.scalar import estimate
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.message_replay import message_order

QWEN = model_preset("qwen3-30b-a3b")
MX2 = "tp=2,pp=4,ep=2,etp=1,dp=1,mbs=1"
QW4 = "tp=4,pp=2,ep=4,etp=1,dp=1,mbs=1"
MX8 = "tp=8,pp=2,ep=8,etp=1,dp=1,mbs=1"
DP, DV = "schedule=dualpipe", "schedule=dualpipev,vpp=2"
#: (model, cluster, plan): one pipeline (dp 1, experts cut from the tensor-parallel ranks,
#: ``etp=1``), DualPipe and DualPipeV, even and uneven, ep 2, 4, 8; on PCIe the all-to-all
#: outlasts what hides it and the unequal copies' extra layers expose theirs
ONE_PIPE = [
    (MIXTRAL, "dgx-h100:1", f"{MX2},{DP}"),
    (MIXTRAL, "dgx-h100:1", f"{MX2},{DP},layout=Et*5|t*10|t*9|t*8L"),
    (MIXTRAL, "dgx-h100:1", f"{MX2},{DV}"),
    (MIXTRAL, "dgx-h100:1", f"{MX2},{DV},{V_UNEVEN}"),
    (QWEN, "dgx-h100:1", f"{QW4},{DP}"),
    (QWEN, "dgx-h100:1", f"{QW4},{DV}"),
    (QWEN, "dgx-h100:1", f"{QW4},{DP},layout=Et*20|t*28L"),
    (MIXTRAL, "dgx-h100:2", f"{MX8},{DP}"),
    (MIXTRAL, "dgx-h100:2", f"{MX8},{DV},layout=Et*7|t*9|t*9|t*7L"),
    (QWEN, "hgx-h100-pcie:1", f"{MX2},{DP}"),
    (QWEN, "hgx-h100-pcie:1", f"{MX2},{DP},layout=Et*9|t*14|t*13|t*12L"),
    (MIXTRAL, "hgx-h100-pcie:1", f"{MX2},{DV},{V_UNEVEN}"),
]
KEYS = ("compute", "tp_comm", "ep_comm", "pp_comm")
ON = SystemConfig(dualpipe_ep_order=1.0)
OFF = SystemConfig(dualpipe_ep_order=0.0)


def _ids(cases: list) -> list[str]:
    return [f"{m.name}-{c}-{p}" for m, c, p in cases]


def _job(model, cluster: str, plan: str, on: bool = True):
    job = case_job(model, cluster, plan, 16)
    return dataclasses.replace(job, system=ON if on else OFF)


@pytest.mark.parametrize("model,cluster,plan", ONE_PIPE, ids=_ids(ONE_PIPE))
def test_step_is_the_contention_free_simulation(model, cluster, plan):
    """The step (1e-9) and the busiest stage's entries (1e-9) with the switch on."""
    assert against_simulation(_job(model, cluster, plan), KEYS) == []


@pytest.mark.parametrize("plan", [f"{MX2},{DP}", f"{MX2},{DV}"])
def test_switch_off_keeps_the_even_composition_but_not_its_ep_entry(plan):
    """Off (on is the default) the even split keeps the even composition's step (mixtral DualPipe
    1.8171 s, DualPipeV 1.6412 s, against 1.8201 and 1.6291 simulated), which the switch
    moves to the simulation's; ``ep_comm`` is the busiest stage's either way, the step
    unchanged by it (the rest is bubble)."""
    off, on = _job(MIXTRAL, "dgx-h100:1", plan, False), _job(MIXTRAL, "dgx-h100:1", plan)
    e_off, e_on = estimate(off), estimate(on)
    sim = to_json(simulate(on, network="contention-free"), on)
    assert e_on.step_time_s == pytest.approx(sim["step_time_s"], rel=1e-9)
    assert abs(e_off.step_time_s / sim["step_time_s"] - 1.0) > 1e-3
    assert e_off.breakdown_s["ep_comm"] == pytest.approx(
        busiest_stage(sim)["ep_comm"], rel=1e-9)


@pytest.mark.parametrize("name,vpp", [("dualpipe", 1), ("dualpipev", 2)])
def test_weight_gradient_passes_run_no_collective(name, vpp):
    """``MessageOrder.collective``: a weight-gradient step alone runs no tensor-parallel
    collective (a receive's all-gather may start under it), every other pass does."""
    order = message_order(get_schedule(name), 4, 8, vpp)
    for (_, members), coll in zip(order.sigs, order.collective):
        assert coll == any(k != "W" for k, _ in members)
    assert not all(order.collective) and any(order.collective)


ONE_CHUNK = [(MIXTRAL, "dgx-h100:1", f"{MX2},layout=Et*5|t*10|t*9|t*8L", 16),
             (MIXTRAL, "dgx-h100:2", "tp=2,pp=4,ep=2,dp=2,mbs=1,layout=Et*5|t*10|t*9|t*8L", 32),
             (model_preset("llama3-8b"), "dgx-h100:1",
              "tp=2,pp=4,dp=1,mbs=1,layout=Et*10|t*8|t*7|t*7L", 16)]


@pytest.mark.parametrize("model,cluster,plan,gbs", ONE_CHUNK,
                         ids=[f"{m.name}-{p}" for m, _, p, _ in ONE_CHUNK])
def test_one_chunk_uneven_layer_comm_is_the_busiest_stages(model, cluster, plan, gbs):
    """1F1B on uneven stages of one chunk (``chunk_correction.per_chunk`` since §5.235, whose
    step ``tests/test_one_chunk_uneven_order.py`` checks on one pipeline): ``tp_comm`` and
    ``ep_comm`` are the busiest stage's layers' (before §5.231: the analytic step's slowest
    kind of rank's, mixtral ``Et*5|t*10|t*9|t*8L`` 0.0124 against 0.0156 s and 0.0248
    against 0.0310 s)."""
    bad = against_simulation(case_job(model, cluster, plan, gbs), ("tp_comm", "ep_comm"))
    assert [k for k in bad if k != "step"] == []
