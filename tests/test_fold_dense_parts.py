"""Dense plans folded by parts (``simulator.fold_ep.part_digits``): a stage's rank index cut
at the node and the hybrid-sharding replica, each part moved on its own; the folded run
equals the unfolded one record for record, bit for bit, where the coordinate translations
kept several ranks a stage; the fold before is kept where the parts gain nothing or a check
refuses them; a run-time breach of the stats ring's premise folds again."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import simulator.fold as fold_module
from simulator.engine.collectives import WatchedRun
from simulator.fold import fold_spec
from simulator.fold_ep import part_digits
from simulator.fold_rings import equitable
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan.parse import parse_plan
from strategies.presets import model_preset
from tests.fold_checks import CLUSTERS, assert_folded_is_full
from topologies.cluster import cluster_preset, parse_cluster_arg

MIXED = str(Path(__file__).resolve().parents[1] / "docs/examples/mixed-h100-a100.yaml")
CASES = [  # (cluster, plan, framework, ranks the coordinate fold simulates)
    ("dgx-h100:4", "tp=2,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=1", None, 8),     # epfold29's twin
    ("h800x4", "tp=2,pp=2,dp=4,cp=2,mbs=1,gbs=16,schedule=interleaved,vpp=2", None, 8),
    ("h800x4", "tp=1,pp=2,dp=16,mbs=1,gbs=32,zero=1", None, 16),           # stats: runs alone
    ("h800x4", "tp=2,pp=1,dp=16,mbs=1,gbs=32,zero=3,dp_shard=4", None, 4),  # hybrid sharding
    ("h800x4", "tp=1,pp=2,dp=8,cp=2,mbs=1,gbs=16,zero=0", "torchtitan", 16),
    ("h800x4", "tp=1,pp=2,dp=8,cp=2,mbs=1,gbs=16,zero=1,cp_comm=a2a", None, 16),
    ("fat_tree", "tp=1,pp=2,dp=16,mbs=1,gbs=32,zero=1", None, 16),
    ("spine", "tp=2,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=0", None, 8),          # one node a leaf
    ("rail_only4", "tp=1,pp=1,dp=32,mbs=1,gbs=64,zero=0", "jax-xla", 8),
    (MIXED, "tp=2,pp=1,dp=32,mbs=2,gbs=256,sp=true,zero=1,group_microbatches=6/2", None, 32),
]


def _job(cluster: str, plan: str, framework: str | None = None):
    cl = CLUSTERS[cluster] if cluster in CLUSTERS else parse_cluster_arg(cluster)
    return make_job(model_preset("llama3-8b"), cl, parse_plan(plan), framework=framework)


@pytest.mark.parametrize("cluster,plan,framework,coord_reps", CASES)
def test_dense_plans_fold_by_parts_bit_for_bit(cluster, plan, framework, coord_reps):
    """Each plan folds to one rank a stage (the mixed cluster: one a node, its translations
    staying inside nodes), where the coordinate translations keep ``coord_reps``, and the
    folded run is the unfolded one."""
    job = _job(cluster, plan, framework)
    spec, coords = fold_spec(job), fold_spec(job, parts=False)
    assert len(coords.reps) == coord_reps and "(parts " not in coords.note
    per_stage = job.cluster.num_nodes if cluster == MIXED else 1
    assert len(spec.reps) == job.plan.pp * per_stage < coord_reps and "(parts " in spec.note
    assert np.array_equal(spec.rep_of[np.array(spec.reps)], np.array(spec.reps))
    assert_folded_is_full(job, spec)


def test_the_parts_are_the_node_and_the_replica():
    """tp2 dp16 ZeRO-3 over 4 of them on 8-GPU nodes: dp cut at the replica (dp_shard 4,
    tp·4 = 8 ranks: also the node) and above; tp2 cp2 dp4 on four nodes: dp cut at the node
    (tp·cp·2 = 8)."""
    digits = fold_module.coord_digits(job := _job(*CASES[3][:2]))
    assert part_digits(job, digits) == (("tp", 2, 1), ("cp", 1, 2), ("dp0", 4, 2),
                                        ("dp1", 4, 8))
    job = _job(*CASES[0][:2])
    assert part_digits(job, fold_module.coord_digits(job)) == (
        ("tp", 2, 1), ("cp", 2, 2), ("dp0", 2, 4), ("dp1", 2, 8))
    assert "dp=4: 4 ranks per representative (parts 2·2)" in fold_spec(job).note


def test_no_gain_keeps_the_coordinate_fold():
    """A stage inside one node (tp2 dp4 on two DGX A100): the coordinates already fold to one
    rank a stage; cuts that do not form a chain (a ZeRO-3 replica of 6 ranks on 8-GPU nodes)
    cut nothing. Either way the fold (note, representatives) is the one before."""
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-a100", 2),
                   parse_plan("tp=2,pp=2,dp=4,mbs=1,gbs=16,zero=1"))
    spec, coords = fold_spec(job), fold_spec(job, parts=False)
    assert spec.note == coords.note and spec.reps == coords.reps == (0, 8)
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 3),
                   parse_plan("tp=2,pp=1,dp=12,mbs=1,gbs=24,zero=3,dp_shard=3"))
    assert part_digits(job, fold_module.coord_digits(job)) is None
    assert fold_spec(job).note == fold_spec(job, parts=False).note


def test_a_refused_ring_falls_back_to_the_coordinate_fold(monkeypatch):
    """Where the rings' equitable-flows check refuses, the parts (which reorder the dp ring)
    fall back to ring order, which moves no cut part, and the coordinate fold is kept; that
    run is the unfolded one bit for bit."""
    job = _job(*CASES[2][:2])
    spec = fold_spec(job)
    assert "dp, dpcp, edp rings folded as sets" in spec.note
    assert equitable(job, spec.rep_of, ["dp", "dpcp", "edp"])
    monkeypatch.setattr(fold_module, "equitable", lambda *a: False)
    refused, strict = fold_spec(job), fold_spec(job, strict=True, parts=False)
    assert refused.reps == strict.reps and len(refused.reps) == 16
    assert "(parts " not in refused.note and "rings folded as sets" not in refused.note
    assert_folded_is_full(job, refused)


def test_a_breach_runs_the_job_again_folded_less(monkeypatch):
    """The parts fold of ``tp1 pp2 dp16`` rests the world's stats ring on its running alone
    (the coordinate fold too); if the engine saw it share the network, ``simulate`` works the
    fold out again without that argument: here nothing folds (the ring crosses the stages),
    and the run is the unfolded one, record for record."""
    def breach(self):
        self.runner.breach = True
        WatchedRun.__mro__[1]._counted_next(self)
    job = _job(*CASES[2][:2])
    first, again = fold_spec(job), fold_spec(job, stats="equitable")
    assert first.alone is not None and len(first.reps) == 2 and again.alone is None
    assert "runs alone" not in again.note and not again.folded
    monkeypatch.setattr(WatchedRun, "_counted_next", breach)
    res, full = simulate(job), simulate(job, fold=False)
    assert res.simulated_ranks == list(range(32)) and res.records == full.records
    assert res.metrics["step_time_s"] == full.metrics["step_time_s"]
