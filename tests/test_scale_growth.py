"""Steps that grow with the GPU count (docs/calibration.md §5.26): the last gradient bucket
is a call of its own (the ring's whole latency exposed), and the slowest-of-N closed forms
of ``experiments/scale_growth.py``."""
import math
import os
import sys
from dataclasses import replace

import pytest

from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))
from scale_growth import expected_max_normal, implied_sigma  # noqa: E402

from tests.norm_barrier_checks import barrier_s

SQRT_PI = math.sqrt(math.pi)
A = math.asin(1.0 / 3.0)


@pytest.mark.parametrize("n, exact", [
    (1, 0.0), (2, 1.0 / SQRT_PI), (3, 1.5 / SQRT_PI),
    (4, 1.5 / SQRT_PI * (1.0 + 2.0 / math.pi * A)),
    (5, 1.25 / SQRT_PI * (1.0 + 6.0 / math.pi * A))])
def test_expected_max_of_normals_is_its_closed_form(n, exact):
    """E[max of n standard normals] for n <= 5 has a closed form (the quadrature's to 1e-12)."""
    assert expected_max_normal(n) == pytest.approx(exact, abs=1e-12)


def test_expected_max_grows_like_sqrt_2_ln_n_and_is_deterministic():
    """Increasing in n, below sqrt(2 ln n), and the ratio tends to 1 (slowly); same input, same
    bits."""
    vals = [expected_max_normal(n) for n in (16, 128, 1024, 8192)]
    assert vals == sorted(vals)
    for n, e in zip((16, 128, 1024, 8192), vals):
        assert 0.7 < e / math.sqrt(2.0 * math.log(n)) < 1.0
    assert expected_max_normal(2048) == expected_max_normal(2048)
    with pytest.raises(ValueError, match="n"):
        expected_max_normal(0)


@pytest.mark.parametrize("sigma", [0.0, 0.01, 0.05])
def test_implied_sigma_inverts_the_slowest_of_n_ratio(sigma):
    a, b = expected_max_normal(16), expected_max_normal(2048)
    ratio = (1.0 + sigma * b) / (1.0 + sigma * a)
    assert implied_sigma(ratio, 16, 2048) == pytest.approx(sigma, abs=1e-12)


#: the extra network hop latency the two latency tests add (seconds)
_HOP_D = 495e-6


def _latency_step_delta(plan: str) -> tuple[float, int, float]:
    """Compute-bound Llama-3-8B (16 layers, seq 8192) on 4 DGX H100 nodes: the estimate's
    step at the preset's inter-node hop latency and at ``_HOP_D`` more; returns (the step's
    growth in seconds, micro-batches, the gradient norm's all-reduce's growth, §5.202)."""
    m = replace(model_preset("llama3-8b"), num_layers=16, seq_length=8192)
    base = cluster_preset("dgx-h100", 4)
    steps, bars, mb = [], [], 0
    for lat in (base.inter_node_latency, base.inter_node_latency + _HOP_D):
        job = make_job(m, replace(base, inter_node_latency=lat), parse_plan(plan))
        e = estimate(job)
        assert e.breakdown_s["dp_comm"] < 0.1 * e.breakdown_s["compute"]   # compute-bound
        steps.append(e.step_time_s)
        bars.append(barrier_s(job))
        mb = e.num_microbatches
    return steps[1] - steps[0], mb, bars[1] - bars[0]


@pytest.mark.parametrize("zero, passes", [(0, 2), (1, 2)])
def test_last_bucket_pays_the_rings_whole_latency(zero, passes):
    """Compute-bound, overlapped data parallelism over 4 DGX H100 nodes (dp 16, 4 per node):
    the exposed reduction is the last bucket as a call of its own, so raising the network hop
    latency by d adds the flat ring's ``(nodes - 1)·d`` per pass to the step: the all-reduce's
    two passes (ZeRO-0), or the reduce-scatter's and the parameter all-gather's (the
    distributed optimizer). It used to add only the bucket's share of it (0.12 here)."""
    extra, _, bar = _latency_step_delta(f"tp=2,pp=1,mbs=1,gbs=16,zero={zero}")
    assert extra == pytest.approx(passes * (4 - 1) * _HOP_D + bar, rel=1e-9)


@pytest.mark.parametrize("gbs", [16, 32])
def test_zero3_pays_a_layer_calls_latency_per_microbatch(gbs):
    """Compute-bound ZeRO-3 over the same 4 nodes: each micro-batch exposes its first layer's
    gather and its last layer's reduce-scatter, a call each of one layer's parameters (FSDP's
    unit), so raising the hop latency by d adds ``mb·2·(nodes - 1)·d`` (it used to add
    ``1/layers`` of that)."""
    extra, mb, bar = _latency_step_delta(f"tp=2,pp=1,mbs=1,gbs={gbs},zero=3")
    assert extra == pytest.approx(mb * 2 * (4 - 1) * _HOP_D + bar, rel=1e-9)
