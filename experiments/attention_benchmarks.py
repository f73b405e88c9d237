"""Fused attention kernel speed per GPU and shape: public kernel benchmarks against the cost
model (``GPU.attention_efficiency``, ``attention_time.attention_time_fwd``; docs/calibration.md
§5.65).

Every figure below is transcribed by hand from the public source named with it (nothing is read
from a data file). FLOPs follow the benchmarks' own convention, which both sources share:
forward ``2·b·a·s²·(d_qk + d_v)``, halved under a causal mask (exactly ``s²/2``, not the
kernel's diagonal blocks), backward 2.5x the forward (recomputed QK^T). The fraction of peak is
that TFLOP/s over the chip's dense bf16 peak (``topologies.gpus``). The model column is the
same convention over ``attention_time.attention_time_fwd``'s seconds for the shape (batch ``b``,
``a`` query heads, ``tp = cp = 1``), which charges the causal kernel's 128x128 blocks
(``attention_counts.causal_fraction``) at ``flash_efficiency`` of the peak times the
kernel's grid factor at the shape (``attention_grid``, docs/calibration.md §5.130), the backward
``FLASH_BWD_FACTOR / FLASH_BWD_EFFICIENCY`` times the forward, plus the exposed exponentials
where the SFU rate differs (GB300). A full (no-mask) shape is the model's causal time scaled
by the full square over the causal blocks (``model_seconds``).

    python experiments/attention_benchmarks.py [--markdown]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics as st
import sys
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_counts, attention_time  # noqa: E402
from strategies.framework import DEFAULT  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

_CF = "github.com/NVIDIA/cudnn-frontend @3929da2, benchmark/sdpa_benchmark_training/results/"
SOURCES = {
    "cudnn919-h200": _CF + "h200_919_only_cudnn/llama3.1_20260227_034703.csv (cuDNN backend "
                     "9.19.1, frontend 1.19.0, H200, 2026-02-27)",
    "cudnn922-gb200": _CF + "{llama3.1,dsv3,qwen35}/gb200/*.csv (cuDNN backend 9.22.0, frontend "
                      "1.21.1, GB200, 2026-04-24)",
    "cudnn922-gb300": _CF + "{llama3.1,dsv3,qwen35}/gb300/*.csv (cuDNN backend 9.22.0, frontend "
                      "1.21.1, GB300, 2026-04-24)",
    "fa3-h100": "github.com/pytorch/benchmark commit ff65cb6 (PR #2391, 2024-07): tritonbench "
                "flash_attention, `--metrics tflops --d-head 128` (forward, no --causal: "
                "full mask; B·S = 16384, H = 2048/d), FlashAttention-3 (flash_v3), H100 SXM5",
}


class Bench(NamedTuple):
    """One public kernel timing: TFLOP/s in the benchmark's convention (module doc)."""
    source: str
    gpu: str          # catalog name
    kernel: str       # "native" (cuDNN, FlashAttention-3) or "fa2"
    b: int
    heads: int        # query heads
    dqk: int
    dv: int
    causal: bool
    seq: int
    fwd_tflops: float
    bwd_tflops: float | None


def _rows(source: str, gpu: str, b: int, heads: int, dqk: int, dv: int, causal: bool,
          table: dict[int, tuple[float, float | None]], kernel: str = "native") -> list[Bench]:
    return [Bench(source, gpu, kernel, b, heads, dqk, dv, causal, s, f, bw)
            for s, (f, bw) in table.items()]


