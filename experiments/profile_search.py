"""Where the default search's CPU time goes, simulation by simulation, and a digest of what
each simulation computed (to check that a faster simulator computes the same, bit for bit).

Runs the README's main job (``search`` with its defaults) in this process with ``--workers 1``
and process CPU time around each phase of every simulation (compile, engine setup, the event
loop, the metrics, the network's construction) and around each of the search's simulations
(plan, events, method).
``--digest`` then simulates each of those plans again (``simulate`` and the search's
``simulate_figures``) and hashes its records in order, step time, event count, metrics and
figures; the total hash must be the same for two checkouts whose outputs are the same.
``--tree DIR`` runs another checkout (``git archive COMMIT | tar -x -C DIR``) with this harness.
Prints figures; asserts nothing. CPU seconds still move with the machine's load (a shared
core runs slower); compare checkouts alternately.

    python experiments/profile_search.py
    python experiments/profile_search.py --digest --tree /tmp/before
    python experiments/profile_search.py --search="--model gpt-530b --cluster hgx-h800:256"

``--search ARGS``: another search than the README's (its arguments as ``--key value`` pairs,
``--workers 1 --json`` added); ``--digest`` then hashes each plan's search figures (less
``wall_s`` and ``events``) for the ``--model``, ``--cluster`` and ``--framework`` given.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

_TREE = (sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1]
         else str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, _TREE)


def timed(spent: Counter, name: str, owner, attr: str) -> None:
    """Wrap ``owner.attr`` so that each call adds its process CPU seconds to ``spent[name]``
    (also used by experiments/profile_simulate.py)."""
    f = getattr(owner, attr)

    def wrapper(*a, **k):
        c0 = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[name] += time.process_time() - c0
    setattr(owner, attr, wrapper)


def profile(args: tuple[str, ...] = ()) -> list:
    """Run the search (``args``: its arguments, none for the README's); print CPU seconds by
    phase and by simulation; return the plans."""
    import simulator.extend as ext
    import simulator.simulate as sim
    from simulator.cli.main import main
    from simulator.engine import core
    spent: Counter = Counter()
    for name, owner, attr in (("compile", sim, "compile_job"), ("metrics", sim, "derive_metrics"),
                              ("network", sim, "new_network"),
                              ("engine setup", core.Engine, "__init__"),
                              ("engine setup", core.Engine, "start"), ("run", sim.engine, "run"),
                              ("simulate", sim, "simulate")):
        timed(spent, name, owner, attr)
    sims = []
    figures = ext.simulate_figures

    def simulate_figures(job, exact=False):
        c0 = time.process_time()
        out = figures(job, exact)
        sims.append((time.process_time() - c0, job.plan, out["events"], out["method"]))
        return out
    ext.simulate_figures = simulate_figures
    c0 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        main(["search", *args, "--workers", "1", "--json"])
    total = time.process_time() - c0
    spent["event loop"] = spent.pop("run") - spent["engine setup"]
    print(f"search ({_TREE}): {total:.2f} CPU s, of which the simulations {spent['simulate']:.2f}:"
          + "".join(f" {k} {spent[k]:.2f}," for k in ("compile", "engine setup", "event loop",
                                                       "metrics", "network")).rstrip(","))
    for cpu, plan, events, method in sims:
        print(f"  {cpu:6.2f} CPU s {events:>9,} events  {plan.short():<40} {method}")
    return [plan for _, plan, _, _ in sims]


def digest(plans: list, args: tuple[str, ...] = ()) -> None:
    """Hash what each plan's simulation computes (records in order, metrics, figures); with
    ``args`` (``--search``'s: its ``--model``, ``--cluster`` and ``--framework``) the search's
    figures alone (``simulate_figures`` less ``wall_s`` and ``events``: what a plan's row
    reports, the same whatever is folded)."""
    from simulator.extend import simulate_figures
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.hf_config import load_model_arg
    from topologies.cluster.arg import parse_cluster_arg
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    model, cluster = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
    opt = dict(zip(args[::2], args[1::2]))
    total = hashlib.sha256()
    for plan in plans:
        if args:
            job = make_job(load_model_arg(opt["--model"]), parse_cluster_arg(opt["--cluster"]),
                           plan, framework=opt.get("--framework"))
            fig = simulate_figures(job)
            parts = [json.dumps({k: v for k, v in fig.items() if k not in ("wall_s", "events")},
                                sort_keys=True, default=repr)]
        else:
            job = make_job(model, cluster, plan)
            res = simulate(job)
            fig = simulate_figures(job)
            fig.pop("wall_s")
            parts = [repr(res.records), repr(res.step_time_s), str(res.events),
                     json.dumps(res.metrics, sort_keys=True, default=repr),
                     json.dumps(fig, sort_keys=True, default=repr)]
        h = hashlib.sha256()
        for part in parts:
            h.update(part.encode())
        total.update(h.digest())
        print(f"  {h.hexdigest()[:16]}  {plan.short()}")
    print(f"digest of {len(plans)} simulations: {total.hexdigest()[:16]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=None, help="run this checkout's simulator instead")
    ap.add_argument("--digest", action="store_true",
                    help="also hash what each simulation computes")
    ap.add_argument("--search", default="", metavar="ARGS",
                    help="the search's arguments (default: the README's search)")
    a = ap.parse_args()
    plans = profile(tuple(a.search.split()))
    if a.digest:
        digest(plans, tuple(a.search.split()))


if __name__ == "__main__":
    main()
