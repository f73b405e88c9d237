"""DeepSpeed's lock step (``TrainSchedule``): the pipeline messages on the critical path
(docs/calibration.md §5.28). Every exchange waits for the rank's previous pass (NCCL enqueues
a point-to-point call behind the caller's stream) and every send for its receiver, so a middle
rank blocks on four message times per micro-batch and an end rank on two
(``DeepSpeed1F1B.bottleneck_messages``): ``2m + 2p − 4`` the last, ``4m + 2p − 8`` a middle
one, ``2m + 2p − 4 + 2·min(p − 2, m − 2)`` the first, ``2m`` with two ranks."""
import dataclasses
import sys

import pytest

from simulator.program.ops import Compute, Recv
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.schedules import get_schedule
from tests.norm_barrier_checks import barrier_s
from tests.test_simulate import _balanced
from topologies.cluster import cluster_preset

sys.path.insert(0, "experiments")
from p2p_exchange_count import MODEL, counts, layers  # noqa: E402

DS = get_schedule("deepspeed-1f1b")
FIRST, MID, LAST = 0, 1, 2


def test_closed_forms():
    """The counts by kind of slowest rank; balanced stages expose a middle rank's; two ranks
    have no middle."""
    assert DS.messages_by_rank
    for pp in range(2, 12):
        for m in range(1, 40):
            n = [float(DS.bottleneck_messages(m, pp, 1, k)) for k in (FIRST, MID, LAST)]
            assert n[LAST] == 2 * m + 2 * pp - 4
            assert n[FIRST] == 2 * m + 2 * pp - 4 + 2 * max(0, min(pp - 2, m - 2))
            if pp == 2:
                assert n == [2 * m] * 3
                assert float(DS.exposed_messages(m, pp, 1)) == 2 * m
                continue
            assert n[MID] == (4 * m + 2 * pp - 8 if m >= 2 else 2 * pp - 2)
            assert float(DS.exposed_messages(m, pp, 1)) == max(n)


def _alone(pp: int, m: int, bw: float):
    cl = dataclasses.replace(cluster_preset("dgx-a100", 1), intra_node_bandwidth=bw,
                             gpus_per_node=pp)
    return make_job(MODEL, cl, parse_plan(
        f"tp=1,pp={pp},dp=1,mbs=1,gbs={m},schedule=deepspeed-1f1b"))


@pytest.mark.parametrize("pp,m", [(2, 8), (3, 8), (4, 1), (4, 4), (4, 16), (6, 2), (8, 16)])
@pytest.mark.parametrize("bw", [300e9, 3e9])
def test_balanced_step_is_the_closed_form(pp, m, bw):
    """Identical stages (no embedding, LM head, optimizer), a pipeline alone on NVLink: the
    simulated step is ``(m + p − 1)(t_F + t_B) + exposed_messages·t_p2p`` to 1e-12, at a
    message of 0.03 ms and of 3 ms."""
    job = _alone(pp, m, bw)
    costs = _balanced(job)
    step = simulate(job, network="contention-free", costs=costs).step_time_s
    L = job.model.num_layers // pp
    tau = float(cm.p2p_time(costs.p2p_bytes, job.cluster, 1))
    closed = ((m + pp - 1) * L * (costs.layer_fwd + costs.layer_bwd)
              + float(DS.exposed_messages(m, pp, 1)) * tau
              + barrier_s(job))   # the gradient norm's all-reduce over the pp ranks (§5.202)
    assert step == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("pp,m,kind", [
    (2, 8, FIRST), (2, 8, LAST), (3, 8, FIRST), (3, 16, MID), (3, 8, LAST), (4, 8, FIRST),
    (4, 16, MID), (4, 8, LAST), (6, 16, MID), (8, 16, FIRST), (8, 16, MID), (8, 16, LAST),
    (4, 2, MID), (8, 1, LAST), (8, 4, LAST)])
def test_simulated_count_is_the_closed_form(pp, m, kind):
    """One layer more on the first, a middle or the last rank: the simulated step grows by
    the closed form's message times per message time, and the estimate charges as many.
    Exact for the last rank, for ``m <= 2`` and for ``m >= 2p``; in between the heavy
    rank's extra layer does not decide the path (``experiments/p2p_exchange_count.py``)."""
    e, s = counts("deepspeed-1f1b", 1, pp, m, layers(pp, kind))
    want = float(DS.bottleneck_messages(m, pp, 1, kind))
    assert s == pytest.approx(want, abs=0.02)
    assert e == pytest.approx(want, abs=1e-6)


def test_receive_waits_for_the_previous_pass():
    """The compiler issues each receive of the lock step after the rank's previous compute
    (so a partner's blocking send cannot start under it); Megatron's eager exchanges are
    unchanged."""
    from simulator.program.compiler import compile_job
    for sched, want in (("deepspeed-1f1b", True), ("1f1b", False)):
        job = _alone(4, 4, 300e9)
        job = dataclasses.replace(job, plan=dataclasses.replace(job.plan, schedule=sched))
        prog = compile_job(job)[1]
        ops = {o.id: o for ops in prog.streams.values() for o in ops}
        recvs = [o for o in prog.streams["pp-comm"] if type(o) is Recv]
        after = [any(type(ops.get(d)) is Compute for d in o.deps) for o in recvs[1:]]
        assert all(after) if want else not any(after)
