"""NCCL's all-reduce Tree against the model's striped flat ring (experiments/nccl_tree.py,
docs/calibration.md §3.21 "Tree: analysis"): the ring's parts are the model's, the tree's
closed form and NCCL's latency, the crossover where the two closed forms meet, and NCCL's
own Simple-protocol model at one hand-worked point."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.nccl_tree import (crossover, log2i, nccl_simple, ring_parts, tree_latency,
                                   tree_time)
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import comm as cm
from topologies.cluster import cluster_preset


@pytest.mark.parametrize("nodes,n,stride", [(2, 16, 1), (8, 64, 1), (64, 512, 1), (8, 32, 2),
                                            (16, 16, 8)])
def test_ring_parts_are_the_models(nodes, n, stride):
    """Bandwidth + latency sum to ``comm.collective_time``; the latency is NCCL's ring split
    (``2(nodes-1)`` network steps, ``2(n-nodes)`` NVLink ones) and linear parts scale."""
    cl = cluster_preset("dgx-h100", nodes)
    S = 2.0 ** 24
    bw, lat = ring_parts(S, n, stride, cl)
    assert bw + lat == pytest.approx(cm.collective_time("allreduce", S, n, stride, cl),
                                     rel=1e-12)
    bw2, lat2 = ring_parts(2 * S, n, stride, cl)
    assert lat2 == pytest.approx(lat, rel=1e-12)
    assert bw2 == pytest.approx(2 * bw, rel=1e-12)


@pytest.mark.parametrize("nodes", [2, 3, 8, 64])
def test_tree_closed_form(nodes):
    """``t_tree = BW·n/((n-1)·e) + 2((k-1)·lat_in + log2i(nodes)·lat_out)`` with the
    cluster's latencies, plus the call's own (``phase.CALL_LATENCY_S``): at k 8 the
    bandwidth term is ``2S/k`` over the member's rate, i.e. the ring's ``2(n-1)/n·S/k``
    times ``n/(n-1)``."""
    cl = cluster_preset("dgx-h100", nodes)
    n, S = 8 * nodes, 3.0 * 2 ** 22
    lat = 2 * (7 * cl.intra_node_latency + np.floor(np.log2(nodes)) * cl.inter_node_latency)
    assert tree_latency(n, 1, cl) == pytest.approx(lat, rel=1e-12)
    bw, _ = ring_parts(S, n, 1, cl)
    for e in (1.0, 0.92):
        assert tree_time(S, n, 1, cl, e) == pytest.approx(bw * n / ((n - 1) * e) + lat + CALL,
                                                          rel=1e-12)
    assert log2i(64) == 6 and log2i(63) == 5 and log2i(1) == 0


@pytest.mark.parametrize("nodes", [2, 8, 64])
@pytest.mark.parametrize("e", [1.0, 0.92])
def test_crossover_is_where_the_closed_forms_meet(nodes, e):
    """At ``S*`` ring and tree take the same time (1e-12); below it the tree is cheaper,
    above it the ring."""
    cl = cluster_preset("dgx-h100", nodes)
    n = 8 * nodes
    s = crossover(n, 1, cl, e)
    ring = lambda S: sum(ring_parts(S, n, 1, cl))    # noqa: E731
    assert tree_time(s, n, 1, cl, e) == pytest.approx(ring(s), rel=1e-12)
    assert tree_time(0.9 * s, n, 1, cl, e) < ring(0.9 * s)
    assert tree_time(1.1 * s, n, 1, cl, e) > ring(1.1 * s)


def test_nccl_simple_by_hand():
    """NCCL's own Simple model (tuning.cc v2.19.3-1) at 16 MiB over 8 nodes of 8 GPUs, bus
    bandwidth 360 GB/s: ring ``1.4·(8.4 + 112·3.4 + 14·14)`` us + ``S·2·63/64/busBw``; tree
    ``2·(7·28 + 3·28)`` us + ``S/(busBw·0.92·0.5·0.7)`` (treeCorrectionFactor[Simple] at
    log2(16 MiB/64) = 18)."""
    S, bus = 2.0 ** 24, 360e9
    ring, tree = nccl_simple(S, 64, 8, bus)
    assert ring == pytest.approx(1.4 * (8.4 + 112 * 3.4 + 14 * 14) * 1e-6
                                 + S * 2 * 63 / 64 / bus, rel=1e-12)
    assert tree == pytest.approx(2 * (7 * 28 + 3 * 28) * 1e-6 + S / (bus * 0.92 * 0.5 * 0.7),
                                 rel=1e-12)
