"""A stop signal that lands inside the event engine keeps its exit status: SimPy re-raises a
callback's exception as ``type(e)(*e.args)``, so ``Stopped`` must survive that copy."""
from __future__ import annotations

import signal

import pytest
import simpy

from simulator.workers import Stopped


def test_stopped_survives_a_copy_from_its_args() -> None:
    e = Stopped(signal.SIGTERM)
    copy = type(e)(*e.args)
    assert (copy.signum, copy.exit_status, str(copy)) == (signal.SIGTERM, 143, "SIGTERM")


def test_stopped_raised_in_a_simpy_process_reaches_the_caller_intact() -> None:
    """A failed process's exception is re-created by SimPy from its args."""
    env = simpy.Environment()

    def proc(env: simpy.Environment):
        yield env.timeout(1.0)
        raise Stopped(signal.SIGTERM)

    env.process(proc(env))
    with pytest.raises(Stopped) as info:
        env.run()
    assert info.value.exit_status == 143
