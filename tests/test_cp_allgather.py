"""All-gather context parallelism (``FrameworkProfile.cp_impl == "allgather"``; Megatron-Core's
``cp_comm_type="all_gather"``, Llama 3's CP, Dubey et al. 2024 §3.3.2): the same K/V
collectives as the p2p ring, none hidden under the attention core. One rule
(``comm_rules.cp_exposed_fraction``) read by the estimate, the lower bound and the simulator
through the stage costs; the reader takes it from an entry's ``plan.cp_comm_type`` into the
plan field ``cp_comm`` (docs/calibration.md §5.62, §5.134)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.stacks.comm_rules import cp_exposed_fraction
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.profile_fields import CP_IMPLS
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry
from strategies.reference.text import cp_comm_type
from topologies.cluster import cluster_preset
from topologies.errors import SpecError

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "strategies", "reference", "data",
                    "frontier_papers.json")


def _job(impl: str, spec: str = "tp=2,cp=4,pp=1,mbs=1,gbs=4", seq: int = 16384):
    m = replace(model_preset("gpt-1.7b"), seq_length=seq)
    return make_job(m, cluster_preset("dgx-h100", 2), parse_plan(spec),
                    framework=replace(MEGATRON_CORE, cp_impl=impl))


def _bound(job) -> float:
    return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                       PlanArrays.from_plans([job.plan]), job.framework)[0])


def test_rule_and_its_validation() -> None:
    assert "allgather" in CP_IMPLS
    assert cp_exposed_fraction("allgather", 0.1) == 1.0
    assert cp_exposed_fraction("ring", 0.1) == 0.1
    with pytest.raises(SpecError, match="allgather"):
        replace(MEGATRON_CORE, cp_impl="ulysses")
    assert isinstance(replace(MEGATRON_CORE, cp_impl="allgather"), FrameworkProfile)


def test_estimate_exposes_every_collective_the_ring_hides() -> None:
    """Where the attention core outlasts the ring's collectives the ring exposes
    ``cp_exposed_fraction`` (0.1) of them; the all-gather exposes them whole: the same
    ``3·t_rs(cp_bytes)`` per layer, 10x the ring's exposed seconds."""
    ring, ag = _job("ring"), _job("allgather")
    sc = stage_costs(ag)
    assert sc.cp_exposed_fraction == 1.0 and stage_costs(ring).cp_exposed_fraction == 0.1
    t_cp = 3 * float(cm.collective_time("reduce_scatter", sc.cp_bytes, 4, 2, ag.cluster))
    assert t_cp < sc.attn_fwd + sc.attn_bwd          # the ring hides all but its tail here
    e_r, e_a = estimate(ring), estimate(ag)
    assert e_a.breakdown_s["cp_comm"] == pytest.approx(10 * e_r.breakdown_s["cp_comm"],
                                                       rel=1e-12)
    layers = ag.model.num_layers * ag.num_microbatches
    assert e_a.breakdown_s["cp_comm"] == pytest.approx(layers * t_cp, rel=1e-9)
    assert e_a.step_time_s > e_r.step_time_s
    lb_r, lb_a = _bound(ring), _bound(ag)
    assert lb_a > lb_r and lb_a <= e_a.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("network", ["flows", "contention-free"])
def test_simulator_runs_the_exposed_collectives(network: str) -> None:
    """The simulator gathers K/V before each attention block and reduce-scatters dK/dV after
    the backward's: the step grows by the estimate's exposed seconds to within the backward
    reduce-scatter's overlap with the block's TP collectives (which the estimate adds) and
    the contention of the flows network (measured: 0.85x and 1.09x here)."""
    ring, ag = _job("ring"), _job("allgather")
    s_r = simulate(ring, network=network).step_time_s
    s_a = simulate(ag, network=network).step_time_s
    gap_est = estimate(ag).step_time_s - estimate(ring).step_time_s
    assert s_a - s_r == pytest.approx(gap_est, rel=0.2)


@pytest.mark.parametrize("text,impl", [("all_gather", "all_gather"),
                                       ("All-gather based", "all_gather"), ("p2p", "p2p"),
                                       ("a2a+p2p", None), ("a2a", "a2a"),
                                       ("DeepSpeed-Ulysses", "a2a"), ("", None)])
def test_reader_text(text: str, impl: str | None) -> None:
    assert cp_comm_type(text) == impl


def test_llama3_128k_row_runs_the_allgather() -> None:
    with open(DATA) as f:
        rows = json.load(f)
    by = {r["id"]: r for r in rows}
    case = case_from_entry(by["llama3_405b_16384gpu_seq128k"], rows)
    assert case.job.framework.cp_impl == "allgather" and case.job.plan.cp_comm == "all_gather"
    assert any("cp_comm=all_gather" in a for a in case.assumptions)
    for rid in ("llama3_405b_8192gpu_seq8k", "llama3_405b_16384gpu_seq8k"):
        assert case_from_entry(by[rid], rows).job.framework.cp_impl == "ring"
