"""Each gradient bucket one collective call (docs/calibration.md §5.227): the estimate's
count of a one-chunk rank's buckets is the simulator's (``bucket_cut.chunk_cut(...,
calls=True)`` against ``greedy_buckets``), ``DpCalls.bucket_calls`` is the sum of the
simulator's per-bucket calls in closed form (a ring between nodes: bytes once, the per-call
latency once a bucket), and the estimate's overlapped reduction of a toy one-micro-batch plan
queues those calls under its backward."""
from __future__ import annotations

from itertools import product
from types import SimpleNamespace as NS

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost.bucket_cut import chunk_cut, chunk_items, greedy_buckets
from strategies.estimate.terms.dp_calls import DpCalls
from topologies.cluster.presets import cluster_preset


def test_bucket_count_equals_the_simulators_list_row_by_row():
    rows = list(product((40.0, 128.0, 1e9), (0.0, 70.0), (30.0, 109.0), (0.25, 0.8),
                        (1, 2, 5), (0.0, 260.0)))
    cols = [np.array(c) for c in zip(*rows)]
    size, head, layer, share, n, tail = cols
    _, _, calls = chunk_cut(size, head, layer, share * layer, n, tail, calls=True)
    for r, (s, h, lp, a, k, t) in enumerate(rows):
        items = list(chunk_items(h, [(lp, a * lp)] * k, t))
        assert calls[r] == len(greedy_buckets(items, s)), rows[r]
    # (a bucket of 1e9 holds the whole chunk: one call)
    assert set(calls[size == 1e9]) == {1.0}


# a toy rank: 8 GPUs a node, dp 16 over two nodes (tp 1), 1e9 parameters in 4 bytes
CL = cluster_preset("dgx-h100", 2)
P_RANK, GB = 1.0e9, 4.0


def _calls() -> DpCalls:
    return DpCalls(pr_k=(P_RANK,) * 3, pe_k=(0.0,) * 3, gb=GB, tp=1, cp=1, dp=16, ep=1,
                   etp=None, dps=None, cl=CL, own_lane=False)


def _one(kind: str, params: float) -> float:
    return float(cm.dp_collective_time(kind, GB, params, 0.0, 1, 1, 16, 1, None, CL))


@pytest.mark.parametrize("kind", ["reduce_scatter", "allgather", "allreduce"])
@pytest.mark.parametrize("buckets", [(0.25e9, 0.25e9, 0.3e9, 0.2e9), (1.0e9,),
                                     (0.6e9, 0.4e9)])
def test_bucket_calls_is_the_sum_of_the_calls(kind, buckets):
    """Between nodes a call is affine in its bytes, so the closed form (equal shares but the
    last) is the sum over the simulator's buckets, whatever their sizes, to 1e-9; and it
    exceeds the one whole call by (calls - 1) per-call latencies, which is > 0."""
    last = buckets[-1] / P_RANK
    got = float(_calls().bucket_calls(kind, GB, 0, last, float(len(buckets))))
    want = sum(_one(kind, b) for b in buckets)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    whole = _one(kind, P_RANK)
    lat = 2 * _one(kind, P_RANK / 2) - whole         # one call's latency (affine)
    assert lat > 0
    assert got - whole == pytest.approx((len(buckets) - 1) * lat, rel=1e-9, abs=1e-12)


def test_one_micro_batch_reduction_queues_the_calls():
    """A toy one-micro-batch plan whose reduce-scatter outlasts its backward: the exposed
    reduction is the calls' sum less the window (``lanes_exposed``), per-call latencies
    included; the whole call alone would expose less."""
    from strategies.estimate.terms.dp_exposure import lanes_exposed
    calls = _calls()
    n_b, last = 5.0, 0.1
    t_q = float(calls.bucket_calls("reduce_scatter", GB, 0, last, n_b))
    window = 0.5 * t_q
    edge = _one("reduce_scatter", last * P_RANK)
    got = float(lanes_exposed(t_q, 0.0, window, edge, False))
    assert got == pytest.approx(t_q - window, rel=1e-9)
    assert got > float(lanes_exposed(_one("reduce_scatter", P_RANK), 0.0, window, edge,
                                     False))


def test_estimate_reads_the_calls_for_a_one_chunk_rank():
    """``BucketWindows.calls_k``: rank 0 of a one-micro-batch pp-1 plan is cut into the
    buckets of its chunk (more than one at the stack's default size, the count of its own
    cut), and its overlapped reduction is then priced no lower than with the one call."""
    import strategies.estimate.analytic as an
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    seen = []
    orig = an.bucket_windows

    def spy(*a, **k):
        w = orig(*a, **k)
        seen.append(float(np.atleast_1d(w.calls_k[0])[0]))
        return w
    an.bucket_windows = spy
    try:
        job = make_job(model_preset("llama3-8b"), CL, parse_plan("tp=1,dp=16,mbs=1,gbs=16,zero=1"))
        estimate(job)
    finally:
        an.bucket_windows = orig
    assert seen and seen[0] > 1
