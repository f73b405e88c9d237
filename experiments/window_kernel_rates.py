#!/usr/bin/env python
"""cuDNN's fused attention on gpt-oss's 128-token sliding window against the model
(docs/calibration.md §5.120).

NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training/results/gpt_oss/<gpu>/*.csv``: the
BF16 kernel's ``time_ms`` per sequence and pass (causal ``top_left``, window 128, head dim 64,
batch 2 x 128 heads, non-deterministic backward, the backward Transformer Engine runs for
gpt-oss: Megatron-Bridge sets ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` for DeepSeek only).

    python experiments/window_kernel_rates.py [CUDNN_FRONTEND_GIT_DIR]
    python experiments/window_kernel_rates.py --table [CUDNN_FRONTEND_GIT_DIR]
    python experiments/window_kernel_rates.py --rows

Default: per chip, sequence and pass, the measured time, the model's time of the same shape
with the catalog's fused-attention efficiency (``GPU.flash_efficiency``, the exposed
exponentials of §5.60) and with the measured windowed rate (``window_kernel``), and the
measured over each. ``--table``: the fractions of the bf16 peak ``window_kernel.EFFICIENCY``
holds. ``--rows``: every gpt-oss reference row, the attention core's forward/backward ms per
layer and micro-batch and the analytic step, the catalog's efficiency on every layer against
the measured windowed rate. The argument is a cudnn-frontend clone or bare git directory
(default: the mirror ``/work/.mirror/NVIDIA+cudnn-frontend/repo``); its HEAD is read with
``git show``.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os
import subprocess
import sys
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_counts, attention_time, window_kernel  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

RESULTS = "benchmark/sdpa_benchmark_training/results"
FILES = {"gb200": "gpt_oss/gb200/gpt_oss_20260424_100011.csv",
         "gb300": "gpt_oss/gb300/gpt_oss_20260424_100022.csv"}
GPU_OF = {"gb200": "GB200", "gb300": "GB300"}
REFERENCE = ("megatron_bridge_2604", "heldout_2026b", "published_2026", "automodel_perf")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def bf16_times(rows: list[dict]) -> dict[tuple[int, str], dict]:
    """``{(sequence, pass): row}`` of the BF16, non-deterministic, successful causal rows."""
    out = {}
    for r in rows:
        if (r.get("success") == "True" and r.get("data_type") == "bfloat16"
                and r.get("deterministic_bwd") == "False" and r.get("attn_mask") == "top_left"):
            out[(int(r["q_seqlen"]), r["profile_pass"])] = r
    return out


def shape_model(r: dict):
    """The gpt-oss-120b preset reshaped to a benchmark row: its heads, head dim, window and
    sequence, every layer windowed (``global_attention_every`` 0)."""
    m = model_preset("gpt-oss-120b")
    return dataclasses.replace(m, num_attention_heads=int(r["num_q_heads"]),
                               num_query_groups=int(r["num_kv_heads"]),
                               kv_channels=int(r["head_dim_qk"]),
                               sliding_window=int(r["sliding_window_size"]),
                               global_attention_every=0, seq_length=int(r["q_seqlen"]))


def efficiency(r: dict, peak: float) -> float:
    """The fraction of ``peak`` a row's time is: forward ``F/(t·peak)``, backward
    ``FLASH_BWD_FACTOR·F/(t·peak)``, ``F`` the model's forward FLOPs of the shape."""
    m = shape_model(r)
    f = attention_counts.attn_core_flops_fwd(m, int(r["batch_size"]), 1, 1, True)
    k = 1.0 if r["profile_pass"] == "fwd" else attention_time.FLASH_BWD_FACTOR
    return k * f / (float(r["time_ms"]) * 1e-3 * peak)


def _catalog():
    """A context in which ``window_kernel`` measures nothing (the catalog's efficiency)."""
    return mock.patch.object(window_kernel, "window_efficiency", lambda *a, **k: None)


def model_ms(r: dict, gpu_name: str) -> float:
    """The model's time (ms) of a benchmark row's shape and pass."""
    m = shape_model(r)
    f, b = attention_time.attention_time_fwd(m, int(r["batch_size"]), 1, 1, True,
                                             get_gpu(gpu_name))
    return 1e3 * (f if r["profile_pass"] == "fwd" else b)


def rows_report() -> None:
    """Print ``--rows``."""
    from strategies.reference.cases import case_from_entry, load_reference
    print("| row | measured s | attention fwd / bwd ms per layer, catalog -> measured window "
          "| analytic s | error |")
    print("|---|---:|---|---|---|")
    for name in REFERENCE:
        for e in load_reference(f"strategies/reference/data/{name}.json"):
            case = case_from_entry(e)
            job = case.job
            if job is None or not job.model.attention_sinks:
                continue
            with _catalog():
                before = _row_times(job)
            after = _row_times(job)
            err = [(t / case.measured_step_s - 1) * 100 for t in (before[2], after[2])]
            print(f"| {e['id']} | {case.measured_step_s:.3f} | "
                  + " -> ".join(f"{1e3 * f:.3f} / {1e3 * b:.3f}" for f, b, _ in (before, after))
                  + f" | {before[2]:.3f} -> {after[2]:.3f} | {err[0]:+.1f} -> {err[1]:+.1f} % |")


def _row_times(job) -> tuple[float, float, float]:
    """A job's attention core (forward, backward seconds per layer and micro-batch) and its
    analytic step (seconds)."""
    from strategies.estimate import estimate
    p = job.plan
    f, b = attention_time.attention_time_fwd(job.model, p.mbs, p.tp, p.cp, True,
                                             job.cluster.gpu, fw=job.framework)
    return float(f), float(b), estimate(job).step_time_s


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", nargs="?", default="/work/.mirror/NVIDIA+cudnn-frontend/repo",
                    help="a cudnn-frontend clone or bare git directory")
    ap.add_argument("--table", action="store_true", help="the fractions of the peak")
    ap.add_argument("--rows", action="store_true", help="every gpt-oss reference row")
    a = ap.parse_args(argv)
    if a.rows:
        rows_report()
        return 0
    table, repo = a.table, a.repo
    commit = _git(repo, "rev-parse", "HEAD").strip()[:12]
    data = {chip: bf16_times(list(csv.DictReader(io.StringIO(
        _git(repo, "show", f"HEAD:{RESULTS}/{f}"))))) for chip, f in FILES.items()}
    print(f"NVIDIA/cudnn-frontend @{commit}: gpt_oss, BF16, causal, window 128, head dim 64")
    print()
    if table:
        print("| chip | pass | fraction of the bf16 peak per sequence |")
        print("|---|---|---|")
        for chip, t in data.items():
            peak = get_gpu(GPU_OF[chip]).peak("bf16")
            seqs = sorted({s for s, _ in t})
            for p in ("fwd", "bwd"):
                print(f"| {chip} | {p} | "
                      f"{', '.join(f'{efficiency(t[(s, p)], peak):.4f}' for s in seqs)} |")
        return 0
    print("| chip | sequence | pass | measured ms | model ms, catalog | measured / model "
          "| model ms, measured window | measured / model |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for chip, t in data.items():
        for (s, p), r in sorted(t.items()):
            with _catalog():
                c = model_ms(r, GPU_OF[chip])
            w = model_ms(r, GPU_OF[chip])
            ms = float(r["time_ms"])
            print(f"| {chip} | {s} | {p} | {ms:.3f} | {c:.3f} | {ms / c:.2f} | {w:.3f} | "
                  f"{ms / w:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
