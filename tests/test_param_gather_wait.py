"""The one-ahead dispatch rule of a stage's parameter gathers at its first forward
(``stacks.param_gather_wait``, docs/calibration.md §5.194): closed forms, and the estimate's
fill term against the simulator's ``FillGathers`` run."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import strategies.estimate.terms.grad_reduce as grad_reduce_module
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.simulate import simulate
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.stacks.param_gather_wait import gather_wait
from topologies.cluster import cluster_preset


def test_three_buckets_one_ahead():
    """a = (2, 1, 3) ms, f = (0.5, 2) ms: bucket 0 whole (2), bucket 1 dispatched at bucket
    0's wait, 1 ms long under 0.5 ms of forward (0.5), bucket 2 3 ms under 2 ms (1):
    a_0 + max(0, a_1 - f_0) + max(0, a_2 - f_1) = 3.5 ms."""
    got = gather_wait([2e-3, 1e-3, 3e-3], [0.5e-3, 2e-3])
    assert abs(float(got) - 3.5e-3) <= 1e-12


def test_early_dispatch_and_arrays():
    """The simulator's layer-granular hook (``early``): bucket 2 dispatched at point 0, not
    when point 1 is reached (3.5 ms), so it ends at 3 + 3 = 6 ms, not 6.5: exposed 2 + 2.5
    = 4.5 ms, not 5.0; an empty point (0 s) neither waits nor moves the dispatch; arrays
    over plans broadcast."""
    a, f = [2e-3, 1e-3, 3e-3], [1.5e-3, 0.0]
    assert abs(float(gather_wait(a, f, [False, True, False])) - 4.5e-3) <= 1e-12
    assert abs(float(gather_wait(a, f)) - 5.0e-3) <= 1e-12
    assert abs(float(gather_wait([2e-3, 0.0, 1e-3], [0.5e-3, 0.5e-3])) - 2e-3) <= 1e-12
    both = gather_wait([np.array([2e-3, 2e-3]), np.array([1e-3, 3e-3])], [np.array([0.5e-3,
                                                                                   1e-3])])
    assert np.allclose(both, [2.5e-3, 4e-3], rtol=0, atol=1e-12)


def _sim_fill(records, rank: int) -> float:
    """The seconds rank ``rank``'s first forward waits: its end less its receive's end and
    its compute."""
    own = [r for r in records if r.rank == rank]
    comp = [r for r in own if r.stream == "compute" and r.label == "F0.c0"]
    recv = [r.end for r in own if r.label == "recv F0.c0"] or [0.0]
    return max(r.end for r in comp) - max(recv) - sum(r.end - r.start for r in comp)


def test_estimate_fill_is_the_simulated_wait(monkeypatch):
    """Llama3-8B/8L dgx-h100:2 pp 2 GPipe ZeRO-2 (every layer's attention and MLP a bucket
    of their own): rank 0 waits 2.568 ms for the embedding's bucket, 0.195 ms for layer 0's
    attention and 0.870 ms for the last layer's MLP (rank 8: 0.218, 0.870 and the LM head's
    0.767 ms), each 2.56 µs more since every call pays its own latency (§5.233: rank 0's
    3.6324 → 3.6401 ms, three calls); the estimate's fill term per stage
    (``fill_gathers.fill_gather_wait``) is the simulated wait to 1e-9 s."""
    seen = []
    orig = grad_reduce_module.fill_gather_wait

    def spy(*args):
        out = orig(*args)
        seen.append(float(np.ravel(out)[0]))
        return out
    monkeypatch.setattr(grad_reduce_module, "fill_gather_wait", spy)
    model = replace(model_preset("llama3-8b"), num_layers=8, seq_length=2048)
    job = make_job(model, cluster_preset("dgx-h100", 2),
                   parse_plan("pp=2,zero=2,gbs=32,schedule=gpipe,overlap_grad_reduce=false"))
    estimate(job)
    records = simulate(job, network="contention-free").records
    first, last = _sim_fill(records, 0), _sim_fill(records, 8)
    assert abs(first - (3.6324e-3 + 3 * CALL)) < 1e-6
    assert abs(seen[0] - first) <= 1e-9 and abs(seen[2] - last) <= 1e-9, (seen, first, last)
