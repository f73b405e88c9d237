"""The README search's parent up to its first simulation: its CPU seconds and the cyclic
garbage collector's collections in it, by phase (imports, ``enumerate_space``, the rest:
estimate, bound, reference plans).

Runs ``search`` with its defaults in this process (``--workers 1``) and stops it when it
submits its first simulation; a ``gc.callbacks`` hook counts the collections and the CPU
seconds spent in them (the collector's own walk; what it costs the caches besides is not
counted), and how many unreachable objects a full collection finds at the end (the cyclic
garbage the phase left). ``--tree DIR`` runs another checkout (``git archive COMMIT | tar -x
-C DIR``) with this harness. Prints figures; asserts nothing. CPU seconds move with the
machine's load; compare checkouts alternately.

    python experiments/profile_search_gc.py
    python experiments/profile_search_gc.py --tree /tmp/before
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import sys
import time
from pathlib import Path


class _Stop(Exception):
    """Raised at the search's first simulation."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                    help="the checkout to run (default: this one)")
    a = ap.parse_args()
    sys.path.insert(0, a.tree)
    counts = {"collections": 0, "full": 0, "gc_cpu": 0.0}
    started: list[float] = []

    def hook(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.process_time())
        else:
            counts["gc_cpu"] += time.process_time() - started.pop()
            counts["collections"] += 1
            counts["full"] += info["generation"] == 2

    rows: list[tuple[str, float, dict]] = []
    mark = [time.process_time()]

    def close(phase: str) -> None:
        now = time.process_time()
        rows.append((phase, now - mark[0], dict(counts)))
        counts.update(collections=0, full=0, gc_cpu=0.0)
        mark[0] = now

    gc.callbacks.append(hook)
    import simulator.search.executors as ex
    import simulator.search.run as run
    from simulator.cli.main import main as cli
    close("imports")
    enumerate_space = run.enumerate_space

    def timed(*args, **kw):
        close("start-up")
        try:
            return enumerate_space(*args, **kw)
        finally:
            close("enumerate_space")

    def submit(_self, _index: int) -> None:
        raise _Stop
    run.enumerate_space = timed
    ex.InProcess.submit = submit
    with contextlib.suppress(_Stop), contextlib.redirect_stdout(io.StringIO()):
        cli(["search", "--workers", "1"])
    close("estimate, bound, first plan")
    gc.callbacks.remove(hook)
    left = gc.collect()
    print(f"search's parent before its first simulation ({a.tree}):")
    for phase, cpu, c in rows:
        print(f"  {phase:<28} {cpu:6.3f} CPU s  {c['collections']:4d} collections "
              f"({c['full']} full) {c['gc_cpu']:6.3f} CPU s in them")
    print(f"  total {sum(r[1] for r in rows):.3f} CPU s; unreachable objects found after: {left}")


if __name__ == "__main__":
    main()
