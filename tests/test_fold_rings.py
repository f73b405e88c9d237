"""Folding context parallelism with data parallelism (``simulator.fold_rings``): the dpcp ring
kept as a set where its flows are an equitable partition; the folded run equals the unfolded
one bit for bit (records and metrics) for every K/V exchange; the route rule the proof reads;
the fallback where the partition is not equitable."""
from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from simulator.fold import fold_spec, hop_owner
from simulator.fold_rings import equitable, ring_flows
from simulator.simulate import graph_of
from strategies.job_text import job_from_text
from tests.fold_checks import CLUSTERS, assert_folded_is_full, fold_job
from topologies.graph import rails
from topologies.routing import relays, route

_job = fold_job


CASES = [  # (plan, cluster, framework): each K/V exchange with dp > 1, cp across and in nodes
    ("tp=2,pp=2,dp=2,cp=4,mbs=1,gbs=16,zero=1", "h800x4", None),                    # p2p ring
    ("tp=2,pp=2,dp=2,cp=4,mbs=1,gbs=16,cp_comm=a2a", "h800x4", None),
    ("tp=1,pp=4,dp=2,cp=4,mbs=1,gbs=16,zero=1,schedule=interleaved,vpp=2,"
     "cp_comm=a2a+p2p,hierarchical_cp=2", "h800x4", "nemo"),
    ("tp=4,pp=1,dp=2,cp=4,mbs=1,gbs=16,zero=1,cp_comm=all_gather,recompute=full",
     "spine", None),
    ("tp=2,pp=1,dp=4,cp=4,mbs=1,gbs=16", "h800x4", "jax-xla"),                         # all-gather
    ("tp=2,pp=2,dp=2,cp=4,mbs=1,gbs=16", "h800x4", "torchtitan"),                     # torch ring
    ("tp=2,pp=1,dp=4,cp=4,mbs=1,gbs=16,zero=3,dp_shard=2", "h800x4", None),          # + dprep
    ("tp=4,pp=2,dp=2,cp=2,mbs=1,gbs=16,zero=1", "fat_tree", None),
]


@pytest.mark.parametrize("plan,cluster,framework", CASES)
def test_cp_with_dp_folds_bit_for_bit(plan, cluster, framework):
    job = _job(plan, cluster, framework)
    coords = fold_spec(job, parts=False)        # the coordinate translations (no node cut)
    assert coords.steps["cp"] < job.plan.cp and "dpcp" in coords.note
    assert fold_spec(job, strict=True, parts=False).steps["cp"] == job.plan.cp
    assert_folded_is_full(job, fold_spec(job))


def test_not_equitable_falls_back_to_ring_order():
    """tp2 cp2 dp4 on 4 nodes: dp folds by whole nodes only (dp ranks 0 and 1 share a node),
    and the dpcp ring's intra-node successor of cp rank 1 is the next dp rank, so a cp
    translation would send flows of one class into two orbits (E1 fails): cp stays unfolded,
    as the strict analysis has it."""
    job = _job("tp=2,pp=2,dp=4,cp=2,mbs=1,gbs=16,schedule=interleaved,vpp=2")
    spec, strict = fold_spec(job, parts=False), fold_spec(job, strict=True, parts=False)
    assert spec.steps == strict.steps == {"tp": 1, "cp": 2, "dp": 2}
    assert spec.note == strict.note and "rings" not in spec.note
    tp, cp, dp, per = 2, 2, 4, 16
    r = np.arange(32)
    d, stage = r // (tp * cp) % dp, r // per
    loose = stage * per + (d % 2) * tp * cp           # tp and cp moved by 1, dp by 2
    assert not equitable(job, loose, ["dpcp"])
    assert equitable(job, strict.rep_of, ["dpcp", "edp"])
    assert equitable(job, np.arange(32), ["dpcp"])    # nothing folded: always equitable


def test_ring_flows_are_the_engines_phases():
    """Striped across nodes (two dpcp members a node): each member sends one flow inside its
    node and one to the next node, in the order placement gives the ring."""
    job = _job("tp=4,pp=1,dp=2,cp=4,mbs=1,gbs=8")
    flows = ring_flows(job, "dpcp")
    assert flows.shape == (64, 2)
    assert {(0, 4), (0, 12), (4, 0), (4, 8), (28, 24), (28, 0)} <= set(map(tuple, flows.tolist()))


