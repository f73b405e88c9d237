"""What a scale-out network is built of: switches, switch ports, NIC ports and optics.

Counted from the cluster's shape under stated design rules (the simulator's graph aggregates
spines, so the counts are derived here, not read off the graph):

* Every plane (``cluster.planes``; 1 for a plain network) is a separate network of switches
  with ``radix = switch_tbps / port_gbps`` ports, ``port_gbps`` the NIC's Gb/s over the planes
  (a 51.2 Tb/s switch chip is 64 x 800G, 128 x 400G or 256 x 200G ports).
* Endpoints per plane: one NIC port per NIC (``rails`` NICs per node, ``topologies.graph``).
* A group of endpoints that fits one switch is one switch, no spine. Otherwise a two-tier
  Clos: each leaf has ``down = floor(radix * o / (1 + o))`` endpoint ports and ``ceil(down
  / o)`` uplinks (``o`` the oversubscription), the spines take every uplink (``ceil(uplinks /
  radix)`` switches).
* ``rail_fat_tree`` (rail-optimised): a group per rail feeds the leaves (each leaf serves
  one rail), and one spine layer joins all leaves of the plane, so it fits one switch only
  when all rails' endpoints do. ``rail_only`` (Wang et al., arXiv 2307.12169): each rail is
  its own network (one switch, or its own two-tier Clos), no spine between rails.
  ``fat_tree``: all endpoints in one group.
* Optics: every NIC-leaf and leaf-spine link is optical with a transceiver at each end
  (two per link), at the plane's port speed. ``torus``/``ring`` have no switches: each
  neighbour link is two transceivers.

Larger fleets than a two-tier Clos of the radix holds (``radix^2 / 2`` endpoints at 1:1) would
need a third tier; they are refused (``SpecError``) rather than under-counted.

>>> from topologies.cluster import cluster_preset
>>> inv = network_inventory(cluster_preset("dgx-h100", 128))   # 1,024 GPUs, 400G, 51.2T
>>> inv.port_gbps, inv.radix, inv.leaf_switches, inv.spine_switches, inv.transceivers
(400.0, 128, 16, 8, 4096)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from topologies.cluster import Cluster
from topologies.errors import SpecError
from topologies.graph import rails, torus_dims

#: switch chip capacity per direction, Tb/s: 51.2 Tb/s is the 2023-26 generation (NVIDIA
#: Spectrum-4 SN5600: 64 x 800GbE; Broadcom Tomahawk 5), the default of the cost model
DEFAULT_SWITCH_TBPS = 51.2


@dataclass(frozen=True)
class NetworkInventory:
    """Parts of a scale-out network (counts; ``port_gbps`` Gb/s per port per direction)."""

    planes: int
    port_gbps: float
    radix: int
    nic_ports: int
    leaf_switches: int
    spine_switches: int
    links: int
    transceivers: int

    @property
    def switches(self) -> int:
        return self.leaf_switches + self.spine_switches

    def to_dict(self) -> dict:
        return {"planes": self.planes, "port_gbps": self.port_gbps, "radix": self.radix,
                "nic_ports": self.nic_ports, "leaf_switches": self.leaf_switches,
                "spine_switches": self.spine_switches, "switches": self.switches,
                "links": self.links, "transceivers": self.transceivers}


def _leaves(endpoints: int, radix: int, oversub: float) -> tuple[int, int]:
    """(leaves, uplinks) of ``endpoints`` ports spread over leaves with ``floor(radix o /
    (1 + o))`` endpoint ports each; a leaf with ``d`` endpoints has ``ceil(d / o)`` uplinks."""
    down = max(1, math.floor(radix * oversub / (1 + oversub)))
    full, rest = divmod(endpoints, down)
    uplinks = full * math.ceil(down / oversub) + (math.ceil(rest / oversub) if rest else 0)
    return full + (1 if rest else 0), uplinks


def _check_tiers(leaves: int, radix: int, what: str) -> None:
    if leaves > radix:
        raise SpecError("network", what, f"needs {leaves} leaves of {radix} ports, more than "
                        f"a two-tier Clos of radix {radix} holds (a third tier is not "
                        "counted); give a larger switch_tbps")


def network_inventory(cluster: Cluster, switch_tbps: float = DEFAULT_SWITCH_TBPS
                      ) -> NetworkInventory:
    """The parts of ``cluster``'s scale-out network (see the module docstring)."""
    planes = cluster.planes
    port = cluster.inter_node_bandwidth * 8 / 1e9 / planes
    radix = max(1, int(math.floor(switch_tbps * 1000 / port + 1e-9)))
    n, nr, kind = cluster.num_nodes, rails(cluster), cluster.inter_node_topology
    if n == 1:
        return NetworkInventory(planes, port, radix, 0, 0, 0, 0, 0)
    nic_ports = n * nr * planes
    if kind in ("torus", "ring"):
        links = sum(1 for _ in _neighbour_pairs(cluster)) * nr
        return NetworkInventory(planes, port, radix, nic_ports, 0, 0, links, 2 * links)
    o = cluster.oversubscription
    what = f"{kind} of {n * nr} ports per plane"
    if kind == "rail_only":            # each rail its own network, no spine between rails
        if n <= radix:
            leaves, spines, up = nr, 0, 0
        else:
            lv, ul = _leaves(n, radix, o)
            _check_tiers(lv, radix, what)
            leaves, spines, up = lv * nr, -(-ul // radix) * nr, ul * nr
    elif n * nr <= radix:              # one switch holds every port of the plane
        leaves, spines, up = 1, 0, 0
    else:                              # leaves per rail (or one group), one spine layer
        groups = [n] * nr if kind == "rail_fat_tree" else [n * nr]
        parts = [_leaves(g, radix, o) for g in groups]
        leaves, up = sum(p[0] for p in parts), sum(p[1] for p in parts)
        _check_tiers(leaves, radix, what)
        spines = -(-up // radix)
    links = n * nr + up
    return NetworkInventory(planes, port, radix, nic_ports, leaves * planes, spines * planes,
                            links * planes, 2 * links * planes)


def _neighbour_pairs(cluster: Cluster):
    dims = torus_dims(cluster.num_nodes) if cluster.inter_node_topology == "torus" \
        else (cluster.num_nodes,)
    seen = set()
    for node in range(cluster.num_nodes):
        stride = 1
        for size in dims:
            x = (node // stride) % size
            nb = node + (((x + 1) % size) - x) * stride
            pair = (min(node, nb), max(node, nb))
            if nb != node and pair not in seen:
                seen.add(pair)
                yield pair
            stride *= size
