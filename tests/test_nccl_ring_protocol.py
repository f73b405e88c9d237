"""experiments/nccl_ring_protocol.py: NCCL's ring latency per protocol (tuning.cc v2.27.7-1)
in closed form, the protocol its model runs, and the public small-message measurements
against the presets' per-hop latencies (docs/calibration.md §5.229)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "experiments"))

import nccl_ring_protocol as rp  # noqa: E402
from topologies.cluster.preset_table import INTER_LATENCY_S, INTRA_LATENCY_S  # noqa: E402


def test_ring_latency_closed_forms():
    # 256 ranks over 32 nodes: 224 NVLink steps and 31 network steps a pass
    assert rp.ring_latency_us("reducescatter", "LL128", 256, 32) == pytest.approx(
        14.0 + 224 * 1.9 + 31 * 4.0, abs=1e-9)
    assert rp.ring_latency_us("reducescatter", "Simple", 256, 32) == pytest.approx(
        8.4 + 224 * 3.4 + 31 * 14.0, abs=1e-9)
    # LL's NVLink step is raised to the network overhead (1 us) across nodes, not on one node
    assert rp.ring_latency_us("allreduce", "LL", 48, 6) == pytest.approx(
        6.6 + (94 - 10) * 1.0 + 10 * 2.7, abs=1e-9)
    assert rp.ring_latency_us("allreduce", "LL", 8, 1) == pytest.approx(6.6 + 14 * 0.6, abs=1e-9)
    # one GPU per node: the tree's network latency (2.27)
    assert rp.ring_latency_us("allreduce", "LL", 2, 2) == pytest.approx(6.6 + 2 * 5.0, abs=1e-9)


def test_ring_time_is_latency_plus_bytes_over_algbw():
    S, n = 2.0 ** 28, 48
    t = rp.ring_time_us("reducescatter", "LL128", S, n, 6, 360.0, 16)
    bus = min(0.92 * 360.0, 16 * 36.7)
    assert t == pytest.approx(rp.ring_latency_us("reducescatter", "LL128", n, 6)
                              + S / (1000 * bus * n / (n - 1)), rel=1e-12)


@pytest.mark.parametrize("n,nodes,arch", [(256, 32, "blackwell"), (48, 6, "hopper"),
                                          (32, 4, "blackwell")])
def test_latency_bound_buckets_run_ll128_near_the_presets(n, nodes, arch):
    """16-256 MiB reduce-scatters over tens of ranks across nodes: NCCL's model runs LL128,
    whose modelled latency is within 12 % of the presets' (Simple's is about twice)."""
    for S in (2 ** 24, 2 ** 26, 2 ** 28):
        assert rp.choice("reducescatter", S, n, nodes, 360.0, 16, arch) == "LL128"
    ll128 = rp.ring_latency_us("reducescatter", "LL128", n, nodes)
    simple = rp.ring_latency_us("reducescatter", "Simple", n, nodes)
    preset = rp.preset_latency_us("reducescatter", n, nodes)
    assert abs(ll128 / preset - 1) < 0.12
    assert simple / preset > 1.9


def test_measured_ring_step_is_the_presets_nvlink_hop():
    """nccl-tests#123 (DGX A100, one channel): ~2 us a step and ~5.6 us a call; NCCL's LL
    model has 0.6 us a step."""
    a, b = rp.slope_intercept([(2 * (n - 1), us) for src, _, n, _, _, us in rp.MEASURED
                               if src == "NVIDIA/nccl-tests#123"])
    assert b == pytest.approx(INTRA_LATENCY_S * 1e6, rel=0.05)
    assert 4.0 < a < 7.0
    assert b > 3 * rp.NVLINK_LAT_US["LL"]


def test_presets_within_the_measured_spread_across_nodes():
    """Across nodes the presets (no per-call term) sit at 0.5-1.0 of the measured small
    all-reduce / all-gather; NCCL's LL model at 0.4-0.8."""
    for src, _, n, nodes, kind, us in rp.MEASURED:
        if nodes > 1:
            assert 0.45 < rp.preset_latency_us(kind, n, nodes) / us < 1.05
    assert INTER_LATENCY_S > INTRA_LATENCY_S


def test_printout_is_deterministic(capsys):
    rp.main()
    one = capsys.readouterr().out
    rp.main()
    assert capsys.readouterr().out == one
    assert "| UF B200 x 256" in one and "LL128 | 563.6 | 603.0 |" in one
