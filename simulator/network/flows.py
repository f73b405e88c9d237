"""Fluid flow-level network: transfers are flows that share links max-min fairly.

A transfer of ``nbytes`` along a route first waits the route's summed latency
(seconds; a pure delay that holds no bandwidth), then becomes a flow. All active
flows share every link max-min fairly (progressive filling). Rates change only
when a flow starts or ends: the model keeps each flow's remaining bytes, and at
every change advances all flows by ``rate * dt``, recomputes the rates and
schedules one SimPy timeout for the earliest completion. Changes that happen at
the same simulated instant are folded into one recomputation, and the rates of a set of
concurrent flows seen before are reused (the same result, not recomputed).

>>> import simpy, networkx as nx
>>> g = nx.DiGraph(); g.add_edge("a", "b", bandwidth=1e9, latency=1e-6)
>>> env = simpy.Environment(); net = FlowNetwork(env, g)
>>> done = net.transfer("a", "b", 1e9)
>>> env.run(done); env.now
1.000001
"""
from __future__ import annotations

from functools import partial
from operator import itemgetter
from heapq import heappush
from typing import Callable, Hashable, Optional, Sequence

import networkx as nx
import numpy as np
import simpy
from simpy.events import NORMAL

Node = Hashable
RouteFn = Callable[[nx.DiGraph, Node, Node], Sequence[Node]]

_FINISH_RTOL = 1e-14   # flows predicted to end within this relative time are done together
_TIE_RTOL = 1e-12      # links whose fair shares differ by less are saturated together
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
_FEW = 8               # up to this many flows started together go in one by one (``_start_flows``)
_DONE_KEPT = 1024      # finished flows whose bytes wait to be added to their links (``_deliver``)


min_reduce = np.minimum.reduce      # ``a.min()`` without its Python wrapper (the same reduction)
_any_row = partial(np.logical_or.reduce, axis=1)     # ``a.any(axis=1)``, likewise
_count = np.count_nonzero   # truthy as ``np.logical_or.reduce`` of ints, without a ufunc reduction
_first = itemgetter(0)
_ZERO = np.zeros(())          # 0.0 as an array: ``np.maximum(a, _ZERO)`` skips converting a float


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


def shortest_route(graph: nx.DiGraph, src: Node, dst: Node) -> list:
    """Fewest-hop path from ``src`` to ``dst``; among those, the one whose node
    ``repr`` sequence sorts first (deterministic, independent of insertion order)."""
    return _walk(graph, src, dst, _hops_to(graph, dst))


def _hops_to(graph: nx.DiGraph, dst: Node) -> dict:
    return nx.single_source_shortest_path_length(graph.reverse(copy=False), dst)


def _walk(graph: nx.DiGraph, src: Node, dst: Node, dist: dict) -> list:
    if src not in dist:
        raise nx.NetworkXNoPath(f"no route from {src!r} to {dst!r}")
    path = [src]
    while path[-1] != dst:
        here = path[-1]
        steps = [v for v in graph.successors(here) if dist.get(v) == dist[here] - 1]
        path.append(min(steps, key=repr))
    return path


