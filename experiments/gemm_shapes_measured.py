#!/usr/bin/env python
"""Public per-shape GEMM measurements on Hopper and Blackwell beside the cost model's time for
the same GEMM (docs/calibration.md §5.79).

Run (a second or two, analytic only):

    python experiments/gemm_shapes_measured.py            # Markdown tables on stdout
    python experiments/gemm_shapes_measured.py --what-if  # + every reference row under
                                                          #   the two leads (a minute or two)

Every point of ``SOURCES`` (one public table each: GPU, dtype, library and conditions, where it
was read) is priced by ``gemm_time.gemms_time_fwd`` of one entry ``(b, M, N, K)`` at tp 1 without
TP overlap, the very function the estimate, the lower bound and the simulator price a layer's
GEMMs with (``gemm_time.gemm_units`` -> ``gemm_unit``: catalog rate, shape penalty, K knee,
fixed time per kernel, HBM roofline); ``b > 1`` (XLA's batched ``dot``) is one kernel, so the
model's ``b`` fixed times are cut to one.

The public tables are timed at the boost clock of short runs and the catalog's rate is the
sustained one (``GPU.gemm_efficiency``: MSMF), so the *shape dependence* is compared
normalised (§3.26): each rate, measured and modelled, over the rate of the same table's best
measured shape (``best``). ``norm ratio`` = model norm / measured norm: 1 the same shape
dependence, below 1 the model charges the shape more than the chip does, above 1 less.
``model / measured`` is the absolute ratio (about the sustained/burst clock ratio, 0.8-0.93,
at large shapes).

Shape classes (``shape_class``): ``thin`` (the output's smaller side ``min(M, N)`` below
``THIN``: decode, MoE groups, narrow projections), ``short-K`` (``K`` below ``SHORT_K``, the
output not thin), ``large`` (neither). Summaries per source, and per GPU, dtype and class:
count, median and range of the norm ratio, the median absolute ratio.

Table 5: the same by wave (``waves``: the output's ``WAVE_TILE`` tiles over the GPU's SMs,
the one-tile-per-SM count of a persistent kernel): below one wave, one to two, two or more.

Table 5b: the same points with the Ampere kernel-choice rule (§3.15.1: the fastest of
``gemm_kernel.gemm_configs``' tiles x split-K at their wave occupancy) switched on for these
chips (``gemm_kernel.gemm_waves`` patched to ``AMPERE_CHECK_TILE``): does it account for the
sub-wave shortfall? (a check; the catalog keeps ``wave_tile`` None on Hopper/Blackwell)

Table 6: the K knee (``gemm_kernel.k_knee`` of the source's GPU and dtype, patched there only)
that best reproduces each source's points at one wave or more (``fit_knee``: least squares on
the log of the norm ratio, grid ``KNEE_GRID``), beside the catalog's scaled knee.

``--what-if`` (nothing in the model changes; ``compute`` is patched inside the run only):
every row of every reference file (``strategies/reference/data``, the schedule studies
aside), analytic, (a) with each generation's K knee scaled by what its newest tables fit
(``WHAT_IF_KNEE_SOURCES``: ``k_knee`` times fitted/catalog, by generation and rate key), (b)
with every GEMM below one wave (``waves`` < 1, on the row's GPU) slowed by its generation's
median sub-wave norm ratio (``subwave_penalty``), an upper-end reading of the measured
shortfall since the tables' sub-wave kernels are short, (c) with the Ampere kernel-choice
rule of Table 5b on the Blackwell parts only (``gemm_kernel.gemm_waves`` patched for generation
``sm_100``), where Table 5b finds it closes most of the sub-wave shortfall, and (d) the same
on the GEMMs below one wave only (the rest priced as now): what of (c)'s move is sub-wave.
Per file and per GPU: MAPE and mean signed error; and the H100 runs of §3.13's lead against their control
(``h100_gemm_shapes.DEFICIT_RUNS``, ``CONTROL_RUNS``).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.calibration_ablation import patched_cost  # noqa: E402
from experiments.blackwell_gemm_shapes import B200, XLA_SM100_BF16, XLA_SM100_FP8  # noqa: E402
from experiments.grouped_gemm_check import DEEPGEMM_H800  # noqa: E402
from experiments.h100_gemm_shapes import H100, XLA_SM90_BF16  # noqa: E402
from strategies.cost import gemm_kernel, gemm_time, hbm_rate  # noqa: E402
from strategies.cost.system import DEFAULT_SYSTEM  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

H800 = "H800-SXM5-80GB"
THIN = 1024       # the output's smaller side below this: "thin"
SHORT_K = 1024    # a reduction below this (output not thin): "short-K"
#: the output tile a Hopper/Blackwell persistent GEMM kernel keeps per SM (CUTLASS 3's sm90
#: and sm100 defaults: 128 rows x 256 columns per SM; rows of M, columns of N), for ``waves``
WAVE_TILE = (128, 256)
KNEE_GRID = range(40, 2001, 10)
AMPERE_CHECK_TILE = (256, 128)   # the Ampere wave tile (topologies.gpus AMPERE_WAVE_TILE)

#: tile-ai/tilelang ``benchmark/matmul_fp8/README.md``, "FP8 Matmul Benchmark (8192x8192)":
#: ``benchmark_matmul.py``'s autotuned fp8 GEMM (e4m3, no block scales) at M = N = 8192 on
#: "NVIDIA H800 SXM", driver 560.35.05, tilelang 6b1faf71; ``(K, latency ms, TFLOP/s)`` (the
#: table's "Latency (s)" column holds milliseconds: 2·8192²·K over it is its TFLOP/s). Two
#: stored versions of the file differ (the same tilelang commit is named in both):
#: tile-ai/tilelang@128a7967032a49190f8843934b5d8e3771ff9d42 (the file gives PFLOP/s,
#: 0.376 ... 1.523; here x1000) and the later xwhzz/tilelang@b2acfc3791d5ddeef3772214222461c85659c904.
TILELANG_H800_FP8_A = ((256, 0.091488, 376), (512, 0.110496, 622), (1024, 0.148256, 927),
                       (2048, 0.234080, 1174), (4096, 0.398944, 1378),
                       (8192, 0.752416, 1461), (16384, 1.443808, 1523))
TILELANG_H800_FP8_B = ((256, 0.060352, 569), (512, 0.080096, 858), (1024, 0.121696, 1129),
                       (2048, 0.204672, 1343), (4096, 0.374816, 1467),
                       (8192, 0.729664, 1507), (16384, 1.427264, 1541))
TILELANG_MN = 8192

#: deepseek-ai/DeepGEMM PR #86 ("Use swizzling instead of padding", 2025-04-14, merged): the
#: dense FP8 GEMMs (1x128 / 128x128 block scaling) on H800 after the change, ``(M, N, K,
#: TFLOP/s)``, the README's table of 327ec92 (``grouped_gemm_check.DEEPGEMM_H800``) re-run
#: ("1503 -> 1519 TFLOPS, the original 1520 is on another good GPU")
DEEPGEMM_PR86_H800 = ((4096, 24576, 1536, 1270), (4096, 32768, 512, 836),
                      (4096, 7168, 16384, 1519), (4096, 4096, 7168, 1439),
                      (4096, 7168, 2048, 1215))

#: zzc0721/torch-performance-test-data issue #79 (2025-10-18, "NVIDIA H100 80GB HBM3"; H100
#: SXM5; torch 2.7.0+cu128, Python 3.11, a Docker container in a cloud): ``torch.matmul`` of
#: square bf16 matrices, ``(side, TFLOP/s)``
TORCHPERF_H100_BF16 = ((1024, 176.62), (2048, 676.59), (4096, 788.72), (8192, 797.51),
                       (10240, 719.72))


@dataclass(frozen=True)
class Source:
    """One public table: ``points`` ``(b, M, N, K, TFLOP/s)`` measured on catalog GPU
    ``gpu`` in ``dtype``, by ``library``, read at ``where``."""

    name: str
    gpu: str
    dtype: str
    library: str
    where: str
    points: tuple


def _tilelang(rows: tuple) -> tuple:
    return tuple((1, TILELANG_MN, TILELANG_MN, k, v) for k, _ms, v in rows)


SOURCES = (
    Source("xla-sm90-bf16", H100, "bf16", "XLA dot (cuBLAS/Triton), median CUPTI kernel time",
           "tensorflow/tensorflow@a305421c .../cost_model/matmul_interpolator_data.h, sm_90 "
           "(experiments/h100_gemm_shapes.py)", XLA_SM90_BF16),
    Source("torchperf-h100-bf16", H100, "bf16", "torch.matmul, torch 2.7.0+cu128",
           "github.com/zzc0721/torch-performance-test-data/issues/79",
           tuple((1, s, s, s, v) for s, v in TORCHPERF_H100_BF16)),
    Source("tilelang-h800-fp8-a", H800, "fp8", "tilelang autotuned fp8 GEMM, driver 560.35.05",
           "tile-ai/tilelang@128a7967 benchmark/matmul_fp8/README.md",
           _tilelang(TILELANG_H800_FP8_A)),
    Source("tilelang-h800-fp8-b", H800, "fp8", "tilelang autotuned fp8 GEMM, driver 560.35.05",
           "xwhzz/tilelang@b2acfc37 benchmark/matmul_fp8/README.md",
           _tilelang(TILELANG_H800_FP8_B)),
    Source("deepgemm-h800-fp8", H800, "fp8-blockwise", "DeepGEMM dense, NVCC 12.8",
           "deepseek-ai/DeepGEMM@327ec92 README (experiments/grouped_gemm_check.py)",
           tuple((1, M, N, K, v) for kind, _g, M, N, K, v in DEEPGEMM_H800 if kind == "dense")),
    Source("deepgemm-pr86-h800-fp8", H800, "fp8-blockwise", "DeepGEMM dense after PR #86",
           "github.com/deepseek-ai/DeepGEMM/pull/86",
           tuple((1, M, N, K, v) for M, N, K, v in DEEPGEMM_PR86_H800)),
    Source("xla-sm100-bf16", B200, "bf16", "XLA dot, median CUPTI kernel time",
           "tensorflow/tensorflow@a305421c .../matmul_interpolator_data.h, sm_100 "
           "(experiments/blackwell_gemm_shapes.py)", XLA_SM100_BF16),
    Source("xla-sm100-fp8", B200, "fp8", "XLA dot, median CUPTI kernel time",
           "tensorflow/tensorflow@a305421c .../matmul_interpolator_data.h, sm_100 "
           "(experiments/blackwell_gemm_shapes.py)", XLA_SM100_FP8),
)


def model_seconds(gpu_name: str, dtype: str, b: int, M: float, N: float, K: float) -> float:
    """Seconds the cost model gives ``b`` GEMMs ``(M x K) @ (K x N)`` run as one kernel:
    ``gemm_time.gemms_time_fwd`` (tp 1, no TP overlap) less ``(b - 1)`` fixed times."""
    gpu = get_gpu(gpu_name)
    return float(gemm_time.gemms_time_fwd([(b, M, N, K, False)], 1, gpu, dtype)
                 - (b - 1) * gemm_kernel.gemm_fixed_s(gpu))


def shape_class(M: float, N: float, K: float) -> str:
    """``thin`` (``min(M, N) < THIN``), else ``short-K`` (``K < SHORT_K``), else ``large``."""
    if min(M, N) < THIN:
        return "thin"
    return "short-K" if K < SHORT_K else "large"


def waves(b: int, M: float, N: float, sms: int) -> float:
    """Output tiles of ``b`` GEMMs ``M x N`` (``WAVE_TILE``) over ``sms``."""
    return b * math.ceil(M / WAVE_TILE[0]) * math.ceil(N / WAVE_TILE[1]) / sms


def wave_class(w: float) -> str:
    """``sub-wave`` (< 1), ``1-2 waves``, ``>= 2 waves``."""
    return "sub-wave" if w < 1 else ("1-2 waves" if w < 2 else ">= 2 waves")


@dataclass(frozen=True)
class Row:
    """One point beside the model: rates in TFLOP/s, norms over the source's best shape."""

    source: str
    gpu: str
    dtype: str
    b: int
    M: float
    N: float
    K: float
    measured: float
    model: float
    measured_norm: float
    model_norm: float
    kernel_us: float
    cls: str
    waves: float

    @property
    def ratio(self) -> float:
        """Model over measured rate (absolute)."""
        return self.model / self.measured

    @property
    def norm_ratio(self) -> float:
        """Model norm over measured norm (the shape dependence)."""
        return self.model_norm / self.measured_norm


