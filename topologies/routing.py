"""Deterministic routes over the graphs of :mod:`topologies.graph`.

``route(graph, src, dst)`` plugs into ``simulator.network.flows.FlowNetwork(route_fn=route)``.
Between GPUs (int nodes) of a graph built by :func:`topologies.graph.build_graph` the path
is computed from the node names, without a graph search:

- same node: ``switch`` via the NVSwitch; ``mesh`` the direct link; ``ring`` the shorter way
  round (ties go to increasing local index).
- other node, ``rail_fat_tree``: the rail of the *destination* GPU. When the source sits on
  another rail, the data first crosses the node fabric to the source node's GPU with the
  destination's local index (NCCL's PXN relay), which then uses its own NIC. Leaf, then
  (across leaves) the rail's spine chosen by ECMP, leaf, NIC, GPU.
- other node, ``rail_only`` (Wang et al., "Rail-only", arXiv 2307.12169): as
  ``rail_fat_tree``: there is no spine between rails, so traffic between GPUs of different
  local indices always crosses the source node's NVLink to the destination's rail first (the
  extra NVLink hop shares that GPU's NVLink port with the node's own NVLink traffic).
- other node, ``fat_tree``: source NIC, shared leaf, (ECMP spine, leaf,) destination NIC.
- multi-plane networks (``planes > 1``): :func:`route` gives plane 0's path;
  :func:`plane_routes` gives every plane's path and the share of the bytes it carries.
- other node, ``torus``/``ring``: PXN relay as above, then dimension-order routing over the
  rail's NICs, each dimension the shorter way round (ties go forward).

The path rule in numbers, the one the estimate and the bound read
(:func:`relays`, :func:`fabric_hop_share`, :func:`transfer_rate`, :func:`transfer_latency`):
a transfer inside a node crosses one fabric hop; between nodes it crosses the GPU's NIC link
and its plane ports (striped: together the NIC, :mod:`topologies.planes`), and first, where
:func:`relays` says so (a rail topology and a destination on another rail), one hop of the
source node's fabric. Alone on its path it runs at the slowest of those hops and waits the
sum of their latencies; the routes above cross exactly those hops
(``tests/test_network_paths.py`` checks every pair).

ECMP picks spine ``crc32("src>dst") % spines_per_rail``: stable across runs and processes
(never Python's salted ``hash()``). Any other graph, endpoint or topology falls back to
``networkx.shortest_path``. Routes are cached per graph (weakly keyed, LRU); graphs must not
change after their first route.

>>> from topologies.cluster import cluster_preset
>>> from topologies.graph import build_graph
>>> g = build_graph(cluster_preset("dgx-h100", 2))
>>> route(g, 0, 3)
[0, ('nvswitch', 0), 3]
>>> route(g, 1, 9)
[1, ('nic', 0, 1), ('leaf', 1, 0), ('nic', 1, 1), 9]
>>> round(path_latency(g, route(g, 1, 9)) * 1e6, 6), path_bandwidth(g, route(g, 1, 9))
(5.0, 50000000000.0)
"""
from __future__ import annotations

import math
import numbers
import weakref
import zlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, Hashable, Sequence

import numpy as np

from topologies.planes import plane_shares

if TYPE_CHECKING:       # networkx is imported where a route is computed: the analytic
    import networkx as nx   # model reads this module's rate rules without it (CLI start-up)

Node = Hashable
CACHE_SIZE = 1 << 20  # routes kept per graph
_CACHES: "weakref.WeakKeyDictionary[nx.DiGraph, OrderedDict]" = weakref.WeakKeyDictionary()


def route(graph: nx.DiGraph, src: Node, dst: Node) -> list[Node]:
    """The deterministic path ``[src, ..., dst]`` (a new list; safe to modify)."""
    if src == dst:
        return [src]
    cache = _CACHES.get(graph)
    if cache is None:
        cache = _CACHES[graph] = OrderedDict()
    key = (src, dst)
    path = cache.get(key)
    if path is None:
        path = tuple(_compute(graph, src, dst))
        cache[key] = path
        if len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return list(path)


def clear_route_cache(graph: nx.DiGraph | None = None) -> None:
    """Forget cached routes of ``graph`` (of every graph when None)."""
    if graph is None:
        _CACHES.clear()
    else:
        _CACHES.pop(graph, None)


def path_latency(graph: nx.DiGraph, path: Sequence[Node]) -> float:
    """Sum of the edges' ``latency`` along ``path`` (seconds)."""
    return sum(float(graph.edges[u, v].get("latency", 0.0)) for u, v in zip(path, path[1:]))


def path_bandwidth(graph: nx.DiGraph, path: Sequence[Node]) -> float:
    """Bottleneck (minimum) edge ``bandwidth`` along ``path`` (bytes/s); inf for one node."""
    return min((float(graph.edges[u, v]["bandwidth"]) for u, v in zip(path, path[1:])),
               default=math.inf)


