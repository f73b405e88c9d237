"""Where the default search's time goes with its worker processes: the CPU seconds on its path.

``profile_search.py`` runs the search in one process; this runs the README's main job as it
runs (``search --json``, two local workers) and times, in CPU seconds (``time.process_time``,
which the machine's load moves far less than the wall clock): the parent up to its first
simulation (start-up, imports, enumeration, estimate, bound; its first plan of the search, not a
reference plan), each worker's start
(``executors._init_worker``: it runs while the parent scores), and each simulation
(``executors._run_in_worker``), the first of each worker apart (what it pays once). The
path figure is the parent's CPU before its first simulation plus the busier worker's
simulations after it (pro rata of a simulation's wall time across that instant): the wall time of the search on an idle 2-core machine, less the report.
``--tree DIR`` runs another checkout (``git archive COMMIT | tar -x -C DIR``) with this
harness. Prints figures; asserts nothing.

    python experiments/profile_search_workers.py
    python experiments/profile_search_workers.py --tree /tmp/before --repeat 3
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strategies.plan import Plan

ROOT = Path(__file__).resolve().parents[1]


_ORIG: dict = {}     # the checkout's ``_init_worker`` and ``_run_in_worker``
_STATE: dict = {}    # in a worker: its start's CPU seconds and end, whether a plan ran yet


def init_worker(ctx: tuple) -> None:
    """``executors._init_worker``, timed (in a worker)."""
    c0 = time.process_time()
    _ORIG["init"](ctx)
    _STATE.update(init_cpu=time.process_time() - c0, init_end=time.time(), first=True)


def run_in_worker(plan: Plan) -> dict[str, Any]:
    """``executors._run_in_worker``, timed (in a worker; a module-level function, so that
    the pool can send it: the forked worker finds it in ``__main__``)."""
    c0, t0 = time.process_time(), time.time()
    out = dict(_ORIG["run"](plan))
    out["_probe"] = {"pid": os.getpid(), "cpu": time.process_time() - c0, "start": t0,
                     "end": time.time(), "first": _STATE.pop("first", False),
                     "init_cpu": _STATE.get("init_cpu"), "init_end": _STATE.get("init_end")}
    return out


def inner(tree: str) -> dict:
    """Run the search in this process (its workers forked from it); the timings as a dict."""
    t_start = time.time()
    sys.path.insert(0, tree)
    import simulator.search.executors as ex
    from simulator.cli.main import main
    _ORIG.update(init=ex._init_worker, run=ex._run_in_worker)
    ex._init_worker, ex._run_in_worker = init_worker, run_in_worker
    probes: list = []
    first: dict = {}
    submit, wait = ex.LocalPool.submit, ex.LocalPool.wait

    def pool_submit(self, index: int) -> None:
        if index >= 0:          # the search's own (a reference plan's index is negative)
            first.setdefault("cpu", time.process_time())   # from the process start
            first.setdefault("wall", time.time())
        submit(self, index)

    def pool_wait(self):
        got = wait(self)
        probes.extend(self.results[i]["_probe"] for i, _ in got)
        return got

    ex.LocalPool.submit, ex.LocalPool.wait = pool_submit, pool_wait
    with contextlib.redirect_stdout(io.StringIO()):
        main(["search", "--json", "--workers", "2"])
    workers: dict = {}
    for p in probes:
        w = workers.setdefault(p["pid"], {"init_cpu": p["init_cpu"], "init_end": p["init_end"],
                                          "sims": 0, "cpu": 0.0, "first_cpu": None,
                                          "cpu_on_path": 0.0})
        w["sims"] += 1
        w["cpu"] += p["cpu"]
        # the share of it after the search's first dispatch (a reference plan may run while
        # the parent scores), pro rata of its wall time
        span = p["end"] - p["start"]
        after = p["end"] - max(p["start"], first["wall"])
        w["cpu_on_path"] += p["cpu"] * (min(max(after / span, 0.0), 1.0) if span > 0 else 1.0)
        if p["first"]:
            w["first_cpu"] = p["cpu"]
    return {"parent_cpu_before_first": first["cpu"], "first_submit": first["wall"] - t_start,
            "wall": time.time() - t_start, "parent_cpu": time.process_time(),
            "workers": [dict(w, init_end=w["init_end"] - first["wall"] if w["init_end"] else None)
                        for w in workers.values()]}


def report(r: dict, tree: str) -> str:
    ws = sorted(r["workers"], key=lambda w: -w["cpu_on_path"])
    path = r["parent_cpu_before_first"] + (ws[0]["cpu_on_path"] if ws else 0.0)
    per = "; ".join(f"worker {n}: start {w['init_cpu']:.2f} CPU s (done {w['init_end']:+.2f} s "
                    f"from the first simulation's dispatch), {w['sims']} simulations "
                    f"{w['cpu']:.2f} CPU s, the first {w['first_cpu']:.2f}"
                    for n, w in enumerate(ws, 1))
    return (f"{tree}: path {path:.2f} CPU s (parent before its first simulation "
            f"{r['parent_cpu_before_first']:.2f}, busier worker after it "
            f"{ws[0]['cpu_on_path']:.2f}); "
            f"wall {r['wall']:.2f} s; {per}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(ROOT), help="run this checkout's search instead")
    ap.add_argument("--repeat", type=int, default=1, help="runs, each in its own process")
    ap.add_argument("--json", action="store_true", help="print one JSON record per run")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        print(json.dumps(inner(a.tree)))
        return
    for _ in range(a.repeat):
        out = subprocess.run([sys.executable, __file__, "--inner", "--tree", a.tree],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(r) if a.json else report(r, a.tree), flush=True)


if __name__ == "__main__":
    main()
