"""The flow network's flow table: a slot per active flow, in per-slot arrays (its bytes, the
bytes left, its route number, whether it is active, its block) and a link-index matrix padded
with the padding link; flows written in one at a time (``_start_flow``) or many at once
(``_start_flows``; ``start_block`` with a ``FlowBlock``, a collective's phase) and taken out
when done (``_complete``), their bytes added to their links' totals (``_deliver``).

``FlowTable`` is the base of ``flows.FlowNetwork``, which times the flows: writing flows in
marks the network ``_dirty`` and, once per instant (``_pending``), queues its ``_on_pending``,
where the rates are recomputed.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Callable, Optional, Sequence

import networkx as nx
import numpy as np

from simulator.network.queue_entry import call_at
from simulator.network.routes import LinkTables, RouteFn, RouteTable

FEW_FLOWS = 8   # up to this many flows started together go in one by one (``_start_flows``)
_DONE_KEPT = 1024      # finished flows whose bytes wait to be added to their links (``_deliver``)
# 32-bit route numbers and link indices in the flow table (< 2**31 of each per network): the
# rate recomputation sorts, gathers and hashes them (``FlowNetwork._rates_of``, the solver
# memo's key), half the bytes of int64 for the same numbers
ROUTE_NO = LINK_NO = np.int32
_count = np.count_nonzero   # truthy as ``np.logical_or.reduce`` of ints, without a ufunc reduction
_first = itemgetter(0)


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
            self.rows = np.array(self.links, dtype=LINK_NO)
        else:
            self.counts = np.array(sizes)
            first = np.cumsum(self.counts) - self.counts
            self.cols = np.arange(int(self.counts.sum())) - np.repeat(first, self.counts)
            self.flat = np.concatenate(self.links)

    def flat_rows(self, idx: np.ndarray) -> np.ndarray:
        return np.repeat(idx, self.counts)


class FlowTable(RouteTable):
    """The flows over a ``RouteTable``'s links, slot by slot (see the module docstring). A
    flow's ``fin(tag)`` is called when ``_complete`` takes it out (a block's once, for its
    last flow). ``count_bytes`` False: finished flows' bytes are not added to their links (a
    run whose per-link bytes nothing reads, ``simulate(figures_only=True)``: two array
    look-ups per completion fewer; ``link_bytes`` then refuses)."""

    count_bytes = True

    def __init__(self, graph: nx.DiGraph, route_fn: Optional[RouteFn] = None,
                 tables: Optional[LinkTables] = None) -> None:
        super().__init__(graph, route_fn, tables)
        # flow slots: per-slot arrays, a link-index matrix padded with ``_pad``
        self._links = np.full((0, 1), self._pad, dtype=LINK_NO)
        self._size, self._rem = np.zeros(0), np.zeros(0)
        # each slot's route number (``_route_of``), 32-bit: ``FlowNetwork._rates_of`` sorts and
        # hashes these per rate recomputation, half the bytes of int64 (the same numbers)
        self._rno = np.zeros(0, dtype=ROUTE_NO)
        self._active = np.zeros(0, dtype=bool)
        # a slot started by ``start_block``: its block's number (0: a flow of its own, whose
        # ``fin`` and ``tag`` are in ``_fins``/``_tags``); a block's [fin, tag, flows left]
        self._grp = np.zeros(0, dtype=np.int64)
        self._blocks_live: dict[int, list] = {}
        self._block_no = 0
        self._fins: list = []
        self._tags: list = []
        self._free: list = []
        self._route_no: dict = {}     # a flow's link indices (bytes) -> its route number
        self._route_arrays: dict = {}   # id of a links array -> (the array, its route number)
        self._padded: dict = {}       # route number -> its row padded to the table's width
        # route number -> its row padded to the table's width, as a matrix (the rows of
        # ``_links`` the rate recomputation gathers in route order: ``FlowNetwork._rates_of``)
        self._route_rows = np.full((0, 1), self._pad, dtype=LINK_NO)
        self._delivered = np.zeros(len(self.edges) + 1)   # bytes of finished flows
        self._done_log: list = []     # (link rows, bytes) of finished flows not yet delivered
        self.quiet_events = 0       # events counted without a queue entry (collectives._Run)
        self.flows_started = 0
        self.flows_completed = 0

    def _on_pending(self, _ev) -> None:
        """Rate the flows written in at this instant (``FlowNetwork._on_pending``)."""
        raise NotImplementedError

    def _grow(self, slots: int, hops: int) -> None:
        old, old_hops = self._links.shape
        links = np.full((slots, hops), self._pad, dtype=LINK_NO)
        links[:old, :old_hops] = self._links
        self._links = links
        if hops != old_hops:
            self._padded.clear()
            self._widen_route_rows(hops)
        for name in ("_size", "_rem", "_rno", "_active", "_grp"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros(slots - old, dtype=arr.dtype)]))
        self._rno[old:] = -1        # a new slot's row holds no route yet (``_start_flow``)
        self._fins += [None] * (slots - old)
        self._tags += [None] * (slots - old)
        self._free += range(slots - 1, old - 1, -1)

    def live_flows(self) -> int:
        """The number of flows now moving bytes (started, not ended)."""
        return int(np.count_nonzero(self._active))

    def _active_idx(self) -> np.ndarray:
        return self._active.nonzero()[0]

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
            self._new_route_row(no, links)
        self._route_arrays[id(links)] = (links, no)     # holds the array: its id stays its own
        return no

    def _widen_route_rows(self, hops: int) -> None:
        """``_route_rows`` padded to ``hops`` columns (the table's new width)."""
        rows, width = self._route_rows.shape
        if hops > width:
            wide = np.full((rows, hops), self._pad, dtype=LINK_NO)
            wide[:, :width] = self._route_rows
            self._route_rows = wide

    def _new_route_row(self, no: int, links: np.ndarray) -> None:
        """Route ``no``'s row (``links`` padded to the table's width) in ``_route_rows``."""
        rows = self._route_rows
        if links.size > rows.shape[1]:
            self._widen_route_rows(links.size)
            rows = self._route_rows
        if no >= rows.shape[0]:
            grown = np.full((max(64, 2 * rows.shape[0]), rows.shape[1]), self._pad,
                            dtype=LINK_NO)
            grown[:rows.shape[0]] = rows
            self._route_rows = rows = grown
        rows[no, :links.size] = links

    def _start_flow(self, links: np.ndarray, nbytes: float, fin: Callable, tag, _ev) -> None:
        """Add a flow; ``fin(tag)`` is called when its last byte arrives."""
        slots, hops = self._links.shape
        if not self._free or links.size > hops:
            self._grow(slots if self._free else max(64, 2 * slots), max(links.size, hops))
        slot = self._free.pop()
        table = self._links
        no = self._route_of(links)
        # a slot keeps its last flow's row and route number when it ends (a step sends the
        # same messages again and again, and the free list hands the slot back first): the
        # row is written only when the route differs
        if self._rno[slot] != no:
            if links.size == table.shape[1]:    # as long as the table's rows: one write
                table[slot] = links
            else:                               # its row padded to the table's width, kept
                row = self._padded.get(no)
                if row is None:
                    row = self._padded[no] = np.full(table.shape[1], self._pad,
                                                     dtype=LINK_NO)
                    row[:links.size] = links
                table[slot] = row
            self._rno[slot] = no
        self._size[slot] = self._rem[slot] = nbytes
        self._active[slot] = True
        self._fins[slot], self._tags[slot] = fin, tag
        self.flows_started += 1
        self._dirty = True
        if not self._pending:
            self._pending = True
            call_at(self.env, 0, self._on_pending)

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
        ``FEW_FLOWS`` flows, ``_start_flow`` itself: cheaper than building the arrays)."""
        k = len(flows)
        if k <= FEW_FLOWS:
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
            block.rno = np.array([self._route_of(x) for x in block.links], dtype=ROUTE_NO)
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

    def _complete(self, done: np.ndarray) -> None:
        """Take the ``done`` slots out (due now): their rows and bytes logged for ``_deliver``,
        each one's ``fin(tag)`` called in order (a block's once: ``_complete_blocks``)."""
        if self.count_bytes:
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
        last = len(done) - 1
        one = grp.item(0)
        if one and not _count(grp != one):     # one block's flows only (the common case)
            calls, blocks_done = [], ((one, 0, last + 1),)
        else:       # each block once: its number, its last flow's place from the end, its count
            calls = [(p, None) for p in (grp == 0).nonzero()[0].tolist()]
            ids, first, counts = np.unique(grp[::-1], return_index=True, return_counts=True)
            blocks_done = zip(ids.tolist(), first.tolist(), counts.tolist())
        blocks = self._blocks_live
        for g, f, c in blocks_done:
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
