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


class RouteTable:
    """The links of a directed graph whose edges carry ``bandwidth`` (bytes/s, > 0) and
    ``latency`` (seconds, >= 0), and the routes between its nodes. Links are numbered in
    ``graph.edges`` order (``edges``); ``_capacity`` holds their bandwidths (bytes/s) and, last,
    a padding link of infinite capacity (index ``_pad``). The base of ``FlowNetwork``; the graph
    must not change after construction."""

    def __init__(self, graph: nx.DiGraph, route_fn: Optional[RouteFn] = None) -> None:
        self.graph = graph
        self.route_fn = route_fn
        self._dist: dict = {}         # dst -> hop counts to it, for the default routing
        self.edges = list(graph.edges)
        self._edge_index = {e: i for i, e in enumerate(self.edges)}
        self._capacity = np.append([self._checked(e) for e in self.edges], np.inf)
        self._capacity.flags.writeable = False   # read-only: maxmin's memo keys on its identity
        self._pad = len(self.edges)
        self._routes: dict = {}

    def _checked(self, edge: tuple) -> float:
        attrs = self.graph.edges[edge]
        bandwidth, latency = attrs.get("bandwidth"), attrs.get("latency", 0.0)
        if bandwidth is None or not bandwidth > 0:
            raise ValueError(f"edge {edge!r}: bandwidth={bandwidth!r} must be > 0 bytes/s")
        if not latency >= 0:
            raise ValueError(f"edge {edge!r}: latency={latency!r} must be >= 0 s")
        return float(bandwidth)

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