def max_min_rates(capacity: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bytes/s) by progressive filling.

    ``capacity[l]`` is link ``l``'s bandwidth (bytes/s); the last entry is a padding
    link of infinite capacity. ``links`` is an ``(flows, hops)`` index matrix padded
    with that last index. Each round saturates the links with the smallest fair share
    and freezes every live flow crossing them (one vectorised pass over ``links``), so many
    flows with few distinct levels take few rounds.

    >>> cap = np.array([1.0, 2.0, np.inf])
    >>> max_min_rates(cap, np.array([[0, 1], [0, 2], [1, 2]])).tolist()
    [0.5, 0.5, 1.5]
    """
    # only the links the flows cross (and the padding link, last) take part: the rounds then
    # work on those few, not on every link of the network (thousands); the same values link
    # by link, so the same rates bit for bit
    count = np.bincount(links.ravel(), minlength=capacity.shape[0])  # flows per link
    count[-1] = 1                             # the padding link kept (its count set to 0)
    used = count.nonzero()[0]                 # in index order: the padding link last
    local = np.empty(capacity.shape[0], dtype=np.int64)
    local[used] = np.arange(used.size)
    links = local[links]
    count = count[used]
    nlinks, pad = used.size, used.size - 1
    nflows = links.shape[0]
    count[pad] = 0
    rates, spare = np.zeros(nflows), capacity[used].astype(float, copy=False)
    live, share, left = np.ones(nflows, dtype=bool), np.empty(nlinks), nflows
    saturated = np.zeros(nlinks, dtype=bool)
    while left:
        share.fill(np.inf)
        np.divide(np.maximum(spare, 0.0), count, out=share, where=count > 0)
        level = share[share.argmin()]     # ``share.min()`` without a ufunc reduction
        saturated[:] = share <= level * (1.0 + _TIE_RTOL)
        # the live flows crossing a saturated link, in flow order: one vector pass over the
        # (flows, hops) matrix (a slice per saturated link was most of the time with hundreds
        # of flows and links saturating together, issue 17)
        hit = (_any_row(saturated[links]) & live).nonzero()[0]
        rates[hit], live[hit] = level, False
        left -= hit.size
        if not left:                  # the last level (inf where no live flow had a link)
            break
        freed = np.bincount(links[hit].ravel(), minlength=nlinks)
        freed[pad] = 0
        spare -= freed * level
        count -= freed
    return rates


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


class FlowBlock:
    """Flows that start together again and again (a collective's phase), prepared once for
    ``FlowNetwork.start_block``: their link-index arrays in order, stacked into one block when
    their routes have one length, and their route numbers (filled by the network on first
    use)."""

    __slots__ = ("links", "size", "hops", "rows", "flat", "cols", "counts", "rno")

    def __init__(self, links: Sequence[np.ndarray]) -> None:
        self.links, self.size = list(links), len(links)
        sizes = [x.size for x in self.links]
        self.hops = max(sizes)
        self.rno = None
        self.rows = self.flat = self.cols = self.counts = None
        if min(sizes) == self.hops:
            self.rows = np.array(self.links, dtype=np.int64)
        else:
            self.counts = np.array(sizes)
            first = np.cumsum(self.counts) - self.counts
            self.cols = np.arange(int(self.counts.sum())) - np.repeat(first, self.counts)
            self.flat = np.concatenate(self.links)

    def flat_rows(self, idx: np.ndarray) -> np.ndarray:
        return np.repeat(idx, self.counts)


class FlowNetwork:
    """Flow-level network over a directed graph whose edges carry ``bandwidth``
    (bytes/s, > 0) and ``latency`` (seconds, >= 0).

    The graph must not change after construction. Time transfers with the events
    that :meth:`transfer` returns: a superseded completion timeout may still fire
    (as a no-op), so ``env.now`` after ``env.run()`` can exceed the last arrival.
    """

    def __init__(self, env: simpy.Environment, graph: nx.DiGraph,
                 route_fn: Optional[RouteFn] = None) -> None:
        self.env, self.graph = env, graph
        self.route_fn = route_fn
        self._dist: dict = {}         # dst -> hop counts to it, for the default routing
        self.edges = list(graph.edges)
        self._edge_index = {e: i for i, e in enumerate(self.edges)}
        self._capacity = np.append([self._checked(e) for e in self.edges], np.inf)
        self._pad = len(self.edges)
        self._routes: dict = {}
        self._due: dict[tuple, list] = {}    # flows waiting out their latency: (start, share)
        self._delivered = np.zeros(len(self.edges) + 1)   # bytes of finished flows
        self._init_table()
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
        self._route_no: dict = {}     # a flow's link indices (bytes) -> its route number
        self._route_arrays: dict = {}   # id of a links array -> (the array, its route number)
        self._padded: dict = {}       # route number -> its row padded to the table's width
        self._x, self._y = np.empty(()), np.empty(())   # ``_settle``'s scalars as 0-d arrays
        self._done_log: list = []     # (link rows, bytes) of finished flows not yet delivered
        self.recomputations = 0
        self.quiet_events = 0       # events counted without a queue entry (collectives._Run)
        self.flows_started = 0
        self.flows_completed = 0

    def _checked(self, edge: tuple) -> float:
        attrs = self.graph.edges[edge]
        bandwidth, latency = attrs.get("bandwidth"), attrs.get("latency", 0.0)
        if bandwidth is None or not bandwidth > 0:
            raise ValueError(f"edge {edge!r}: bandwidth={bandwidth!r} must be > 0 bytes/s")
        if not latency >= 0:
            raise ValueError(f"edge {edge!r}: latency={latency!r} must be >= 0 s")
        return float(bandwidth)

    # -- routing -------------------------------------------------------------
    def route(self, src: Node, dst: Node) -> tuple:
        """``(nodes, link_indices, latency_s)`` of the cached route from src to dst."""
        key = (src, dst)
        if key not in self._routes:
            if self.route_fn is None:
                if dst not in self._dist:
                    self._dist[dst] = _hops_to(self.graph, dst)
                nodes = tuple(_walk(self.graph, src, dst, self._dist[dst]))
            else:
                nodes = tuple(self.route_fn(self.graph, src, dst))
            if nodes[0] != src or nodes[-1] != dst:
                raise ValueError(f"route_fn gave {nodes!r} for {src!r} -> {dst!r}")
            hops = list(zip(nodes[:-1], nodes[1:]))
            latency = 0.0
            for hop in hops:
                latency += float(self.graph.edges[hop].get("latency", 0.0))
            index = np.array([self._edge_index[h] for h in hops], dtype=np.int64)
            self._routes[key] = (nodes, index, latency)
        return self._routes[key]

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

    def _take_slots(self, k: int) -> list:
        """The ``k`` slots of the flow table that ``_start_flow`` would take one by one (the
        free list's last first, the table grown when it runs out)."""
        free = self._free
        if len(free) >= k:
            taken = free[-k:][::-1]
            del free[-k:]
        else:
            taken = []
            for _ in range(k):
                if not free:
                    self._grow(max(64, 2 * self._links.shape[0]), self._links.shape[1])
                taken.append(free.pop())
        return taken

    def _start_flows(self, flows: list) -> None:
        """``_start_flow`` for each of ``flows`` (``(links, nbytes, fin, tag)``), in order:
        the same slots, with one array operation per column of the flow table for all (up to
        ``_FEW`` flows, ``_start_flow`` itself: cheaper than building the arrays)."""
        k = len(flows)
        if k <= _FEW:
            for flow in flows:
                self._start_flow(*flow, None)
            return
        sizes = [f[0].size for f in flows]
        slots, hops = self._links.shape
        if max(sizes) > hops:
            self._grow(slots, max(sizes))
        taken = self._take_slots(k)
        idx = np.array(taken)
        hops = self._links.shape[1]
        if min(sizes) == max(sizes):   # routes of one length (the common case): one block
            rows = np.array([f[0] for f in flows])
            if sizes[0] == hops:
                self._links[idx] = rows
            else:
                self._links[idx, sizes[0]:] = self._pad
                self._links[idx, :sizes[0]] = rows
        else:
            self._links[idx] = self._pad
            count = np.array(sizes)
            first = np.cumsum(count) - count
            cols = np.arange(first[-1] + count[-1]) - np.repeat(first, count)
            self._links[np.repeat(idx, count), cols] = np.concatenate([f[0] for f in flows])
        nbytes = np.array([f[1] for f in flows], dtype=float)
        route_of = self._route_of
        self._rno[idx] = [route_of(f[0]) for f in flows]
        self._size[idx] = nbytes
        self._rem[idx] = nbytes
        self._active[idx] = True
        fins, tags = self._fins, self._tags
        for slot, (_, _, fin, tag) in zip(taken, flows):
            fins[slot], tags[slot] = fin, tag
        self.flows_started += k
        self._dirty = True
        if not self._pending:
            self._pending = True
            call_at(self.env, 0, self._on_pending)

    def start_block(self, block: "FlowBlock", nbytes, fin: Callable, tag) -> None:
        """Start ``block``'s flows now (``nbytes``: bytes of every flow, or an array with one
        per flow, each > 0): ``_start_flow`` for each in order, the same slots, with one array
        operation per column of the flow table (a collective's phase, issue 17: an all-to-all
        starts thousands of flows at once). ``fin(tag)`` is called once, when the last of them
        lands, at the place in the completions the last one's ``fin`` had; the other flows'
        ends are counted in ``quiet_events`` (each was an event of the phase's process, whose
        only effect was to count down to that last one: ``collectives._Run``)."""
        k = block.size
        if k == 1:
            nb = nbytes[0] if isinstance(nbytes, np.ndarray) else nbytes
            self._start_flow(block.links[0], float(nb), fin, tag, None)
            return
        slots, hops = self._links.shape
        if block.hops > hops:
            self._grow(slots, block.hops)
        taken = self._take_slots(k)
        idx = np.array(taken)
        hops = self._links.shape[1]
        if block.rows is not None:     # routes of one length (the common case): one block
            if block.hops == hops:
                self._links[idx] = block.rows
            else:
                self._links[idx, block.hops:] = self._pad
                self._links[idx, :block.hops] = block.rows
        else:
            self._links[idx] = self._pad
            self._links[block.flat_rows(idx), block.cols] = block.flat
        if block.rno is None:
            block.rno = np.array([self._route_of(x) for x in block.links], dtype=np.int64)
        self._rno[idx] = block.rno
        self._size[idx] = nbytes
        self._rem[idx] = nbytes
        self._active[idx] = True
        self._block_no += 1
        self._grp[idx] = self._block_no
        self._blocks_live[self._block_no] = [fin, tag, k]
        self.flows_started += k
        self._dirty = True
        if not self._pending:
            self._pending = True
            call_at(self.env, 0, self._on_pending)

    def link_bytes(self) -> dict:
        """Bytes carried so far by each directed link ``(u, v)``, partial flows included."""
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
        ``SimNetwork``'s bound ``_recompute`` on itself. Read-only queries (``link_bytes``,
        routes, logs) still answer; nothing can run on the network after it."""
        env = self.env
        env._queue.clear()
        for name, value in list(vars(env).items()):
            if getattr(value, "__self__", None) is env:
                delattr(env, name)
        self.__dict__.pop("_recompute", None)

    # -- flow table ----------------------------------------------------------
    def _init_table(self) -> None:
        """Flow slots: per-slot arrays, a link-index matrix padded with ``_pad``."""
        self._links = np.full((0, 1), self._pad, dtype=np.int64)
        self._size, self._rem = np.zeros(0), np.zeros(0)
        # the rates of the last recomputation: (the slots it rated, each one's rate bytes/s,
        # each one's seconds left then, the time then), and the first of the finish times
        # ``then + left`` (the timer's time; the others are added up only when it has come).
        # Flows started since have no rate yet (0: they move nothing) and never finish before
        # the next recomputation; flows end only in ``_settle``, which recomputes at once, so
        # the slots rated are always active.
        self._cur = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), 0.0)
        self._first = np.inf
        self._rno = np.zeros(0, dtype=np.int64)      # each slot's route number (``_route_of``)
        self._active = np.zeros(0, dtype=bool)
        # a slot started by ``start_block``: its block's number (0: a flow of its own, whose
        # ``fin`` and ``tag`` are in ``_fins``/``_tags``); a block's [fin, tag, flows left]
        self._grp = np.zeros(0, dtype=np.int64)
        self._blocks_live: dict[int, list] = {}
        self._block_no = 0
        self._fins: list = []
        self._tags: list = []
        self._free: list = []

    def _grow(self, slots: int, hops: int) -> None:
        old, old_hops = self._links.shape
        links = np.full((slots, hops), self._pad, dtype=np.int64)
        links[:old, :old_hops] = self._links
        self._links = links
        if hops != old_hops:
            self._padded.clear()
        for name in ("_size", "_rem", "_rno", "_active", "_grp"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros(slots - old, dtype=arr.dtype)]))
        self._fins += [None] * (slots - old)
        self._tags += [None] * (slots - old)
        self._free += range(slots - 1, old - 1, -1)

    def _active_idx(self) -> np.ndarray:
        return self._active.nonzero()[0]

    def _slot_rates(self) -> np.ndarray:
        """Each slot's rate (bytes/s) as the last recomputation set it (0 for a flow started
        since, and for a free slot)."""
        rate = np.zeros(self._active.size)
        rate[self._cur[0]] = self._cur[1]
        return rate

    def _route_of(self, links: np.ndarray) -> int:
        """The number of the route ``links`` (link indices in order), one per distinct route;
        looked up by the array's identity first (the routes' arrays are cached and reused)."""
        hit = self._route_arrays.get(id(links))
        if hit is not None and hit[0] is links:
            return hit[1]
        key = links.tobytes()
        no = self._route_no.get(key)
        if no is None:
            no = self._route_no[key] = len(self._route_no)
        self._route_arrays[id(links)] = (links, no)     # holds the array: its id stays its own
        return no

    def _start_flow(self, links: np.ndarray, nbytes: float, fin: Callable, tag, _ev) -> None:
        """Add a flow; ``fin(tag)`` is called when its last byte arrives."""
        slots, hops = self._links.shape
        if not self._free or links.size > hops:
            self._grow(slots if self._free else max(64, 2 * slots), max(links.size, hops))
        slot = self._free.pop()
        table = self._links
        no = self._route_of(links)
        if links.size == table.shape[1]:    # a route as long as the table's rows: one write
            table[slot] = links
        else:                               # its row padded to the table's width, kept
            row = self._padded.get(no)
            if row is None:
                row = self._padded[no] = np.full(table.shape[1], self._pad, dtype=np.int64)
                row[:links.size] = links
            table[slot] = row
        self._size[slot] = self._rem[slot] = nbytes
        self._rno[slot] = no
        self._active[slot] = True
        self._fins[slot], self._tags[slot] = fin, tag
        self.flows_started += 1
        self._dirty = True
        if not self._pending:
            self._pending = True
            call_at(self.env, 0, self._on_pending)

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
            left = self._rem[idx] - rate * x
            self._rem[idx] = np.maximum(left, _ZERO, out=left)
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

    def _complete(self, done: np.ndarray) -> None:
        self._done_log.append((self._links[done], self._size[done]))
        if len(self._done_log) >= _DONE_KEPT:
            self._deliver()
        self._active[done] = False
        # a block's slots keep its number until they end: with no block live, every slot's is 0
        grp = self._grp[done] if self._blocks_live else None
        if grp is not None and _count(grp):
            self._grp[done] = 0
            self._complete_blocks(done.tolist(), grp)
        else:
            for slot in done.tolist():
                fin, tag = self._fins[slot], self._tags[slot]
                self._fins[slot] = self._tags[slot] = None
                self._free.append(slot)
                fin(tag)
        self.flows_completed += done.size

    def _complete_blocks(self, done: list, grp: np.ndarray) -> None:
        """``_complete``'s loop when some of the ``done`` slots belong to blocks
        (``start_block``): the same calls in the same order, and the same slots freed in the
        same order around them, but a block's flows call nothing until its last one lands
        (counted, not called: one Python step per block, not per flow)."""
        calls = [(p, None) for p in (grp == 0).nonzero()[0].tolist()]
        last = len(done) - 1
        ids, first, counts = np.unique(grp[::-1], return_index=True, return_counts=True)
        blocks = self._blocks_live
        for g, f, c in zip(ids.tolist(), first.tolist(), counts.tolist()):
            if not g:
                continue
            entry = blocks[g]
            entry[2] -= c
            if entry[2]:
                self.quiet_events += c
            else:                      # its last flow: called where it sits in ``done``
                self.quiet_events += c - 1
                del blocks[g]
                calls.append((last - f, entry))
        calls.sort(key=_first)
        fins, tags, free = self._fins, self._tags, self._free
        prev = 0
        for pos, entry in calls:
            free.extend(done[prev:pos + 1])
            prev = pos + 1
            if entry is None:
                slot = done[pos]
                fin, tag = fins[slot], tags[slot]
                fins[slot] = tags[slot] = None
            else:
                fin, tag = entry[0], entry[1]
            fin(tag)
        free.extend(done[prev:])

    def _deliver(self) -> None:
        """Add the finished flows' bytes to their links, in the order they finished (one
        unbuffered ``np.add.at``: the same sums, link by link, as one call per completion)."""
        log = self._done_log
        if log:
            # each flow's bytes once per column of its row, in the same order (one repeat)
            idx = np.concatenate([rows.ravel() for rows, _ in log])
            width = np.repeat([rows.shape[1] for rows, _ in log],
                              [rows.shape[0] for rows, _ in log])
            vals = np.concatenate([size for _, size in log]).repeat(width)
            np.add.at(self._delivered, idx, vals)
            log.clear()

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
        left = self._rem[idx] / rates       # ``rates`` may be a cached array: never written to
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
            order = rno.argsort(kind="stable")
            rates = max_min_rates(self._capacity, self._links[idx[order]])
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
