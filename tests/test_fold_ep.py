"""Expert-parallel plans folded inside their expert groups (``simulator.fold_ep``): the
folded run equals the unfolded one record for record, bit for bit, with each dispatcher,
1F1B and DualPipe, with and without pp; the all-to-all's check; the fallbacks."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.collectives import WatchedRun
from simulator.fold import fold_spec
from simulator.fold_ep import a2a_kept, a2a_table, forwarded_codes, same_locals
from simulator.fold_rings import equitable
from simulator.simulate import simulate
from strategies import placement
from strategies.collectives import all_to_all
from strategies.hf_config import load_model_arg
from strategies.job import make_job
from strategies.plan.parse import parse_plan
from tests.fold_checks import CLUSTERS, assert_folded_is_full
from topologies.cluster import cluster_preset
from topologies.cluster.arg import parse_cluster_arg

DSV3 = "docs/reports/deepseek_v3_model.json"     # DeepSeek-V3, 64 layers (the published run's)
QWEN = "qwen3-30b-a3b"
CASES = [  # (model, cluster, plan, framework): dispatchers, schedules, ep in and across nodes
    (QWEN, "dgx-h100:2", "tp=1,pp=1,dp=16,ep=8,mbs=1,gbs=32,zero=1", None),
    (QWEN, "dgx-h100:2", "tp=1,pp=1,dp=16,ep=16,mbs=1,gbs=32,zero=1,moe_dispatcher=deepep",
     None),
    (QWEN, "h800x4", "tp=1,pp=1,dp=32,ep=32,mbs=1,gbs=64,zero=1", None),      # PXN relays
    (QWEN, "h800x4", "tp=1,pp=2,dp=16,ep=16,mbs=1,gbs=64,zero=1,moe_dispatcher=hybridep",
     None),
    (QWEN, "h800x4", "tp=2,pp=2,dp=8,ep=4,etp=1,mbs=1,gbs=64,zero=1,schedule=1f1b", None),
    (DSV3, "h800x4", "tp=1,pp=2,dp=16,ep=16,mbs=1,gbs=64,zero=1,moe_dispatcher=deepep,"
     "schedule=dualpipe", "hai-llm"),
    (DSV3, "h800x4", "tp=1,pp=2,dp=16,ep=8,mbs=1,gbs=64,zero=1,moe_dispatcher=deepep,"
     "schedule=dualpipe", "hai-llm"),
    (QWEN, "fat_tree", "tp=1,pp=1,dp=32,ep=8,mbs=1,gbs=64,zero=1,moe_dispatcher=deepep", None),
    (QWEN, "spine", "tp=1,pp=2,dp=16,ep=16,mbs=1,gbs=64,zero=1,moe_dispatcher=deepep", None),
    (QWEN, "h800x4", "tp=1,pp=1,dp=8,cp=4,ep=2,mbs=1,gbs=64,zero=1", None),    # cp cut at ep
    (QWEN, "h800x4", "tp=1,pp=1,dp=32,ep=16,mbs=1,gbs=64,zero=3,dp_shard=16", None),
]


def _job(model: str, cluster: str, plan: str, framework: str | None = None, **kw):
    cl = CLUSTERS[cluster] if cluster in CLUSTERS else parse_cluster_arg(cluster)
    return make_job(load_model_arg(model), cl, parse_plan(plan), framework=framework, **kw)


@pytest.mark.parametrize("model,cluster,plan,framework", CASES)
def test_ep_plans_fold_inside_expert_groups_bit_for_bit(model, cluster, plan, framework):
    """Each plan folds to one rank a stage, where the coordinate translations alone keep
    several, and the folded run is the unfolded one."""
    job = _job(model, cluster, plan, framework)
    spec, coords = fold_spec(job), fold_spec(job, parts=False)
    assert len(spec.reps) == job.plan.pp < len(coords.reps)
    assert "(parts " in spec.note and "(parts " not in coords.note
    assert_folded_is_full(job, spec)


def test_deepseek_v3_published_plan_folds_to_one_rank_a_stage():
    """The brief's plan (pp16 dp128 ep64, 256 HGX H800 nodes): dp = GPU + 8·node + 64·edp,
    each part moved on its own; 16 of 2,048 ranks, where the coordinate fold kept 1,024
    (only the move by a whole expert group maps the groups)."""
    job = _job(DSV3, "hgx-h800:256", "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,"
               "recompute_modules=layernorm+moe_act+mla_up_proj,moe_dispatcher=deepep,"
               "schedule=dualpipe,gbs=15360", "hai-llm", dtype="fp8-blockwise")
    spec, coords = fold_spec(job), fold_spec(job, parts=False)
    assert spec.steps == {"tp": 1, "cp": 1, "dp0": 1, "dp1": 1, "dp2": 1}
    assert len(spec.reps) == 16 and len(coords.reps) == 1024 and coords.steps["dp"] == 64
    assert "dp=128: 128 ranks per representative (parts 8·8·2)" in spec.note
    assert "runs alone: checked" in spec.note and spec.alone == (tuple(range(2048)),)
    assert equitable(job, spec.rep_of, ["dp", "dpcp"])


def test_forwarded_flows_are_pairs_in_a_node_or_on_a_local_index():
    """What the all-to-all's check reads (module doc): where every node of a group holds the
    same local indices, the engine's forwarded flows are the pairs in one node and the pairs
    on one local index; where they differ, ``same_locals`` says so."""
    G = 8
    for plan, n in (("tp=1,pp=1,dp=32,ep=16", 32), ("tp=2,pp=1,dp=16,ep=8", 32),
                    ("tp=2,pp=1,dp=16,ep=16,etp=1", 32), ("tp=1,pp=2,dp=64,ep=64", 128)):
        p = make_job(load_model_arg(QWEN), cluster_preset("hgx-h800", n // G),
                     parse_plan(plan + ",mbs=1,gbs=256")).plan
        groups = np.asarray(placement.groups(p, "ep"))
        assert same_locals(groups, G)
        for g in groups.tolist():
            (ph,) = all_to_all.phases("alltoall", g, 1.0, G.__rfloordiv__, 0.5)
            assert set(ph.flows) == {(a, b) for a in g for b in g if a != b and (
                a // G == b // G or a % G == b % G)}
    assert not same_locals(np.array([[0, 1, 6, 7], [2, 3, 4, 5]]), 4)
    assert same_locals(np.array([[0, 1, 4, 5], [2, 3, 6, 7]]), 4)
    assert same_locals(np.array([[0, 1, 2, 4], [3, 5, 6, 7]]), 4)     # uneven: direct


def test_a2a_check_refuses_a_permutation_that_breaks_forwarding():
    """Two 4-GPU nodes, expert group {0, 1, 6, 7} (local indices 0, 1 and 2, 3): swapping
    local indices 2 and 3 maps the group onto itself as a set but sends the forwarded pair
    0 -> 6 onto 0 -> 7, which the engine does not run: refused. Moving both nodes and every
    local index by 2 keeps the pairs: accepted."""
    groups = np.array([[0, 1, 6, 7], [2, 3, 4, 5]])
    table = [("ep", forwarded_codes(groups, 4, 8))]
    r = np.arange(8)
    swap23 = r // 4 * 4 + np.array([0, 1, 3, 2])[r % 4]
    assert sorted(swap23[[0, 1, 6, 7]].tolist()) == [0, 1, 6, 7]
    assert not a2a_kept(swap23, table)
    assert a2a_kept((r // 4 ^ 1) * 4 + (r % 4 + 2) % 4, table) and a2a_kept(r, table)
    assert a2a_table(_job(*CASES[0][:3])) == [("ep", None)]      # placement's: no codes


def test_no_gain_keeps_the_coordinate_fold():
    """Nodes that differ (H100 and A100) allow translations inside nodes only, and the
    coordinate fold already has one rank a node: the parts gain nothing, the fold (note,
    representatives) is the coordinate one, bit for bit."""
    job = make_job(load_model_arg(QWEN), parse_cluster_arg("docs/examples/mixed-h100-a100.yaml"),
                   parse_plan("tp=2,pp=1,dp=8,cp=4,ep=8,mbs=1,gbs=64,zero=1"))
    spec, coords = fold_spec(job), fold_spec(job, parts=False)
    assert spec.note == coords.note and spec.reps == coords.reps and "(parts" not in spec.note


def test_a_breach_runs_the_job_again_folded_less(monkeypatch):
    """The gradient norm's ring folded on its running alone (``simulator.fold_stats``): if the
    engine saw it share the network, ``simulate`` works the fold out again without that
    argument (the parts fall back as far as they must) and the figures are the unfolded
    run's."""
    def always(self):
        self.runner.breach = True
        WatchedRun.__mro__[1]._counted_next(self)
    job = _job(*CASES[3][:3])
    assert "runs alone: checked" in fold_spec(job).note
    monkeypatch.setattr(WatchedRun, "_counted_next", always)
    res = simulate(job)
    again = fold_spec(job, stats="equitable")
    assert res.simulated_ranks == list(again.reps) and "runs alone" not in again.note
    assert res.metrics["step_time_s"] == simulate(job, fold=False).metrics["step_time_s"]
