"""Fluid flow-level network: transfers are flows that share links max-min fairly.

A transfer of ``nbytes`` along a route first waits the route's summed latency
(seconds; a pure delay that holds no bandwidth), then becomes a flow. All active
flows share every link max-min fairly (progressive filling). Rates change only
when a flow starts or ends: the model keeps each flow's remaining bytes, and at
every change advances all flows by ``rate * dt``, recomputes the rates and
schedules one SimPy timeout for the earliest completion. Changes that happen at
the same simulated instant are folded into one recomputation, and the rates of a set of
concurrent flows seen before are reused (the same result, not recomputed).

This module times the flows (latency, advancing, completion timeouts, the rates of each set
of concurrent flows); what it builds on lives beside it: ``routes`` (the links, their
capacities and the routes between nodes), ``flow_table`` (the active flows' slots, written in
and taken out), ``maxmin`` (the max-min solver) and ``queue_entry`` (SimPy queue entries
without an event).

>>> import simpy, networkx as nx
>>> g = nx.DiGraph(); g.add_edge("a", "b", bandwidth=1e9, latency=1e-6)
>>> env = simpy.Environment(); net = FlowNetwork(env, g)
>>> done = net.transfer("a", "b", 1e9)
>>> env.run(done); env.now
1.000001
"""
from __future__ import annotations

from functools import partial
from heapq import heappush
from typing import Callable, Hashable, Optional

import networkx as nx
import numpy as np
import simpy
from simpy.events import NORMAL

from simulator.network.flow_table import FlowTable
from simulator.network.maxmin import max_min_memo, solved
from simulator.network.queue_entry import QueueEntry, call_at
from simulator.network.routes import LinkTables, Node, RouteFn

_FINISH_RTOL = 1e-14   # flows predicted to end within this relative time are done together
# Max-min rates depend only on the links each active flow crosses (capacities are fixed), and a
# training step repeats the same few sets of concurrent flows thousands of times (GPT-3 175B,
# 12-chunk interleaved: 30,814 recomputations, 148 distinct sets), so the network keeps the
# rates of the sets it has seen, up to this many. A set is keyed by its flows' routes as a
# multiset (sorted route numbers), not by the flow-table slots they happen to occupy:
# ``max_min_rates`` is exactly permutation-equivariant (it works on per-link integer counts),
# so the same routes in other slots get the same rates bit for bit (GPT-3 175B, tp4 pp16
# interleaved:6: 21,928 of 32,240 recomputations missed the slot-order key, 3,993 sets
# distinct as multisets).
_RATES_KEPT = 4096
# The same rates by the flows' routes in slot order (``_rates_by_slot``, one dict look-up; a
# miss re-keys by multiset, ``_rates_of``) are kept up to this many bytes of keys and rates
# (8 bytes a flow each): the orders of a long step outnumber its multisets (GPT-3 175B, tp4
# pp16 interleaved:6: 11,482 orders, 3,619 multisets; a cap of 4,096 orders left 42,292 of
# 86,401 recomputations to re-key), and an all-to-all's thousands of flows make a key large.
_BY_SLOT_BYTES = 64 << 20
_ZERO = np.zeros(())          # 0.0 as an array: ``np.maximum(a, _ZERO)`` skips converting a float


def transfer_ends(env: simpy.Environment, tag, then: Optional[Callable],
                  empty: bool) -> tuple[Optional[simpy.Event], Optional[Callable]]:
    """``(event, fin)`` of a new transfer: without ``then`` a new event and its ``succeed``,
    with it no event and ``then``; ``fin`` None when the transfer moves nothing (``empty``)
    and has already been ended: the event succeeded, or ``then(tag)`` due from a zero timeout
    (never from inside the call that started the transfer)."""
    done = env.event() if then is None else None
    fin = then if done is None else done.succeed
    if not empty:
        return done, fin
    if done is not None:
        done.succeed(tag)
    else:
        env.timeout(0).callbacks.append(lambda _e: then(tag))
    return done, None


