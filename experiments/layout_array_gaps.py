"""The search's array estimate of its uneven-layout rows against their lower bound and the
scalar estimate (docs/calibration.md §5.107): over the default search's space (GPT-3 175B on
``dgx-a100:128`` at global batch 1536, ``python -m simulator.cli search``; ``--schedules
all`` its all-schedule space), how many candidates have a lower bound above their array
estimate (``analytic.estimate_arrays``, the plan columns: what the search orders, prunes and
picks variants by), and for the layout rows (``estimate.kinds.kind_rows``) the array
estimate over the scalar's (``with_kind_rows``: ``paraplan estimate`` of the plan, what the
report shows).

    python experiments/layout_array_gaps.py                  # default space, about 1 min
    python experiments/layout_array_gaps.py --schedules all
    python experiments/layout_array_gaps.py --worst 5        # the 5 widest gaps, by plan
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gaps(schedules: str = "default") -> dict:
    """``{"n", "bound_above", "rows", "arrays", "scalar", "bound", "labels"}`` of the default
    search's space: its size, the count of candidates whose bound exceeds their array
    estimate, and for the layout rows their indices, array estimate, scalar estimate and
    bound (seconds) and short labels."""
    from simulator.cli.search import DEFAULT_GLOBAL_BATCH
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.kinds import kind_rows, with_kind_rows
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import parse_cluster_arg
    m, cl = model_preset("gpt3-175b"), parse_cluster_arg("dgx-a100:128")
    space = enumerate_space(m, cl, DEFAULT_GLOBAL_BATCH, SpaceOptions(schedules=schedules))
    arr = estimate_arrays(m, cl, "bf16", space.arrays)
    bound = step_time_lower_bound(m, cl, "bf16", space.arrays, costs=arr["stage_costs"])
    est = np.asarray(arr["step_time_s"], dtype=float)
    rows = kind_rows(m, space.arrays)
    scal = with_kind_rows(m, cl, "bf16", space.arrays, arr, space.plan, only=rows.tolist())
    return {"n": space.size, "bound_above": int(np.sum(bound > est)), "rows": rows,
            "arrays": est[rows], "scalar": np.asarray(scal["step_time_s"])[rows],
            "bound": np.asarray(bound)[rows],
            "labels": [space.plan(int(i)).short() for i in rows]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedules", choices=("default", "all"), default="default")
    ap.add_argument("--worst", type=int, default=0, metavar="K",
                    help="list the K layout rows whose arrays differ most from the scalar")
    a = ap.parse_args(argv)
    g = gaps(a.schedules)
    rel = g["arrays"] / g["scalar"] - 1
    print(f"space ({a.schedules} schedules): {g['n']} candidates, bound > array estimate: "
          f"{g['bound_above']}")
    print(f"layout rows: {len(g['rows'])}, arrays/scalar - 1: min {rel.min():+.4%}, "
          f"max {rel.max():+.4%}, mean |.| {np.abs(rel).mean():.4%}; "
          f"bound > scalar: {int(np.sum(g['bound'] > g['scalar']))}")
    for j in np.argsort(-np.abs(rel), kind="stable")[:a.worst].tolist():
        print(f"  {g['labels'][j]}: arrays {g['arrays'][j]:.6f} scalar {g['scalar'][j]:.6f} "
              f"({rel[j]:+.4%}) bound {g['bound'][j]:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
