"""The engine's view of the network: a ``FlowNetwork`` with achievable bandwidths and, when
ranks are folded by symmetry, routes mapped onto the representatives' own links.

* **Achievable bandwidth.** Link capacities are scaled by ``strategies.cost.comm``'s
  efficiencies (NVLink/NVSwitch links ``NVLINK_EFFICIENCY``, NIC and fabric links
  ``NETWORK_EFFICIENCY``), so an uncontended collective takes what the analytic model says.
* **Latency.** ``route()`` reports the real path's latency; ``FlowNetwork.transfer`` waits it
  before the flow starts. ``flow()`` starts a flow at once (the caller has paid the latency).
* **Folded routes.** With a ``link_map`` (see ``simulator.fold``), every hop of a real route is
  replaced by the same hop of the representative GPU that owns it, and fabric-core hops
  (leaf <-> spine) are dropped. A hop may then appear twice in one flow: it counts twice in
  the max-min sharing (``simulator.network.maxmin.max_min_rates`` counts index repeats), which is
  exactly the load the real link carries under the symmetry.
* **Planes.** On a multi-plane network (``topologies.planes``) a transfer between nodes is
  striped: one sub-flow per plane (``topologies.routing.plane_routes``), each with its
  plane's share of the bytes, contending with its own plane's traffic only; the transfer
  ends with its last sub-flow. Such transfers are never timed in closed form on the
  ``flows`` backend (``solo_seconds`` is None: the sub-flows of one transfer share its
  GPU's NIC link, which only the max-min sharing can tell).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Hashable, Optional, Sequence

import networkx as nx
import numpy as np
import simpy

from simulator.network.flow_table import FlowBlock
from simulator.network.flows import FlowNetwork, transfer_ends
from simulator.network.routes import LinkTables
from strategies.cost.comm import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY
from topologies.routing import plane_routes

Node = Hashable
LinkMap = Callable[[Sequence[Node]], "list[tuple[Node, Node]]"]


def is_intra_node_edge(u: Node, v: Node) -> bool:
    """An NVLink/NVSwitch hop: GPU <-> NVSwitch or GPU <-> GPU."""
    kinds = [_kind(x) for x in (u, v)]
    return "nvswitch" in kinds or kinds == ["gpu", "gpu"]


def _kind(x: Node) -> str:
    return x[0] if isinstance(x, tuple) else "gpu"


def link_kind(u: Node, v: Node) -> str:
    """The class of a directed link: ``nvlink`` (GPU <-> NVSwitch or GPU), ``nic`` (GPU <->
    its NIC) or ``fabric`` (NIC, leaf and spine links between nodes)."""
    if is_intra_node_edge(u, v):
        return "nvlink"
    return "nic" if "gpu" in (_kind(u), _kind(v)) else "fabric"


LINK_KINDS = ("nvlink", "nic", "fabric")


def edge_efficiency(u: Node, v: Node) -> float:
    """Fraction of a link's line rate that NCCL achieves on it (comm_model's figures)."""
    return NVLINK_EFFICIENCY if is_intra_node_edge(u, v) else NETWORK_EFFICIENCY


class SimNetwork(FlowNetwork):
    """FlowNetwork over ``graph`` with capacities scaled by ``edge_efficiency`` (unless
    ``scale=False``) and, with ``link_map``, folded routes (see the module docstring). The
    ``flows`` backend of ``simulator.network.backend``."""

    shares_links = True

    def __init__(self, env: simpy.Environment, graph: nx.DiGraph,
                 route_fn: Optional[Callable] = None, link_map: Optional[LinkMap] = None,
                 scale: bool = True, record_load: bool = False,
                 tables: Optional[LinkTables] = None) -> None:
        super().__init__(env, graph, route_fn, tables)
        if scale:       # the graph's scaled capacities, worked out once for its tables
            scaled = self.tables.scaled
            if scaled is None:
                eff = np.array([edge_efficiency(u, v) for u, v in self.edges] + [1.0])
                scaled = self.tables.scaled = self._capacity * eff
                scaled.flags.writeable = False   # (as in Routes: the memo's key)
            self._capacity = scaled
        self.link_map = link_map
        self._solo = np.zeros(len(self.edges) + 1)   # bytes moved in closed form, per link
        self._solo_due: list = []    # (link indices, bytes) counted but not yet added to _solo
        # With ``record_load``: the load of each link over time (``link_rate_series``).
        self.record_load = record_load
        self._load = np.zeros(len(self.edges) + 1)   # bytes/s of the flows now, per link
        self._load_log: list = []    # (t, link indices, new bytes/s): flow-network changes
        self._solo_log: list = []    # (t, pattern): a closed-form transfer started at t
        self._solo_patterns: dict = {}   # key -> [(t0, t1, link indices, bytes/s)] from start
        self._striped: dict = {}     # (src, dst) -> ((link indices, share), ...) or None
        self._planes = graph.graph.get("planes", 1) > 1 and route_fn is not None
        self._blocks: dict = {}      # id of a list of flows -> (the list, its FlowBlock)
        if not self._planes:         # nothing striped: the engine's messages go straight to
            self.transfer = super().transfer     # ``FlowNetwork.transfer`` (a frame fewer)

    @property
    def record_load(self) -> bool:
        return self._record_load

    @record_load.setter
    def record_load(self, on: bool) -> None:
        """Without the load log the flow network's own ``_recompute`` runs, not the override
        below (one Python frame fewer per rate recomputation)."""
        self._record_load = on
        if on:
            self.__dict__.pop("_recompute", None)
        else:
            self._recompute = super()._recompute

    def _recompute(self, now: float, idx: Optional[np.ndarray] = None) -> None:
        """``FlowNetwork._recompute``, then the links whose load changed (``record_load``)."""
        super()._recompute(now, idx)
        idx, rate = self._cur[:2]            # every active flow, just rated
        load = np.bincount(self._links[idx].ravel(), minlength=len(self._load),
                           weights=np.repeat(rate, self._links.shape[1]))
        load[-1] = 0.0
        changed = np.flatnonzero(load != self._load)
        if changed.size:
            self._load_log.append((now, changed, load[changed]))
            self._load = load

    @property
    def capacity(self) -> np.ndarray:
        """Achievable bytes/s of each edge (index as in ``self.edges``)."""
        return self._capacity[:-1]

    def route(self, src: Node, dst: Node) -> tuple:
        """``(nodes, link_indices, latency_s)``; with a link map the indices are folded."""
        key = (src, dst)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        if self.link_map is None:
            return super().route(src, dst)
        nodes, index, latency = self.real_route(src, dst)
        hops = self.link_map(nodes)
        index = np.array([self._edge_index[h] for h in hops], dtype=np.int64)
        self._routes[key] = hit = (nodes, index, latency)
        return hit

    def stripes(self, src: Node, dst: Node) -> tuple | None:
        """``((link indices, share of the bytes), ...)``, one per plane, when a transfer from
        src to dst is striped over the planes of a multi-plane network; None otherwise."""
        if not self._planes:
            return None
        key = (src, dst)
        if key in self._striped:
            return self._striped[key]
        hit = None
        if src != dst:
            routes = plane_routes(self.graph, src, dst)
            if len(routes) > 1:
                hit = tuple((self._indices(path), share) for path, share in routes)
        self._striped[key] = hit
        return hit

    def _indices(self, nodes: Sequence[Node]) -> np.ndarray:
        hops = self.link_map(nodes) if self.link_map is not None \
            else list(zip(nodes[:-1], nodes[1:]))
        return np.array([self._edge_index[h] for h in hops], dtype=np.int64)

    def transfer(self, src: Node, dst: Node, nbytes: float, tag=None,
                 then: Optional[Callable] = None, share: Hashable = None) -> simpy.Event | None:
        """Send ``nbytes``: the route latency, then the bytes (striped over the planes of a
        multi-plane network); the event fires at the last byte (with ``then``: no event,
        ``then(tag)`` is called then, as ``FlowNetwork.transfer``)."""
        stripes = self.stripes(src, dst) if self._planes else None
        if stripes is None:
            return super().transfer(src, dst, nbytes, tag, then, share)
        if not nbytes >= 0:
            raise ValueError(f"nbytes={nbytes!r}: must be >= 0")
        done, fin = transfer_ends(self.env, tag, then, nbytes == 0)
        if fin is None:
            return done
        latency = self.route(src, dst)[2]
        start = partial(self._start_striped, stripes, float(nbytes), fin, tag)
        if latency > 0:
            self.env.timeout(latency).callbacks.append(start)
        else:
            start(None)
        return done

    def _start_striped(self, stripes: tuple, nbytes: float, fin: Callable, tag, _ev) -> None:
        """One flow per plane; ``fin(tag)`` when the last of them ends."""
        left = [len(stripes)]

        def one_done(_tag) -> None:
            left[0] -= 1
            if not left[0]:
                fin(tag)
        for links, share in stripes:
            self._start_flow(links, nbytes * share, one_done, tag, None)

    def latency(self, src: Node, dst: Node) -> float:
        """Summed latency of the real route from src to dst (seconds): the unfolded route's,
        which folding keeps (its links need not be mapped for it)."""
        if src == dst:
            return 0.0
        hit = self._latencies.get((src, dst))     # ``route_latency``'s memo, read here first
        return self.route_latency(src, dst) if hit is None else hit

    def links(self, src: Node, dst: Node) -> np.ndarray:
        """Link indices a flow from src to dst loads (folded when folding; every plane's
        links, each once, when striped)."""
        if src == dst:
            return np.zeros(0, dtype=np.int64)
        stripes = self.stripes(src, dst)
        if stripes is not None:
            return np.unique(np.concatenate([links for links, _ in stripes]))
        return self.route(src, dst)[1]

    def flow(self, src: Node, dst: Node, nbytes: float, tag=None) -> simpy.Event:
        """Start a flow now, without the route latency; the event fires when it ends."""
        done = self.env.event()
        if not self.start_flow(src, dst, nbytes, tag, done.succeed):
            done.succeed(tag)
        return done

    def start_flow(self, src: Node, dst: Node, nbytes: float, tag, fin: Callable) -> bool:
        """Start a flow now, without the route latency; ``fin(tag)`` is called when its last
        byte lands. False (and nothing started) when it moves nothing."""
        links = self.links(src, dst)
        if nbytes <= 0 or links.size == 0:
            return False
        stripes = self.stripes(src, dst)
        if stripes is not None:
            self._start_striped(stripes, float(nbytes), fin, tag, None)
        else:
            self._start_flow(links, float(nbytes), fin, tag, None)
        return True

    def flow_block(self, flows: Sequence[tuple[Node, Node]]) -> FlowBlock | None:
        """``flows`` (pairs ``(src, dst)``) prepared for ``start_block``, worked out once per
        list (a collective's phase, kept by the caller); None when one of them is striped
        over planes or moves nothing (same rank), which ``start_flow`` treats one by one."""
        hit = self._blocks.get(id(flows))
        if hit is not None and hit[0] is flows:
            return hit[1]
        block = None
        if flows and not any(a == b or self.stripes(a, b) is not None for a, b in flows):
            links = [self.route(a, b)[1] for a, b in flows]
            if all(x.size for x in links):
                block = FlowBlock(links)
        self._blocks[id(flows)] = (flows, block)     # holds the list: its id stays its own
        return block

    def count_solo(self, links: np.ndarray, nbytes: float) -> None:
        """Account ``nbytes`` on each of ``links`` (a transfer timed in closed form). Added
        to the per-link totals when they are read, in the order counted (the same sums)."""
        self._solo_due.append((links, nbytes))

    def _settle_solo(self) -> None:
        if self._solo_due:
            idx = np.concatenate([links for links, _ in self._solo_due])
            vals = np.repeat([nbytes for _, nbytes in self._solo_due],
                             [links.size for links, _ in self._solo_due])
            np.add.at(self._solo, idx, vals)      # unbuffered: link by link in count order
            self._solo_due.clear()

    def link_bytes(self) -> dict:
        """Bytes carried so far by each directed link, closed-form transfers included."""
        self._settle_solo()
        out = super().link_bytes()
        for i in np.flatnonzero(self._solo[:-1]).tolist():
            out[self.edges[i]] += float(self._solo[i])
        return out

    def _solo_flow(self, src: Node, dst: Node) -> tuple[np.ndarray, np.ndarray, float]:
        """``(links, times each is crossed, bytes/s)`` of a flow alone on its links."""
        uniq, counts = np.unique(self.links(src, dst), return_counts=True)
        rate = float(np.min(self._capacity[uniq] / counts)) if uniq.size else np.inf
        return uniq, counts, rate

    def solo_seconds(self, flows: Sequence[tuple[Node, Node]], nbytes: float) -> float | None:
        """Seconds until the last of ``flows`` (each ``nbytes``) ends if they start together
        and nothing else shares their links; None if two of them share a link (then only
        the max-min sharing can tell)."""
        seen: set[int] = set()
        worst = 0.0
        for src, dst in flows:
            if self.stripes(src, dst) is not None:
                return None
            uniq, _, rate = self._solo_flow(src, dst)
            if uniq.size == 0:
                continue
            if seen.intersection(uniq.tolist()):
                return None
            seen.update(uniq.tolist())
            worst = max(worst, nbytes / rate)
        return worst

    def log_solo(self, phases: Sequence[tuple[float, Sequence[tuple[Node, Node]], float]],
                 key: Hashable = None) -> None:
        """With ``record_load``: the load of a closed-form transfer starting now, given as
        phases ``(latency s, flows, bytes per flow)`` run one after the other, each flow at
        its ``solo_seconds`` rate (the same arithmetic as the closed form's duration).
        ``key`` names phases that recur (their load pattern is worked out once)."""
        if not self.record_load:
            return
        pattern = self._solo_patterns.get(key) if key is not None else None
        if pattern is None:
            pattern, t = [], 0.0
            for latency, flows, nbytes in phases:
                t += latency
                end = t
                for src, dst in flows:
                    uniq, counts, rate = self._solo_flow(src, dst)
                    if uniq.size and nbytes > 0:
                        pattern.append((t, t + nbytes / rate, uniq, rate * counts))
                        end = max(end, t + nbytes / rate)
                t = end
            if key is not None:
                self._solo_patterns[key] = pattern
        self._solo_log.append((self.env.now, pattern))

    def link_rate_series(self, edges: Sequence[tuple[Node, Node]]
                         ) -> dict[tuple[Node, Node], list[tuple[float, float]]]:
        """Bytes/s on each of ``edges`` over time, as steps ``[(t, rate from t on), …]`` from
        ``(0, 0)``; the integral of each equals its bytes in ``link_bytes`` (needs
        ``record_load``). Same-instant changes are merged (the last one holds)."""
        if not self.record_load:
            raise ValueError("link_rate_series needs a SimNetwork made with record_load=True")
        want = {self._edge_index[e]: e for e in edges}
        points: dict[int, list[tuple[float, int, float, bool]]] = {i: [] for i in want}
        wanted = np.array(sorted(want), dtype=np.int64)
        if self._load_log:           # flow network: absolute loads at each change
            sizes = [len(idx) for _, idx, _ in self._load_log]
            times = np.repeat([t for t, _, _ in self._load_log], sizes)
            order = np.repeat(np.arange(len(sizes)), sizes)
            idx = np.concatenate([i for _, i, _ in self._load_log])
            vals = np.concatenate([v for _, _, v in self._load_log])
            hit = np.isin(idx, wanted)
            for t, o, i, v in zip(times[hit].tolist(), order[hit].tolist(),
                                  idx[hit].tolist(), vals[hit].tolist()):
                points[i].append((t, o, v, True))
        base = len(self._load_log)
        kept: dict[int, list] = {}   # per pattern, its segments on wanted links
        for n, (t, pattern) in enumerate(self._solo_log):
            segs = kept.get(id(pattern))
            if segs is None:
                segs = kept[id(pattern)] = [(a, b, i, r) for a, b, idx, rates in pattern
                                            for i, r in zip(idx.tolist(), rates.tolist())
                                            if i in want]
            for a, b, i, r in segs:
                points[i] += [(t + a, base + n, r, False), (t + b, base + n, -r, False)]
        out = {}
        for i, e in want.items():
            flow = solo = 0.0
            series = [(0.0, 0.0)]
            for t, _, v, absolute in sorted(points[i]):
                if absolute:
                    flow = v
                else:
                    solo += v
                level = flow + solo
                if abs(level) <= 1e-9 * abs(v):      # a closed-form segment ended: exact 0
                    level = 0.0
                if series[-1][0] == t:
                    series[-1] = (t, level)
                else:
                    series.append((t, level))
            out[e] = series
        return out

