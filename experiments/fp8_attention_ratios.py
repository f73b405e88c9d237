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
    python experiments/fp8_attention_ratios.py --table [CUDNN_FRONTEND_GIT_DIR]
    python experiments/fp8_attention_ratios.py --rows

``--table``: the MXFP8 figures the cost model reads (``strategies.cost.fp8_attention.RATIOS``,
docs/calibration.md §5.98): per chip and head-dim class, the BF16 / MXFP8 time at each
sequence length of the causal (``top_left``) shapes, non-deterministic backward. ``--rows``:
the held-out rows whose config runs FP8 attention (``plan.fp8_attention``), the attention
core's forward/backward ms per layer and micro-batch in BF16 and in MXFP8 (casts included),
and the analytic step with and without it. The argument is a cudnn-frontend clone or bare git directory (default: the mirror
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


#: the benchmark file per ``(chip, class)`` of ``strategies.cost.fp8_attention.RATIOS``
TABLE_FILES = {("gb200", "192/128"): "dsv3/gb200/dsv3_20260424_101009.csv",
               ("gb300", "192/128"): "dsv3/gb300/dsv3_20260424_101002.csv",
               ("gb200", "128/128"): "llama3.1/gb200/llama3.1_20260424_100750.csv",
               ("gb300", "128/128"): "llama3.1/gb300/llama3.1_20260424_100757.csv",
               ("gb200", "64/64w128"): "gpt_oss/gb200/gpt_oss_20260424_100011.csv",
               ("gb300", "64/64w128"): "gpt_oss/gb300/gpt_oss_20260424_100022.csv"}


def mxfp8_table(repo: str) -> dict[tuple[str, str], tuple[tuple[float, ...], ...]]:
    """``{(chip, class): (forward, backward)}`` BF16 / MXFP8 time ratios of the causal shapes
    per sequence length (ascending), rounded to 3 decimals, from ``TABLE_FILES`` at HEAD."""
    out = {}
    for key, f in TABLE_FILES.items():
        t: dict[tuple, float] = {}
        for r in csv.DictReader(io.StringIO(_git(repo, "show", f"HEAD:{RESULTS}/{f}"))):
            if (r["success"] == "True" and r["attn_mask"] == "top_left"
                    and r["deterministic_bwd"] == "False"):
                t[(int(r["q_seqlen"]), r["profile_pass"], r["data_type"])] = float(r["time_ms"])
        seqs = sorted({k[0] for k in t})
        out[key] = tuple(tuple(round(t[(s, p, "bfloat16")] / t[(s, p, "mxfp8")], 3)
                               for s in seqs) for p in ("fwd", "bwd"))
    return out


def rows_report() -> None:
    """Print ``--rows`` (see the module doc)."""
    import dataclasses
    import os
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from strategies.cost import attention_time
    from strategies.estimate import estimate
    from strategies.reference.cases import case_from_entry, load_reference
    print("| row | measured s | attention fwd / bwd ms per layer, BF16 -> MXFP8 "
          "| analytic s without -> with | error without -> with |")
    print("|---|---|---|---|---|")
    for e in load_reference("strategies/reference/data/heldout_2026b.json"):
        if (e.get("plan") or {}).get("fp8_attention") is not True:
            continue
        case = case_from_entry(e)
        job = case.job
        off = dataclasses.replace(job, framework=dataclasses.replace(job.framework,
                                                                     fp8_attention=False))
        m, p, gpu = job.model, job.plan, job.cluster.gpu
        a = [attention_time.attention_time_fwd(m, p.mbs, p.tp, p.cp, True, gpu, fw=j.framework)
             for j in (off, job)]
        t0, t1 = estimate(off).step_time_s, estimate(job).step_time_s
        meas = case.measured_step_s
        print(f"| {e['id']} | {meas:.3f} | {a[0][0] * 1e3:.2f} / {a[0][1] * 1e3:.2f} -> "
              f"{a[1][0] * 1e3:.2f} / {a[1][1] * 1e3:.2f} | {t0:.3f} -> {t1:.3f} | "
              f"{(t0 / meas - 1) * 100:+.1f} -> {(t1 / meas - 1) * 100:+.1f} % |")


def main(argv: list[str]) -> int:
    if "--rows" in argv:
        rows_report()
        return 0
    table = "--table" in argv
    argv = [a for a in argv if a != "--table"]
    repo = argv[0] if argv else "/work/.mirror/NVIDIA+cudnn-frontend/repo"
    if table:
        print(f"NVIDIA/cudnn-frontend @{_git(repo, 'rev-parse', 'HEAD').strip()[:12]}: "
              "BF16 / MXFP8 time, causal, sequence 2k-32k")
        print()
        print("| chip | class | pass | ratios |")
        print("|---|---|---|---|")
        for (chip, cls), (f, b) in mxfp8_table(repo).items():
            print(f"| {chip} | {cls} | fwd | {', '.join(f'{x:.3f}' for x in f)} |")
            print(f"| {chip} | {cls} | bwd | {', '.join(f'{x:.3f}' for x in b)} |")
        return 0
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
