"""A MoE layer's tensor-parallel collectives and its expert all-to-all run one after the
other (docs/calibration.md §5.53): the all-to-all dispatches the router's output, which reads
the reduce-scattered attention output (Megatron-Core ``MoELayer.forward``), so the two
collectives of one layer and micro-batch never overlap in the simulation."""
from __future__ import annotations

import dataclasses

import pytest

from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

REL = 1e-12


def _job():
    # the data gradients' reductions stay blocking here (``dgrad_overlap="none"``): with
    # them beside the weight gradients the backward's reduce-scatter leaves the block's
    # sequence (docs/calibration.md §5.75; tests/test_dgrad_reduce.py prices it)
    m = dataclasses.replace(model_preset("qwen3-30b-a3b"), num_layers=1)
    plan = parse_plan("tp=2,sp=true,ep=2,etp=1,mbs=1,gbs=8")
    return make_job(m, cluster_preset("hgx-h800", 1), plan,
                    framework=dataclasses.replace(MEGATRON_CORE, dgrad_overlap="none"))


@pytest.mark.parametrize("pass_", ["F0.c0", "B0.c0"])
def test_one_moe_layer_runs_compute_a2a_then_tp_in_sequence(pass_):
    """One MoE layer, tp 2 with SP, ep 2, contention-free network: the block's compute, its
    all-to-all, then its reduce-scatter and all-gather, each starting as the one before ends;
    the next compute starts after the last, so the block lasts the sum of the four."""
    res = simulate(_job(), network="contention-free", fold=False)
    recs = sorted(res.by_rank(0), key=lambda r: (r.start, r.end))
    # the block's main compute: its last record (a backward first runs the data-gradient
    # GEMMs beside SP's re-gathers, docs/calibration.md §5.70)
    main = max((r for r in recs if r.label == pass_ and r.kind in ("forward", "backward")),
               key=lambda r: r.end)
    a2a = next(r for r in recs if r.label == f"A2A ep {pass_}")
    rs = next(r for r in recs if r.label == f"RS tp {pass_}")
    ag = next(r for r in recs if r.label == f"AG tp {pass_}")
    nxt = next(r for r in recs if r.stream == "compute" and r.start >= main.end
               and r is not main)
    assert a2a.start == pytest.approx(main.end, rel=REL)
    assert rs.start == pytest.approx(a2a.end, rel=REL)       # not beside the all-to-all
    assert ag.start == pytest.approx(rs.end, rel=REL)
    assert nxt.start == pytest.approx(ag.end, rel=REL)
    span = nxt.start - main.start
    assert span == pytest.approx(main.duration + a2a.duration + rs.duration + ag.duration,
                                 rel=REL)
    assert min(a2a.duration, rs.duration, ag.duration) > 0


def test_one_moe_layer_estimate_meets_its_simulation():
    """The estimate charges the same sequence: within 1 % of the contention-free simulation."""
    job = _job()
    err = estimate(job).step_time_s / simulate(job, network="contention-free").step_time_s - 1
    assert abs(err) <= 0.01, err
