"""The SimPy event engine: replays per-rank programs (``core``) and runs collectives as
phases of flows on the network (``collectives``)."""
from simulator.engine.core import DeadlockError, Engine, UnmatchedSendError, run

__all__ = ["DeadlockError", "Engine", "UnmatchedSendError", "run"]
