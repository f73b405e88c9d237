"""NCCL's ring over a group whose nodes hold different member counts (``ring.uneven``,
docs/calibration.md §5.228): as many channels as the thinnest node has members, so its
NICs carry the pass; the engine alone, the closed form and the estimate's
``collective_time`` agree."""
from __future__ import annotations

from dataclasses import replace

import pytest
import simpy

from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies.collectives import ring
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.collectives.select import uneven_layouts
from strategies.cost import comm as cm
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

REL = 1e-12
A100 = cluster_preset("dgx-a100", 2)                  # 8 GPUs a node, 8 rails: hops relay
FAT = replace(A100, inter_node_topology="fat_tree")  # no rails: no relay
NVL = A100.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
NIC = A100.inter_node_bandwidth * cm.NETWORK_EFFICIENCY
LAT_IN, LAT_OUT = A100.intra_node_latency, A100.inter_node_latency
KINDS = ("reduce_scatter", "allgather", "allreduce")


def _engine(cluster, kind, group, nbytes):
    """Seconds the engine takes for one collective over ``group`` alone (flows backend)."""
    progs = {r: Program(r, 0, {"s": (Collective(0, "s", kind, tuple(group), nbytes,
                                                colls.RING, "t", "dp", "c"),)})
             for r in group}
    return run(progs, net=SimNetwork(simpy.Environment(), build_graph(cluster), route)
               ).step_time_s


