"""Cluster -> ``networkx.DiGraph`` of GPUs, switches, NICs and links.

Node naming (stable, so routes can be computed from the names alone):

==========================  ===============================================================
``r`` (plain ``int``)        the GPU of global rank ``r = node * gpus_per_node + local``
``('nvswitch', n)``          the NVSwitch of node ``n`` (``intra_node_topology: switch``); for
                             an NVL72 rack (a node = one NVLink domain) the rack's NVLink
                             switch trays, aggregated into one non-blocking switch
``('nic', n, i)``            NIC ``i`` of node ``n``; GPU ``local`` uses NIC ``local % rails``
``('leaf', rail, j)``        leaf switch ``j`` of a rail; it serves nodes
                             ``j*nodes_per_leaf .. (j+1)*nodes_per_leaf - 1``
                             (plain ``fat_tree``: one shared leaf per group, ``rail`` is 0)
``('spine', rail, k)``       spine ``k`` of a rail (``fat_tree``: rail 0)
``('leaf', rail, j, p)``     with ``planes > 1`` (a multi-plane network,
                             :mod:`topologies.planes`) leaves and spines carry their plane
                             ``p``; each NIC has one port into each plane
==========================  ===============================================================

``rails = min(nics_per_node, gpus_per_node)`` (NICs that no GPU uses are not modelled). Node
attributes: ``kind`` (``gpu``, ``nvswitch``, ``nic``, ``leaf``, ``spine``); GPUs also carry
``node``, ``local`` and ``gpu`` (catalog name; heterogeneous clusters build each NodeGroup's
nodes in order). ``graph.graph`` holds the shape that :mod:`topologies.routing` reads.

Every physical link is two directed edges with ``bandwidth`` (bytes/s, per direction) and
``latency`` (seconds):

- intra-node ``switch``: GPU <-> NVSwitch at ``intra_node_bandwidth``, ``intra_node_latency/2``
  per hop (GPU -> switch -> GPU totals ``intra_node_latency``); ``mesh``: a direct link per GPU
  pair at ``intra_node_bandwidth / (gpus_per_node - 1)``, latency ``intra_node_latency``;
  ``ring``: links to the two ring neighbours at ``intra_node_bandwidth / 2`` (full bandwidth
  with 2 GPUs), ``intra_node_latency`` per hop.
- GPU <-> its NIC at ``inter_node_bandwidth``, latency ``inter_node_latency/4`` (GPUs that
  share a NIC share its uplink).
- fat trees: NIC <-> leaf at ``inter_node_bandwidth``, latency ``inter_node_latency/4``, so any
  route between GPUs of two nodes totals ``inter_node_latency`` whether it crosses a spine or
  not (leaf <-> spine links have latency 0). A leaf's uplinks sum to its downlinks divided by
  ``oversubscription``, split evenly over ``spines_per_rail`` spines. By default each rail's
  spine layer is **aggregated into one node** with the summed capacity (a fluid model of
  perfect load balancing); ``spines_per_rail > 1`` builds separate spines that routing picks
  by deterministic ECMP. With a single leaf per rail there are no spines.
- ``torus`` (2-D, near-square, see :func:`torus_dims`) and ``ring``: NIC ``i`` of each node
  links to NIC ``i`` of its neighbours at ``inter_node_bandwidth`` (one port per neighbour),
  latency ``inter_node_latency/2`` per NIC-NIC hop (a neighbour route totals
  ``inter_node_latency``).

A single-node cluster has no NICs and no fabric. 2,048 eight-GPU nodes build in about a second.

Degraded links (``cluster.faults``, :mod:`topologies.faults`) are built at ``1/FACTOR`` of
their bandwidth, both directions, with the factor in the edge attribute ``degraded``; a
named link that is not in the graph is refused (``SpecError``).

>>> from topologies.cluster import cluster_preset
>>> g = build_graph(cluster_preset("dgx-h100", 2))
>>> g.number_of_nodes(), g[0][("nvswitch", 0)]["bandwidth"]
(42, 450000000000.0)
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Hashable

from topologies.cluster import Cluster
from topologies.errors import SpecError
from topologies.routing import fabric_hop_share

if TYPE_CHECKING:       # networkx is imported where a graph is built (``build_graph``): the
    import networkx as nx   # CLI's checks and the analytic model start without it

Node = Hashable
Link = tuple  # (u, v, bandwidth bytes/s, latency s): one physical link, both directions
IntraBuilder = Callable[[Cluster, int], "list[Link]"]
InterBuilder = Callable[[Cluster, int], "list[Link]"]

_REGISTRY: dict[str, dict[str, Callable]] = {"intra": {}, "inter": {}}


def register(level: str, name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a topology builder for ``level`` ("intra" or "inter") under
    ``name``; duplicate names are refused.

    Intra builders are ``fn(cluster, node) -> list[Link]`` (the links inside one node);
    inter builders are ``fn(cluster, spines_per_rail) -> list[Link]`` (the fabric above
    the NICs).
    """
    if level not in _REGISTRY:
        raise ValueError(f"level={level!r}: must be 'intra' or 'inter'")

    def deco(fn: Callable) -> Callable:
        table = _REGISTRY[level]
        if name in table:
            old = table[name]
            raise ValueError(f"{level}-node topology {name!r} is already registered "
                             f"(by {old.__module__}.{old.__name__})")
        table[name] = fn
        return fn

    return deco


