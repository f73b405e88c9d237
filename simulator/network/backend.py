"""The engine's narrow interface to a network, and the backends that implement it.

``NetworkBackend`` is everything ``simulator.engine`` asks of a network: the route latency and
the links between two ranks, transfers (latency, then bytes) and flows (bytes only: the caller
paid the latency, as a collective's phase does), the closed-form time of flows that start
together alone on their links, and per-link byte accounting. Two backends:

* ``flows`` (``SimNetwork``, the default): flows share every link max-min fairly, so traffic
  contends (``simulator.network.flows``).
* ``contention-free`` (``ContentionFreeNetwork``): every transfer moves as if it were alone on
  the network, whatever else is on the wire: a point-to-point message at its bottleneck link's
  full achievable bandwidth, a collective's phase with its own flows sharing links max-min
  fairly among themselves only (an all-to-all's flows share their member's port, as its
  closed form assumes), so a collective takes its analytic time (``strategies.collectives``),
  the network the analytic estimate assumes. A collective alone takes the same time on both
  backends; with overlapping traffic the difference between the two is the cost of
  contention.

Both use the same graph, achievable bandwidths (``cluster_net``), routes, latencies and folded
routes, so a simulation differs between them by contention only.
"""
from __future__ import annotations

from typing import Callable, Hashable, Protocol, Sequence, runtime_checkable

import networkx as nx
import numpy as np
import simpy

from simulator.network import BACKEND_NAMES
from simulator.network.cluster_net import SimNetwork
from simulator.network.maxmin import max_min_rates
from simulator.network.routes import LinkTables

Node = Hashable


@runtime_checkable
class NetworkBackend(Protocol):
    """What the engine needs from a network (seconds, bytes, bytes/s)."""

    env: simpy.Environment
    graph: nx.DiGraph
    shares_links: bool      # flows on a common link slow each other down

    def latency(self, src: Node, dst: Node) -> float:
        """Route latency from src to dst (seconds; 0 when src == dst)."""

    def links(self, src: Node, dst: Node) -> np.ndarray:
        """Indices of the links a flow from src to dst loads."""

    def transfer(self, src: Node, dst: Node, nbytes: float, tag=None,
                 then: Callable | None = None, share: Hashable = None) -> simpy.Event | None:
        """Send ``nbytes``: the route latency, then the bytes; the event fires at the last byte
        (with ``then``: no event; ``then(tag)`` is called at the last byte). Transfers with
        the same ``share`` (not None) that start at one instant may share SimPy events."""

    def flow(self, src: Node, dst: Node, nbytes: float, tag=None) -> simpy.Event:
        """Move ``nbytes`` from now on, without the route latency."""

    def start_flow(self, src: Node, dst: Node, nbytes: float, tag, fin: Callable) -> bool:
        """``flow`` without an event: ``fin(tag)`` at the last byte; False when it moves
        nothing (nothing started, ``fin`` never called)."""

    def solo_seconds(self, flows: Sequence[tuple[Node, Node]], nbytes: float) -> float | None:
        """Seconds until the last of ``flows`` (``nbytes`` each) ends when they start together
        with nothing else on their links; None when only the flow model can tell."""

    def count_solo(self, links: np.ndarray, nbytes: float) -> None:
        """Account ``nbytes`` on each of ``links`` (a transfer timed by ``solo_seconds``)."""

    def link_bytes(self) -> dict:
        """Bytes carried so far by each directed link ``(u, v)``."""


