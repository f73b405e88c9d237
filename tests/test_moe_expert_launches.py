"""``experiments/moe_expert_launches.py`` (docs/calibration.md §5.29): Transformer Engine's
``GroupedLinear`` launches per local expert, the host time per launch the published MoE
rows would need, and the x86/Grace host pairs that bound the host-sensitive part of the
miss."""
from __future__ import annotations

import pytest

from experiments import moe_expert_launches as mel
from strategies.cost.moe_bytes import EXPERT_BIAS_KERNELS


def test_launch_counts_by_precision():
    """Per local expert, MoE layer and micro-batch: fc1 + fc2, forward GEMMs (+ one
    quantise per split), backward dgrad + wgrad (+ the gradient's quantise); current
    scaling's quantise is three kernels (amax, scale, cast)."""
    gemms = mel.GEMMS_PER_EXPERT
    assert mel.launches_per_expert("bf16") == gemms == 6
    assert mel.launches_per_expert("mxfp8") == gemms + 4 == 10
    assert mel.launches_per_expert("fp8-blockwise") == gemms + 4
    assert mel.launches_per_expert("fp8") == gemms + 3 * 4 == 18
    # the per-expert output bias path (gpt-oss) rides on top, read from counts
    assert mel.launches_per_expert("bf16", bias=True) == 6 + sum(EXPERT_BIAS_KERNELS)


def test_unknown_precision_is_named():
    with pytest.raises(ValueError, match="dtype: 'nvfp4'"):
        mel.launches_per_expert("nvfp4")


def test_host_classes_and_ratio():
    assert mel.host_cpu("GB200") == mel.host_cpu("GB300") == "grace"
    for gpu in ("B200-SXM-180GB", "B300-SXM-288GB", "H100-SXM5-80GB"):
        assert mel.host_cpu(gpu) == "x86"
    assert mel.GRACE_HOST_RATIO == pytest.approx(37.08 / 13.48, rel=1e-12)


def test_rows_closed_form_and_floor_agreement():
    """Each row's µs per launch is its implied (missed) ms over local experts x launches,
    and its implied time is ``moe_expert_floor``'s for the same run."""
    from experiments.moe_expert_floor import floor_rows
    floor = {r[0]: r for r in floor_rows()}
    rows = mel.launch_rows()
    assert rows and all(r[5] >= mel.MIN_LOCAL for r in rows)
    for (rid, gpu, cpu, d, _mbs, local, n, implied, missed, ipl, mpl, torch_us) in rows:
        assert n == mel.launches_per_expert(d, rid.split("_")[1].startswith("gptoss"))
        assert ipl == pytest.approx(1e3 * implied / (local * n), rel=1e-12)
        assert mpl == pytest.approx(1e3 * missed / (local * n), rel=1e-12)
        assert torch_us == pytest.approx(1e6 * mel.TORCH_LINEAR_HOST_S[cpu], rel=1e-12)
        assert cpu == mel.host_cpu(gpu)
        assert implied == pytest.approx(floor[rid][8], rel=1e-12)
        assert local == floor[rid][5]
    assert rows == mel.launch_rows()                       # deterministic


def test_host_pairs_bound():
    """Pairs differ in the host CPU only; the host-sensitive part follows
    ``(M_grace - M_x86)/(r - 1)``; and the finding: no pair's miss grows with the host's
    measured slowness (Grace/x86 miss ratio below the host-time ratio)."""
    pairs = mel.host_pairs()
    assert pairs
    for a, g, mx, mg, h, share, _ga, _gg in pairs:
        ra, rg = mel._residuals()[a], mel._residuals()[g]
        assert mel.host_cpu(ra[0][1]) == "x86" and mel.host_cpu(rg[0][1]) == "grace"
        assert mel._key(ra[1], ra[2]) == mel._key(rg[1], rg[2])
        assert (mx, mg) == (ra[0][7], rg[0][7])
        assert h == pytest.approx(max(0.0, (mg - mx) / (mel.GRACE_HOST_RATIO - 1)),
                                  rel=1e-12)
        assert share == pytest.approx(h / mx, rel=1e-12)
        assert mg / mx < mel.GRACE_HOST_RATIO
    # a larger host ratio can only shrink the bound
    for p, q in zip(pairs, mel.host_pairs(ratio=2 * mel.GRACE_HOST_RATIO)):
        assert q[4] <= p[4]
