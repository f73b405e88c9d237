"""The SSD scan's measured rate (``strategies.cost.mamba_kernels``): the rule reproduces every
measured point, interpolates between them and holds the ends, and carries the grid through
the SM count."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.cost import mamba_kernels as mk
from strategies.cost.hbm_rate import usable_hbm
from topologies.gpus import get_gpu


def test_the_rule_reproduces_every_measured_point():
    """At each vllm#27299 point (H100, 128 heads of 64, 1 group of 128, chunk 256, no gate)
    the roofline times ``scan_factor`` is the measured time, tokens over tokens/s."""
    g = get_gpu(mk.BENCH_GPU)
    H, P, G, N, Q = mk.BENCH_SHAPE
    for T, rate in mk.SSD_FWD_POINTS:
        roof = mk.roofline_s(T, 1, H, G, P, N, Q, usable_hbm(g),
                             g.peak("bf16") * g.attention_efficiency, gate=False)
        assert float(roof * mk.scan_factor(T, 1, H, Q, g)) == pytest.approx(T / rate, rel=1e-12)


def test_points_are_hbm_bound_and_slower_than_the_roofline():
    for _, e in mk.efficiency_points():
        assert 0.3 < e < 1.0


def test_interpolation_between_and_held_outside():
    pts = mk.efficiency_points()
    (x0, e0), (x1, e1) = pts[0], pts[1]
    mid = np.sqrt(x0 * x1)                       # halfway in log programs
    assert float(mk.efficiency(mid)) == pytest.approx((e0 + e1) / 2, rel=1e-12)
    assert float(mk.efficiency(x0 / 10)) == e0
    assert float(mk.efficiency(pts[-1][0] * 10)) == pts[-1][1]
    assert mk.efficiency(np.array([x0, x1])).shape == (2,)


def test_grid_carries_through_the_sm_count():
    """Programs per SM: b·ceil(s/Q)·H/sms (a partial chunk whole)."""
    assert float(mk.programs_per_sm(8193, 2, 32, 128, 132)) == pytest.approx(
        2 * 65 * 32 / 132, rel=1e-12)
    b200 = get_gpu("b200")
    s, H, Q = 8192, 32, 128
    assert float(mk.scan_factor(s, 1, H, Q, b200)) == pytest.approx(
        1 / float(mk.efficiency(64 * H / b200.sm_count)), rel=1e-12)
