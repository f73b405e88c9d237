"""Every plan a search simulates, run twice in this process: folded by parts (``fold_spec``,
``simulator.fold_ep.part_digits``: cut at the node, the hybrid-sharding replica, the expert
groups) and by the coordinate translations alone (``fold_spec(parts=False)``, the fold
before parts were cut for dense plans). Per plan: ranks simulated, events and CPU seconds of
each run, and whether the parts' representatives' records are the same bit for bit, every
rank the coordinate fold simulates runs its new representative's timeline, the metrics are
equal but the fold's bookkeeping (``BOOKKEEPING``; the per-rank ones compared on the ranks
both simulate) and the search's figures (``simulate_figures`` less
``wall_s`` and ``events``) are equal. Exits 1 if any differ.

    python experiments/fold_parts_check.py
    python experiments/fold_parts_check.py --search="--model gpt-530b --cluster hgx-h800:256"

``--search ARGS``: as ``experiments/profile_search.py``'s (default: the README's search,
gpt3-175b on 128 DGX A100 nodes); the plans are that search's simulations.
``--coordinates-digest``: also ``profile_search.py --digest``'s hashes with the coordinate
fold, to compare with a checkout's from before the parts (``--tree``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import profile_search                                                     # noqa: E402
import simulator.extend as ext                                            # noqa: E402
import simulator.simulate as sim                                          # noqa: E402
from strategies.hf_config import load_model_arg                           # noqa: E402
from strategies.job import make_job                                       # noqa: E402
from strategies.presets import model_preset                               # noqa: E402
from topologies.cluster import cluster_preset                             # noqa: E402
from topologies.cluster.arg import parse_cluster_arg                      # noqa: E402

#: metrics that say what was simulated, not what the step does
BOOKKEEPING = ("fold_note", "link_utilisation", "activation_memory", "rank_ends_s", "rank_gpus")


def coordinates_only(f):
    """Run ``f()`` with ``simulate`` folding by the coordinate translations alone."""
    parts_fold = sim.fold_spec      # ``simulate`` reads ``fold_spec`` from its module
    sim.fold_spec = lambda j, fold=True, **kw: parts_fold(j, fold, parts=False, **kw)
    try:
        return f()
    finally:
        sim.fold_spec = parts_fold


def timed(f):
    c0 = time.process_time()
    out = f()
    return out, time.process_time() - c0


def same_run(new, old) -> bool:
    """``new`` (parts) and ``old`` (coordinates) compute the same step, bit for bit."""
    mine = set(new.simulated_ranks)
    if sorted(new.records) != sorted(r for r in old.records if r.rank in mine):
        return False
    by: dict[int, list] = {}
    for r in old.records:
        by.setdefault(r.rank, []).append(r._replace(rank=0, peer=0))
    rep_of = {q: rep for rep, ranks in new.rank_map.items() for q in ranks}
    if not all(sorted(by[q]) == sorted(by[rep_of[q]]) for q in old.simulated_ranks):
        return False
    if new.step_time_s != old.step_time_s or new.metrics.keys() != old.metrics.keys():
        return False
    if any(new.metrics[k] != old.metrics[k] for k in new.metrics if k not in BOOKKEEPING):
        return False
    return all(new.metrics[k][r] == old.metrics[k][r] for k in BOOKKEEPING[2:]
               if k in new.metrics for r in mine & set(old.simulated_ranks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--search", default="", metavar="ARGS",
                    help="the search's arguments (default: the README's search)")
    ap.add_argument("--coordinates-digest", action="store_true",
                    help="also print profile_search's digest of the plans folded by the "
                    "coordinates alone (a checkout before parts gives the same)")
    a = ap.parse_args()
    args = tuple(a.search.split())
    plans = profile_search.profile(args)
    if a.coordinates_digest:
        coordinates_only(lambda: profile_search.digest(plans, args))
    opt = dict(zip(args[::2], args[1::2]))
    if args:
        model, cluster = load_model_arg(opt["--model"]), parse_cluster_arg(opt["--cluster"])
    else:
        model, cluster = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    bad = 0
    totals = [0, 0, 0.0, 0.0]
    print("ranks before -> after, events before -> after, simulate CPU s before -> after")
    for plan in plans:
        job = make_job(model, cluster, plan, framework=opt.get("--framework"))
        new, t_new = timed(lambda: sim.simulate(job))
        old, t_old = coordinates_only(lambda: timed(lambda: sim.simulate(job)))
        fig = {k: v for k, v in ext.simulate_figures(job).items()
               if k not in ("wall_s", "events")}
        fig_old = coordinates_only(lambda: ext.simulate_figures(job))
        same = same_run(new, old) and fig == {k: v for k, v in fig_old.items()
                                              if k not in ("wall_s", "events")}
        bad += not same
        totals = [totals[0] + old.events, totals[1] + new.events, totals[2] + t_old,
                  totals[3] + t_new]
        print(f"  {len(old.simulated_ranks):>5} -> {len(new.simulated_ranks):<5}"
              f"{old.events:>10,} -> {new.events:<10,}{t_old:6.2f} -> {t_new:<6.2f}"
              f"{'equal' if same else 'DIFFER'}  {new.step_time_s!r}  {plan.short()}")
    print(f"{len(plans)} plans, {bad} differ; events {totals[0]:,} -> {totals[1]:,}, "
          f"simulate CPU s {totals[2]:.1f} -> {totals[3]:.1f}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
