"""A pipeline message's seconds over the hops of its path (docs/calibration.md §5.66):
``Schedule.path_hops`` lists the hops a micro-batch's path crosses and
``comm.path_p2p_time`` prices each inside or between nodes and charges the worst rank's
neighbours' mean per exposed message (the simulator routes each message on its own hop)."""
import dataclasses
import sys

import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.estimate.terms import messages
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset

sys.path.insert(0, "experiments")
from p2p_exchange_count import MODEL  # noqa: E402

H100x2 = cluster_preset("dgx-h100", 2)
NB = 64e6


def test_path_hops():
    """The ring's wrap from the last rank back to rank 0 is a hop; a V's turn is not."""
    assert get_schedule("1f1b").path_hops(4, 1) == ((0, 1), (1, 2), (2, 3))
    assert get_schedule("interleaved").path_hops(3, 2) == ((0, 1), (1, 2), (2, 0), (0, 1),
                                                           (1, 2))
    assert get_schedule("zb-v").path_hops(3, 2) == ((0, 1), (1, 2), (2, 1), (1, 0))
    assert get_schedule("1f1b").path_hops(1, 1) == ()


def test_worst_rank_closed_form():
    """Stages 2 GPUs apart on two 8-GPU nodes: 1F1B over 8 stages crosses between stages 3
    and 4, interleaved vpp 2 there and on the wrap from 7 to 0; the ranks next to a crossing
    have one neighbour across and one inside, so a message costs ``(t_in + t_x) / 2``, each
    hop as ``p2p_time`` prices it inside the node (``stride`` 0) or across (the rails'
    offset 2: ``G + 2``). An end rank whose only neighbour is across (3 stages 4 GPUs apart:
    0, 4 | 8) pays ``t_x``. To floating-point precision."""
    t_in = cm.p2p_time(NB, H100x2, 0)
    t_x = cm.p2p_time(NB, H100x2, 8 + 2)
    assert t_x > 5 * t_in
    for name, v in (("1f1b", 1), ("interleaved", 2)):
        got = cm.path_p2p_time(NB, H100x2, 2, get_schedule(name).path_hops(8, v))
        assert got == pytest.approx((t_in + t_x) / 2, rel=1e-13)
    end = cm.path_p2p_time(NB, H100x2, 4, get_schedule("1f1b").path_hops(3, 1))
    assert end == pytest.approx(cm.p2p_time(NB, H100x2, 8 + 4), rel=1e-13)


@pytest.mark.parametrize("stride,pp,nodes", [(8, 4, 4), (16, 2, 4), (2, 4, 1), (1, 8, 1)])
def test_alike_hops_keep_the_single_hop_price(stride, pp, nodes):
    """Every hop inside one node, or every hop between nodes on one rail (stages a whole
    number of nodes apart, the ring's wrap included): ``p2p_time(stride)`` as before."""
    cl = cluster_preset("dgx-h100", nodes)
    for name, v in (("1f1b", 1), ("interleaved", 2)):
        got = cm.path_p2p_time(NB, cl, stride, get_schedule(name).path_hops(pp, v))
        assert got == pytest.approx(cm.p2p_time(NB, cl, stride), rel=1e-13)


@pytest.mark.parametrize("plan,before,tol", [
    ("tp=2,pp=8,dp=1,mbs=1,sp=true,gbs=32", -0.076, 0.025),
    ("tp=2,pp=8,dp=1,mbs=1,sp=true,schedule=interleaved,vpp=2,gbs=32", -0.055, 0.07)])
def test_estimate_meets_the_contention_free_simulation(plan, before, tol, monkeypatch):
    """A pipeline of stages 2 GPUs apart over two DGX H100 nodes at 1/8 of their network
    (the node-crossing hop 0.85 ms, the others 0.015 ms): estimate against the
    contention-free simulation +2.2 % for 1F1B, -6.9 % interleaved (the path's mean hop gave
    -5.7 % and -14.1 %; the single-hop price of before, every message at NVLink's rate, -8.3 %
    and -18.9 %, which the test checks too). Since Megatron-Core's ``overlap_p2p_comm``
    (docs/calibration.md §5.68) the interleaved plan exposes only the chain through every hop
    and back, priced at the worst rank's neighbours' mean: +3.1 %, the single-hop price
    -2.1 %. Since the attention grid (§5.130) the compute is longer: 1F1B +2.1 % (single hop
    -7.6 %), interleaved +2.9 % (-2.0 %). Since the simulator waits for the warm-up's and
    cool-down's calls as Megatron-Core does (§5.207: each forward's send over the slow hop
    holds the lock-step) the interleaved simulation is 3.8 % longer: -0.9 % (-5.5 %)."""
    cl = dataclasses.replace(H100x2, inter_node_bandwidth=H100x2.inter_node_bandwidth / 8)
    job = make_job(MODEL, cl, parse_plan(plan))
    sim = simulate(job, network="contention-free").step_time_s
    err = estimate(job).step_time_s / sim - 1
    assert abs(err) <= tol, err
    monkeypatch.setattr(messages, "path_p2p_times",
                        lambda s, pp, v, st, nb, c: cm.p2p_time(nb, c, st))
    assert estimate(job).step_time_s / sim - 1 == pytest.approx(before, abs=0.005)
