"""The SMs in-flight collectives hold, taken from the compute beside them
(docs/calibration.md §5.152, §5.156, §5.159).

A collective whose kernel runs on SMs (NCCL, DeepEP, HybridEP, Transformer Engine's
userbuffers) holds ``Collective.sms`` of each member's SMs from its start (the last member's
arrival) to its end; a copy-engine transfer holds none (``sms`` 0). While collectives holding
``k`` SMs in all are in flight on a rank, its compute op proceeds at ``(sm − k)/sm`` of its
rate (``k`` capped at ``sm − 1``), the rule ``strategies.cost.sm_share.overlap_extra`` prices
per window in the estimate. A compute op's end is therefore not fixed when it starts: each
change of a rank's ``k`` moves the end of its running compute op (its work left at the old
rate, the rest at the new one), as the flow network moves a flow's end when its rate changes
(``simulator.network.flows``). Used by ``core.Engine`` only when ``SystemConfig.comm_sm_share``
is on (``run(..., sm_of=...)``); with it off the engine never builds one, and its runs are
what they were, bit for bit. Units: seconds, SMs.
"""
from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING, Callable

from simpy.events import NORMAL

if TYPE_CHECKING:
    from simulator.engine.streams import Stream


class SmHold:
    """Per simulated rank: its chip's SM count (``sm``), the SMs its in-flight collectives
    hold (``held``) and its running compute op (``running[rank]``: the stream, the op's
    work left in seconds at the full rate, when that was counted, and its queue key
    ``(end, class, op index)`` in the engine's ``ends``). ``ends`` and the SimPy queue are the
    engine's: an op's end is an entry of ``ends`` (the replicas that end at one instant share
    it); a moved op leaves its entry (an entry left empty is skipped by the engine's loop)."""

    __slots__ = ("sm", "held", "running", "ends", "env")

    def __init__(self, sm_of: dict[int, int], ends: dict, env) -> None:
        for rank, sm in sm_of.items():
            if sm is not None and sm < 0:
                raise ValueError(f"rank {rank}: sm_count={sm!r} must be an SM count (>= 0)")
        self.sm, self.ends, self.env = dict(sm_of), ends, env
        self.held = dict.fromkeys(self.sm, 0.0)
        self.running: dict[int, tuple] = {}

    def rate(self, rank: int) -> float:
        """Share of its full rate ``rank``'s compute runs at now: ``(sm − k)/sm``, ``k`` the
        SMs held (capped at ``sm − 1``); 1 where nothing is held or ``sm`` is 0 (unknown)."""
        k, sm = self.held[rank], self.sm[rank]
        if not k or not sm:          # nothing held, or a chip without an SM count
            return 1.0
        return (sm - min(k, sm - 1)) / sm

    def start(self, st: Stream, i: int, seconds: float, now: float) -> None:
        """``st``'s compute op ``i`` of ``seconds`` (at the full rate) starts now."""
        self._put(st, i, seconds, now, self.rate(st.rank))

    def _put(self, st: Stream, i: int, work: float, now: float, rate: float) -> None:
        """Queue the end of ``st``'s op ``i`` with ``work`` seconds left at ``rate``."""
        t = now + work if rate == 1.0 else now + work / rate
        key = (t, st.cls, i)
        due = self.ends.get(key)
        if due is None:
            self.ends[key] = due = [st]
            env = self.env
            heappush(env._queue, (t, NORMAL, next(env._eid), due))
        else:
            due.append(st)
        self.running[st.rank] = (st, work, now, key)

    def ended(self, streams: list[Stream]) -> None:
        """The compute ops of ``streams`` ended now."""
        running = self.running
        for st in streams:
            running.pop(st.rank, None)

    def hold(self, ranks: list[int], k: float) -> None:
        """``ranks``' held SMs change by ``k`` now; each one's running compute op, if its rate
        changes, is moved: its work left is what the old rate did not do since it was last
        counted, its new end that work at the new rate."""
        now = self.env._now
        held, running, ends = self.held, self.running, self.ends
        for r in ranks:
            old = self.rate(r)
            held[r] += k
            new = self.rate(r)
            run = running.get(r)
            if run is None or new == old:
                continue
            st, work, t0, key = run
            work = max(work - (now - t0) * old, 0.0)
            due = ends[key]
            due.remove(st)
            if not due:
                del ends[key]
            self._put(st, key[2], work, now, new)

    def around(self, ranks: list[int], k: float, then: Callable) -> Callable:
        """Hold ``k`` SMs on ``ranks`` from now; returns the collective's end callback: it
        gives them back, then calls ``then``."""
        self.hold(ranks, k)

        def end(ev: object = None) -> None:
            self.hold(ranks, -k)
            then(ev)
        return end