def stable_hash(src: Node, dst: Node) -> int:
    """A hash of ``(src, dst)`` that is the same in every process (CRC-32 of their repr)."""
    return zlib.crc32(f"{src!r}>{dst!r}".encode())


# ---------------------------------------------------------------- the path rule

#: inter-node topologies whose transfers between nodes stay on the destination GPU's rail,
#: crossing the source node's fabric first when the source sits on another rail (NCCL's PXN
#: on a rail-optimised fat tree, torus and ring; the only way across rails on rail-only)
RAIL_ROUTED = frozenset({"rail_fat_tree", "rail_only", "torus", "ring"})


def relays(topology: str, rails: int, src_local, dst_local):
    """Whether a transfer between two nodes, from local GPU ``src_local`` to local GPU
    ``dst_local``, first crosses the source node's fabric to the GPU on the destination's
    rail (GPU ``i`` uses rail ``i % rails``). Vectorised (a bool for scalars)."""
    if type(src_local) is int and type(dst_local) is int and type(rails) is int and rails > 0:
        # the route builder's case (every new GPU pair): the same ``np.bool_`` without arrays
        return np.bool_(topology in RAIL_ROUTED and src_local % rails != dst_local % rails)
    a, b = np.asarray(src_local), np.asarray(dst_local)
    out = (a % rails != b % rails) if topology in RAIL_ROUTED else np.zeros(
        np.broadcast(a, b).shape, dtype=bool)
    return out[()]


def fabric_hop_share(intra_topology: str, gpus_per_node: int) -> float:
    """The share of a GPU's node-fabric bandwidth one GPU-to-GPU hop gets: 1 through an
    NVSwitch, ``1/(g-1)`` on a full mesh (a link per peer), 1/2 on a ring (a link per
    neighbour; 1 with two GPUs)."""
    g = gpus_per_node
    if intra_topology == "mesh" and g > 1:
        return 1.0 / (g - 1)
    if intra_topology == "ring" and g > 2:
        return 0.5
    return 1.0


def transfer_rate(fabric_hop, nic, crosses_node, relay, planes: int = 1, plane_port=None):
    """Bytes/s of one transfer alone on its path: ``fabric_hop`` (one hop of the node fabric)
    inside a node; between nodes the slowest of the GPU's NIC link ``nic``, its ``planes``
    plane ports striped together (``plane_port`` each, default ``nic / planes``: together the
    NIC) and, where ``relay``, the source node's fabric hop. The caller gives each link
    class's rate as it sees it (line rates for the graph; achievable and shared rates for the
    estimate). Vectorised."""
    port = nic / planes if plane_port is None else plane_port
    out = np.minimum(nic, planes * port)
    out = np.where(relay, np.minimum(fabric_hop, out), out)
    return np.where(crosses_node, out, fabric_hop)[()]


def transfer_latency(intra_latency, inter_latency, crosses_node, relay):
    """Seconds a transfer waits on its path: ``intra_latency`` inside a node;
    ``inter_latency`` between nodes, plus ``intra_latency`` where it relays through the
    source node's fabric. Vectorised."""
    return np.where(crosses_node, inter_latency + np.where(relay, intra_latency, 0.0),
                    intra_latency)[()]


# ---------------------------------------------------------------- path construction

def _compute(graph: nx.DiGraph, src: Node, dst: Node) -> list[Node]:
    meta = graph.graph
    if _is_gpu(meta, src) and _is_gpu(meta, dst):
        g = meta["gpus_per_node"]
        (na, a), (nb, b) = divmod(int(src), g), divmod(int(dst), g)
        if na == nb:
            path = _intra(meta, na, a, b)
        else:
            fn = _INTER_ROUTES.get(meta["inter_topology"])
            path = fn(meta, int(src), int(dst)) if fn else None
        if path is not None:
            return path
    import networkx as nx
    return nx.shortest_path(graph, src, dst)


def _is_gpu(meta: dict, v: Node) -> bool:
    if type(v) is int:          # the common case, without the ``numbers.Integral`` check
        return "inter_topology" in meta and 0 <= v < meta["num_nodes"] * meta["gpus_per_node"]
    if "inter_topology" not in meta or isinstance(v, bool) or not isinstance(v, numbers.Integral):
        return False
    return 0 <= v < meta["num_nodes"] * meta["gpus_per_node"]


def _intra(meta: dict, node: int, a: int, b: int) -> list[Node] | None:
    """Path from local GPU ``a`` to local GPU ``b`` inside ``node``; None if unknown kind."""
    g = meta["gpus_per_node"]
    base, kind = node * g, meta["intra_topology"]
    if kind == "switch":
        return [base + a, ("nvswitch", node), base + b]
    if kind == "mesh":
        return [base + a, base + b]
    if kind == "ring":
        fwd = (b - a) % g
        step = 1 if fwd <= g - fwd else -1
        return [base + (a + i * step) % g for i in range(min(fwd, g - fwd) + 1)]
    return None


