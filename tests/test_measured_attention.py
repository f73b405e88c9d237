"""A measured profile's fused attention is keyed by the kernel's grid, ``batch × heads``
(docs/calibration.md §5.128): on an H200 (docs/measurements/h200_2026-11-29/run2/probes.json)
cuDNN's rate at batch 2 × 4 heads is that of batch 1 × 8 heads, not of 4 heads."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import attention_counts, attention_time, measured
from strategies.framework import DEFAULT
from strategies.presets import model_preset
from topologies.gpu_profile import profile_from_mapping
from topologies.gpus import get_gpu

HEADS = (4, 8, 16, 32)
SEQS = (2048, 4096)


def _seconds(heads: int, seq: int) -> tuple[float, float]:
    """Arbitrary, distinct (fwd, bwd) seconds of each calibrate-shaped point."""
    return 1e-5 * heads ** 0.7 * (seq / 2048) ** 1.9, 3.1e-5 * heads ** 0.8 * (seq / 2048) ** 1.8


def _gpu(batches=(1,)):
    """An H200 carrying probes.json-shaped cuDNN points: ``batches`` × ``HEADS`` × ``SEQS``
    (calibrate's own sweep: batch 1), causal, head dim 128."""
    att = [{"kernel": "native", "batch": b, "heads": h, "seq": s, "head_dim": 128,
            "causal": True, "fwd_seconds": _seconds(b * h, s)[0] * (1 + 0.01 * b),
            "bwd_seconds": _seconds(b * h, s)[1] * (1 + 0.02 * b)}
           for b in batches for h in HEADS for s in SEQS]
    prof = profile_from_mapping({
        "schema": "paraplan-gpu-profile/1",
        "gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}],
        "attention": att})
    return replace(get_gpu("H200"), profile=prof)


def _rate(gpu) -> float:
    return gpu.peak("bf16") * gpu.flash_efficiency("native")


def _point_ratio(gpu, b: int, h: int, s: int) -> tuple[float, float]:
    """Measured over catalog seconds of the profile's point ``(b, h, s)``, forward and
    backward (the backward's catalog time is ``FLASH_BWD_FACTOR/FLASH_BWD_EFFICIENCY`` of the
    forward's)."""
    p = next(p for p in gpu.profile.attention_points("native")
             if (p.batch, p.heads, p.seq) == (b, h, s))
    cat = measured.attention_flops_fwd(b, h, s, 128, True) / _rate(gpu)
    k = attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY
    return p.fwd_seconds / cat, p.bwd_seconds / (k * cat)


def _ratios(gpu):
    k = attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY
    return measured.attention_ratios(gpu, "native", lambda f: f / _rate(gpu), k)


def test_batch_two_by_four_heads_reads_batch_one_by_eight():
    g = _gpu()
    fwd, bwd = _ratios(g)
    r8 = _point_ratio(g, 1, 8, 2048)
    assert fwd(2048, 2 * 4) == pytest.approx(r8[0], rel=1e-12)
    assert bwd(2048, 2 * 4) == pytest.approx(r8[1], rel=1e-12)
    r4 = _point_ratio(g, 1, 4, 2048)
    assert abs(r8[0] / r4[0] - 1) > 0.05       # the old key (heads 4) would differ
    # array form, and the nearest product in log (6 -> 8, 12 -> 16, 64 -> 32)
    want = [_point_ratio(g, 1, h, 4096)[0] for h in (4, 8, 8, 16, 16, 32, 32)]
    assert np.allclose(fwd(4096, np.array([4, 6, 8, 12, 16, 32, 64])), want, rtol=1e-12)


def test_same_product_points_are_averaged():
    """probes.json's own shape: batch 1, 2, 4 × heads; the points of one ``batch·heads`` and
    sequence share a ratio, their mean."""
    g = _gpu(batches=(1, 2, 4))
    fwd, _ = _ratios(g)
    pairs = [(1, 16), (2, 8), (4, 4)]
    want = np.mean([_point_ratio(g, b, h, 2048)[0] for b, h in pairs])
    assert fwd(2048, 16) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("b,tp,cp,seq", [(2, 8, 1, 2048), (2, 8, 2, 4096), (1, 4, 2, 4096),
                                         (4, 16, 1, 4096)])
def test_attention_time_keys_micro_batch_times_heads_per_gpu(b, tp, cp, seq):
    """The layer's fused kernel at micro-batch ``b``, ``32/tp`` heads per GPU and ``seq/cp``
    tokens a call: the catalog time times the ratio of the point ``(1, b·32/tp, seq/cp)``;
    context parallelism still reads its call's sequence."""
    g = _gpu()
    m = replace(model_preset("llama3-8b"), seq_length=seq)
    f, bw = attention_time.attention_time_fwd(m, b, tp, cp, True, g, fw=DEFAULT)
    cat = attention_counts.attn_core_flops_fwd(m, b, tp, cp, True) / _rate(g)
    rf, rb = _point_ratio(g, 1, b * m.num_attention_heads // tp, seq // cp)
    k = attention_time.FLASH_BWD_FACTOR / attention_time.FLASH_BWD_EFFICIENCY
    assert f == pytest.approx(cat * rf, rel=1e-12)
    assert bw == pytest.approx(k * cat * rb, rel=1e-12)


def test_attention_time_array_form():
    g = _gpu()
    m = model_preset("llama3-8b")   # 32 heads, seq 8192: cp 2, 4 give calls of 4096, 2048
    b, tp, cp = np.array([1, 2, 4, 2]), np.array([8, 8, 8, 4]), np.array([2, 4, 2, 4])
    f, bw = attention_time.attention_time_fwd(m, b, tp, cp, True, g, fw=DEFAULT)
    for i in range(4):
        fi, bi = attention_time.attention_time_fwd(m, int(b[i]), int(tp[i]), int(cp[i]), True, g,
                                                   fw=DEFAULT)
        assert f[i] == pytest.approx(fi, rel=1e-12) and bw[i] == pytest.approx(bi, rel=1e-12)
    cat = attention_counts.attn_core_flops_fwd(m, 2, 8, 4, True) / _rate(g)
    assert f[1] == pytest.approx(cat * _point_ratio(g, 1, 8, 2048)[0], rel=1e-12)


def test_outside_the_measured_sequences_the_catalog():
    g = _gpu()
    fwd, bwd = _ratios(g)
    assert fwd(8192, 8) == 1.0 and bwd(1024, np.array([8]))[0] == 1.0
