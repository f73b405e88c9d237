"""profile_simulate's py-spy grouping: samples under the engine's finishing functions
(``Stream.finish``, ``Rendezvous.fire``, ``Engine.deliver``, a send's callback) count as
finishing ops, those under messages and rendezvous as such, the rest of ``Engine._loop`` (the
queue, stream dispatch, compute ends) as the event loop, and SimPy's own frames as SimPy."""
from __future__ import annotations

from experiments import profile_simulate as prof

ROOT = ("<module> (profile_simulate.py:1);simulate (simulator/simulate.py:92);"
        "run (simulator/engine/core.py:420);Engine._loop (simulator/engine/core.py:300)")


def _part(*frames: str) -> str:
    return prof.part_of((ROOT + "".join(";" + f for f in frames)).split(";"))


def test_engine_samples_split_by_part():
    assert _part().startswith("engine event loop")
    assert _part("Rendezvous.fire (simulator/engine/streams.py:70)").startswith(
        "engine finishing ops")
    assert _part("FlowTable._complete (simulator/network/flow_table.py:250)",
                 "Stream.__call__ (simulator/engine/streams.py:165)",
                 "Engine.deliver (simulator/engine/core.py:440)").startswith("engine finishing")
    assert _part("Engine._collective (simulator/engine/core.py:460)").startswith(
        "engine messages and rendezvous")
    assert _part("Environment.schedule (simpy/core.py:165)").startswith("SimPy")


def test_samples_outside_simulate_are_not_counted():
    assert prof.part_of(["<module> (profile_simulate.py:1)", "main (x.py:2)"]) == ""


def test_the_innermost_part_wins():
    """A stream finishing inside the flow network's callback is finishing; a transfer the
    engine starts is the flow network."""
    assert _part("FlowNetwork._settle (simulator/network/flows.py:280)",
                 "Stream.finish (simulator/engine/streams.py:145)").startswith("engine finishing")
    assert _part("Engine._send (simulator/engine/core.py:420)",
                 "FlowNetwork.transfer (simulator/network/flows.py:180)").startswith(
                     "flow network")


def test_a_collective_phase_is_the_flow_network():
    """A phase's flows started as one block, and the phase's run, count as the flow network
    (a stream finished inside them is still finishing)."""
    assert _part("_Run._step (simulator/engine/collectives.py:206)",
                 "FlowTable.start_block (simulator/network/flow_table.py:200)").startswith(
                     "flow network")
    assert _part("_Run._step (simulator/engine/collectives.py:206)",
                 "Rendezvous.fire (simulator/engine/streams.py:70)").startswith(
                     "engine finishing")
