"""ZB-H1's pipeline messages on the critical path (docs/calibration.md §5.22): ZB-H1 exchanges
around each step but keeps 1F1B's warm-up, and the simulation of a pipeline alone on NVLink
(``experiments/p2p_exchange_count.py``) exposes 1F1B's last-rank count ``m + 2p − 3`` with
the last rank slowest and ``2m + p + j − 3`` with middle rank ``j`` slowest (``m >= p``); the
largest, ``j = p − 2``, is 1F1B's balanced count ``2m + 2p − 5``, which the estimate charges
(``ZBH1.exposed_messages``; ``2·(m + p − 1)`` before)."""
import dataclasses
import sys

import pytest

from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset

sys.path.insert(0, "experiments")
from p2p_exchange_count import MODEL, counts, layers  # noqa: E402

ZB, ONE = get_schedule("zb-h1"), get_schedule("1f1b")


def heavy(pp: int, j: int) -> str:
    """``layers_per_stage`` with one layer moved onto middle rank ``j`` from rank ``j + 1``."""
    n = [MODEL.num_layers // pp] * pp
    n[j] += 1
    n[j + 1] -= 1
    return ",layers_per_stage=" + "/".join(map(str, n))


def test_closed_form_is_one_f_one_b_balanced_count():
    """One count for every kind of rank: ``2m + 2p − 5`` (p >= 3, m >= 2), ``m + 1`` with two
    ranks, ``2p − 2`` with one micro-batch."""
    assert not ZB.messages_by_rank
    for pp in range(2, 10):
        for m in range(1, 20):
            want = 2 * pp - 2 if m == 1 else (m + 1 if pp == 2 else 2 * m + 2 * pp - 5)
            assert float(ZB.exposed_messages(m, pp, 1)) == want
            assert float(ZB.exposed_messages(m, pp, 1)) == float(ONE.exposed_messages(m, pp, 1))
            for k in (0, 1, 2):
                assert float(ZB.bottleneck_messages(m, pp, 1, k)) == want


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 8), (3, 2), (4, 1), (8, 2)])
def test_exact_with_two_ranks_or_few_microbatches(pp, m):
    """Two ranks or ``m <= 2``: estimate and simulation both expose the closed form, even split
    and the last rank slowest."""
    want = float(ZB.exposed_messages(m, pp, 1))
    for kind in (None, 2):
        e, s = counts("zb-h1", 1, pp, m, layers(pp, kind))
        assert e == pytest.approx(want, abs=1e-6)
        assert s == pytest.approx(want, abs=0.02)


@pytest.mark.parametrize("pp,m,j", [(3, 8, 1), (4, 8, 1), (4, 16, 2), (8, 8, 2), (8, 16, 6)])
def test_simulated_count_by_slowest_rank(pp, m, j):
    """Middle rank ``j`` slowest: ``2m + p + j − 3``, at most the charged count, equal to it at
    ``j = p − 2``; the last rank slowest: ``m + 2p − 3``; the first: at most the charged count."""
    charged = float(ZB.exposed_messages(m, pp, 1))
    _, s = counts("zb-h1", 1, pp, m, heavy(pp, j))
    assert s == pytest.approx(2 * m + pp + j - 3, abs=0.02)
    assert s <= charged + 0.02
    _, s = counts("zb-h1", 1, pp, m, layers(pp, 2))
    assert s == pytest.approx(m + 2 * pp - 3, abs=0.02)
    _, s = counts("zb-h1", 1, pp, m, layers(pp, 0))
    assert s <= charged + 0.02


@pytest.mark.parametrize("pp,m", [(2, 8), (3, 8), (4, 8), (4, 16), (8, 8), (8, 16)])
@pytest.mark.parametrize("bw", [300e9, 30e9, 3e9])
def test_estimate_agrees_with_contention_free_simulation(pp, m, bw):
    """The even split: the estimate within 0.6 % of the contention-free simulation (+0.01 to
    +0.57 %, the most at p 8, m 16, 30 GB/s; +0.05 to +3.6 % before §5.22)."""
    cl = dataclasses.replace(cluster_preset("dgx-a100", 1), gpus_per_node=pp,
                             intra_node_bandwidth=bw)
    job = make_job(MODEL, cl, parse_plan(f"tp=1,pp={pp},dp=1,mbs=1,gbs={m},schedule=zb-h1"))
    e, s = estimate(job), simulate(job, network="contention-free")
    assert 0.0 <= e.step_time_s / s.step_time_s - 1 < 0.006