class FlowNetwork(FlowTable):
    """Flow-level network over a directed graph whose edges carry ``bandwidth``
    (bytes/s, > 0) and ``latency`` (seconds, >= 0).

    The graph must not change after construction. Time transfers with the events
    that :meth:`transfer` returns: a superseded completion timeout may still fire
    (as a no-op), so ``env.now`` after ``env.run()`` can exceed the last arrival.
    """

    def __init__(self, env: simpy.Environment, graph: nx.DiGraph,
                 route_fn: Optional[RouteFn] = None, tables: Optional[LinkTables] = None
                 ) -> None:
        self.env = env
        super().__init__(graph, route_fn, tables)
        self._due: dict[tuple, list] = {}    # flows waiting out their latency: (start, share)
        # the rates of the last recomputation: (the slots it rated, each one's rate bytes/s,
        # each one's seconds left then, the time then), and the first of the finish times
        # ``then + left`` (the timer's time; the others are added up only when it has come).
        # Flows started since have no rate yet (0: they move nothing) and never finish before
        # the next recomputation; flows end only in ``_settle``, which recomputes at once, so
        # the slots rated are always active.
        self._cur = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), 0.0)
        # the bytes left of the slots rated then, as ``_rem`` holds them (only ``_settle``
        # writes an active slot's, and it keeps this copy in step): one gather fewer a call
        self._cur_rem = np.zeros(0)
        self._first = np.inf
        self._last = env.now          # time the flows were last advanced to
        # the queue entry of the completion timeout now due (None once it fired); a newer one
        # supersedes it by emptying its callbacks: it stays in the queue and calls nothing
        self._timer: Optional[QueueEntry] = None
        self._dirty = False           # a flow was added since the last recomputation
        self._pending = False         # a same-instant update is already scheduled
        self._rates_seen: dict = {}   # active flows' sorted route numbers -> rate per route
        # the active flows' route numbers in slot order -> each one's rate (``_rates_seen``'s,
        # the same values: a step repeats the same flows in the same slots again and again)
        self._rates_by_slot: dict = {}
        self._by_slot_room = _BY_SLOT_BYTES   # bytes ``_rates_by_slot`` may still take
        self._scratch = np.empty(0)   # a rate per route number, filled from ``_rates_seen``
        self._x, self._y = np.empty(()), np.empty(())   # ``_settle``'s scalars as 0-d arrays
        # the process-wide rates of flow sets over ``_solved_for`` (the capacity vector they
        # were looked up for: a subclass may set its own capacities after this, ``SimNetwork``)
        self._solved, self._solved_for = {}, None
        self.recomputations = 0

    # -- public API ----------------------------------------------------------
    def transfer(self, src: Node, dst: Node, nbytes: float, tag=None,
                 then: Optional[Callable] = None, share: Hashable = None
                 ) -> Optional[simpy.Event]:
        """Send ``nbytes`` (bytes) from src to dst; the event succeeds when the last
        byte arrives (with value ``tag``). With ``then``, no event: ``then(tag)`` is called
        when the last byte arrives (from inside the network's own callback, at that instant;
        one SimPy event fewer per message, issue 17), and None is returned. Transfers with
        the same ``share`` (not None) whose latency ends at the same instant share one
        timeout and start together (``_start_later``)."""
        if then is not None and nbytes > 0 and src != dst:   # the engine's messages
            done, fin = None, then
        else:
            if not nbytes >= 0:
                raise ValueError(f"nbytes={nbytes!r}: must be >= 0")
            done, fin = transfer_ends(self.env, tag, then, src == dst or nbytes == 0)
            if fin is None:
                return done
        hit = self._routes.get((src, dst))      # the route as ``route`` cached it
        _, links, latency = hit if hit is not None else self.route(src, dst)
        if latency > 0:
            self._start_later(latency, (links, float(nbytes), fin, tag), share)
        else:
            self._start_flow(links, float(nbytes), fin, tag, None)
        return done

    def _start_later(self, latency: float, flow: tuple, share: Hashable = None) -> None:
        """Start ``flow`` (``_start_flow``'s arguments) after ``latency`` seconds. The flows
        with the same ``share`` (not None) due at the same instant share one timeout and start
        together, in the order they were sent (issue 17: the replicas of a large step send
        thousands of messages at each instant; flows that start at one instant share one rate
        recomputation either way). The engine shares by the sending op's place in its
        program, so the count of timeouts depends on the programs, not on which unrelated
        instants happen to be equal in floating point."""
        if share is None:
            call_at(self.env, latency, partial(self._start_flow, *flow))
            return
        key = (self.env._now + latency, share)   # the instant the timeout below fires at
        due = self._due.get(key)
        if due is None:
            due = self._due[key] = []
            call_at(self.env, latency, partial(self._start_due, key))
        due.append(flow)

    def _start_due(self, key: tuple, _ev) -> None:
        """The flows due at ``key``'s instant start. Their rate recomputation is the zero-delay
        entry ``_start_flow`` queues, unless that entry would be the very next one taken (no
        recomputation queued yet, the engine's same-instant lanes empty, SimPy's next entry
        later): then it runs here, the same recomputation at the same point of the run, one
        queue entry fewer (a latency that ends at an instant of its own, e.g. a pipeline
        send on its own NCCL stream, §5.68)."""
        env = self.env
        queue, lanes = env._queue, getattr(env, "lanes", None)
        if self._pending or (queue and queue[0][0] <= env._now) or \
                (lanes is not None and (lanes[0] or lanes[1])):
            self._start_flows(self._due.pop(key))
            return
        self._pending = True           # no entry: ``_settle`` runs now, as that entry would
        self._start_flows(self._due.pop(key))
        self._pending = False
        self._settle()

    def link_bytes(self) -> dict:
        """Bytes carried so far by each directed link ``(u, v)``, partial flows included."""
        if not self.count_bytes:
            raise RuntimeError("link_bytes: this network does not count bytes (count_bytes "
                               "is False)")
        self._deliver()
        carried = self._delivered.copy()
        idx = self._active_idx()
        if idx.size:
            dt = self.env.now - self._last
            moved = self._size[idx] - np.maximum(self._rem[idx] - self._slot_rates()[idx] * dt,
                                                 0.0)
            hops = self._links.shape[1]
            np.add.at(carried, self._links[idx].ravel(), np.repeat(moved, hops))
        return {e: float(carried[i]) for i, e in enumerate(self.edges)}

    def active_flows(self) -> list:
        """``(tag, rate bytes/s, remaining bytes)`` of each active flow, in slot order."""
        blocks, grp = self._blocks_live, self._grp
        rate = self._slot_rates()
        return [(blocks[grp[i]][1] if grp[i] else self._tags[i], float(rate[i]),
                 float(self._rem[i])) for i in self._active_idx()]

    def close(self) -> None:
        """Break the reference cycles a finished run leaves, so that reference counting frees
        the network and its SimPy environment as soon as the caller drops them (the cyclic
        collector is paused during a run and seldom walks what it leaves: ``gc_pause``). They
        are the environment's queue (the superseded completion timeouts, whose callbacks are
        this network's bound methods), the environment's own bound event classes (SimPy's
        ``BoundClass.bind_early`` stores ``env.timeout`` and the like on ``env``) and
        ``SimNetwork``'s bound ``_recompute`` and ``transfer`` on itself. Read-only queries (``link_bytes``,
        routes, logs) still answer; nothing can run on the network after it."""
        env = self.env
        env._queue.clear()
        for name, value in list(vars(env).items()):
            if getattr(value, "__self__", None) is env:
                delattr(env, name)
        self.__dict__.pop("_recompute", None)
        self.__dict__.pop("transfer", None)

    def _slot_rates(self) -> np.ndarray:
        """Each slot's rate (bytes/s) as the last recomputation set it (0 for a flow started
        since, and for a free slot)."""
        rate = np.zeros(self._active.size)
        rate[self._cur[0]] = self._cur[1]
        return rate

    # -- event-driven core ---------------------------------------------------
    def _on_pending(self, _ev) -> None:
        self._pending = False
        self._settle()

    def _on_timer(self, _ev) -> None:
        self._timer = None
        self._settle()

    def _settle(self) -> None:
        """Advance flows to now, finish those that are done, recompute if anything changed."""
        now = self.env._now
        # only the flows rated at the last recomputation move (a flow started since has rate
        # 0: ``rem - 0 * dt`` is ``rem``) and only they can be done (the others' finish is
        # infinite); none is when the first finish is later (``_first``, the least of them)
        idx, rate, secs, then = self._cur
        x, y = self._x, self._y             # 0-d scratch arrays: no float converted per call
        if idx.size and now > self._last:
            x[()] = now - self._last
            left = self._cur_rem - rate * x
            self._rem[idx] = self._cur_rem = np.maximum(left, _ZERO, out=left)
        self._last = now
        limit = now * (1.0 + _FINISH_RTOL)
        if self._first <= limit:
            x[()], y[()] = then, limit
            self._complete(idx[secs + x <= y])
            self._dirty = False
            self._recompute(now)
        elif self._dirty:
            self._dirty = False
            self._recompute(now)

    def _recompute(self, now: float, idx: Optional[np.ndarray] = None) -> None:
        """New max-min rates of the active flows (``idx``: their slots, when the caller has
        them) and the timeout of the first to end."""
        self.recomputations += 1
        timer = self._timer
        if timer is not None:               # superseded: its entry calls nothing when taken
            timer.callbacks = []
            self._timer = None
        if idx is None:
            idx = self._active.nonzero()[0]
        if not idx.size:
            self._cur, self._first = (idx, np.zeros(0), np.zeros(0), now), np.inf
            self._cur_rem = self._cur[1]
            return
        rno = self._rno[idx]
        by_slot = rno.tobytes()             # the routes in slot order: their rates, if seen
        rates = self._rates_by_slot.get(by_slot)
        if rates is None:
            rates = self._rates_of(idx, rno)
            room = self._by_slot_room - 2 * len(by_slot)
            if room >= 0:
                self._by_slot_room = room
                self._rates_by_slot[by_slot] = rates
        self._cur_rem = rem = self._rem[idx]
        left = rem / rates                  # ``rates`` may be a cached array: never written to
        env = self.env                      # ``call_at`` written out (one call per recomputation)
        # the first finish: the least of ``now + left`` (rounding to nearest is monotonic), by
        # ``argmin`` (the value ``np.minimum.reduce`` gives, NaN included, without a ufunc
        # reduction: several times cheaper on a few flows)
        self._first = first = env._now + left.item(left.argmin())
        self._cur = (idx, rates, left, now)
        self._timer = timer = QueueEntry([self._on_timer])
        heappush(env._queue, (first, NORMAL, next(env._eid), timer))

    def _rates_of(self, idx: np.ndarray, rno: np.ndarray) -> np.ndarray:
        """The max-min rate (bytes/s) of each active flow (slots ``idx``, route numbers
        ``rno``): looked up by the routes as a multiset (``_rates_seen``), computed on a miss."""
        ranked = rno.copy()                 # ``np.sort(rno)`` without its Python wrapper
        ranked.sort()
        key = ranked.tobytes()
        hit = self._rates_seen.get(key)     # (route numbers, the rate of a flow on each)
        if hit is None:
            if self._solved_for is not self._capacity:
                self._solved, self._solved_for = solved(self._capacity), self._capacity
            # the flows' rows in route order (each slot's row is its route's, padded alike):
            # the rows of ``_links[idx]`` sorted stably by route, without the sort
            width = self._links.shape[1]
            if self._route_rows.shape[1] < width:
                self._widen_route_rows(width)
            rows = self._route_rows[ranked]
            if rows.shape[1] > width:       # (a route no flow table row was ever as wide)
                rows = rows[:, :width]
            rates = max_min_memo(self._solved, self._capacity, rows)
            # flows on one route cross the same links, so progressive filling freezes them in
            # the same round at the same level: one rate per route, the first flow's
            first = np.empty(ranked.size, dtype=bool)
            first[0] = True
            np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
            hit = (ranked[first], rates[first])
            if len(self._rates_seen) < _RATES_KEPT:
                self._rates_seen[key] = hit
        scratch = self._scratch
        if scratch.size < len(self._route_no):
            scratch = self._scratch = np.empty(2 * len(self._route_no))
        scratch[hit[0]] = hit[1]
        return scratch[rno]                 # each flow its route's rate (no sort, no scatter)