def best(src: Source) -> tuple:
    """The point of ``src`` with the highest measured rate (the first one on a tie)."""
    return max(src.points, key=lambda p: p[4])


def rows(sources: tuple = SOURCES) -> list[Row]:
    """Every point of ``sources`` beside the model, normalised to its source's ``best``."""
    out = []
    for src in sources:
        bb, bM, bN, bK, bv = best(src)
        sms = get_gpu(src.gpu).sm_count
        bmod = 2.0 * bb * bM * bN * bK / model_seconds(src.gpu, src.dtype, bb, bM, bN, bK) / 1e12
        for b, M, N, K, v in src.points:
            t = model_seconds(src.gpu, src.dtype, b, M, N, K)
            mod = 2.0 * b * M * N * K / t / 1e12
            us = 2.0 * b * M * N * K / (v * 1e12) * 1e6
            out.append(Row(src.name, src.gpu, src.dtype, b, M, N, K, v, mod, v / bv, mod / bmod,
                           us, shape_class(M, N, K), waves(b, M, N, sms)))
    return out


def summary(group: list[Row]) -> tuple:
    """``(count, median norm ratio, min, max, geometric mean, median model/measured)``."""
    nr = [r.norm_ratio for r in group]
    geo = math.exp(statistics.fmean(math.log(x) for x in nr))
    return (len(nr), statistics.median(nr), min(nr), max(nr), geo,
            statistics.median(r.ratio for r in group))


