"""experiments/gb300_fp8_terms.py (docs/calibration.md §5.173): the needed GEMM rate closes the
measured layer exactly, the per-token figures are the layer's over the tokens a rank holds, and
the step's terms other than compute are small on every GB300 fp8 row."""
import pytest

from experiments.gb300_fp8_terms import (LAYER_TERMS, ROWS, STEP_TERMS, needed_gemm_rate,
                                         rank_tokens, row_terms)
from experiments.llama405_blackwell import cases, layer_parts, measured_layer


@pytest.fixture(scope="module")
def cs():
    return cases()


def test_needed_rate_closes_the_measured_layer(cs):
    for rid in ROWS:
        c = cs[rid]
        p = layer_parts(c.job)
        meas = measured_layer(c)[2]
        rate = needed_gemm_rate(c.job, meas)
        assert p["gemm_flops"] / rate + (p["total"] - p["gemm"]) == pytest.approx(meas, rel=1e-12)


def test_rank_tokens_and_per_token_sum(cs):
    c = cs["mbridge260401_llama31405b_gb300_256_fp8"]
    assert rank_tokens(c.job) == 8192.0                         # mbs 1, seq 8192, cp 1
    assert rank_tokens(cs["dgxc2505_llama31_405b_gb200_256_fp8"].job) == 4096.0   # cp 2
    r = row_terms(c)
    p = layer_parts(c.job)
    # the kernel classes (with the fused accumulation's 0) sum to the layer's model time
    assert sum(r["us_" + k] for k in LAYER_TERMS) == pytest.approx(
        r["us_model"] - 1e6 * p["accumulation"] / 8192.0, rel=1e-12)


def test_gb300_fp8_excess_is_compute(cs):
    for rid in ROWS[:3]:                                        # the GB300 fp8 rows
        r = row_terms(cs[rid])
        assert r["error"] > 0.15                                # too slow, as found
        assert sum(r[k] for k in STEP_TERMS) < 0.035            # no non-compute term carries it
        assert r["needed_over_harness"] > 0.94                  # GEMMs at the harness's rate
    dg = row_terms(cs["dgxc2505_llama31_405b_gb200_256_fp8"])
    assert abs(dg["error"]) < 0.05 and dg["needed_over_harness"] < 0.75


def test_what_if_restores_the_clock(cs):
    from experiments.gb300_fp8_terms import what_if_no_overlap_clock
    from strategies.cost import overlap_clock
    c = cs["mbridge260401_llama31405b_gb300_256_fp8"]
    before = row_terms(c)["error"]
    assert what_if_no_overlap_clock(c) < before - 0.05      # the clock is a real term here
    assert overlap_clock.OVERLAP_CLOCK_RATIO == 0.88
    assert row_terms(c)["error"] == before
