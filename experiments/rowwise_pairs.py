"""torchao's float8 rowwise rows of heldout_2026b.json beside their tensorwise and bf16 twins
(docs/calibration.md §5.147): measured and modelled step-time ratios, and the mean layer's
cast bytes per micro-batch of each precision.

    python experiments/rowwise_pairs.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strategies.cost import quantise  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import reference_cases  # noqa: E402

FILE = str(ROOT / "strategies" / "reference" / "data" / "heldout_2026b.json")
ROWS = ("torchtitan_2506_70b_256gpu_fp8rw_tp", "torchtitan_2506_70b_256gpu_fp8rw_asynctp",
        "torchtitan_2506_8b_64gpu_fp8rw_tp", "torchtitan_2506_8b_64gpu_fp8rw_asynctp")


def main() -> None:
    cases = {c.id: c for c in reference_cases([FILE])}
    print("| row | measured rw / tw | model rw / tw | measured rw / bf16 | model rw / bf16 "
          "| error rw | casts GB fwd / bwd per layer and micro-batch, rw · tw |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for rid in ROWS:
        got = []
        for r in (rid, rid.replace("fp8rw", "fp8tw"), rid.replace("fp8rw", "bf16")):
            c = cases[r]
            got.append((c.measured_step_s, estimate(c.job).step_time_s, c.job))
        (mr, er, jr), (mt, et, jt), (mb, eb, _) = got
        casts = []
        for j in (jr, jt):
            p, fw = j.plan, j.framework
            f, b = quantise.layer_cast_bytes(
                j.model, p.mbs, p.tp, p.cp, p.sp, j.cluster.gpu, j.dtype,
                fw.grouped_mlp_casts, fw.torchao_float8_tp, fw.mlp_act_casts)
            casts.append(f"{float(f) / 1e9:.2f} / {float(b) / 1e9:.2f}")
        print(f"| {rid} | {mr / mt:.3f} | {er / et:.3f} | {mr / mb:.3f} | {er / eb:.3f} "
              f"| {100 * (er / mr - 1):+.1f} % | {casts[0]} · {casts[1]} |")
    print()
    print("| row | where the time goes, rowwise - tensorwise (seconds per step) |")
    print("|---|---|")
    for rid in ROWS:
        a, b = (estimate(cases[r].job).breakdown_s
                for r in (rid, rid.replace("fp8rw", "fp8tw")))
        diff = ", ".join(f"{k} {a[k] - b.get(k, 0.0):+.3f}" for k in a
                         if abs(a[k] - b.get(k, 0.0)) >= 0.0005)
        print(f"| {rid} | {diff} |")


if __name__ == "__main__":
    main()
