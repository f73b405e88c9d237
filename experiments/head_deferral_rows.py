#!/usr/bin/env python
"""The deferred output-layer weight gradient row by row (docs/calibration.md §5.232, §5.234):
per reference row whose plan states it (``plan.defer_embedding_wgrad_compute``, read into
``SystemConfig.head_wgrad_deferral``), the analytic step time and the last stage's and the
peak stage's memory (GiB) without and with the deferral, and those rows' MAPE both ways.

    python experiments/head_deferral_rows.py
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.memory.scalar import memory_by_stage  # noqa: E402
from strategies.reference.cases import DATA_DIR, case_from_entry  # noqa: E402

GIB = 2 ** 30
#: the reference files whose rows state the switch
FILES = ("heldout_mlperf_gpt3", "heldout_mlperf_llama", "nemo_performance_25")


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    for f in FILES:
        rows = json.load(open(os.path.join(DATA_DIR, f + ".json"), encoding="utf-8"))
        e0 = e1 = n = 0.0
        for r in rows:
            if r.get("duplicate_of"):
                continue
            c = case_from_entry(r)
            if c.skipped or c.job is None or c.job.plan.pp < 2:
                continue
            j = c.job
            k = j.system.head_wgrad_deferral
            if not k:
                continue
            off, on = (replace(j, system=replace(j.system, head_wgrad_deferral=x))
                       for x in (0.0, k))
            t0, t1 = estimate(off).step_time_s, estimate(on).step_time_s
            m0, m1 = memory_by_stage(off), memory_by_stage(on)
            meas = c.measured_step_s
            e0 += abs(t0 / meas - 1)
            e1 += abs(t1 / meas - 1)
            n += 1
            print(f"{r['id'][:58]:58s} k {k:3g} meas {meas:7.3f} est {t0:7.3f} -> {t1:7.3f}  "
                  f"last {m0[-1].total / GIB:6.1f} -> {m1[-1].total / GIB:6.1f}  peak "
                  f"{max(x.total for x in m0) / GIB:6.1f} -> {max(x.total for x in m1) / GIB:6.1f}"
                  f"  HBM {j.cluster.min_hbm_bytes / GIB:.0f} GiB")
        if n:
            print(f"  {f}: {int(n)} rows stating it, MAPE of these rows "
                  f"{100 * e0 / n:.2f} -> {100 * e1 / n:.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