def by_key(rs: list[Row], key) -> dict:
    """``rs`` grouped by ``key(row)``, in first-seen order."""
    out: dict = {}
    for r in rs:
        out.setdefault(key(r), []).append(r)
    return out


def rows_with_ampere_waves() -> list[Row]:
    """``rows()`` with ``gemm_kernel.gemm_waves`` giving every catalog Hopper/Blackwell part
    (``gemm_kernel.GEMM_GENERATION``) ``AMPERE_CHECK_TILE`` waves over its SMs (Table 5b)."""
    orig = gemm_kernel.gemm_waves

    def waves_(gpu, system=DEFAULT_SYSTEM):
        if gpu.wave_tile is None and gpu.sm_count and gpu.name in gemm_kernel.GEMM_GENERATION:
            return gemm_kernel.Waves(gpu.sm_count, *AMPERE_CHECK_TILE,
                                     hbm_rate.usable_hbm(gpu, system))
        return orig(gpu, system)
    with patched_cost(gemm_kernel, "gemm_waves", waves_):
        return rows()


def fit_knee(src: Source) -> tuple[int, float, float, int]:
    """``(knee, rms log norm ratio there, rms at the catalog's knee, points)``: the knee of
    ``src``'s GPU and dtype (``gemm_kernel.k_knee`` patched for that GPU's rate key alone) of
    ``KNEE_GRID`` minimising the squared log norm ratio over ``src``'s points at one wave or
    more."""
    orig = gemm_kernel.k_knee
    gpu0 = get_gpu(src.gpu)
    key = gpu0.rate_key(src.dtype)

    def err(knee: float | None) -> tuple[float, int]:
        def kk(gpu, dtype):
            if knee is not None and gpu.name == gpu0.name and gpu.rate_key(dtype) == key:
                return float(knee)
            return orig(gpu, dtype)
        with patched_cost(gemm_kernel, "k_knee", kk):
            rs = [r for r in rows((src,)) if r.waves >= 1]
        return sum(math.log(r.norm_ratio) ** 2 for r in rs), len(rs)

    e0, n = err(None)
    best = min(KNEE_GRID, key=lambda k: err(k)[0])
    return best, math.sqrt(err(best)[0] / n), math.sqrt(e0 / n), n


