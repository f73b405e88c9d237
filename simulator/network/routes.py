"""The links and routes of a flow network's graph: each directed link's index and capacity,
and the route between two nodes (``route_fn``, or by default the fewest hops with ties broken
by the nodes' ``repr``), each worked out once.
"""
from __future__ import annotations

from typing import Callable, Hashable, Optional, Sequence

import networkx as nx
import numpy as np

Node = Hashable
RouteFn = Callable[[nx.DiGraph, Node, Node], Sequence[Node]]


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


class LinkTables:
    """What every network over one graph shares: its directed links in ``graph.edges`` order
    (``edges``, ``edge_index``), their bandwidths (bytes/s) with the padding link's infinite
    capacity last (``capacity``, read-only), ``SimNetwork``'s capacities scaled by each link's
    efficiency (``scaled``, filled by the first such network) and the unfolded routes of each
    route function (``routes``: ``route_fn -> {(src, dst): (nodes, link indices, latency)}``).
    A pure function of the graph, which must not change after it is built: ``simulate`` keeps
    one per cached graph (``simulate.graph_of``), so the simulations of a search build the
    links of its 1,024-GPU cluster (6,208 of them) and their routes once, not per plan.
    ``edge_latency``: each link's latency (seconds); ``latencies``: ``route_fn -> {(src, dst):
    the route's summed latency}`` for the pairs whose latency alone was asked
    (``RouteTable.route_latency``: a collective's phase reads every member's hop, a
    2,048-GPU search hundreds of thousands of pairs whose links no flow ever loads)."""

    __slots__ = ("edges", "edge_index", "edge_latency", "capacity", "scaled", "routes",
                 "latencies")

    def __init__(self, graph: nx.DiGraph) -> None:
        self.edges = list(graph.edges)
        self.edge_index = {e: i for i, e in enumerate(self.edges)}
        self.capacity = np.append([_checked(graph, e) for e in self.edges], np.inf)
        self.capacity.flags.writeable = False   # read-only: maxmin's memo keys on its identity
        self.edge_latency = {e: float(graph.edges[e].get("latency", 0.0)) for e in self.edges}
        self.scaled: Optional[np.ndarray] = None
        self.routes: dict = {}
        self.latencies: dict = {}


def _checked(graph: nx.DiGraph, edge: tuple) -> float:
    """``edge``'s bandwidth (bytes/s), once its bandwidth and latency are checked."""
    attrs = graph.edges[edge]
    bandwidth, latency = attrs.get("bandwidth"), attrs.get("latency", 0.0)
    if bandwidth is None or not bandwidth > 0:
        raise ValueError(f"edge {edge!r}: bandwidth={bandwidth!r} must be > 0 bytes/s")
    if not latency >= 0:
        raise ValueError(f"edge {edge!r}: latency={latency!r} must be >= 0 s")
    return float(bandwidth)


class RouteTable:
    """The links of a directed graph whose edges carry ``bandwidth`` (bytes/s, > 0) and
    ``latency`` (seconds, >= 0), and the routes between its nodes. Links are numbered in
    ``graph.edges`` order (``edges``); ``_capacity`` holds their bandwidths (bytes/s) and, last,
    a padding link of infinite capacity (index ``_pad``). The base of ``FlowNetwork``; the graph
    must not change after construction. ``tables``: the graph's ``LinkTables`` when the caller
    keeps them (the same links, capacities and unfolded routes; else built here)."""

    def __init__(self, graph: nx.DiGraph, route_fn: Optional[RouteFn] = None,
                 tables: Optional[LinkTables] = None) -> None:
        self.graph = graph
        self.route_fn = route_fn
        self._dist: dict = {}         # dst -> hop counts to it, for the default routing
        self.tables = tables = tables if tables is not None else LinkTables(graph)
        self.edges = tables.edges
        self._edge_index = tables.edge_index
        self._capacity = tables.capacity
        self._pad = len(self.edges)
        self._routes: dict = {}       # (src, dst) -> this network's route (folded: SimNetwork)
        # (src, dst) -> the unfolded route, shared by the networks over these tables
        self._unfolded: dict = tables.routes.setdefault(route_fn, {})
        # (src, dst) -> the route's latency, where it alone was asked (``route_latency``)
        self._latencies: dict = tables.latencies.setdefault(route_fn, {})
        self._edge_latency = tables.edge_latency

    def route(self, src: Node, dst: Node) -> tuple:
        """``(nodes, link_indices, latency_s)`` of the cached route from src to dst (the
        link indices read-only: networks over the same tables share them)."""
        key = (src, dst)
        hit = self._routes.get(key)
        if hit is None:
            hit = self._routes[key] = self.real_route(src, dst)
        return hit

    def real_route(self, src: Node, dst: Node) -> tuple:
        """``(nodes, link_indices, latency_s)`` of the real (unfolded) route from src to dst,
        kept in the tables every network over this graph shares; ``route`` is this one unless
        a subclass maps the links (``SimNetwork``'s folding keeps the nodes and latency)."""
        key = (src, dst)
        hit = self._unfolded.get(key)
        if hit is None:
            hit = self._unfolded[key] = self._new_route(src, dst)
        return hit

    def route_latency(self, src: Node, dst: Node) -> float:
        """The summed latency (seconds) of the real route from src to dst (``real_route``'s
        third field, the same float), without its link indices where none was worked out."""
        key = (src, dst)
        hit = self._latencies.get(key)
        if hit is None:
            route = self._unfolded.get(key)
            hit = self._latencies[key] = route[2] if route is not None else \
                self._latency(self._nodes(src, dst))
        return hit

    def _nodes(self, src: Node, dst: Node) -> tuple:
        if self.route_fn is None:
            if dst not in self._dist:
                self._dist[dst] = _hops_to(self.graph, dst)
            nodes = tuple(_walk(self.graph, src, dst, self._dist[dst]))
        else:
            nodes = tuple(self.route_fn(self.graph, src, dst))
        if nodes[0] != src or nodes[-1] != dst:
            raise ValueError(f"route_fn gave {nodes!r} for {src!r} -> {dst!r}")
        return nodes

    def _latency(self, nodes: tuple) -> float:
        """The hops' latencies summed in path order (seconds)."""
        lat = self._edge_latency
        latency = 0.0
        for hop in zip(nodes[:-1], nodes[1:]):
            latency += lat[hop]
        return latency

    def _new_route(self, src: Node, dst: Node) -> tuple:
        nodes = self._nodes(src, dst)
        hops = list(zip(nodes[:-1], nodes[1:]))
        index = np.array([self._edge_index[h] for h in hops], dtype=np.int64)
        index.flags.writeable = False
        return nodes, index, self._latency(nodes)
