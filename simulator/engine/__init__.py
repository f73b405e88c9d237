"""The SimPy event engine: replays per-rank programs (``core``: the event loop; ``messages``:
messages and rendezvous; ``streams``: each (rank, stream)'s state; ``deadlock``: the check after a run;
``channels``: which collectives run alone on their links) and runs collectives as phases of
flows on the network (``collectives``)."""
from simulator.engine.core import Engine, run
from simulator.engine.deadlock import DeadlockError, UnmatchedSendError

__all__ = ["DeadlockError", "Engine", "UnmatchedSendError", "run"]
