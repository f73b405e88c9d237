"""Sequence parallelism's backward re-gathers on every reference row (docs/calibration.md
§5.70): per file, the rows with tp > 1 and SP on a stack that re-gathers
(``FrameworkProfile.sp_regather``), how many expose any of it (an all-gather longer than the
data-gradient GEMM it runs beside, ``cost.stage.sp_regather_exposed``), the largest ratio of
the all-gather to the shortest such GEMM (QKV's; exposure starts at 1) and its row. With
``--rows``, every such row: tp, the all-gather's and QKV's dgrad microseconds, the exposed
microseconds per layer and micro-batch. Analytic, about 20 s.

    python experiments/sp_regather.py [--rows]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import sp_regather_exposed, stage_costs  # noqa: E402
from strategies.errors import SpecError  # noqa: E402
from strategies.reference.cases import case_from_entry  # noqa: E402


def sp_rows(path: str) -> list[tuple[str, int, float, float, float, str]]:
    """``(id, tp, t_ag, qkv dgrad, exposed, stack on GPU)`` (seconds) of each row of ``path``
    that re-gathers."""
    with open(path) as f:
        rows = json.load(f)
    out = []
    for r in rows:
        try:
            case = case_from_entry(r, rows)
        except (SpecError, ValueError, KeyError):
            continue
        job = getattr(case, "job", None)
        if job is None or job.plan.tp < 2 or not job.plan.sp:
            continue
        c = stage_costs(job)
        if c.rg_bytes <= 0:
            continue
        t = float(cm.collective_time("allgather", c.rg_bytes, job.plan.tp, 1, job.cluster))
        out.append((r["id"], job.plan.tp, t, c.rg_attn, float(sp_regather_exposed(
            lambda w: cm.collective_time("allgather", c.rg_bytes * w, job.plan.tp, 1,
                                         job.cluster), c)),
                    f"{job.framework.name} on {job.cluster.gpu.name}"))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="list every row that re-gathers")
    a = ap.parse_args(argv)
    total = exposed = 0
    stacks: dict[str, int] = {}
    for f in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        if "schedule_studies" in f:
            continue
        rows = sp_rows(f)
        if not rows:
            continue
        n_exp = sum(x[4] > 0 for x in rows)
        for x in rows:
            stacks[x[5]] = stacks.get(x[5], 0) + 1
        worst = max(rows, key=lambda x: x[2] / x[3])
        total, exposed = total + len(rows), exposed + n_exp
        print(f"{os.path.basename(f):28} re-gathering rows {len(rows):4d}  exposed {n_exp:3d}  "
              f"max all-gather/QKV dgrad {worst[2] / worst[3]:.2f} ({worst[0]})")
        if a.rows:
            for rid, tp, t, d, e, _ in rows:
                print(f"    {rid:60} tp {tp}  all-gather {t * 1e6:8.1f} us  QKV dgrad "
                      f"{d * 1e6:8.1f} us  exposed {e * 1e6:7.2f} us")
    print(f"all files: {total} rows re-gather, {exposed} expose some of it; by stack: "
          + ", ".join(f"{k} {n}" for k, n in sorted(stacks.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
