"""The SSD scan's kernel-by-kernel table (``strategies.cost.ssd_traffic``, docs/calibration.md
§5.160): its sums are the totals the cost model prices, each term §5.160 added is a closed form
at one rank of the Nemotron-H 56B (tp 8: 32 heads of 64, one group of state 256, chunk 128,
8192 tokens, 64 chunks), and that rank's Mamba-2 scan time moves by exactly their sum from
§5.149's rule."""
from __future__ import annotations

import pytest

from strategies.cost import mamba_kernels as mk
from strategies.cost import mamba_mixer as mx
from strategies.cost import ssd_traffic as st
from strategies.cost.hbm_rate import usable_hbm
from strategies.presets import model_preset
from topologies.gpus import get_gpu

# one rank of the 56B at tp 8: tokens, chunks, per-token sizes X, BC, H (bytes), a chunk's
# fp32 states, the conv's channels
T, C = 8192, 64
X, BC, HU, S_CHUNK, CONV = 2 * 32 * 64, 2 * 256, 4 * 32, 4 * 32 * 256 * 64, 20480 // 8


def test_kernel_sums_are_the_priced_totals():
    assert st.traffic() == (5, 4, 2, 6.5, 3)
    assert st.traffic(gate=False) == (3, 4, 2, 6.5, 3)
    assert st.traffic(backward=True) == (17, 17, 6, 21.5, 8.5)
    assert mx.SSD_TRAFFIC == {False: st.traffic(), True: st.traffic(backward=True)}
    assert st.flop_multiples() == (2, 2, 4, 2)           # the §5.146 closed forms
    assert st.flop_multiples(backward=True) == (6, 6, 10, 4)
    assert len(st.SSD_FWD_KERNELS) == 5 and len(st.SSD_BWD_KERNELS) == 15
    assert st.eager_per_head() == 80 and st.eager_per_head(st.BWD_EAGER_NEW) == 28


def test_each_new_term_closed_form():
    """Forward: the state passing writes 16-bit states, read by the chunk scan: half a chunk's
    fp32 states twice fewer. Backward: the two C·Bᵀ backwards read the fp32 residual (one BC
    more each), the cumsum backward moves 12 bytes a head (two H fewer); 28 bytes a head and
    token of zero-fills and eager sums; one more pass of the conv's channels."""
    m = model_preset("nemotron-h-56b")
    fwd_549 = T * (5 * X + 4 * BC + 2 * 512 + 6.5 * HU) + C * 4 * S_CHUNK
    assert mx.ssd_bytes(m, 1, 8) - fwd_549 == pytest.approx(-C * S_CHUNK, rel=1e-12)
    bwd_549 = T * (17 * X + 15 * BC + 6 * 512 + 23.5 * HU) + C * 8.5 * S_CHUNK
    assert mx.ssd_bytes(m, 1, 8, backward=True) - bwd_549 == pytest.approx(
        T * (2 * BC - 2 * HU), rel=1e-12)
    assert mx.conv_recompute_bytes(m, 1, 8) == pytest.approx(T * 2 * CONV, rel=1e-12)
    eager_549 = T * (18 * 2 * 256 + 16 * 128 + 52 * 32)
    assert mx.ssd_eager_bytes_bwd(m, 1, 8, 1, 132) - eager_549 == pytest.approx(
        T * (28 * 32 + 2 * CONV), rel=1e-12)


def _factor_549(g) -> float:
    """§5.149's factor at the 56B rank's grid (15.5 programs per SM, below the first point:
    held there): the first vllm#27299 point over its roofline with the states counted fp32
    both ways (4 S a chunk's token, one S more than now)."""
    H, P, G, N, Q = mk.BENCH_SHAPE
    T1, rate = mk.SSD_FWD_POINTS[0]
    bytes_549 = float(mx.shape_bytes(T1, 1, H, G, P, N, Q, gate=False)) \
        + (T1 / Q) * 4 * H * N * P
    return (T1 / rate) / (bytes_549 / usable_hbm(g))


def test_recalibrated_factor_closed_form():
    """The factor is the measured time over the roofline; the roofline at the first point loses
    a chunk's fp32 states per chunk, so the factor grows by their ratio."""
    g = get_gpu("H100-SXM5-80GB")
    H, P, G, N, Q = mk.BENCH_SHAPE
    T1 = mk.SSD_FWD_POINTS[0][0]
    now = float(mx.shape_bytes(T1, 1, H, G, P, N, Q, gate=False))
    f = float(mk.scan_factor(T, 1, 32, 128, g))
    assert f == pytest.approx(_factor_549(g) * (now + (T1 / Q) * 4 * H * N * P) / now,
                              rel=1e-12)


def test_rank_scan_time_moves_by_the_sum_of_the_new_terms():
    """The 56B rank's forward and backward scan seconds (H100, usable HBM) against §5.149's
    (both HBM-bound): the difference is the forward's states at the new factor, the old
    rooflines times the factor's change, the backward table's change at the new factor, the
    new eager bytes and the conv pass at the HBM rate."""
    m, g = model_preset("nemotron-h-56b"), get_gpu("H100-SXM5-80GB")
    hbm = usable_hbm(g)
    f_new, f_old = float(mk.scan_factor(T, 1, 32, 128, g)), _factor_549(g)
    r_fwd_old = (T * (5 * X + 4 * BC + 2 * 512 + 6.5 * HU) + C * 4 * S_CHUNK) / hbm
    r_bwd_old = (T * (17 * X + 15 * BC + 6 * 512 + 23.5 * HU) + C * 8.5 * S_CHUNK) / hbm
    flop = g.peak("bf16") * g.attention_efficiency
    assert r_fwd_old > mx.ssd_flops(m, 1, 8) / flop
    assert r_bwd_old > mx.ssd_flops(m, 1, 8, backward=True) / flop
    old = r_fwd_old * f_old + r_bwd_old * f_old + T * (18 * 2 * 256 + 16 * 128 + 52 * 32) / hbm
    new = sum(float(mx.scan_time(m, 1, 8, 1, g, hbm, bw)) for bw in (False, True))
    terms = (-C * S_CHUNK / hbm * f_new,                     # forward states in 16 bits
             (r_fwd_old + r_bwd_old) * (f_new - f_old),      # the factor recalibrated
             T * (2 * BC - 2 * HU) / hbm * f_new,            # backward table
             T * 28 * 32 / hbm,                              # zero-fills, eager sums
             T * 2 * CONV / hbm)                             # the conv's recomputation
    assert new - old == pytest.approx(sum(terms), rel=1e-12)
    assert new > old