def builder_names(level: str) -> list[str]:
    """Registered builder names for ``level`` ("intra" or "inter"), sorted."""
    return sorted(_REGISTRY[level])


def get_builder(level: str, name: str) -> Callable:
    """The builder registered for ``level`` under ``name``; ``SpecError`` if none."""
    table = _REGISTRY.get(level, {})
    if name not in table:
        raise SpecError(f"{level}_node_topology", name,
                        f"must be one of {', '.join(sorted(table))}")
    return table[name]


def rails(cluster: Cluster) -> int:
    """Number of modelled NICs per node (= rails): ``min(nics_per_node, gpus_per_node)``."""
    return min(cluster.nics_per_node, cluster.gpus_per_node)


def torus_dims(num_nodes: int) -> tuple[int, ...]:
    """Near-square 2-D torus shape ``(a, b)``, ``a <= b``, ``a*b = num_nodes``; ``(n,)`` (a
    ring) when ``num_nodes`` has no divisor above 1 up to its square root.

    >>> torus_dims(64), torus_dims(12), torus_dims(7)
    ((8, 8), (3, 4), (7,))
    """
    a = max(d for d in range(1, math.isqrt(num_nodes) + 1) if num_nodes % d == 0)
    return (num_nodes,) if a == 1 else (a, num_nodes // a)


# ---------------------------------------------------------------- intra-node builders

@register("intra", "switch")
def intra_switch(cluster: Cluster, node: int) -> list[Link]:
    """Every GPU of ``node`` to its NVSwitch at ``intra_node_bandwidth``, half the latency."""
    g = cluster.gpus_per_node
    if g == 1:
        return []
    sw, bw, lat = ("nvswitch", node), cluster.intra_bandwidth_of_node(node), \
        cluster.intra_node_latency / 2
    return [(node * g + i, sw, bw, lat) for i in range(g)]


@register("intra", "mesh")
def intra_mesh(cluster: Cluster, node: int) -> list[Link]:
    """A direct link per GPU pair at ``intra_node_bandwidth / (gpus_per_node - 1)``."""
    g, base = cluster.gpus_per_node, node * cluster.gpus_per_node
    if g == 1:
        return []
    bw = cluster.intra_bandwidth_of_node(node) * fabric_hop_share("mesh", g)
    lat = cluster.intra_node_latency
    return [(base + i, base + j, bw, lat) for i in range(g) for j in range(i + 1, g)]


@register("intra", "ring")
def intra_ring(cluster: Cluster, node: int) -> list[Link]:
    """GPU ``i`` to GPU ``i+1 mod g`` at half the GPU's bandwidth (full with 2 GPUs)."""
    g, base = cluster.gpus_per_node, node * cluster.gpus_per_node
    if g == 1:
        return []
    lat = cluster.intra_node_latency
    bw = cluster.intra_bandwidth_of_node(node) * fabric_hop_share("ring", g)
    if g == 2:
        return [(base, base + 1, bw, lat)]
    return [(base + i, base + (i + 1) % g, bw, lat) for i in range(g)]


def nic_links(cluster: Cluster, node: int) -> list[Link]:
    """GPU ``local`` of ``node`` to NIC ``local % rails`` at ``inter_node_bandwidth``."""
    g, r = cluster.gpus_per_node, rails(cluster)
    bw, lat = cluster.inter_bandwidth_of_node(node), cluster.inter_node_latency / 4
    return [(node * g + i, ("nic", node, i % r), bw, lat) for i in range(g)]


# ---------------------------------------------------------------- inter-node builders

def _sw(kind: str, rail: int, index: int, plane: int, planes: int) -> tuple:
    """A leaf or spine name: ``(kind, rail, index)``, with the plane appended when the
    network has several (``('leaf', rail, j, plane)``)."""
    return (kind, rail, index, plane) if planes > 1 else (kind, rail, index)


def _leaf_uplinks(cluster: Cluster, rail: int, down_per_node: float,
                  spines: int, plane: int = 0) -> list[Link]:
    n, per, planes = cluster.num_nodes, cluster.nodes_per_leaf, cluster.planes
    leaves = -(-n // per)
    if leaves == 1:
        return []
    out = []
    for j in range(leaves):
        down = (min(n, (j + 1) * per) - j * per) * down_per_node
        if not cluster.uniform:     # node groups with their own NICs: the leaf's own sum
            scale = down_per_node / cluster.inter_node_bandwidth
            down = sum(cluster.inter_bandwidth_of_node(k) * scale
                       for k in range(j * per, min(n, (j + 1) * per)))
        up = down / cluster.oversubscription / spines / planes
        out += [(_sw("leaf", rail, j, plane, planes), _sw("spine", rail, k, plane, planes),
                 up, 0.0) for k in range(spines)]
    return out


@register("inter", "rail_fat_tree")
def rail_fat_tree(cluster: Cluster, spines_per_rail: int = 1) -> list[Link]:
    """Rail-optimised leaf/spine: NIC ``i`` of every node to the rail-``i`` leaf of its group
    of ``nodes_per_leaf`` nodes; each rail's leaves to that rail's spines. With ``planes > 1``
    one such fabric per plane, each NIC port at ``1/planes`` of the NIC."""
    bw, lat, per, planes = cluster.inter_node_bandwidth, cluster.inter_node_latency / 4, \
        cluster.nodes_per_leaf, cluster.planes
    out: list[Link] = []
    for p in range(planes):
        for r in range(rails(cluster)):
            out += [(("nic", n, r), _sw("leaf", r, n // per, p, planes),
                     cluster.inter_bandwidth_of_node(n) / planes, lat)
                    for n in range(cluster.num_nodes)]
            out += _leaf_uplinks(cluster, r, bw, spines_per_rail, p)
    return out


# A rail-only network (Wang et al., arXiv 2307.12169) keeps each rail's own Clos and drops the
# spine layer that joins the rails: the links and the routes paraplan builds for a rail fat
# tree are already per rail (cross-rail traffic relays over NVLink, topologies.routing), so
# the graph is the same; what differs is the switches bought (simulator.studies.network_cost).
register("inter", "rail_only")(rail_fat_tree)


@register("inter", "fat_tree")
def fat_tree(cluster: Cluster, spines_per_rail: int = 1) -> list[Link]:
    """Plain leaf/spine: all NICs of a group of ``nodes_per_leaf`` nodes share one leaf (per
    plane)."""
    bw, lat, per, nr, planes = cluster.inter_node_bandwidth, cluster.inter_node_latency / 4, \
        cluster.nodes_per_leaf, rails(cluster), cluster.planes
    out: list[Link] = []
    for p in range(planes):
        out += [(("nic", n, i), _sw("leaf", 0, n // per, p, planes),
                 cluster.inter_bandwidth_of_node(n) / planes, lat)
                for n in range(cluster.num_nodes) for i in range(nr)]
        out += _leaf_uplinks(cluster, 0, nr * bw, spines_per_rail, p)
    return out


def _torus_links(cluster: Cluster, dims: tuple[int, ...]) -> list[Link]:
    bw, lat = cluster.inter_node_bandwidth, cluster.inter_node_latency / 2
    out: list[Link] = []
    for n in range(cluster.num_nodes):
        stride = 1
        for size in dims:
            x = (n // stride) % size
            nb = n + (((x + 1) % size) - x) * stride
            if nb != n:
                out += [(("nic", n, r), ("nic", nb, r), bw, lat) for r in range(rails(cluster))]
            stride *= size
    return out


@register("inter", "torus")
def torus(cluster: Cluster, spines_per_rail: int = 1) -> list[Link]:
    """2-D torus of nodes (shape :func:`torus_dims`), one per rail: NIC ``i`` to NIC ``i``."""
    return _torus_links(cluster, torus_dims(cluster.num_nodes))


@register("inter", "ring")
def ring(cluster: Cluster, spines_per_rail: int = 1) -> list[Link]:
    """Ring of nodes, one per rail: NIC ``i`` of node ``n`` to NIC ``i`` of node ``n+1``."""
    return _torus_links(cluster, (cluster.num_nodes,))


# ---------------------------------------------------------------- assembly

def build_graph(cluster: Cluster, spines_per_rail: int = 1) -> nx.DiGraph:
    """The directed link graph of ``cluster`` (see the module docstring for names and units).

    ``spines_per_rail``: 1 aggregates each rail's spine layer into one node; more builds that
    many spines per rail, each with ``1/spines_per_rail`` of every leaf's uplink capacity.
    """
    if isinstance(spines_per_rail, bool) or not isinstance(spines_per_rail, int) \
            or spines_per_rail < 1:
        raise SpecError("spines_per_rail", spines_per_rail, "must be an integer >= 1")
    intra = get_builder("intra", cluster.intra_node_topology)
    inter = get_builder("inter", cluster.inter_node_topology)
    n, g = cluster.num_nodes, cluster.gpus_per_node
    dims = torus_dims(n) if cluster.inter_node_topology == "torus" else (n,)
    import networkx as nx
    graph = nx.DiGraph(name=cluster.name, num_nodes=n, gpus_per_node=g, rails=rails(cluster),
                       nodes_per_leaf=cluster.nodes_per_leaf, spines_per_rail=spines_per_rail,
                       intra_topology=cluster.intra_node_topology,
                       inter_topology=cluster.inter_node_topology, torus_dims=dims,
                       planes=cluster.planes)
    graph.add_nodes_from((node * g + i, {"kind": "gpu", "node": node, "local": i,
                                         "gpu": cluster.gpu_of_node(node).name})
                         for node in range(n) for i in range(g))
    links: list[Link] = []
    for node in range(n):
        links += intra(cluster, node)
    if n > 1:
        for node in range(n):
            links += nic_links(cluster, node)
        links += inter(cluster, spines_per_rail)
    graph.add_edges_from(_both_directions(links))
    for v, attrs in graph.nodes(data=True):
        if "kind" not in attrs:
            attrs["kind"] = v[0]
    for (u, v), factor in degraded_edges(graph, cluster).items():
        graph.edges[u, v]["bandwidth"] /= factor
        graph.edges[u, v]["degraded"] = factor
    return graph


def degraded_edges(graph: nx.DiGraph, cluster: Cluster) -> dict[tuple, float]:
    """Directed edge -> slowdown factor of every link ``cluster.faults`` degrades (the
    largest factor where entries overlap)."""
    out: dict[tuple, float] = {}
    g = cluster.gpus_per_node
    for spec, factor in cluster.faults.links():
        if spec.kind == "nic":
            gpu = spec.ends[0]
            edges = [e for e in list(graph.out_edges(gpu)) + list(graph.in_edges(gpu))
                     if any(isinstance(x, tuple) and x[0] == "nic" for x in e)]
            if not edges:
                raise SpecError("degrade", spec.text, "this GPU has no NIC link in the network")
        elif spec.kind == "plane":
            p = spec.ends[0]
            edges = [(u, v) for u, v in graph.edges
                     if any(isinstance(x, tuple) and x[0] in ("leaf", "spine") and len(x) == 4
                            and x[3] == p for x in (u, v))]
        elif spec.kind == "node":
            n = spec.ends[0]
            mine = {v for v, a in graph.nodes(data=True)
                    if a.get("node") == n or (isinstance(v, tuple) and v[0] in ("nvswitch", "nic")
                                              and v[1] == n)}
            edges = [e for v in mine for e in list(graph.out_edges(v)) + list(graph.in_edges(v))]
        else:
            a, b = spec.ends
            if not graph.has_edge(a, b):
                raise SpecError("degrade", spec.text,
                                f"no such link in this cluster's network ({cluster.num_nodes} "
                                f"nodes, {cluster.intra_node_topology}/"
                                f"{cluster.inter_node_topology}; see topologies/graph.py)")
            edges = [(a, b), (b, a)]
        for e in edges:
            out[e] = max(out.get(e, 1.0), factor)
    return out


def check_links(cluster: Cluster) -> None:
    """Refuse (``SpecError``) a degraded named link that the cluster's graph does not have;
    builds the graph only when there is such a link."""
    if any(spec.kind == "link" for spec, _ in cluster.faults.links()):
        build_graph(cluster)


def _both_directions(links: list[Link]):
    for u, v, bw, lat in links:
        yield u, v, {"bandwidth": bw, "latency": lat}
        yield v, u, {"bandwidth": bw, "latency": lat}