@pytest.mark.parametrize("name", ["h800x4", "spine", "fat_tree", "rail_only"])
def test_routes_are_owned_by_source_relay_destination(name):
    """The route rule the proof reads: every hop folding keeps is owned (``hop_owner``) by the
    flow's source, its relay (the source node's GPU on the destination's rail, where
    ``routing.relays`` says so) or its destination, and which hops each owns depends only on
    whether the flow stays in a node and whether it relays."""
    cl = CLUSTERS[name]
    graph, G = graph_of(cl), cl.gpus_per_node
    shapes: dict[tuple, set] = {}
    for a, b in product(range(cl.num_gpus), repeat=2):
        if a == b:
            continue
        intra = a // G == b // G
        relay = not intra and bool(relays(cl.inter_node_topology, rails(cl), a % G, b % G))
        who = {a: "src", b: "dst", **({a // G * G + b % G: "relay"} if relay else {})}
        path = route(graph, a, b)
        shape = []
        for u, v in zip(path, path[1:]):
            o = hop_owner(u, v, G)
            if o is not None:
                assert o in who, (a, b, u, v)
                shape.append((who[o], *(x[0] if isinstance(x, tuple) else "gpu" for x in (u, v))))
        shapes.setdefault((intra, relay), set()).add(tuple(shape))
    assert all(len(s) == 1 for s in shapes.values()), shapes


def test_benchmark_shape_folds_to_the_stages():
    """gpt-530b tp8 pp8 dp8 cp4 on 256 HGX H800 nodes (a plan ``search`` simulates): one
    representative per stage, where before the cp ranks were all simulated (32 of 2,048)."""
    job = job_from_text("gpt-530b", "hgx-h800:256",
                        "tp=8,pp=8,dp=8,cp=4,mbs=2,gbs=1536,schedule=interleaved,vpp=7,sp=true,"
                        "zero=1,first_stage_layers=14,last_stage_layers=7")
    spec = fold_spec(job)
    assert len(spec.reps) == 8 and spec.steps == {"tp": 1, "cp": 1, "dp": 1}
    assert len(fold_spec(job, strict=True).reps) == 32


MOE_TWINS = [  # (MoE model, dense model, plan): ep and cp together on four DGX H100 nodes
    ("mixtral-8x7b", "llama3-8b", "tp=2,pp=2,dp=2,cp=4,ep=4,mbs=1,gbs=8,zero=1"),
    ("qwen3-30b-a3b", "llama3-8b", "tp=2,pp=1,dp=4,cp=4,ep=4,mbs=1,gbs=8,zero=1"),
    ("mixtral-8x7b", "llama3-8b", "tp=2,pp=2,dp=4,cp=2,ep=4,mbs=1,gbs=16,zero=1"),
    ("qwen3-30b-a3b", "llama3-8b", "tp=1,pp=2,dp=4,cp=4,ep=4,mbs=1,gbs=16,zero=1"),
]


@pytest.mark.parametrize("moe,dense,plan", MOE_TWINS)
def test_moe_with_cp_folds_as_its_dense_twin(moe, dense, plan):
    """The expert groups do not keep cp from folding: an MoE plan with ep and cp folds by the
    coordinate translations as the same plan of a dense model (cp unfolded in the last two:
    the dpcp ring's (E1) fails, as in ``test_not_equitable_falls_back_to_ring_order``), and
    with the expert groups' parts (``simulator.fold_ep``) at least as far, here to one rank
    a stage, bit for bit."""
    job = job_from_text(moe, "dgx-h100:4", plan)
    twin = fold_spec(job_from_text(dense, "dgx-h100:4", plan.replace("ep=4,", "")),
                     parts=False)
    assert fold_spec(job, parts=False).steps == twin.steps
    spec = fold_spec(job)
    assert len(spec.reps) == job.plan.pp <= len(twin.reps)
    assert_folded_is_full(job, spec)


def test_expert_groups_across_cp_keep_a_translation_from_folding_it():
    """ep=2 inside cp=4 (each expert group two neighbouring cp ranks): moving the cp
    coordinate by 1 maps an expert group onto no group, so it folds cp by 2 only, where its
    dense twin folds by 1; cut at the expert group, cp's two parts fold (the cp rings kept as
    sets: their flows' orbits are equitable), as far as the twin."""
    plan = "tp=2,pp=2,dp=2,cp=4,ep=2,mbs=1,gbs=8,zero=1"
    job = job_from_text("mixtral-8x7b", "dgx-h100:4", plan)
    twin = fold_spec(job_from_text("llama3-8b", "dgx-h100:4", plan.replace("ep=2,", "")),
                     parts=False)
    assert fold_spec(job, parts=False).steps["cp"] == 2 and twin.steps["cp"] == 1
    spec = fold_spec(job)
    assert spec.steps["cp0"] == spec.steps["cp1"] == 1 and len(spec.reps) == len(twin.reps)
    assert "cp, cpr" in spec.note