H2, G2, G3 = "H200-SXM-141GB", "GB200", "GB300"
#: (seq -> (forward, backward) TFLOP/s), bf16, non-deterministic backward, as published
BENCHMARKS: list[Bench] = [
    # Llama 3.1 GQA shape: 64 query heads, 8 KV heads, head dim 128
    *_rows("cudnn919-h200", H2, 1, 64, 128, 128, True, {
        2048: (484, 370), 4096: (591, 474), 8192: (644, 541), 16384: (673, 579),
        32768: (688, 581)}),
    *_rows("cudnn919-h200", H2, 1, 64, 128, 128, False, {
        2048: (633, 504), 4096: (671, 560), 8192: (691, 594), 16384: (702, 612),
        32768: (693, 572)}),
    *_rows("cudnn922-gb200", G2, 2, 64, 128, 128, True, {
        2048: (1097, 885), 4096: (1408, 1148), 8192: (1574, 1332), 16384: (1708, 1328),
        32768: (1622, 1226)}),
    *_rows("cudnn922-gb200", G2, 2, 64, 128, 128, False, {
        2048: (1433, 1124), 4096: (1599, 1350), 8192: (1771, 1404), 16384: (1697, 1374),
        32768: (1634, 1262)}),
    *_rows("cudnn922-gb300", G3, 2, 64, 128, 128, True, {
        2048: (1373, 967), 4096: (1703, 1248), 8192: (1856, 1435), 16384: (1915, 1507),
        32768: (1953, 1490)}),
    *_rows("cudnn922-gb300", G3, 2, 64, 128, 128, False, {
        2048: (1805, 1213), 4096: (1900, 1429), 8192: (2017, 1531), 16384: (2014, 1536),
        32768: (1836, 1427)}),
    # DeepSeek-V3 MLA shape: 128 heads, head dims 192 (QK) / 128 (V), causal
    *_rows("cudnn922-gb200", G2, 2, 128, 192, 128, True, {
        2048: (1072, 846), 4096: (1406, 1057), 8192: (1585, 1193), 16384: (1678, 1134),
        32768: (1743, 1076)}),
    *_rows("cudnn922-gb300", G3, 2, 128, 192, 128, True, {
        2048: (1285, 914), 4096: (1590, 1143), 8192: (1825, 1291), 16384: (1967, 1302),
        32768: (1991, 1289)}),
    # Qwen 3.5 shape: 32 query heads, 2 KV heads, head dim 256, causal, forward only
    *_rows("cudnn922-gb200", G2, 1, 32, 256, 256, True, {
        2048: (1126, None), 4096: (1441, None), 8192: (1708, None), 16384: (1804, None),
        32768: (1734, None)}),
    *_rows("cudnn922-gb300", G3, 1, 32, 256, 256, True, {
        2048: (1307, None), 4096: (1743, None), 8192: (1965, None), 16384: (2063, None),
        32768: (2096, None)}),
    # FlashAttention-3 on H100, head dim 128, full mask, forward (B·S = 16384, 16 heads)
    *[Bench("fa3-h100", "H100-SXM5-80GB", "native", 16384 // s, 16, 128, 128, False, s, f, None)
      for s, f in {512: 430.32, 1024: 517.099, 2048: 565.544, 4096: 590.233, 8192: 614.234,
                   16384: 620.73}.items()],
]


def bench_flops(r: Bench) -> tuple[float, float]:
    """(forward, backward) FLOPs of a benchmark shape in the benchmarks' convention."""
    f = 2.0 * r.b * r.heads * r.seq * r.seq * (r.dqk + r.dv) * (0.5 if r.causal else 1.0)
    return f, attention_time.FLASH_BWD_FACTOR * f


def shape_model(r: Bench):
    """A model preset with the benchmark's head dims, query heads and sequence length (the
    attention core depends on nothing else): DeepSeek-V3 for MLA's 192/128, else Llama 3 70B
    with ``kv_channels`` set."""
    if r.dqk != r.dv:
        m = model_preset("deepseek-v3")
    else:
        m = dataclasses.replace(model_preset("llama3-70b"), kv_channels=r.dqk)
    m = dataclasses.replace(m, seq_length=r.seq, num_attention_heads=r.heads)
    if (m.head_dim, m.v_dim) != (r.dqk, r.dv):
        raise SystemExit(f"no preset with head dims {r.dqk}/{r.dv}")
    return m


def model_seconds(r: Bench) -> tuple[float, float]:
    """(forward, backward) seconds the cost model gives the shape: ``attention_time_fwd``
    (causal), times ``s² / (s²·causal_fraction(s))`` for a full mask."""
    m = shape_model(r)
    fw = dataclasses.replace(DEFAULT, attention_kernel=r.kernel)
    f, bw = attention_time.attention_time_fwd(m, r.b, 1, 1, True, get_gpu(r.gpu), fw=fw)
    scale = 1.0 if r.causal else 1.0 / attention_counts.causal_fraction(r.seq)
    return float(f) * scale, float(bw) * scale


def fractions(r: Bench) -> dict[str, float | None]:
    """Measured and model fraction of the dense bf16 peak, forward and backward."""
    peak = get_gpu(r.gpu).peak("bf16")
    ff, fb = bench_flops(r)
    tf, tb = model_seconds(r)
    return {"meas_fwd": r.fwd_tflops * 1e12 / peak, "model_fwd": ff / tf / peak,
            "meas_bwd": None if r.bwd_tflops is None else r.bwd_tflops * 1e12 / peak,
            "model_bwd": fb / tb / peak}


def kernel_convention_fwd(r: Bench) -> float:
    """The measured forward fraction of peak in the catalog's convention (the causal kernel's
    128x128 blocks, ``attention_counts.causal_fraction``), comparable with
    ``attention_efficiency``."""
    cf = attention_counts.causal_fraction(r.seq) if r.causal else 1.0
    return r.fwd_tflops * 1e12 / get_gpu(r.gpu).peak("bf16") * cf / (0.5 if r.causal else 1.0)


def summary(gpu: str, source: str, lo: int = 8192) -> tuple[float, float]:
    """Median over the head-dim-128 causal shapes of ``source`` on ``gpu`` at sequences of at
    least ``lo``: (forward fraction of peak in the catalog's convention, backward over forward
    fraction)."""
    rs = [r for r in BENCHMARKS if r.gpu == gpu and r.source == source and r.causal
          and r.dqk == r.dv == 128 and r.seq >= lo]
    return (st.median(kernel_convention_fwd(r) for r in rs),
            st.median(r.bwd_tflops / r.fwd_tflops for r in rs))


def consistency() -> dict[tuple[str, int], tuple[float, float]]:
    """(GPU, seq) -> measured over model speed (forward, backward) of the cuDNN causal
    head-dim-128 GQA shape: the catalog's error per chip at the same kernel and shape."""
    out = {}
    for r in BENCHMARKS:
        if r.source.startswith("cudnn") and r.causal and r.dqk == r.dv == 128:
            x = fractions(r)
            out[(r.gpu, r.seq)] = (x["meas_fwd"] / x["model_fwd"], x["meas_bwd"] / x["model_bwd"])
    return out


def knee_fit(gpu: str, source: str) -> tuple[float, float, float]:
    """Least-squares fit of the cuDNN causal head-dim-128 forward fractions of ``gpu`` (catalog
    convention) to ``E·L/(L + L0)``, ``L`` the mean key blocks per 128-row query block the
    causal kernel visits, ``(n + 1)/2``: (E, L0 in blocks, largest relative residual). L0 is
    scanned over 0.05-block steps up to 20; for each, E is the linear least-squares value."""
    pts = [(((r.seq + 127) // 128 + 1) / 2, kernel_convention_fwd(r)) for r in BENCHMARKS
           if r.gpu == gpu and r.source == source and r.causal and r.dqk == r.dv == 128]
    best = None
    for i in range(401):
        l0 = 0.05 * i
        g = [L / (L + l0) for L, _ in pts]
        e = sum(gi * y for gi, (_, y) in zip(g, pts)) / sum(gi * gi for gi in g)
        sse = sum((e * gi - y) ** 2 for gi, (_, y) in zip(g, pts))
        if best is None or sse < best[0]:
            best = (sse, e, l0, max(abs(e * gi / y - 1) for gi, (_, y) in zip(g, pts)))
    return best[1], best[2], best[3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    print("| source | GPU | heads | d_qk/d_v | mask | seq | fwd meas | fwd model | meas/model "
          "| bwd meas | bwd model | meas/model |")
    print("| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in BENCHMARKS:
        x = fractions(r)
        bwd = ("- | " + f"{x['model_bwd']:.3f} | -" if x["meas_bwd"] is None else
               f"{x['meas_bwd']:.3f} | {x['model_bwd']:.3f} | "
               f"{x['meas_bwd'] / x['model_bwd']:.3f}")
        print(f"| {r.source} | {r.gpu} | {r.heads} | {r.dqk}/{r.dv} | "
              f"{'causal' if r.causal else 'full'} | {r.seq} | {x['meas_fwd']:.3f} | "
              f"{x['model_fwd']:.3f} | {x['meas_fwd'] / x['model_fwd']:.3f} | {bwd} |")
    print()
    for gpu, src in ((H2, "cudnn919-h200"), (G2, "cudnn922-gb200"), (G3, "cudnn922-gb300")):
        f, ratio = summary(gpu, src)
        g = get_gpu(gpu)
        print(f"{gpu} ({src}): head dim 128, causal, seq >= 8k: forward {f:.3f} of peak in the "
              f"catalog's convention (catalog attention_efficiency {g.attention_efficiency}), "
              f"backward/forward {ratio:.3f} (FLASH_BWD_EFFICIENCY "
              f"{attention_time.FLASH_BWD_EFFICIENCY})")
    c = consistency()
    gpus = (H2, G2, G3)
    print("\nmeasured / model speed, cuDNN, causal, head dim 128 (forward; backward):")
    print("| seq | " + " | ".join(gpus) + " |")
    print("| ---: |" + " --- |" * len(gpus))
    for s in sorted({k[1] for k in c}):
        print(f"| {s} | " + " | ".join(f"{c[(g, s)][0]:.3f}; {c[(g, s)][1]:.3f}" for g in gpus)
              + " |")
    print("\nsequence knee (lead, not in the model): causal head dim 128 forward = "
          "E·L/(L + L0), L = mean key blocks per query block")
    for gpu, src in ((H2, "cudnn919-h200"), (G2, "cudnn922-gb200"), (G3, "cudnn922-gb300")):
        e, l0, worst = knee_fit(gpu, src)
        g = get_gpu(gpu)
        print(f"  {gpu}: E {e:.3f}, L0 {l0:.2f} blocks ({l0 * 128:.0f} keys), worst residual "
              f"{100 * worst:.1f} %; bf16 rate per SM {g.peak('bf16') / g.sm_count / 1e12:.2f} "
              f"TFLOP/s")
    print("\nSources:")
    for k, v in SOURCES.items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
