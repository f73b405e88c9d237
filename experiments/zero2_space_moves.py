"""Which candidates a change to the estimate moves, and are they closer to their
contention-free simulation (docs/calibration.md §5.127)? Two steps, GPT-3 175B on
``dgx-a100:128``, global batch 1536:

    python experiments/zero2_space_moves.py estimate OUT.npz      # in each tree: the array
        # estimate and lower bound of every candidate of the default and --schedules all spaces
    python experiments/zero2_space_moves.py simulate BEFORE.npz AFTER.npz TOP RANDOM [SEED]
        # per space, the candidates whose estimate moved: the TOP largest moves and RANDOM
        # drawn (numpy seed SEED, default 0; the "all" space's ZB-V and DualPipeV only),
        # each simulated contention-free, est/sim - 1 before and after

The first prints each space's size and how many bounds are above their estimate; the second
one line per simulated plan, then the mean |est/sim - 1| before and after and how many moved
closer. Minutes to an hour (pp 2-4 plans with cp 32-128 simulate for minutes each).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _estimate(out: str) -> None:
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import cluster_preset
    m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    res = {}
    for name, opts in (("default", SpaceOptions()), ("all", SpaceOptions(schedules="all"))):
        sp = enumerate_space(m, cl, 1536, opts)
        arr = estimate_arrays(m, cl, "bf16", sp.arrays)
        bd = step_time_lower_bound(m, cl, "bf16", sp.arrays, costs=arr["stage_costs"])
        res[name + "_keys"] = np.array([sp.key(i) for i in range(sp.size)])
        res[name + "_est"], res[name + "_bound"] = arr["step_time_s"], bd
        print(name, sp.size, int((bd > arr["step_time_s"]).sum()))
    np.savez(out, **res)


def _simulate(before: str, after: str, n_top: int, n_rand: int, seed: int) -> None:
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import parse_cluster_arg
    a, b = np.load(before), np.load(after)
    m, cl = model_preset("gpt3-175b"), parse_cluster_arg("dgx-a100:128")
    rng = np.random.default_rng(seed)
    for n, kinds in (("default", None), ("all", ("zb-v", "dualpipev"))):
        ia = {k: i for i, k in enumerate(a[n + "_keys"])}
        rows = []
        for j, k in enumerate(b[n + "_keys"]):
            if k in ia and a[n + "_est"][ia[k]] != b[n + "_est"][j]:
                if kinds and not any(("schedule=" + s + ",") in k for s in kinds):
                    continue
                rows.append((b[n + "_est"][j] / a[n + "_est"][ia[k]] - 1, k,
                             a[n + "_est"][ia[k]], b[n + "_est"][j]))
        rows.sort()
        pick = rows[len(rows) - n_top:] + [rows[i] for i in rng.choice(len(rows) - n_top,
                                                                          n_rand, replace=False)]
        res = []
        for r, k, eb, ea in pick:
            t = time.time()
            job = make_job(m, cl, parse_plan(str(k).replace(",gbs=1536", "")),
                           global_batch=1536)
            sim = simulate(job, network="contention-free").step_time_s
            res.append((eb / sim - 1, ea / sim - 1))
            print(f"{n} {job.plan.short():55s} move {r:+.2%} before {eb / sim - 1:+.2%} "
                  f"after {ea / sim - 1:+.2%} ({time.time() - t:.0f}s)", flush=True)
        x = np.array(res)
        print(n, "mean|before|", np.abs(x[:, 0]).mean(), "mean|after|", np.abs(x[:, 1]).mean(),
              "closer", int((np.abs(x[:, 1]) < np.abs(x[:, 0])).sum()), "of", len(x))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "estimate":
        _estimate(argv[1])
        return 0
    if len(argv) in (5, 6) and argv[0] == "simulate":
        _simulate(argv[1], argv[2], int(argv[3]), int(argv[4]),
                  int(argv[5]) if len(argv) == 6 else 0)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