#: the table each generation's knee what-if reads, by rate key: XLA's (sm_90 bf16, sm_100
#: bf16 and fp8) and, for Hopper fp8, tilelang's faster version (per-tensor fp8 like the
#: catalog's ``fp8`` rate; DeepGEMM's tables are block-scaled)
WHAT_IF_KNEE_SOURCES = {("sm_90", "bf16"): "xla-sm90-bf16", ("sm_90", "fp8"): "tilelang-h800-fp8-b",
                        ("sm_100", "bf16"): "xla-sm100-bf16", ("sm_100", "fp8"): "xla-sm100-fp8"}


def knee_factors() -> dict:
    """``{(generation, rate key): fitted knee / catalog knee}`` of ``WHAT_IF_KNEE_SOURCES``."""
    src = {s.name: s for s in SOURCES}
    out = {}
    for key, name in WHAT_IF_KNEE_SOURCES.items():
        s = src[name]
        out[key] = fit_knee(s)[0] / gemm_kernel.k_knee(get_gpu(s.gpu), s.dtype)
    return out


def subwave_penalty() -> dict:
    """``{generation: median norm ratio of its points below one wave}`` (every source)."""
    rs = rows()
    out = {}
    for gen in ("sm_90", "sm_100"):
        sub = [r.norm_ratio for r in rs
               if gemm_kernel.GEMM_GENERATION.get(r.gpu) == gen and r.waves < 1]
        out[gen] = statistics.median(sub)
    return out


