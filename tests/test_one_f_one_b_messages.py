"""1F1B's pipeline messages on the critical path (docs/calibration.md §5.21): Megatron-Core's
``forward_backward_pipelining_without_interleaving`` blocks a middle rank on two exchanges per
steady micro-batch (``send_forward_recv_backward``, ``send_backward_recv_forward``) and an end
rank on one, so the count depends on which kind of rank bounds the steady state
(``OneFOneB.bottleneck_messages``): ``m + 2p − 3`` the last, ``2m + 2p − 5`` a middle one,
``m + 2p − 5 + min(m, p)`` the first, ``2p − 2`` with one micro-batch. The simulation of a
pipeline alone on NVLink (``experiments/p2p_exchange_count.py``) exposes exactly these, and
the estimate charges the largest path."""
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

ONE = get_schedule("1f1b")
FIRST, MID, LAST = 0, 1, 2
#: the same GPT with a 128K vocabulary: the last stage (LM head and loss) is far the slowest
BIG_VOCAB = dataclasses.replace(MODEL, vocab_size=128000)


def test_closed_forms():
    """The counts by kind of slowest rank; balanced stages expose the largest (a middle
    rank's); two ranks have no middle (DeepSpeed's lock step: tests/test_deepspeed_messages.py)."""
    for pp in range(2, 10):
        for m in range(1, 20):
            n = [float(ONE.bottleneck_messages(m, pp, 1, k)) for k in (FIRST, MID, LAST)]
            if m == 1:
                assert n == [2 * pp - 2] * 3
                continue
            assert n[LAST] == m + 2 * pp - 3
            assert n[MID] == 2 * m + 2 * pp - 5
            assert n[FIRST] == (m + 3 * pp - 5 if m >= pp else 2 * m + 2 * pp - 5)
            kinds = n if pp >= 3 else [n[FIRST], n[LAST]]
            assert float(ONE.exposed_messages(m, pp, 1)) == max(kinds)
        assert float(ONE.exposed_messages(8, 2, 1)) == 9.0            # m + 1 on two ranks


@pytest.mark.parametrize("pp,m,kind", [
    (2, 8, FIRST), (2, 8, LAST), (3, 8, FIRST), (3, 8, MID), (3, 8, LAST),
    (4, 8, FIRST), (4, 8, MID), (4, 8, LAST), (4, 16, FIRST), (6, 16, MID), (8, 16, FIRST),
    (8, 16, MID), (8, 16, LAST), (4, 2, MID), (8, 1, LAST)])
def test_simulated_count_is_the_closed_form(pp, m, kind):
    """One layer more on the first, a middle or the last rank (a few ms against a message's
    0.03-0.3 ms): the simulated step grows by the closed form's message times per message
    time, and the estimate charges as many. Exact for ``m <= 2`` and ``m >= 2p``; in between
    the heavy rank's extra layer lies on too few of the path's steps to decide it (the table
    of the experiment)."""
    e, s = counts("1f1b", 1, pp, m, layers(pp, kind))
    want = float(ONE.bottleneck_messages(m, pp, 1, kind))
    assert s == pytest.approx(want, abs=0.02)
    # the estimate of the uneven stages charges the real slowest rank's path
    # (``estimate.stage_correction.messages_shift``), not the even plan's
    assert e == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("pp,m", [(2, 8), (3, 8), (4, 8), (4, 16), (8, 16)])
def test_estimate_charges_the_slowest_ranks_path(pp, m):
    """The even split: with a 128K vocabulary the last rank bounds the steady state and both
    the estimate and the simulation expose ``m + 2p − 3`` messages (the estimate charged
    ``2·(m + p − 1)`` before §5.21); with a 1K vocabulary at 10 and 3 GB/s (a message of
    1-3 ms against a micro-batch's 5-10 ms per stage) the two messages per micro-batch of a
    middle rank outweigh the end ranks' LM head and embedding: ``2m + 2p − 5``."""
    e, s = counts("1f1b", 1, pp, m, model=BIG_VOCAB)
    assert e == pytest.approx(m + 2 * pp - 3, abs=1e-6)
    assert s == pytest.approx(m + 2 * pp - 3, abs=1e-6)
    e, s = counts("1f1b", 1, pp, m, bandwidths=(10e9, 3e9))
    want = float(ONE.exposed_messages(m, pp, 1))
    assert e == pytest.approx(want, abs=1e-6)
    assert s == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("pp,m", [(3, 8), (4, 8), (4, 16), (8, 8), (8, 16)])
@pytest.mark.parametrize("bw", [300e9, 30e9, 3e9])
def test_estimate_agrees_with_contention_free_simulation(pp, m, bw):
    """The even split (end ranks slower by their embedding and LM head than a middle rank by
    less than a message at 30 GB/s): the estimate within 0.1 % of the contention-free
    simulation (0.06 % at most; 0.05-2.5 % above it before §5.21)."""
    cl = dataclasses.replace(cluster_preset("dgx-a100", 1), gpus_per_node=pp,
                             intra_node_bandwidth=bw)
    job = make_job(MODEL, cl, parse_plan(f"tp=1,pp={pp},dp=1,mbs=1,gbs={m},schedule=1f1b"))
    e, s = estimate(job), simulate(job, network="contention-free")
    assert e.step_time_s == pytest.approx(s.step_time_s, rel=0.001)
