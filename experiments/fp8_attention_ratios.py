#!/usr/bin/env python
"""How much faster cuDNN's fused attention runs in FP8 than in BF16 on the same shapes, from
NVIDIA's public kernel benchmark (docs/calibration.md §5.90, a lead: the 26.06 graphed MoE
configs set ``fp8_dot_product_attention``, which the model does not price). Nothing here
changes a cost.

NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training/results/<model>/<gpu>/*.csv``:
per shape (mask, batch, sequence, heads, head dims, window), pass and determinism, the
kernel's ``time_ms`` for ``data_type`` bfloat16 and fp8. Per file and pass: the shapes that
ran in both (non-deterministic backward only), and the median and range of the BF16 / FP8
time ratio.

    python experiments/fp8_attention_ratios.py [CUDNN_FRONTEND_GIT_DIR]

The argument is a cudnn-frontend clone or bare git directory (default: the mirror
``/work/.mirror/NVIDIA+cudnn-frontend/repo``); its HEAD is read with ``git show``.
"""
from __future__ import annotations

import csv
import io
import statistics as st
import subprocess
import sys

RESULTS = "benchmark/sdpa_benchmark_training/results"
#: a shape's identity in the benchmark's CSV (every column but the type, timing and outcome)
KEY = ("attn_mask", "batch_size", "q_seqlen", "kv_seqlen", "num_q_heads", "num_kv_heads",
       "head_dim_qk", "head_dim_vo", "profile_pass", "deterministic_bwd",
       "sliding_window_size")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def ratios(rows: list[dict]) -> dict[str, list[float]]:
    """``{pass: [bf16 time / fp8 time per shape]}`` over the shapes that ran in both types
    (the deterministic backward left out)."""
    by: dict[str, dict[tuple, float]] = {"bfloat16": {}, "fp8": {}}
    for r in rows:
        if any(r.get(k) is None for k in (*KEY, "success", "data_type", "time_ms")):
            continue            # a file of another layout (no per-shape time): not read
        if r["success"] == "True" and r["data_type"] in by:
            by[r["data_type"]][tuple(r[k] for k in KEY)] = float(r["time_ms"])
    out: dict[str, list[float]] = {}
    for k, t8 in by["fp8"].items():
        t16 = by["bfloat16"].get(k)
        if t16 is None or k[KEY.index("deterministic_bwd")] != "False":
            continue
        out.setdefault(k[KEY.index("profile_pass")], []).append(t16 / t8)
    return out


def main(argv: list[str]) -> int:
    repo = argv[0] if argv else "/work/.mirror/NVIDIA+cudnn-frontend/repo"
    commit = _git(repo, "rev-parse", "HEAD").strip()[:12]
    files = [f for f in _git(repo, "ls-tree", "-r", "--name-only", "HEAD", RESULTS).split()
             if f.endswith(".csv")]
    print(f"NVIDIA/cudnn-frontend @{commit}, {RESULTS}")
    print()
    print("| file | GPU | head dims (qk/vo) | pass | shapes | BF16/FP8 time, median | range |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        rows = list(csv.DictReader(io.StringIO(_git(repo, "show", f"HEAD:{f}"))))
        dims = sorted({f"{r.get('head_dim_qk')}/{r.get('head_dim_vo')}" for r in rows
                       if r.get("data_type") == "fp8"})
        gpu = sorted({str(r.get("gpu_name")) for r in rows})
        for p, rs in sorted(ratios(rows).items()):
            print(f"| {f[len(RESULTS) + 1:]} | {', '.join(gpu)} | {', '.join(dims)} | {p} | "
                  f"{len(rs)} | {st.median(rs):.2f} | {min(rs):.2f}-{max(rs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