def what_if(paths: list[str] | None = None) -> list[tuple]:
    """``(file, id, GPU, error now %, with the fitted knees %, with the sub-wave penalty %,
    with the Ampere kernel-choice rule on sm_100 %, with it on sm_100's sub-wave GEMMs only %)``
    of every analytic reference row (``--what-if``)."""
    import numpy as np

    from simulator.studies.validate import load_cases
    from strategies.estimate.scalar import estimate

    kf, pen = knee_factors(), subwave_penalty()
    orig_knee, orig_compute, orig_waves = (gemm_kernel.k_knee, gemm_kernel.gemm_compute,
                                           gemm_kernel.gemm_waves)

    def blackwell_waves(gpu, system=DEFAULT_SYSTEM):
        if gpu.wave_tile is None and gpu.sm_count \
                and gemm_kernel.GEMM_GENERATION.get(gpu.name) == "sm_100":
            return gemm_kernel.Waves(gpu.sm_count, *AMPERE_CHECK_TILE,
                                     hbm_rate.usable_hbm(gpu, system))
        return orig_waves(gpu, system)

    def knee(gpu, dtype):
        gen = gemm_kernel.GEMM_GENERATION.get(gpu.name)
        return orig_knee(gpu, dtype) * kf.get((gen, gpu.rate_key(dtype)), 1.0)

    state = {"sms": None, "pen": 1.0, "waves": None}

    def sub_wave(M, N):
        return np.ceil(np.asarray(M, dtype=float) / WAVE_TILE[0]) \
            * np.ceil(np.asarray(N, dtype=float) / WAVE_TILE[1]) / state["sms"] < 1

    def compute(M, N, K, rate, knee_, waves_=None):
        t = orig_compute(M, N, K, rate, knee_, waves_)
        if state["sms"] is None:
            return t
        if state["waves"] is not None:        # (d): the kernel-choice rule below one wave
            return np.where(sub_wave(M, N), orig_compute(M, N, K, rate, knee_, state["waves"]),
                            t)
        return t * np.where(sub_wave(M, N), state["pen"], 1.0)

    if paths is None:
        from strategies.reference.cases import run_file_names
        data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "strategies", "reference", "data")
        paths = [os.path.join(data, n) for n in run_file_names(data)]
    out = []
    for path in paths:
        for c in load_cases(path, tiers=None):
            if c.job is None or c.measured_step_s is None:
                continue
            gpu = c.job.cluster.groups[0].gpu
            now = estimate(c.job).step_time_s
            with patched_cost(gemm_kernel, "k_knee", knee):
                a = estimate(c.job).step_time_s
            gen = gemm_kernel.GEMM_GENERATION.get(gpu.name)
            state.update(sms=gpu.sm_count if gen else None, pen=pen.get(gen, 1.0))
            with patched_cost(gemm_kernel, "gemm_compute", compute):
                b = estimate(c.job).step_time_s
            state.update(sms=None)
            with patched_cost(gemm_kernel, "gemm_waves", blackwell_waves):
                w = estimate(c.job).step_time_s
            bw = blackwell_waves(gpu) if gen == "sm_100" else None
            state.update(sms=gpu.sm_count if bw else None, waves=bw)
            with patched_cost(gemm_kernel, "gemm_compute", compute):
                d = estimate(c.job).step_time_s
            state.update(sms=None, waves=None)
            m = c.measured_step_s
            out.append((os.path.basename(path), c.id, gpu.name, 100 * (now / m - 1),
                        100 * (a / m - 1), 100 * (b / m - 1), 100 * (w / m - 1),
                        100 * (d / m - 1)))
    return out


