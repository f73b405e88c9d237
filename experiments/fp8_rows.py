#!/usr/bin/env python
"""Every reference row that trains in a quantised precision (fp8 delayed or current scaling,
fp8-blockwise, mxfp8, nvfp4), with its stack, plan, analytic error and the estimate's casts
(docs/calibration.md §5.118). Analytic only; about two minutes.

    python experiments/fp8_rows.py

Table 1: per row, the file, GPU, precision, stack, plan, measured and estimated step (s), the
error (estimate/measured − 1) and the casts' share of the estimated step (``cast_time`` of the
mean layer times the layer-micro-batches of the compute term, ``llama405_blackwell``'s
reading; dense rows only, MoE rows "-") and, for a current-scaling row, its error were the same
job priced with delayed scaling (``fp8``: no amax pass, no TP amax all-reduce, casts fused
where a producer can fuse them): all that current scaling adds in the model.

Table 2: the rows' mean and mean absolute error per GPU family and precision.

Table 3: per file, the quantised rows' count and MAPE.
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import replace

_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TREE)

from experiments.blackwell_dense_rows import DATA, plan_text, table  # noqa: E402
from experiments.llama405_blackwell import layer_parts, measured_layer  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference, run_file_names  # noqa: E402
from topologies.precision import get_precision  # noqa: E402

#: GPU name prefixes to families (Table 2)
FAMILIES = (("H100", "H100"), ("H200", "H200"), ("B200", "B200"), ("B300", "B300"),
            ("GB200", "GB200"), ("GB300", "GB300"), ("MI", "AMD"), ("A100", "A100"))


def family(gpu: str) -> str:
    """The family Table 2 groups ``gpu`` under (its own name where none matches)."""
    return next((f for p, f in FAMILIES if gpu.startswith(p)), gpu)


def quantised_rows(files: tuple[str, ...] | None = None) -> list[dict]:
    """Table 1's records: every row the reader builds whose precision is quantised, in file
    then row order (the schedule studies left out, as ``reference_mape``); ``files``: only
    these reference files (names in ``DATA``), default all."""
    out = []
    for name in sorted(files) if files else run_file_names(DATA):
        rows = load_reference(os.path.join(DATA, name))
        for r in rows:
            c = case_from_entry(r, rows)
            if c.job is None or c.measured_step_s is None \
                    or not get_precision(c.job.dtype).quantised:
                continue
            e = estimate(c.job)
            delayed = None
            if c.job.dtype == "fp8-current":
                t = estimate(replace(c.job, dtype="fp8")).step_time_s
                delayed = 100 * (t / c.measured_step_s - 1)
            share = None
            if not c.job.model.is_moe:
                layers, mb, _ = measured_layer(c)
                share = 100 * layer_parts(c.job)["casts"] * layers * mb / e.step_time_s
            out.append({"file": name[:-5], "id": c.id, "gpu": c.job.cluster.gpu.name,
                        "dtype": c.job.dtype, "stack": c.job.framework.name,
                        "plan": plan_text(c), "meas": c.measured_step_s,
                        "est": e.step_time_s,
                        "err": 100 * (e.step_time_s / c.measured_step_s - 1), "casts": share,
                        "delayed": delayed})
    return out


def main() -> None:
    recs = quantised_rows()
    table("Table 1: rows in a quantised precision, analytic estimate",
          ["file", "row", "gpu", "dtype", "stack", "plan", "measured s", "est s", "error",
           "casts % of step", "as fp8 (delayed)"],
          [[r["file"], r["id"], r["gpu"], r["dtype"], r["stack"], r["plan"],
            f"{r['meas']:.3f}", f"{r['est']:.3f}", f"{r['err']:+.1f} %",
            "-" if r["casts"] is None else f"{r['casts']:.2f}",
            "-" if r["delayed"] is None else f"{r['delayed']:+.1f} %"] for r in recs], left=6)
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    files: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        groups[(family(r["gpu"]), r["dtype"])].append(r["err"])
        files[r["file"]].append(r["err"])
    table("Table 2: mean error by GPU family and precision",
          ["family", "dtype", "rows", "mean error", "mean abs error"],
          [[g, d, str(len(e)), f"{sum(e) / len(e):+.2f} %",
            f"{sum(abs(x) for x in e) / len(e):.2f} %"] for (g, d), e in sorted(groups.items())],
          left=2)
    table("Table 3: quantised rows per file", ["file", "rows", "MAPE"],
          [[f, str(len(e)), f"{sum(abs(x) for x in e) / len(e):.2f} %"]
           for f, e in sorted(files.items())])


if __name__ == "__main__":
    main()
