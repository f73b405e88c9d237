"""The gradient norm's all-reduce under folding (``simulator.fold_stats``): ``fold_spec``
checks its group; where its ring is neither kept in order nor equitable (the world's ring
with ``pp > 1`` across nodes) the fold rests on its flows running alone, which the engine
checks; folded == unfolded bit for bit; a breach runs the job again, folded less."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy

from simulator.engine.collectives import WatchedRun
from simulator.engine.core import NotAlone, run
from simulator.fold import fold_spec, group_table
from simulator.fold_rings import equitable, ring_flows
from simulator.fold_stats import alone_counts_hold
from simulator.network.cluster_net import SimNetwork
from simulator.program.compiler import Layout, stats_groups
from simulator.program.ops import Collective, Program, Recv, Send
from simulator.simulate import simulate
from tests.fold_checks import assert_folded_is_full, fold_job
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

_job = fold_job


ALONE = [  # pp > 1: the world's ring, a stage over two or four nodes or stages sharing a node
    ("tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1", "h800x4"),
    ("tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,schedule=interleaved,vpp=2", "spine"),
    ("tp=2,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=1", "fat_tree"),
    ("tp=8,pp=2,dp=2,mbs=1,gbs=16,zero=1", "rail_only4"),
    ("tp=2,pp=4,dp=1,mbs=1,gbs=8,zero=1", "h800x1"),
    ("tp=2,pp=2,dp=2,mbs=1,gbs=16,zero=0", "h800x1"),       # model-parallel rings 0 1 4 5
]


@pytest.mark.parametrize("plan,cluster", ALONE)
def test_rings_across_stages_fold_bit_for_bit(plan, cluster):
    job = _job(plan, cluster)
    spec = fold_spec(job)
    world = tuple(range(job.cluster.num_gpus))
    assert spec.alone == ((world,) if job.plan.zero else ((0, 1, 4, 5),))
    assert "runs alone" in spec.note
    assert not equitable(job, spec.rep_of, ["stats"])      # the orbit argument fails here
    assert_folded_is_full(job, spec)


@pytest.mark.parametrize("plan", ["tp=2,pp=4,dp=4,mbs=1,gbs=16,zero=0",
                                  "tp=8,pp=4,dp=1,mbs=1,gbs=16,zero=1"])
def test_equitable_stats_ring_folds_bit_for_bit(plan):
    """Model-parallel groups (no distributed optimizer), and one stage a node: the flows'
    orbits are an equitable partition, nothing rests on running alone."""
    job = _job(plan)
    spec = fold_spec(job)
    assert spec.alone is None and "stats ring folded as a set (equitable flows)" in spec.note
    assert_folded_is_full(job, spec)


def test_the_check_sees_the_stats_group():
    """Dropping the group from the checks would fold as far with the ring kept in order as
    without: here keeping it in order folds nothing, the orbit test fails, the alone test
    holds."""
    job = _job("tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1")
    assert "stats" in [d for d, *_ in group_table(job)]
    loose, strict = fold_spec(job, parts=False), fold_spec(job, stats="order", parts=False)
    assert len(loose.reps) == 4 and len(strict.reps) == 32 and "stats" not in strict.note
    assert fold_spec(job, stats="equitable", parts=False).reps == strict.reps
    assert alone_counts_hold(job, loose.rep_of, ring_flows(job, "stats"))
    off = replace(job, framework=replace(job.framework, step=replace(
        job.framework.step, norm_barrier=False)))
    assert "stats" not in [d for d, *_ in group_table(off)] and fold_spec(off).alone is None


def test_alone_counts_refuse_uneven_loads():
    """(S1): a ring whose GPUs carry different counts (one flow reversed) is refused; (S2):
    orbits whose representatives would carry other counts than the real links are too."""
    job = _job("tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1")
    spec, flows = fold_spec(job), ring_flows(job, "stats")
    bent = flows.copy()
    bent[0] = bent[0, ::-1]
    assert not alone_counts_hold(job, spec.rep_of, bent)
    lopsided = np.where(np.arange(32) % 8 < 4, spec.rep_of, np.arange(32))
    assert not alone_counts_hold(job, lopsided, flows[flows[:, 0] % 8 < 4])


def test_stats_groups_are_the_layouts():
    for plan in ("tp=2,pp=4,dp=2,cp=2,mbs=1,gbs=16,zero=0", "tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1"):
        job = _job(plan)
        lay = Layout(job)
        assert {lay.group("stats", r) for r in range(32)} == set(stats_groups(job.plan))


def test_a_breach_runs_the_job_again_folded_less(monkeypatch):
    """If the watched ring's flows shared the network, ``simulate`` runs the job again with
    the orbit argument alone; the figures are still the unfolded run's."""
    def always(self):
        self.runner.breach = True
        WatchedRun.__mro__[1]._counted_next(self)
    job = _job("tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1")
    monkeypatch.setattr(WatchedRun, "_counted_next", always)
    res = simulate(job)
    assert res.simulated_ranks == list(fold_spec(job, stats="equitable").reps)
    assert len(res.simulated_ranks) == 32 and "runs alone" not in res.metrics["fold_note"]
    assert res.metrics["step_time_s"] == simulate(job, fold=False).metrics["step_time_s"]


def _coll(i, group, nbytes, tag, deps=()):
    return Collective(i, "dp-comm", "allreduce", tuple(group), nbytes, "ring", tag, "dp",
                      f"allreduce {i}", deps=deps)


@pytest.mark.parametrize("overlap", [False, True])
def test_engine_watches_the_ring(overlap):
    """Hand-built: a ring all-reduce over 8 GPUs of a node, watched (by group and label);
    another all-reduce over the same group after it (not watched: no breach) or a message
    beside it (``NotAlone``)."""
    cl = cluster_preset("dgx-a100", 1)
    net = SimNetwork(simpy.Environment(), build_graph(cl), route)
    group = tuple(range(8))
    progs = {r: Program(r, 0, {"dp-comm": (_coll(0, group, 4e6, "stats"),
                                           _coll(1, group, 4e6, "dp", deps=(0,)))})
             for r in group}
    if overlap:     # rank 0 sends rank 1 a message on its own stream, at the same time
        progs[0] = Program(0, 0, {**progs[0].streams,
                                  "pp-comm": (Send(2, "pp-comm", 1, 1e9, "x", "send"),)})
        progs[1] = Program(1, 0, {**progs[1].streams,
                                  "pp-comm": (Recv(2, "pp-comm", 0, "x", "recv"),)})
        with pytest.raises(NotAlone):
            run(progs, net=net, watch=[(group, "allreduce 0")])
    else:
        assert run(progs, net=net, watch=[(group, "allreduce 0")]).step_time_s > 0
