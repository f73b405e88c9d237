"""``experiments/eager_host_sources.py`` (docs/calibration.md §5.181): what Transformer
Engine's unfused ``GroupedLinear`` runs per local expert, the public measurements of it, and
the finding that none prices the eager rows' extra time per local expert."""
from __future__ import annotations

import pytest

from experiments import eager_host_sources as ehs
from experiments.moe_expert_launches import GRACE_HOST_RATIO, LAUNCHES
from strategies.cost import moe_time


@pytest.mark.parametrize("tag", ["v2.9", "v2.14", "v2.16"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 16, 64, 128])
def test_counts_closed_form(tag, k):
    """Per-expert terms grow as k; the fork/join of the 4-stream GEMM is per call: it stops
    growing at 4 local experts."""
    c = ehs.per_layer_counts(k, "mxfp8", tag)
    assert c["gemms"] == (2 * k, 4 * k)
    assert c["quantise"] == (2 * k, 2 * k)
    assert sum(c["gemms"]) + sum(c["quantise"]) == k * sum(LAUNCHES["mxfp8"])
    assert c["py_ops"] == (16 * k, 10 * k)
    s = min(4, k)
    assert c["cross_stream_waits"] == (4 * s, 8 * s)
    assert c["event_records"] == (2 * (1 + s), 4 * (1 + s))
    assert c["allocs"] == (0, 2 * k * (tag == "v2.9"))


def test_bf16_has_no_quantise_and_gemms_match_launch_table():
    for k in (4, 16):
        c = ehs.per_layer_counts(k, "bf16")
        assert c["quantise"] == (0, 0)
        assert sum(c["gemms"]) == k * sum(LAUNCHES["bf16"])


def test_serialisations_do_not_scale_with_local_experts():
    """16 and 64 local experts run the same cross-stream waits: no per-expert GPU-side
    serialisation exists to carry a per-expert cost."""
    a, b = ehs.per_layer_counts(16), ehs.per_layer_counts(64)
    assert a["cross_stream_waits"] == b["cross_stream_waits"]
    assert a["event_records"] == b["event_records"]
    assert b["gemms"] == tuple(4 * x for x in a["gemms"])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="k \\(local experts\\): 0"):
        ehs.per_layer_counts(0)
    with pytest.raises(ValueError, match="tag: 'v3.0'"):
        ehs.per_layer_counts(4, tag="v3.0")
    with pytest.raises(ValueError, match="dtype: 'nvfp4'"):
        ehs.per_layer_counts(4, "nvfp4")


def test_source_figures_closed_form():
    rows = {r[0]: r for r in ehs.source_rows()}
    assert rows["TE #2897"][4] == pytest.approx(1e6 * 3.3e-3 / 64, rel=1e-12)
    # the fused figure is the model's EXPERT_HOST_S, per local expert
    assert rows["TE #2897"][4] == pytest.approx(1e6 * sum(moe_time.EXPERT_HOST_S), rel=1e-12)
    assert rows["TE #3134"][4] == pytest.approx(6 * (267 - 69) / 8, rel=1e-12)
    assert rows["TE #2939"][4] == pytest.approx((966.614 - 952.678) / 4, rel=1e-12)
    assert rows["TE #2053"][4] is None and rows["TE #1499"][4] is None


def test_finding_no_source_is_a_stated_host_measurement_of_the_unfused_path():
    """The one source timing TE's per-expert cuBLASLt loop (#3134) states no host; the one
    per-expert host figure on a stated host (#2897) is the fused op the rows did not run."""
    for name, _what, host, _gpu, us, applies in ehs.source_rows():
        stated = host != "not stated"
        of_path = applies.startswith("partly") or applies.startswith("yes")
        assert not (stated and of_path and us is not None), name


@pytest.mark.slow
def test_finding_rows_grace_ratio_below_host_ratio():
    """The eager rows' extra per local expert is 1.1-1.4x larger on Grace than on x86, half
    the 2.75x a host path shows (TE #2053): not host time alone."""
    rows = ehs.pair_extra()
    assert {r[1] for r in rows} == {"grace", "x86"}
    r = ehs.grace_x86_ratio(rows)
    assert 1.0 < r < 0.6 * GRACE_HOST_RATIO
    with pytest.raises(ValueError, match="grace and an x86"):
        ehs.grace_x86_ratio([r0 for r0 in rows if r0[1] == "grace"])


def test_gemm_host_whatif_restores():
    kept = moe_time.EXPERT_HOST_S
    with ehs._gemm_host(1e-6):
        assert moe_time.EXPERT_HOST_S == pytest.approx((kept[0] + 2e-6, kept[1] + 4e-6),
                                                       rel=1e-12)
    assert moe_time.EXPERT_HOST_S == kept