def _relay(meta: dict, src: int, dst: int) -> list[Node] | None:
    """``src`` up to the GPU of its node that shares the destination's rail (PXN)."""
    g, nr = meta["gpus_per_node"], meta["rails"]
    (na, a), b = divmod(src, g), dst % g
    return _intra(meta, na, a, b) if relays(meta["inter_topology"], nr, a, b) else [src]


def _leaf_to_leaf(meta: dict, rail: int, src: int, dst: int, plane: int = 0) -> list[Node]:
    g, per = meta["gpus_per_node"], meta["nodes_per_leaf"]
    ja, jb = src // g // per, dst // g // per
    tail = (plane,) if meta.get("planes", 1) > 1 else ()
    if ja == jb:
        return [("leaf", rail, ja, *tail)]
    k = stable_hash(src, dst) % meta["spines_per_rail"]
    return [("leaf", rail, ja, *tail), ("spine", rail, k, *tail), ("leaf", rail, jb, *tail)]


def _rail_fat_tree(meta: dict, src: int, dst: int, plane: int = 0) -> list[Node] | None:
    g, nr = meta["gpus_per_node"], meta["rails"]
    rail = dst % g % nr
    head = _relay(meta, src, dst)
    if head is None:
        return None
    return head + [("nic", src // g, rail), *_leaf_to_leaf(meta, rail, src, dst, plane),
                   ("nic", dst // g, rail), dst]


def _fat_tree(meta: dict, src: int, dst: int, plane: int = 0) -> list[Node]:
    g, nr = meta["gpus_per_node"], meta["rails"]
    return [src, ("nic", src // g, src % g % nr), *_leaf_to_leaf(meta, 0, src, dst, plane),
            ("nic", dst // g, dst % g % nr), dst]


def plane_routes(graph: nx.DiGraph, src: Node, dst: Node) -> tuple[tuple[tuple, float], ...]:
    """The paths a transfer from ``src`` to ``dst`` is striped over and the share of its
    bytes each carries: ``((path, share), ...)``. One path with share 1 unless the graph is a
    multi-plane network and the GPUs sit in different nodes; then one path per plane, the
    shares by :func:`topologies.planes.plane_shares` (proportional to each plane path's
    bottleneck bandwidth, so degraded planes carry less)."""
    meta = graph.graph
    planes = meta.get("planes", 1)
    if planes == 1 or src == dst or not (_is_gpu(meta, src) and _is_gpu(meta, dst)) \
            or int(src) // meta["gpus_per_node"] == int(dst) // meta["gpus_per_node"]:
        return ((tuple(route(graph, src, dst)), 1.0),)
    cache = _CACHES.get(graph)
    if cache is None:
        cache = _CACHES[graph] = OrderedDict()
    key = ("planes", src, dst)
    hit = cache.get(key)
    if hit is None:
        fn = _PLANE_ROUTES[meta["inter_topology"]]
        paths = [tuple(fn(meta, int(src), int(dst), p)) for p in range(planes)]
        shares = plane_shares([path_bandwidth(graph, p) for p in paths])
        hit = cache[key] = tuple(zip(paths, shares))
    return hit


def _torus(meta: dict, src: int, dst: int) -> list[Node] | None:
    g, nr = meta["gpus_per_node"], meta["rails"]
    rail, head = dst % g % nr, _relay(meta, src, dst)
    if head is None:
        return None
    node, target, hops = src // g, dst // g, []
    stride = 1
    for size in meta["torus_dims"]:
        x, want = (node // stride) % size, (target // stride) % size
        fwd = (want - x) % size
        step = 1 if fwd <= size - fwd else -1
        for _ in range(min(fwd, size - fwd)):
            x2 = (x + step) % size
            node += (x2 - x) * stride
            x = x2
            hops.append(("nic", node, rail))
        stride *= size
    return head + [("nic", src // g, rail), *hops, dst]


RouteBuilder = Callable[[dict, int, int], "list[Node] | None"]
_INTER_ROUTES: dict[str, RouteBuilder] = {}


def register_route(name: str, fn: RouteBuilder) -> None:
    """Register the name-based inter-node router for topology ``name`` (no duplicates)."""
    if name in _INTER_ROUTES:
        raise ValueError(f"a router for inter-node topology {name!r} is already registered")
    _INTER_ROUTES[name] = fn


for _name, _fn in (("rail_fat_tree", _rail_fat_tree), ("fat_tree", _fat_tree),
                   ("rail_only", _rail_fat_tree), ("torus", _torus), ("ring", _torus)):
    register_route(_name, _fn)
# routers that take a plane (the topologies a multi-plane network is built of)
_PLANE_ROUTES: dict[str, Callable[[dict, int, int, int], "list[Node] | None"]] = {
    "rail_fat_tree": _rail_fat_tree, "rail_only": _rail_fat_tree, "fat_tree": _fat_tree}
