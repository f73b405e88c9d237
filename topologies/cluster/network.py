"""The scale-out network of a cluster: the topology names a node fabric and a network may take,
and the ``network:`` section of a cluster file (one fabric, or several switch planes).

>>> network_from_mapping({"network": {"kind": "multi_plane", "planes": 2}})
('rail_fat_tree', 2)
>>> network_from_mapping({"inter_node_topology": "torus"})
('torus', 1)
"""
from __future__ import annotations

from typing import Any, Mapping

from topologies.errors import SpecError

INTRA_TOPOLOGIES = ("switch", "mesh", "ring")
INTER_TOPOLOGIES = ("rail_fat_tree", "fat_tree", "rail_only", "torus", "ring")
#: inter-node topologies built of leaves and spines, which can be split into planes
SWITCHED_TOPOLOGIES = ("rail_fat_tree", "fat_tree", "rail_only")
#: intra-node fabrics that forward a rail-only network's cross-rail traffic in one hop
RAIL_ONLY_INTRA = ("switch", "mesh")

#: the keys a cluster file's ``network:`` section may hold
NETWORK_KEYS = {"kind", "planes", "plane_topology"}


def network_from_mapping(d: Mapping[str, Any]) -> tuple[str, int]:
    """``(inter_node_topology, planes)`` of a cluster mapping: its ``network:`` section
    (``{kind: multi_plane, planes: N, plane_topology: T}`` or ``{kind: T}``), else its
    ``inter_node_topology`` with one plane."""
    if "network" not in d:
        return d.get("inter_node_topology", "rail_fat_tree"), 1
    net = d["network"]
    if not isinstance(net, Mapping):
        raise SpecError("network", net, "must be a mapping {kind: ..., planes: N}")
    unknown = sorted(str(k) for k in set(net) - NETWORK_KEYS)
    if unknown:
        raise SpecError("network", unknown[0],
                        f"unknown key; allowed: {', '.join(sorted(NETWORK_KEYS))}")
    kinds = ("multi_plane", *INTER_TOPOLOGIES)
    kind = net.get("kind")
    if kind not in kinds:
        raise SpecError("network.kind", kind, f"must be one of {', '.join(kinds)}")
    if kind != "multi_plane":
        for key in ("planes", "plane_topology"):
            if key in net:
                raise SpecError(f"network.{key}", net[key], f"only with kind: multi_plane "
                                f"(kind is {kind})")
        return kind, 1
    planes = net.get("planes", 2)
    if isinstance(planes, bool) or not isinstance(planes, int) or planes < 2:
        raise SpecError("network.planes", planes, "must be an integer >= 2 for a multi-plane "
                        "network (each plane a NIC port and its own switches)")
    topology = net.get("plane_topology", "rail_fat_tree")
    if topology not in SWITCHED_TOPOLOGIES:
        raise SpecError("network.plane_topology", topology,
                        f"must be one of {', '.join(SWITCHED_TOPOLOGIES)}")
    return topology, planes
