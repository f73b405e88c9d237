"""The search's analytic arrays of uneven-layout rows against the scalar ``estimate`` of each
row's plan (docs/search.md "Uneven pipeline layouts").

For each search space (``enumerate_space`` with ``SpaceOptions(layouts=True)``) it takes the
feasible rows whose layout is uneven (``plan_arrays.rank_layers``' flag: slots, first/last
stage layer counts), a deterministic sample of them (every ``n``-th), and prints the relative
gap of the step time of

* ``raw``: the plan columns' arrays (``estimate_arrays_mixed``: each rank priced by its own
  layer count, the even pipeline's order), what the search reported before for a one-kind
  model (Llama 3.1 405B, Qwen3-235B-A22B; DeepSeek-V3 mixes kinds of layer, so its rows went
  through the scalar's path already);
* ``search``: the arrays the search reports (``estimate.kinds.with_kind_rows``: the rows it
  cannot price by columns go through the scalar's own path, ``scalar.step_arrays``),

to ``scalar.estimate(make_job(plan))``, their median and largest, and for the largest raw
gap the breakdown terms that differ (ms).

    python -m experiments.uneven_arrays_vs_scalar [--sample 24] [--spaces 405b,dsv3,qwen3]
"""
from __future__ import annotations

import argparse

import numpy as np

from strategies.estimate.kinds import with_kind_rows
from strategies.estimate.mixed import estimate_arrays_mixed
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate
from strategies.job import make_job
from strategies.plan_arrays import rank_layers
from strategies.presets import model_preset
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

SPACES = {   # name: (model preset, cluster preset, nodes, global batch)
    "405b": ("llama3.1-405b", "dgx-h100", 64, 2048),
    "dsv3": ("deepseek-v3", "dgx-h100", 32, 2048),     # dense first layers, MoE, one MTP
    "qwen3": ("qwen3-235b-a22b", "dgx-h100", 32, 2048),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=24, help="uneven rows per space")
    ap.add_argument("--spaces", default=",".join(SPACES))
    args = ap.parse_args()
    for name in args.spaces.split(","):
        mname, cname, nodes, gbs = SPACES[name]
        m, cl = model_preset(mname), cluster_preset(cname, nodes)
        sp = enumerate_space(m, cl, gbs, SpaceOptions(layouts=True))
        P = sp.arrays
        uneven = np.flatnonzero(rank_layers(m.num_layers, P)[4] & (np.asarray(P.pp) > 1))
        print(f"\n{name}: {mname} on {cname}:{nodes} gbs {gbs}: {sp.size} feasible plans, "
              f"{uneven.size} uneven")
        if uneven.size == 0:
            continue
        rows = uneven[:: max(1, uneven.size // args.sample)][: args.sample]
        raw = estimate_arrays_mixed(m, cl, "bf16", P)
        new = with_kind_rows(m, cl, "bf16", P, raw, sp.plan, only=rows.tolist())
        gaps_raw, gaps_new, worst = [], [], None
        for i in rows.tolist():
            e = estimate(make_job(m, cl, sp.plan(i)))
            g_raw = float(raw["step_time_s"][i]) / e.step_time_s - 1
            g_new = float(new["step_time_s"][i]) / e.step_time_s - 1
            gaps_raw.append(g_raw)
            gaps_new.append(g_new)
            if worst is None or abs(g_raw) > abs(worst[0]):
                worst = (g_raw, i, e)
        for label, g in (("raw (before)", gaps_raw), ("search (after)", gaps_new)):
            a = np.abs(np.array(g))
            print(f"  {label:15} |arrays/scalar - 1|: median {np.median(a):.3e}, "
                  f"max {a.max():.3e} over {a.size} rows")
        g, i, e = worst
        print(f"  largest raw gap {g:+.4f}: {plan_key(sp.plan(i))}")
        print(f"    {'term':10} {'raw ms':>10} {'scalar ms':>10} {'search ms':>10}")
        for k in ("step_time_s",) + BREAKDOWN_KEYS:
            s = e.step_time_s if k == "step_time_s" else e.breakdown_s[k]
            r, n = float(raw[k][i]), float(new[k][i])
            if abs(r - s) > 1e-9 * max(abs(s), 1e-3) or abs(n - s) > 1e-9 * max(abs(s), 1e-3):
                print(f"    {k:10} {r * 1e3:10.2f} {s * 1e3:10.2f} {n * 1e3:10.2f}")


if __name__ == "__main__":
    main()
