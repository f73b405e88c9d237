"""Entries of SimPy's queue without an ``Event``: ``call_at`` puts a bare callback where
``env.timeout(delay)`` would have gone (the same time, priority and sequence number, so the
order of the queue is unchanged), one object fewer per timeout (issue 17). The flow network
(``flows``, ``flow_table``) and the collective runs (``simulator.engine.collectives``) use it.
"""
from __future__ import annotations

from heapq import heappush
from typing import Callable

import simpy
from simpy.events import NORMAL


class QueueEntry:
    """An entry of SimPy's queue that only calls back: what ``Environment.step`` and the
    engine's loop read of an event (``callbacks``, ``_ok``), without an ``Event``'s
    construction. ``call_at`` puts one where ``env.timeout(delay)`` would have gone, with the
    same time, priority and sequence number, so the order of the queue is unchanged."""

    __slots__ = ("callbacks",)
    _ok = True

    def __init__(self, callbacks: list) -> None:
        self.callbacks = callbacks


def call_at(env: simpy.Environment, delay: float, callback: Callable,
            priority: int = NORMAL) -> None:
    """``callback(entry)`` ``delay`` seconds from now: ``env.timeout(delay)`` with
    ``callback`` as its only callback (``priority``: ``env.schedule``'s), one object fewer."""
    heappush(env._queue, (env._now + delay, priority, next(env._eid), QueueEntry([callback])))