class ContentionFreeNetwork(SimNetwork):
    """``SimNetwork`` without contention between transfers: a flow gets the full achievable
    bandwidth of the slowest link on its route (a folded route's repeated hop, another rank's
    image of the transfer, counts once) whatever else is on the wire; the flows of one
    collective phase (``solo_seconds``, which the engine always uses on this backend) share
    links among themselves only."""

    shares_links = False

    def _start_flow(self, links: np.ndarray, nbytes: float, fin: Callable, tag, _ev) -> None:
        rate = float(np.min(self._capacity[links]))
        self.flows_started += 1

        def finish(_e) -> None:
            np.add.at(self._delivered, links, nbytes)
            self.flows_completed += 1
            fin(tag)
        self.env.timeout(nbytes / rate).callbacks.append(finish)

    def _start_flows(self, flows: list) -> None:
        for links, nbytes, fin, tag in flows:
            self._start_flow(links, nbytes, fin, tag, None)

    def start_block(self, block, nbytes, fin: Callable, tag) -> None:
        """``SimNetwork.start_block`` flow by flow (each at its own bottleneck's rate):
        ``fin(tag)`` when the last one lands, the others' ends counted in ``quiet_events``."""
        sizes = nbytes if isinstance(nbytes, np.ndarray) else (nbytes,) * block.size
        left = [block.size]

        def one_done(_tag) -> None:
            left[0] -= 1
            if left[0]:
                self.quiet_events += 1
            else:
                fin(tag)
        for links, nb in zip(block.links, sizes):
            self._start_flow(links, float(nb), one_done, tag, None)

    def solo_seconds(self, flows: Sequence[tuple[Node, Node]], nbytes: float) -> float:
        """Seconds until the last of ``flows`` (``nbytes`` each) ends when they share links
        max-min fairly among themselves and with nothing else: never None."""
        routes, shares = [], []      # a striped flow is one row per plane (its share of bytes)
        for a, b in flows:
            stripes = self.stripes(a, b)
            for r, share in stripes if stripes is not None else ((self.links(a, b), 1.0),):
                if r.size:
                    routes.append(r)
                    shares.append(share)
        if not routes or nbytes <= 0:
            return 0.0
        table = np.full((len(routes), max(r.size for r in routes)), self._pad, dtype=np.int64)
        for i, r in enumerate(routes):
            table[i, :r.size] = r
        return float(np.max(nbytes * np.array(shares) / max_min_rates(self._capacity, table)))

    def solo_seconds_sized(self, flows: Sequence[tuple[Node, Node]],
                           sizes: Sequence[float]) -> float:
        """``solo_seconds`` for flows of different ``sizes`` (bytes each; a forwarded
        all-to-all, the striped ring): max-min fair sharing among themselves, re-shared each
        time one ends; a flow between nodes of a multi-plane network is one row per plane
        with its share of the bytes, as in ``solo_seconds``."""
        pairs = []
        for (a, b), n in zip(flows, sizes):
            stripes = self.stripes(a, b)
            for r, share in stripes if stripes is not None else ((self.links(a, b), 1.0),):
                if r.size and n > 0:
                    pairs.append((r, float(n) * share))
        if not pairs:
            return 0.0
        table = np.full((len(pairs), max(r.size for r, _ in pairs)), self._pad, dtype=np.int64)
        for i, (r, _) in enumerate(pairs):
            table[i, :r.size] = r
        left = np.array([n for _, n in pairs])
        size, t = left.copy(), 0.0
        while table.shape[0]:
            rates = max_min_rates(self._capacity, table)
            dt = float(np.min(left / rates))
            t, left = t + dt, left - rates * dt
            keep = left > 1e-12 * size           # not yet through (rounding aside)
            table, left, size = table[keep], left[keep], size[keep]
        return t


BACKENDS: dict[str, Callable[..., NetworkBackend]] = dict(
    zip(BACKEND_NAMES, (SimNetwork, ContentionFreeNetwork), strict=True))
DEFAULT_BACKEND = BACKEND_NAMES[0]


def new_network(graph: nx.DiGraph, route_fn: Callable, link_map=None,
                backend: str = DEFAULT_BACKEND, record_load: bool = False,
                tables: LinkTables | None = None) -> NetworkBackend:
    """A network of kind ``backend`` (``BACKENDS``' keys) over ``graph`` on a fresh SimPy
    environment (callers need no SimPy of their own). ``record_load``: keep each link's load
    over time (``SimNetwork.link_rate_series``); the ``flows`` backend only (the
    contention-free one times its flows outside the flow table). ``tables``: the graph's
    ``LinkTables`` where the caller keeps them (``simulate``: one per cached graph)."""
    try:
        cls = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"network backend {backend!r}: must be one of "
                         f"{', '.join(BACKENDS)}") from None
    net = cls(simpy.Environment(), graph, route_fn, link_map, tables=tables)
    net.record_load = record_load and cls is SimNetwork
    return net
