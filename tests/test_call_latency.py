"""Each NCCL collective call pays ``phase.CALL_LATENCY_S`` once beyond its ring steps and its
bytes (docs/calibration.md §5.233): the estimate (``comm.collective_time``), the bound's floors
and the simulator's engine read the one constant, per call, not per phase."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies.collectives.phase import (CALL_LATENCY_S, NCCL_CALL_INTERCEPT_S,
                                          call_latency)
from strategies.cost import comm as cm
from strategies.estimate.bound.floors import a2a_floor, group_floor
from strategies.stacks.profile import LAUNCH_GAP_S
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route

REL = 1e-12
H100 = cluster_preset("dgx-h100", 4)
NVL = H100.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
LAT_IN = H100.intra_node_latency


def _engine(kind, group, nbytes, repeat=1.0):
    """Seconds the engine takes for one ``kind`` call (``repeat`` back to back) alone."""
    algo = colls.algorithm_for(kind, group, H100.gpus_per_node)
    progs = {r: Program(r, 0, {"s": (Collective(0, "s", kind, tuple(group), nbytes, algo, "t",
                                                "dp", "c", repeat=repeat),)})
             for r in group}
    return run(progs, net=SimNetwork(simpy.Environment(), build_graph(H100),
                                     route)).step_time_s


def test_the_constant_is_the_measured_intercept_less_the_kernel_gap():
    """nccl-tests#123's intercept (5.56 us) less the 3 us kernel-boundary gap the stacks'
    kernel counts already charge: 2.56 us; none for a group of one."""
    assert NCCL_CALL_INTERCEPT_S == 5.56e-6 and LAUNCH_GAP_S == 3e-6
    assert CALL_LATENCY_S == pytest.approx(2.56e-6, rel=1e-12)
    assert call_latency(1) == 0.0 and call_latency(8) == CALL_LATENCY_S
    assert list(call_latency(np.array([1, 2, 64]))) == [0.0, CALL_LATENCY_S, CALL_LATENCY_S]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tiny_ring_allreduce_is_call_plus_steps_plus_bytes(n):
    """A ring all-reduce of 8 bytes alone in one node: ``CALL + 2(n-1)·hop + 2(n-1)/n·S/B``,
    to 1e-12, in the estimate and in the simulator alike."""
    S = 8.0
    want = CALL_LATENCY_S + 2 * (n - 1) * LAT_IN + 2 * (n - 1) / n * S / NVL
    assert cm.collective_time("allreduce", S, n, 1, H100) == pytest.approx(want, rel=REL)
    assert _engine("allreduce", list(range(n)), S) == pytest.approx(want, rel=REL)
    # the bound's floor pays the call too, and stays at or below the estimate
    assert float(group_floor(S, n, 1, 2, H100)) <= want * (1 + REL)
    assert float(group_floor(S, n, 1, 2, H100)) >= CALL_LATENCY_S


def test_once_per_call_not_per_phase_or_pass():
    """An all-reduce (two passes, one call) pays one call latency: a reduce-scatter and an
    all-gather of the same buffer (two calls) pay two. Over nodes (the striped ring) too."""
    for n, stride in ((8, 1), (32, 1), (16, 8)):
        S = 64e6
        ar = cm.collective_time("allreduce", S, n, stride, H100)
        two = cm.collective_time("reduce_scatter", S, n, stride, H100) \
            + cm.collective_time("allgather", S, n, stride, H100)
        assert two - ar == pytest.approx(CALL_LATENCY_S, rel=1e-6)
    # the all-to-all and a group of one rank
    assert float(a2a_floor(H100, 1e6, 8, 1, 1.0)) > CALL_LATENCY_S
    assert cm.collective_time("allreduce", 1e6, 1, 1, H100) == 0.0


def test_back_to_back_calls_each_pay_it_in_the_engine():
    """``repeat`` calls: ``repeat`` times (call + steps + bytes), as the estimate's per-call
    sum prices them (§5.227: a bucket is a call)."""
    one = cm.collective_time("reduce_scatter", 4e6, 4, 1, H100)
    assert _engine("reduce_scatter", [0, 1, 2, 3], 4e6, repeat=3.0) == \
        pytest.approx(3 * one, rel=REL)
    assert _engine("reduce_scatter", [0, 1, 2, 3], 4e6) == pytest.approx(one, rel=REL)
