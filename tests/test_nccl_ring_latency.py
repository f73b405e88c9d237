"""NCCL's flat ring vs the hierarchical all-gather / reduce-scatter
(experiments/nccl_ring_latency.py, docs/calibration.md §3.21): NCCL's latency split
(``tuning.cc``: ``nsteps - nInterSteps``
steps at the intra-node latency, ``nInterSteps = nodes - 1`` at the network's) against the
hierarchical algorithm's ``(k-1)`` + ``(nodes-1)`` latencies, and the what-if patch touching
only all-gather and reduce-scatter over hierarchical groups."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.nccl_ring_latency import MODEL, _patched, flat_parts, hier_parts, nccl_ring_latency
from strategies.collectives import hierarchical
from strategies.cost import comm as cm
from strategies.cost.comm.links import hop_relays, nic_rate
from topologies.routing import transfer_latency
from topologies.cluster import cluster_preset

CL = cluster_preset("dgx-h100", 16)


@pytest.mark.parametrize("n,nodes", [(8, 1), (16, 16), (1024, 128), (32, 16)])
def test_latency_split_is_nccl_step_count(n, nodes):
    """One member per node or one node: every step pays one latency, as ``ring.time``'s
    ``(n-1)·lat``; otherwise ``nodes - 1`` network steps and ``n - nodes`` NVLink steps."""
    li, lo = 2e-6, 7e-6
    got = nccl_ring_latency(1, n, nodes, li, lo)
    assert got == pytest.approx((nodes - 1) * lo + (n - nodes) * li, rel=1e-15)
    if nodes == 1:
        assert got == pytest.approx((n - 1) * li, rel=1e-15)
    if nodes == n:
        assert got == pytest.approx((n - 1) * lo, rel=1e-15)
    assert nccl_ring_latency(2, n, nodes, li, lo) == pytest.approx(2 * got, rel=1e-15)


@pytest.mark.parametrize("n,stride", [(16, 1), (64, 1), (32, 2), (16, 4)])
def test_flat_ring_pays_nodes_times_more_intra_steps(n, stride):
    """The flat ring's latency exceeds the hierarchical one by ``(nodes-1)·(k-1)`` intra-node
    latencies per pass (``n - nodes`` vs ``k - 1``), plus the relay's intra-node latency on
    each of its ``nodes-1`` steps between nodes where the hop changes rail; the flat parts
    sum to the model's ``collective_time`` and the hierarchical ones to its closed form."""
    k, nodes = 8 // stride, n * stride // 8
    _, hl = hier_parts("allgather", 1e6, n, stride, CL)
    fb, fl = flat_parts("allgather", 1e6, n, stride, CL)
    li = CL.intra_node_latency
    relay = float(hop_relays(CL, (stride, -(k - 1) * stride)))
    assert fl - hl == pytest.approx((nodes - 1) * (k - 1) * li + relay * (nodes - 1) * li,
                                    rel=1e-9)
    assert fb + fl == pytest.approx(float(cm.collective_time("allgather", 1e6, n, stride, CL)),
                                    rel=1e-12)
    hb, hl = hier_parts("reduce_scatter", 3e7, n, stride, CL)
    assert hb + hl == pytest.approx(float(hierarchical.time(
        1, 3e7, k, nodes, CL.intra_node_bandwidth * cm.NVLINK_EFFICIENCY, li,
        float(nic_rate(CL)),
        float(transfer_latency(li, CL.inter_node_latency, True, False)))), rel=1e-12)


@pytest.mark.parametrize("mode", ["hierarchical", "latency"])
def test_whatif_touches_only_gathers_and_scatters_over_several_members_per_node(mode):
    orig, ct = MODEL, _patched(mode)
    assert orig is cm.collective_time
    for kind, n, stride in [("allreduce", 64, 1), ("allgather", 8, 1), ("allgather", 16, 8),
                            ("alltoall", 16, 1)]:
        assert float(ct(kind, 5e6, n, stride, CL)) == float(orig(kind, 5e6, n, stride, CL))
    got = ct("allgather", 5e6, np.array([8, 64]), 1, CL)
    assert got[0] == float(orig("allgather", 5e6, 8, 1, CL))
    # the former rule pays fewer latencies; at 5 MB it is the faster of the two here
    assert got[1] < float(orig("allgather", 5e6, 64, 1, CL))