def print_what_if(res: list[tuple]) -> None:
    """Per file, per GPU, and for §3.13's lead and control: MAPE and mean signed error, now and under
    each what-if."""
    from experiments.h100_gemm_shapes import CONTROL_RUNS, DEFICIT_RUNS

    kf, pen = knee_factors(), subwave_penalty()
    print("\nTable 7. What-if (analytic): (a) knees x " + ", ".join(
        f"{g} {k} {f:.2f}" for (g, k), f in kf.items()) + "; (b) sub-wave GEMMs x " + ", ".join(
        f"{g} {p:.3f}" for g, p in pen.items()) + "; (c) the Ampere kernel-choice rule on "
        "sm_100; (d) (c) on its sub-wave GEMMs only\n")
    print("| rows | runs | MAPE now | (a) knees | (b) sub-wave | (c) sm_100 waves | (d) | "
          "mean signed now | (a) | (b) | (c) | (d) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    groups = by_key(res, lambda r: r[0])
    groups.update(by_key(sorted(res, key=lambda r: r[2]), lambda r: f"GPU {r[2]}"))
    groups["§3.13 lead (H100, no pipelining)"] = [r for r in res if re.search(DEFICIT_RUNS, r[1])]
    groups["§3.13 control (NeMo 24.11, pipelined)"] = [r for r in res
                                                      if re.search(CONTROL_RUNS, r[1])]
    for name, g in groups.items():
        if not g:
            continue
        mape = [statistics.fmean(abs(r[i]) for r in g) for i in (3, 4, 5, 6, 7)]
        sgn = [statistics.fmean(r[i] for r in g) for i in (3, 4, 5, 6, 7)]
        print(f"| {name} | {len(g)} | " + " | ".join(f"{x:.2f} %" for x in mape) + " | "
              + " | ".join(f"{x:+.2f} %" for x in sgn) + " |")


def _summary_table(groups: dict, head: str) -> None:
    print(f"| {head} | points | norm ratio median | min | max | geo. mean | model / measured "
          f"median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k, g in groups.items():
        n, med, lo, hi, geo, ab = summary(g)
        label = " / ".join(k) if isinstance(k, tuple) else k
        print(f"| {label} | {n} | {med:.3f} | {lo:.3f} | {hi:.3f} | {geo:.3f} | {ab:.3f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what-if", action="store_true",
                    help="also every reference row under the two leads (a minute or two)")
    args = ap.parse_args(argv)
    rs = rows()
    print("Table 1. Sources\n")
    print("| source | GPU (catalog) | dtype | library, conditions | where | points | best "
          "(b, M, N, K) |")
    print("|---|---|---|---|---|---:|---|")
    for s in SOURCES:
        b = best(s)
        print(f"| {s.name} | {s.gpu} | {s.dtype} | {s.library} | {s.where} | {len(s.points)} | "
              f"{b[0]}x{b[1]}x{b[2]}x{b[3]} |")
    print("\nTable 2. Every point beside the model (gemm_time.gemms_time_fwd), normalised to its "
          "source's best shape\n")
    print("| source | b | M | N | K | class | kernel us | measured TFLOP/s | model TFLOP/s | "
          "model / measured | measured norm | model norm | norm ratio |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        print(f"| {r.source} | {r.b} | {r.M:.0f} | {r.N:.0f} | {r.K:.0f} | {r.cls} | "
              f"{r.kernel_us:.1f} | {r.measured:.1f} | {r.model:.1f} | {r.ratio:.3f} | "
              f"{r.measured_norm:.3f} | {r.model_norm:.3f} | {r.norm_ratio:.3f} |")
    print("\nTable 3. Per source\n")
    _summary_table(by_key(rs, lambda r: r.source), "source")
    print("\nTable 4. Per GPU, dtype and shape class\n")
    order = {"thin": 0, "short-K": 1, "large": 2}
    groups = by_key(sorted(rs, key=lambda r: (r.gpu, r.dtype, order[r.cls])),
                    lambda r: (r.gpu, r.dtype, r.cls))
    _summary_table(groups, "GPU / dtype / class")
    print(f"\nTable 5. Per GPU, dtype and wave count ({WAVE_TILE[0]}x{WAVE_TILE[1]} output "
          f"tiles over the SMs)\n")
    worder = {"sub-wave": 0, "1-2 waves": 1, ">= 2 waves": 2}
    groups = by_key(sorted(rs, key=lambda r: (r.gpu, r.dtype, worder[wave_class(r.waves)])),
                    lambda r: (r.gpu, r.dtype, wave_class(r.waves)))
    _summary_table(groups, "GPU / dtype / waves")
    print("\nTable 5b. The same with the Ampere kernel-choice rule (tiles x split-K x "
          "waves) switched on for Hopper/Blackwell (a check)\n")
    ra = rows_with_ampere_waves()
    groups = by_key(sorted(ra, key=lambda r: (r.gpu, r.dtype, worder[wave_class(r.waves)])),
                    lambda r: (r.gpu, r.dtype, wave_class(r.waves)))
    _summary_table(groups, "GPU / dtype / waves")
    print("\nTable 6. The K knee each source implies at one wave or more\n")
    print("| source | GPU / dtype | points | catalog knee | rms at the catalog knee | "
          "fitted knee | rms there | fitted / catalog |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for src in SOURCES:
        knee, rms, rms0, n = fit_knee(src)
        cat = gemm_kernel.k_knee(get_gpu(src.gpu), src.dtype)
        print(f"| {src.name} | {src.gpu} / {src.dtype} | {n} | {cat:.0f} | {rms0:.3f} | "
              f"{knee} | {rms:.3f} | {knee / cat:.2f} |")
    if args.what_if:
        print_what_if(what_if())
    return 0


if __name__ == "__main__":
    sys.exit(main())
