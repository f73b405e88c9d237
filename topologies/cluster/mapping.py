"""A cluster from its YAML mapping (docs/clusters.md): the keys, the file units and their
checks, the node groups. ``Cluster.to_dict`` writes the same form back.

Units inside: bytes/s and seconds. Files say ``intra_node_GBps`` (gigabytes/s per GPU per
direction), ``inter_node_gbps`` (gigabits/s per NIC per direction) and ``*_latency_us``; they are
converted once, here.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from topologies.cluster.network import network_from_mapping
from topologies.cluster.preset_table import INTER_LATENCY_S, INTRA_LATENCY_S
from topologies.cluster.presets import cluster_preset
from topologies.cluster.spec import Cluster, NodeGroup
from topologies.errors import SpecError
from topologies.faults import faults_from_mapping
from topologies.gpus import GPU, get_gpu, gpu_from_mapping
from topologies.planes import check_planes
from topologies.yaml_io import load_mapping_file
from topologies.limits import (MAX_BANDWIDTH_BPS, MIN_BANDWIDTH_BPS, MAX_GPUS,
                               MAX_GPUS_PER_NODE, MAX_LATENCY_S, MAX_NODES,
                               MAX_OVERSUBSCRIPTION, check_int, check_name, check_number)

#: the keys a cluster file may hold
CLUSTER_KEYS = {"name", "gpu", "nodes", "gpus_per_node", "intra_node_GBps",
                "intra_node_latency_us", "intra_node_topology", "nics_per_node",
                "inter_node_gbps", "inter_node_latency_us", "oversubscription",
                "inter_node_topology", "node_groups", "preset", "nodes_per_leaf", "faults",
                "storage_write_GBps", "gpus_per_tray", "nvlink_domain_gpus", "network",
                "trays_per_rack"}
_GROUP_KEYS = {"gpu", "nodes", "intra_node_GBps", "inter_node_gbps"}


def cluster_from_mapping(d: Mapping[str, Any], base_dir: str | None = None) -> Cluster:
    """A cluster from the YAML mapping (see docs/clusters.md). ``preset:`` fills defaults.
    ``base_dir``: the folder relative GPU profile paths (``gpu: {profile: FILE}``) start from."""
    merged = _with_preset(d)
    topology, planes = network_from_mapping(merged)
    for req in ("gpus_per_node", "intra_node_GBps", "nics_per_node", "inter_node_gbps"):
        if req not in merged:
            raise SpecError(req, None, "is required in a cluster file (or give preset:)")
    groups = _groups(merged, base_dir)
    num = _file_numbers(merged)
    if planes > 1:   # on the checked rates (a missing or malformed one is refused above)
        _check_plane_ports(merged, planes, num["inter_node_gbps"])
    return Cluster(
        name=check_name("name", merged.get("name", "custom")), groups=groups,
        gpus_per_node=merged["gpus_per_node"],
        intra_node_bandwidth=num["intra_node_GBps"] * 1e9,
        intra_node_latency=num["intra_node_latency_us"] * 1e-6,
        nics_per_node=merged["nics_per_node"],
        inter_node_bandwidth=num["inter_node_gbps"] * 1e9 / 8,
        inter_node_latency=num["inter_node_latency_us"] * 1e-6,
        oversubscription=num["oversubscription"],
        intra_node_topology=merged.get("intra_node_topology", "switch"),
        inter_node_topology=topology, planes=planes,
        nodes_per_leaf=merged.get("nodes_per_leaf", 32),
        faults=faults_from_mapping(merged.get("faults")),
        storage_write_bandwidth=None if merged.get("storage_write_GBps") is None else check_number(
            "storage_write_GBps", merged["storage_write_GBps"], 0.0,
            MAX_BANDWIDTH_BPS * MAX_GPUS / 1e9, lo_open=True,
            sane_lo=MIN_BANDWIDTH_BPS / 1e9) * 1e9,
        source="yaml",
        gpus_per_tray=merged.get("gpus_per_tray"),
        nvlink_domain_gpus=merged.get("nvlink_domain_gpus"))


def load_cluster_file(path: str) -> Cluster:
    """The cluster of a YAML or JSON file (``topologies.yaml_io``'s safe loading); relative GPU
    profile paths in it start from the file's folder."""
    return cluster_from_mapping(load_mapping_file(path, "cluster", "cluster"),
                                os.path.dirname(os.path.abspath(path)))


def _with_preset(d: Mapping[str, Any]) -> dict[str, Any]:
    """The file's keys over its ``preset:``'s (the preset's network or node GPUs dropped where
    the file gives its own in another form), after the checks of the keys themselves."""
    if not isinstance(d, Mapping):
        raise SpecError("cluster", type(d).__name__, "a cluster file must hold a mapping")
    unknown = sorted((str(k) for k in set(d) - CLUSTER_KEYS))
    if unknown:
        raise SpecError("cluster", unknown[0],
                        f"unknown key; allowed: {', '.join(sorted(CLUSTER_KEYS))}")
    if "node_groups" in d and ("gpu" in d or "nodes" in d):
        raise SpecError("node_groups", "...", "give either node_groups or gpu and nodes, not both")
    base = cluster_preset(check_name("preset", d["preset"]), 1).to_dict() if "preset" in d else {}
    if "network" in d and "inter_node_topology" in d:
        raise SpecError("network", d["network"], "give either network: or "
                        "inter_node_topology:, not both")
    if "network" in d:
        base.pop("inter_node_topology", None)
    elif "inter_node_topology" in d:
        base.pop("network", None)
    merged = {**base, **{k: v for k, v in d.items() if k not in ("preset", "trays_per_rack")}}
    if "node_groups" in d:
        merged.pop("gpu", None)
        merged.pop("nodes", None)
    if "trays_per_rack" in d:
        _apply_trays_per_rack(d, base, merged)
    return merged


def _apply_trays_per_rack(d: Mapping[str, Any], base: Mapping[str, Any],
                          merged: dict[str, Any]) -> None:
    """``trays_per_rack: T``: a node (one NVLink domain) of T trays of ``gpus_per_tray`` GPUs,
    at most ``nvlink_domain_gpus``; ``gpus_per_node`` becomes T x ``gpus_per_tray`` and, where
    the file gives no ``nics_per_node``, the preset's NICs per GPU times that."""
    t = d["trays_per_rack"]
    tray = merged.get("gpus_per_tray")
    if tray is None:
        raise SpecError("trays_per_rack", t, "needs gpus_per_tray (give preset: gb200-nvl72, "
                        "or gpus_per_tray:)")
    check_int("gpus_per_tray", tray, hi=MAX_GPUS_PER_NODE)
    check_int("trays_per_rack", t, hi=MAX_GPUS_PER_NODE // tray)
    domain = merged.get("nvlink_domain_gpus")
    if domain is not None:
        check_int("nvlink_domain_gpus", domain, hi=MAX_GPUS_PER_NODE)
        if t * tray > domain:
            raise SpecError("trays_per_rack", t, f"must be at most {domain // tray}: an NVLink "
                            f"domain of nvlink_domain_gpus={domain} holds {domain // tray} "
                            f"trays of gpus_per_tray={tray} GPUs")
    if "gpus_per_node" in d and d["gpus_per_node"] != t * tray:
        raise SpecError("trays_per_rack", t, f"gives gpus_per_node={t * tray} ({t} trays of "
                        f"{tray} GPUs) but the file says gpus_per_node={d['gpus_per_node']}; "
                        "give one of them")
    merged["gpus_per_node"] = t * tray
    if "nics_per_node" not in d and "nics_per_node" in base:
        merged["nics_per_node"] = base["nics_per_node"] * t * tray // base["gpus_per_node"]


def _file_numbers(merged: Mapping[str, Any]) -> dict[str, float]:
    """The cluster-wide rates, latencies and oversubscription in file units, checked before
    they are converted (10**400 GB/s must not overflow)."""
    return {
        "intra_node_GBps": check_number("intra_node_GBps", merged["intra_node_GBps"], 0.0,
                                        MAX_BANDWIDTH_BPS / 1e9, lo_open=True,
                                        sane_lo=MIN_BANDWIDTH_BPS / 1e9),
        "inter_node_gbps": check_number("inter_node_gbps", merged["inter_node_gbps"], 0.0,
                                        MAX_BANDWIDTH_BPS * 8 / 1e9, lo_open=True,
                                        sane_lo=MIN_BANDWIDTH_BPS * 8 / 1e9),
        "intra_node_latency_us": check_number(
            "intra_node_latency_us", merged.get("intra_node_latency_us", INTRA_LATENCY_S * 1e6),
            0.0, MAX_LATENCY_S * 1e6),
        "inter_node_latency_us": check_number(
            "inter_node_latency_us", merged.get("inter_node_latency_us", INTER_LATENCY_S * 1e6),
            0.0, MAX_LATENCY_S * 1e6),
        "oversubscription": check_number("oversubscription", merged.get("oversubscription", 1.0),
                                         1.0, MAX_OVERSUBSCRIPTION),
    }


def _check_plane_ports(merged: Mapping[str, Any], planes: int, inter_node_gbps: float) -> None:
    """The NICs (the cluster's, ``inter_node_gbps`` Gb/s, and each node group's own) must
    split into ``planes`` equal ports (``topologies.planes.check_planes``)."""
    check_planes(planes, inter_node_gbps, "network.planes")
    for i, g in enumerate(merged.get("node_groups") or ()):
        if "inter_node_gbps" in g:    # a group's own NICs split over the same planes
            gbps = float(g["inter_node_gbps"])      # checked by _groups
            try:
                check_planes(planes, gbps, "network.planes")
            except SpecError as e:
                raise SpecError(f"node_groups[{i}].inter_node_gbps", g["inter_node_gbps"],
                                f"with network.planes={planes}: {e.rule}") from None


def _gpu(v: Any, base_dir: str | None = None) -> GPU:
    return gpu_from_mapping(v, base_dir) if isinstance(v, Mapping) else \
        get_gpu(check_name("gpu", v))


def _groups(d: Mapping[str, Any], base_dir: str | None = None) -> tuple[NodeGroup, ...]:
    """The node groups of a merged mapping: each of ``node_groups``, else ``nodes`` x ``gpu``."""
    if "node_groups" in d:
        gs = d["node_groups"]
        if not isinstance(gs, list) or not gs:
            raise SpecError("node_groups", gs, "must be a non-empty list of {gpu, nodes}")
        out = []
        for i, g in enumerate(gs):
            if not isinstance(g, Mapping) or not {"gpu", "nodes"} <= set(g) \
                    or set(g) - _GROUP_KEYS:
                raise SpecError(f"node_groups[{i}]", g, "must be a mapping with keys gpu and "
                                "nodes (and optionally intra_node_GBps, inter_node_gbps)")
            check_int(f"node_groups[{i}].nodes", g["nodes"], hi=MAX_NODES)
            bw = {k: check_number(f"node_groups[{i}].{k}", g[k], 0.0, hi * scale, lo_open=True,
                                  sane_lo=MIN_BANDWIDTH_BPS * scale)
                  for k, hi, scale in (("intra_node_GBps", MAX_BANDWIDTH_BPS, 1e-9),
                                       ("inter_node_gbps", MAX_BANDWIDTH_BPS, 8e-9)) if k in g}
            out.append(NodeGroup(
                _gpu(g["gpu"], base_dir), g["nodes"],
                bw["intra_node_GBps"] * 1e9 if "intra_node_GBps" in bw else None,
                bw["inter_node_gbps"] * 1e9 / 8 if "inter_node_gbps" in bw else None))
        return tuple(out)
    if "gpu" not in d:
        raise SpecError("gpu", None, "is required in a cluster file (or give node_groups:)")
    nodes = d.get("nodes", 1)
    check_int("nodes", nodes, hi=MAX_NODES)
    return (NodeGroup(_gpu(d["gpu"], base_dir), nodes),)
