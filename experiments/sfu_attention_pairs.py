"""GB300 over GB200 fused attention speed: cuDNN's public SDPA benchmark against the model's
exposed exponentials (docs/calibration.md §5.60).

Reads the bf16 training SDPA timings NVIDIA publishes for GB200 and GB300 with the same cuDNN
(github.com/NVIDIA/cudnn-frontend, ``benchmark/sdpa_benchmark_training/results/<config>/
gb200|gb300/*.csv``; give a checkout with ``--cudnn-frontend DIR``, nothing is copied here),
pairs the same shapes, and prints per model family and pass: the measured GB200/GB300 time
ratio, the exposed fraction it implies, ``(t200 - t300) / (n·(1/R200 - 1/R300))`` with ``n``
one exponential per computed score element and ``R`` the SFU rates of ``topologies.gpus``,
and the ratio the cost model gives for that head dimension (``attention_time.attention_time_fwd``).

    python experiments/sfu_attention_pairs.py --cudnn-frontend /path/to/cudnn-frontend
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import glob
import os
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_time  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

KEY = ("config_name", "attn_mask", "batch_size", "q_seqlen", "num_q_heads", "num_kv_heads",
       "head_dim_qk", "head_dim_vo", "profile_pass", "sliding_window_size")


def read_pairs(root: str) -> list[tuple[dict, dict]]:
    """(GB200 row, GB300 row) of every bf16, non-deterministic shape timed on both."""
    rows: dict = {}
    pattern = os.path.join(root, "benchmark", "sdpa_benchmark_training", "results", "*",
                           "gb[23]00", "*.csv")
    for path in sorted(glob.glob(pattern)):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if (r["success"] != "True" or r["data_type"] != "bfloat16"
                        or r["deterministic_bwd"] != "False"):
                    continue
                rows[(r["gpu_name"].split()[-1],) + tuple(r[k] for k in KEY)] = r
    return [(r, rows[("GB300",) + k[1:]]) for k, r in sorted(rows.items())
            if k[0] == "GB200" and ("GB300",) + k[1:] in rows]


def model_ratio(dqk: int, dv: int, backward: bool) -> float:
    """The model's GB200/GB300 time ratio of a fused attention pass with these head dims
    (both terms scale with the score elements; the kernel's grid factor on each chip's SMs at
    batch 1 and the preset's heads and sequence, docs/calibration.md §5.130)."""
    if dqk != dv:   # MLA's shapes: DeepSeek-V3's 192/128
        m = model_preset("deepseek-v3")
    else:
        m = dataclasses.replace(model_preset("llama3-70b"), kv_channels=dqk)
    if (m.head_dim, m.v_dim) != (dqk, dv):
        raise SystemExit(f"no preset with head dims {dqk}/{dv}")
    t = {g: attention_time.attention_time_fwd(m, 1, 1, 1, True, get_gpu(g))
         for g in ("GB200", "GB300")}
    i = 1 if backward else 0
    return float(t["GB200"][i] / t["GB300"][i])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cudnn-frontend", required=True, help="a cudnn-frontend checkout")
    a = ap.parse_args()
    r200, r300 = get_gpu("GB200").exp_rate, get_gpu("GB300").exp_rate
    groups: dict = {}
    for g2, g3 in read_pairs(a.cudnn_frontend):
        t2, t3 = float(g2["time_ms"]) * 1e-3, float(g3["time_ms"]) * 1e-3
        dq, dv, p = int(g2["head_dim_qk"]), int(g2["head_dim_vo"]), g2["profile_pass"]
        flops = float(g2["tflops"]) * 1e12 * t2 \
            / (attention_time.FLASH_BWD_FACTOR if p == "bwd" else 1)
        n = flops / (2 * (dq + dv))
        win = "window" if g2["sliding_window_size"] else "full"
        g = groups.setdefault((g2["config_name"], dq, dv, win, p), ([], []))
        g[0].append(t2 / t3)
        g[1].append((t2 - t3) / (n * (1 / r200 - 1 / r300)))
    print("| family | head dims | attention | pass | shapes | measured GB200/GB300 (median, "
          "range) | exposed fraction (median) | model |")
    print("| --- | --- | --- | --- | ---: | --- | ---: | ---: |")
    for (cfg, dq, dv, win, p), (ratio, om) in sorted(groups.items()):
        print(f"| {cfg} | {dq}/{dv} | {win} | {p} | {len(ratio)} | {st.median(ratio):.3f} "
              f"({min(ratio):.3f}-{max(ratio):.3f}) | {st.median(om):.2f} | "
              f"{model_ratio(dq, dv, p == 'bwd'):.3f} |")
    for p in ("fwd", "bwd"):
        om = [x for (c, dq, dv, w, q), (_, o) in groups.items() if q == p and w == "full"
              for x in o]
        print(f"{p}: {len(om)} full-attention shapes, exposed fraction median {st.median(om):.3f}"
              f" (range {min(om):.2f}-{max(om):.2f}); model EXP_EXPOSED_{p.upper()[:3]} = "
              f"{attention_time.EXP_EXPOSED_FWD if p == 'fwd' else attention_time.EXP_EXPOSED_BWD}")


if __name__ == "__main__":
    main()
