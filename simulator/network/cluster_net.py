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
  the max-min sharing (``simulator.network.flows.max_min_rates`` counts index repeats), which is
  exactly the load the real link carries under the symmetry.
"""
from __future__ import annotations

from typing import Callable, Hashable, Optional, Sequence

import networkx as nx
import numpy as np
import simpy

from simulator.network.flows import FlowNetwork
from strategies.cost.comm import NETWORK_EFFICIENCY, NVLINK_EFFICIENCY

Node = Hashable
LinkMap = Callable[[Sequence[Node]], "list[tuple[Node, Node]]"]


def is_intra_node_edge(u: Node, v: Node) -> bool:
    """An NVLink/NVSwitch hop: GPU <-> NVSwitch or GPU <-> GPU."""
    kinds = [_kind(x) for x in (u, v)]
    return "nvswitch" in kinds or kinds == ["gpu", "gpu"]


def _kind(x: Node) -> str:
    return x[0] if isinstance(x, tuple) else "gpu"


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
                 scale: bool = True) -> None:
        super().__init__(env, graph, route_fn)
        if scale:
            eff = np.array([edge_efficiency(u, v) for u, v in self.edges] + [1.0])
            self._capacity = self._capacity * eff
        self.link_map = link_map
        self._solo = np.zeros(len(self.edges) + 1)   # bytes moved in closed form, per link

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
        nodes, index, latency = super().route(src, dst)
        if self.link_map is not None:
            hops = self.link_map(nodes)
            index = np.array([self._edge_index[h] for h in hops], dtype=np.int64)
            self._routes[key] = hit = (nodes, index, latency)
            return hit
        return nodes, index, latency

    def latency(self, src: Node, dst: Node) -> float:
        """Summed latency of the real route from src to dst (seconds)."""
        return 0.0 if src == dst else self.route(src, dst)[2]

    def links(self, src: Node, dst: Node) -> np.ndarray:
        """Link indices a flow from src to dst loads (folded when folding)."""
        if src == dst:
            return np.zeros(0, dtype=np.int64)
        return self.route(src, dst)[1]

    def flow(self, src: Node, dst: Node, nbytes: float, tag=None) -> simpy.Event:
        """Start a flow now, without the route latency; the event fires when it ends."""
        done = self.env.event()
        links = self.links(src, dst)
        if nbytes <= 0 or links.size == 0:
            return done.succeed(tag)
        self._start_flow(links, float(nbytes), done, tag, None)
        return done

    def count_solo(self, links: np.ndarray, nbytes: float) -> None:
        """Account ``nbytes`` on each of ``links`` (a transfer timed in closed form)."""
        np.add.at(self._solo, links, nbytes)

    def link_bytes(self) -> dict:
        """Bytes carried so far by each directed link, closed-form transfers included."""
        out = super().link_bytes()
        for i in np.flatnonzero(self._solo[:-1]).tolist():
            out[self.edges[i]] += float(self._solo[i])
        return out

    def solo_seconds(self, flows: Sequence[tuple[Node, Node]], nbytes: float) -> float | None:
        """Seconds until the last of ``flows`` (each ``nbytes``) ends if they start together
        and nothing else shares their links; None if two of them share a link (then only
        the max-min sharing can tell)."""
        seen: set[int] = set()
        worst = 0.0
        for src, dst in flows:
            links = self.links(src, dst)
            if links.size == 0:
                continue
            uniq, counts = np.unique(links, return_counts=True)
            if seen.intersection(uniq.tolist()):
                return None
            seen.update(uniq.tolist())
            rate = float(np.min(self._capacity[uniq] / counts))
            worst = max(worst, nbytes / rate)
        return worst
