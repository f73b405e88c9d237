"""Clusters built from the preset rows (``topologies.cluster.preset_table``): ``PRESET:NODES``
of a node preset, ``PRESET:TRAYS`` of a rack-scale one (spread over racks of equal tray
counts), a multi-plane variant, or a preset sized by its GPU count.

>>> cluster_preset("gb200-nvl72", 32).describe_domain()
'2 NVLink domains of 64 GPUs (16 of 18 trays of 4 GPUs; 8 of 72 GPU slots left empty in each)'
>>> cluster_for_gpus("dgx-h100", 64).name
'dgx-h100:8'
"""
from __future__ import annotations

from dataclasses import replace

from topologies.cluster.preset_table import (INTER_LATENCY_S, INTRA_LATENCY_S, NODE_PRESETS,
                                             PLANED, RACKS, preset_names, preset_unit_gpus)
from topologies.cluster.spec import Cluster, NodeGroup
from topologies.errors import SpecError
from topologies.gpus import get_gpu
from topologies.limits import MAX_GPUS, MAX_NODES, check_int

def _rack_preset(key: str, trays: int) -> Cluster:
    gpu, per_tray, per_rack, nvl, nic_gbps, _ = RACKS[key]
    check_int("trays", trays, hi=MAX_NODES)
    racks = -(-trays // per_rack)
    if trays % racks:
        lo, hi = racks * (trays // racks), racks * (trays // racks + 1)
        raise SpecError("cluster", f"{key}:{trays}",
                        f"{trays} trays need {racks} racks of at most {per_rack} trays, and "
                        f"the racks must hold equal tray counts (one NVLink domain each): "
                        f"give {lo} or {hi} trays")
    per_node = trays // racks * per_tray
    return Cluster(name=f"{key}:{trays}", groups=(NodeGroup(get_gpu(gpu), racks),),
                   gpus_per_node=per_node, intra_node_bandwidth=nvl * 1e9,
                   intra_node_latency=INTRA_LATENCY_S, nics_per_node=per_node,
                   inter_node_bandwidth=nic_gbps * 1e9 / 8, inter_node_latency=INTER_LATENCY_S,
                   intra_node_topology="switch", source=key, gpus_per_tray=per_tray,
                   nvlink_domain_gpus=per_tray * per_rack)


def cluster_preset(name: str, num_nodes: int = 1) -> Cluster:
    """A preset cluster of ``num_nodes`` nodes (of ``num_nodes`` trays for a rack-scale
    preset such as ``gb200-nvl72``)."""
    key = str(name).strip().lower()
    if key in PLANED:
        base, planes, _ = PLANED[key]
        c = cluster_preset(base, num_nodes)
        return replace(c, name=f"{key}:{c.name.split(':')[1]}", planes=planes, source=key)
    if key in RACKS:
        return _rack_preset(key, num_nodes)
    if key not in NODE_PRESETS:
        raise SpecError("cluster", name, f"unknown preset; known: {', '.join(preset_names())}")
    gpu, per_node, nvl, nics, nic_gbps, intra, _ = NODE_PRESETS[key]
    check_int("nodes", num_nodes, hi=MAX_NODES)
    return Cluster(name=f"{key}:{num_nodes}", groups=(NodeGroup(get_gpu(gpu), num_nodes),),
                   gpus_per_node=per_node, intra_node_bandwidth=nvl * 1e9,
                   intra_node_latency=INTRA_LATENCY_S, nics_per_node=nics,
                   inter_node_bandwidth=nic_gbps * 1e9 / 8, inter_node_latency=INTER_LATENCY_S,
                   intra_node_topology=intra, source=key)


def cluster_for_gpus(name: str, num_gpus: int) -> Cluster:
    """Preset ``name`` with ``num_gpus`` GPUs: ``num_gpus / 8`` nodes of a DGX-like preset,
    ``num_gpus / 4`` trays of a rack-scale one (spread over equal racks); a count the preset's
    unit does not divide is refused."""
    unit = preset_unit_gpus(name)
    check_int("num_gpus", num_gpus, hi=MAX_GPUS)
    if num_gpus % unit:
        what = "trays" if str(name).strip().lower() in RACKS else "nodes"
        raise SpecError("cluster", name, f"holds {unit} GPUs per {what[:-1]}, which does not "
                        f"divide {num_gpus} GPUs")
    return cluster_preset(name, num_gpus // unit)
