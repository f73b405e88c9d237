"""profile_simulate's py-spy grouping: samples in the finishing part of a stream's callback
(``Engine._finish`` written out in ``_Stream.__call__``) count as finishing ops, the rest of the
callback as stream dispatch."""
from __future__ import annotations

import inspect

from experiments import profile_simulate as prof
from simulator.engine.core import _Stream

ROOT = ("<module> (profile_simulate.py:1);simulate (simulator/simulate.py:92);"
        "run (simulator/engine/core.py:420)")


def _line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(_Stream.__call__)
    return first + next(k for k, line in enumerate(lines) if text in line)


def test_callback_lines_split_between_dispatch_and_finishing():
    start = f"_Stream.__call__ (simulator/engine/core.py:{_line_of('code = self.codes[i]')})"
    done = f"_Stream.__call__ (simulator/engine/core.py:{_line_of('self.done.add(oid)')})"
    assert prof.part_of((ROOT + ";" + start).split(";")).startswith("engine stream dispatch")
    assert prof.part_of((ROOT + ";" + done).split(";")).startswith("engine finishing ops")


def test_samples_outside_simulate_are_not_counted():
    assert prof.part_of(["<module> (profile_simulate.py:1)", "main (x.py:2)"]) == ""
