"""Where a simulation's time goes: CPU seconds per phase, and per event by part of the engine.

* Phases (default): ``simulate(job)`` of a ``bench_simulate.py`` case with CPU time (process
  time) around compile, engine setup, the event loop and the metrics; microseconds per event.
  ``--keep-gc`` leaves Python's garbage collector running (``simulator.gc_pause``).
* ``--spy FILE``: a py-spy raw profile of this script (``py-spy record -r 200 -f raw -o FILE
  -- python experiments/profile_simulate.py --case 175b-full``), its samples inside
  ``simulate`` grouped by part of the engine (SimPy itself, stream dispatch, finishing ops and
  their records, messages and rendezvous, the flow network, ...). py-spy samples without
  slowing the run down much, unlike cProfile, which inflates call-heavy code.

Prints figures; asserts nothing.

    python experiments/profile_simulate.py --case 175b-full
    python experiments/profile_simulate.py --case 175b-full --keep-gc   # collector running
    py-spy record -r 200 -f raw -o /tmp/spy.txt -- python experiments/profile_simulate.py
    python experiments/profile_simulate.py --spy /tmp/spy.txt
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (part, frame names that put a sample in it): a sample goes to the part of the innermost frame
# of its stack that names one (a stream finishing its op inside the flow network's callback is
# finishing, a transfer started by the engine is the flow network), else to SimPy when its
# innermost frame is SimPy's
PARTS = [
    ("compile (program builder, relabel)", ("compile_job",)),
    ("metrics", ("derive_metrics",)),
    ("engine setup (stream plans, exclusive channels)", ("Engine.__init__", "Engine.start")),
    ("flow network (transfers, flow table, max-min)",
     ("FlowNetwork._settle", "FlowTable._start_flow", "FlowTable._start_flows",
      "FlowNetwork.transfer", "SimNetwork.transfer", "SimNetwork.flow", "CollectiveRunner._run",
      "FlowTable.start_block", "_Run._step")),
    ("collective start (closed form)", ("CollectiveRunner.start",)),
    ("engine messages and rendezvous",
     ("Engine._collective", "Engine._send", "Engine._post_recv",
      # py-spy names a method by its defining class where it reads co_qualname
      "Messaging._collective", "Messaging._send", "Messaging._post_recv")),
    ("engine finishing ops (record, dependency counters, waking)",
     ("Stream.finish", "Rendezvous.fire", "Engine.deliver", "Messaging.deliver",
      "Stream.__call__")),
    ("engine event loop (queue, stream dispatch, compute ends and their records)",
     ("Engine._loop",)),
]
_PART_OF = {name: part for part, names in PARTS for name in names}


def part_of(frames: list[str]) -> str:
    names = [f.split(" (")[0] for f in frames]
    if "simulate" not in names:
        return ""
    if "simpy" in frames[-1]:
        return "SimPy (event creation, schedule, succeed)"
    for name in reversed(names):
        if name in _PART_OF:
            return _PART_OF[name]
    return "other"


def spy_parts(path: str) -> None:
    parts: Counter = Counter()
    for line in open(path, encoding="utf-8"):
        stack, n = line.rstrip("\n").rsplit(" ", 1)
        part = part_of(stack.split(";"))
        if part:
            parts[part] += int(n)
    total = sum(parts.values())
    print(f"{total} samples inside simulate")
    for part, n in parts.most_common():
        print(f"{n / total:6.1%}  {part}")


def phases(case: str, keep_gc: bool = False) -> None:
    import simulator.simulate as sim
    from simulator.engine import core
    from bench_simulate import make
    spent: Counter = Counter()
    if keep_gc:                  # what pausing the garbage collector saves (gc_pause)
        from contextlib import nullcontext
        sim.paused_gc = core.paused_gc = nullcontext

    from profile_search import timed as _timed

    def timed(name, owner, attr):
        _timed(spent, name, owner, attr)
    timed("compile", sim, "compile_job")
    timed("metrics", sim, "derive_metrics")
    timed("engine setup", core.Engine, "__init__")
    timed("engine setup", core.Engine, "start")
    timed("run", sim.engine, "run")
    job, fold = make(case)
    c0 = time.process_time()
    res = sim.simulate(job, fold=fold)
    total = time.process_time() - c0
    spent["event loop"] = spent.pop("run") - spent["engine setup"]
    spent["other"] = total - sum(spent.values())
    print(f"{case}: {res.events:,} events, {len(res.records):,} records, {total:.2f} CPU s, "
          f"{total / res.events * 1e6:.2f} us per event")
    for name in ("compile", "engine setup", "event loop", "metrics", "other"):
        print(f"  {name:<13} {spent[name]:6.2f} s  {spent[name] / res.events * 1e6:6.2f} us/event")


def main() -> None:
    from bench_simulate import CASES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", default="175b-full", choices=sorted(CASES))
    ap.add_argument("--spy", default=None, help="a py-spy raw profile to group by part")
    ap.add_argument("--keep-gc", action="store_true",
                    help="leave the garbage collector running during the simulation")
    a = ap.parse_args()
    if a.spy:
        spy_parts(a.spy)
    else:
        phases(a.case, a.keep_gc)


if __name__ == "__main__":
    main()