def test_phase_has_the_thinnest_nodes_channels():
    """4 members on node 0, 2 on node 1: 2 channels of S/2; channel c enters each node at
    member c and leaves from member c-1; the exits pass one chunk less inside the node and
    send one across, every NIC carries at most one channel's chunk."""
    S = 60.0
    (ph,) = ring.phases("reduce_scatter", (0, 2, 4, 6, 8, 10), S, lambda r: r // 8)
    chunk = 5 / 6 * S / 2
    assert dict(zip(ph.flows, ph.flow_nbytes)) == pytest.approx({
        (0, 2): chunk, (0, 10): chunk, (2, 4): 2 * chunk, (4, 6): 2 * chunk,
        (6, 0): chunk, (6, 8): chunk, (8, 10): chunk, (8, 2): chunk, (10, 8): chunk,
        (10, 0): chunk}, rel=1e-15)
    assert (ph.steps, ph.local_steps) == (1, 4)
    # a node of one member: one channel, the plain ring in node order
    (one,) = ring.phases("allgather", (0, 1, 2, 8), S, lambda r: r // 8)
    assert one.flows == ((0, 1), (1, 2), (2, 8), (8, 0))
    assert one.flow_nbytes == pytest.approx((3 / 4 * S,) * 4, rel=1e-15)
    assert (one.steps, one.local_steps) == (1, 2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cluster,relay", [(A100, True), (FAT, False)])
def test_uneven_ring_alone_is_its_closed_form_and_the_estimate(kind, cluster, relay):
    """Both groups of 6 ranks 2 apart on 8-GPU nodes (4 + 2 and 2 + 4 members): the engine
    alone equals ``uneven_time`` (2 channels; ``k + relay`` chunks on the busiest NVLink
    port) and the estimate's ``collective_time`` for groups of that shape, each plus the
    call's own latency (``phase.CALL_LATENCY_S``)."""
    S, p = 40e6, colls.PASSES[kind]
    lat_out = LAT_OUT + (LAT_IN if relay else 0.0)
    closed = ring.uneven_time(p, S, 6, 2, 2, NVL, LAT_IN, NIC, lat_out, relay)
    assert closed == pytest.approx(p * (5 / 6 * S / 2 * max((2 + relay) / NVL, 1 / NIC)
                                        + lat_out + 4 * LAT_IN), rel=1e-15)
    for group in ((0, 2, 4, 6, 8, 10), (4, 6, 8, 10, 12, 14)):
        assert _engine(cluster, kind, group, S) == pytest.approx(closed + CALL, rel=REL), group
    assert cm.collective_time(kind, S, 6, 2, cluster) == pytest.approx(closed + CALL, rel=REL)


def test_thinner_node_is_slower_and_even_groups_keep_the_striped_ring():
    """The NICs of the thinnest node bound the ring: 8 + 4 members run 4 channels, 3 + 1
    one; groups laid out evenly keep ``striped_time`` (no uneven layout)."""
    S = 256e6
    assert uneven_layouts(12, 1, 8)[1:] == (4.0, 2.0)
    t12 = cm.collective_time("allgather", S, 12, 1, FAT)
    assert t12 == pytest.approx(ring.uneven_time(1, S, 12, 4, 2, NVL, LAT_IN, NIC, LAT_OUT)
                                + CALL, rel=REL)
    assert _engine(FAT, "allgather", tuple(range(12)), S) == pytest.approx(t12, rel=REL)
    t4 = _engine(FAT, "allgather", (5, 6, 7, 8), S)
    assert t4 == pytest.approx(ring.uneven_time(1, S, 4, 1, 2, NVL, LAT_IN, NIC, LAT_OUT) + CALL,
                               rel=REL)
    assert t4 > t12
    assert not uneven_layouts(16, 1, 8)[0]
    assert cm.collective_time("allgather", S, 16, 1, FAT) == pytest.approx(
        ring.striped_time(1, S, 16, 8, 2, NVL, LAT_IN, NIC, LAT_OUT) + CALL, rel=REL)


def test_mlperf_405b_dp39_layout():
    """The MLPerf Llama 3.1 405B row on 2,496 GB200 GPUs: dp·cp = 78 ranks 4 apart over
    64-GPU NVLink domains; the stage whose group starts 2 slots before a domain's end has
    2 members there, so 2 channels, over 6 domains."""
    assert uneven_layouts(78, 4, 64) == (True, 2.0, 6.0)
    assert uneven_layouts(80, 4, 64)[0] == False    # noqa: E712  (dp 40: 5 whole domains)


@pytest.mark.parametrize("kind", KINDS)
def test_gb200_domains_alone_equal_the_estimate(kind):
    """16-GPU NVLink domains of ``gb200-nvl72:8x4`` (a NIC a GPU, 16 rails): six ranks 4
    apart, 4 + 2 and 2 + 4 members; the engine alone equals ``collective_time`` for a
    bucket and for a few kilobytes."""
    from topologies.cluster.arg import parse_cluster_arg
    cl = parse_cluster_arg("gb200-nvl72:8x4")
    for S in (40e6, 4e3):
        want = cm.collective_time(kind, S, 6, 4, cl)
        for group in ((0, 4, 8, 12, 16, 20), (8, 12, 16, 20, 24, 28)):
            assert _engine(cl, kind, group, S) == pytest.approx(want, rel=REL), (S, group)


def test_straddling_plan_folds_tp_only_and_the_fold_is_exact():
    """llama3-8b ``tp4 cp2 pp2 dp3`` on 16-GPU domains: each stage's 24 ranks are 1.5
    domains, so no dp translation is a node permutation times one local permutation (stage
    0's GPUs on domain 1 would go to domain 0, stage 1's on it to domain 2) and cp's keeps
    the dp·cp ring only as a set whose flows are not equitable with dp whole: tp alone
    folds (§5.228), and the folded step is the unfolded one bit for bit; the estimate and
    the contention-free simulation agree to 0.2 % (0.07 % before §5.227 priced each gradient
    bucket's call latency in the estimate: the estimate sits 0.16 % above, as §5.227 found
    on Megatron-Core's rank buckets)."""
    from simulator.fold import fold_spec
    from simulator.simulate import simulate
    from strategies.estimate.scalar import estimate
    from strategies.job_text import job_from_text
    job = job_from_text("llama3-8b", "gb200-nvl72:12x4", "tp=4,cp=2,pp=2,dp=3,mbs=1,gbs=48",
                        dtype="fp8")
    spec = fold_spec(job)
    assert spec.steps == {"tp": 1, "cp": 2, "dp": 3} and len(spec.reps) == 12
    assert simulate(job).step_time_s == simulate(job, fold=False).step_time_s
    free = simulate(job, network="contention-free").step_time_s
    assert free == pytest.approx(estimate(job).step_time_s, rel=2e-3)
