"""The gradient norm's ring on heterogeneous clusters (``simulator.fold_stats``, (S1n) and
(S2n)): nodes that differ allow within-node translations only; the world's ring (the
distributed optimizer) folds there as flows that run alone, counted node by node; folded ==
unfolded bit for bit; what the argument must refuse, it refuses."""
from __future__ import annotations

from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import simulator.simulate as simulate_module
from simulator.fold import fold_spec, hop_owner, network_rules
from simulator.fold_rings import equitable, ring_flows
from simulator.fold_stats import alone_counts_hold, alone_groups
from strategies.job import Job, make_job
from strategies.plan.parse import parse_plan
from strategies.presets import model_preset
from tests.fold_checks import assert_folded_is_full
from topologies.cluster import parse_cluster_arg
from topologies.graph import build_graph

EXAMPLE = str(Path(__file__).resolve().parents[1] / "docs/examples/mixed-h100-a100.yaml")
DOCS_PLAN = ("tp=2,pp=1,dp=32,cp=1,ep=1,mbs=2,gbs=256,schedule=1f1b,vpp=1,recompute=none,"
             "sp=true,zero=1,group_microbatches=6/2")


def _job(cluster: str, plan: str) -> Job:
    return make_job(model_preset("llama3-8b"), parse_cluster_arg(cluster), parse_plan(plan))


HETERO = [  # (cluster, plan, ranks simulated)
    (EXAMPLE, DOCS_PLAN, 32),                                   # docs/simulator.md's figures
    ("dgx-h100:2+dgx-a100:2", "tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1", 16),
    ("dgx-h100:1+dgx-a100:1", "tp=4,pp=1,dp=4,mbs=1,gbs=16,zero=1", 4),
    ("dgx-h100:2+dgx-a100:2", "tp=4,pp=2,dp=4,mbs=1,gbs=16,zero=1,schedule=interleaved,vpp=2", 8),
    # identical nodes, uneven micro-batches per replica: within-node translations only too
    ("dgx-h100:1+dgx-h100:1", "tp=2,pp=1,dp=8,mbs=1,gbs=32,zero=1,group_microbatches=5/3", 8),
]


@pytest.mark.parametrize("cluster,plan,reps", HETERO)
def test_world_ring_on_mixed_nodes_folds_bit_for_bit(cluster, plan, reps, monkeypatch):
    """The coordinate translations (``parts=False``; the node's parts fold these plans to one
    rank a node on the orbit argument: ``tests/test_fold_dense_parts.py``)."""
    job = _job(cluster, plan)
    coords = partial(fold_spec, parts=False)
    monkeypatch.setattr(simulate_module, "fold_spec", coords)
    spec = coords(job)
    assert network_rules(job)[1:] == (False, "heterogeneous nodes")
    assert len(spec.reps) == reps and spec.alone == (tuple(range(job.cluster.num_gpus)),)
    assert "runs alone: checked" in spec.note
    assert np.array_equal(spec.rep_of // 8, np.arange(spec.rep_of.size) // 8)
    # the fold rests on this argument: the orbit one refuses the ring, nothing folds without
    assert not equitable(job, spec.rep_of, ["stats"])
    assert len(coords(job, stats="equitable").reps) == job.cluster.num_gpus
    assert_folded_is_full(job, spec)


def test_links_of_one_kind_in_one_node_have_one_capacity():
    """The premise (S1n) rests on: every link a GPU owns (``fold.hop_owner``) has, kind by
    kind, its node's capacity; the two groups' nodes differ."""
    cl = parse_cluster_arg(EXAMPLE)
    caps = defaultdict(set)
    for u, v, d in build_graph(cl).edges(data=True):
        o = hop_owner(u, v, cl.gpus_per_node)
        if o is not None:
            kind = tuple(x[0] if isinstance(x, tuple) else "gpu" for x in (u, v))
            caps[kind, o // cl.gpus_per_node].add(d["bandwidth"])
    assert all(len(c) == 1 for c in caps.values())
    assert caps[("gpu", "nvswitch"), 0] != caps[("gpu", "nvswitch"), 4]


def test_node_counts_refuse():
    """(S1n): a ring with one flow reversed loads its GPUs unevenly; orbits that leave a node
    are refused before counting; (S2n): orbits whose representatives would carry other
    counts than the real links; all three where the node-wide counts of the true ring hold."""
    job = _job("dgx-h100:2+dgx-a100:2", "tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1")
    spec, flows = fold_spec(job), ring_flows(job, "stats")
    assert alone_counts_hold(job, spec.rep_of, flows, by_node=True)
    bent = flows.copy()
    bent[0] = bent[0, ::-1]
    assert not alone_counts_hold(job, spec.rep_of, bent, by_node=True)
    across = spec.rep_of % 16          # node 1's ranks stand for node 0's and so on
    assert alone_groups(job, across, False, flows) is None
    lopsided = np.where(np.arange(32) % 8 < 4, spec.rep_of, np.arange(32))
    real = alone_groups(job, np.arange(32), False, flows)     # (S1n) alone holds here
    assert real is not None and not alone_counts_hold(job, lopsided, flows, by_node=True)
