"""Clusters built from the preset rows (``topologies.cluster.preset_table``): ``PRESET:NODES``
of a node preset, ``PRESET:TRAYS`` of a rack-scale one (spread over the fewest racks of equal
tray counts, or ``trays_per_rack`` each: ``PRESET:TRAYSxT``), a multi-plane variant, or a
preset sized by its GPU count.

>>> cluster_preset("gb200-nvl72", 32).describe_domain()
'2 NVLink domains of 64 GPUs (16 of 18 trays of 4 GPUs; 8 of 72 GPU slots left empty in each)'
>>> cluster_preset("gb200-nvl72", 256, trays_per_rack=16).describe_domain()
'16 NVLink domains of 64 GPUs (16 of 18 trays of 4 GPUs; 8 of 72 GPU slots left empty in each)'
>>> cluster_for_gpus("dgx-h100", 64).name
'dgx-h100:8'
"""
from __future__ import annotations

from dataclasses import replace

from topologies.cluster.preset_table import (INTER_LATENCY_S, INTRA_LATENCY_S, NODE_PRESETS,
                                             PLANED, RACKS, default_trays_per_rack,
                                             preset_names, preset_unit_gpus, rack_preset_name)
from topologies.cluster.spec import Cluster, NodeGroup
from topologies.errors import SpecError
from topologies.gpus import get_gpu
from topologies.limits import MAX_GPUS, MAX_NODES, check_int

def _rack_preset(key: str, trays: int, trays_per_rack: int | None = None) -> Cluster:
    gpu, per_tray, per_rack, nvl, nic_gbps, _ = RACKS[key]
    check_int("trays", trays, hi=MAX_NODES)
    if trays_per_rack is None:
        trays_per_rack = default_trays_per_rack(key, trays)
    else:
        check_trays_per_rack(key, trays, trays_per_rack)
    if trays_per_rack is None:
        racks = -(-trays // per_rack)
        lo, hi = racks * (trays // racks), racks * (trays // racks + 1)
        raise SpecError("cluster", f"{key}:{trays}",
                        f"{trays} trays need {racks} racks of at most {per_rack} trays, and "
                        f"the racks must hold equal tray counts (one NVLink domain each): "
                        f"give {lo} or {hi} trays, or the trays per rack: {key}:{trays}x"
                        f"{_largest_divisor(trays, per_rack)} (PRESET:TRAYSxT, T dividing "
                        f"TRAYS, at most {per_rack})")
    per_node = trays_per_rack * per_tray
    return Cluster(name=rack_preset_name(key, trays, trays_per_rack),
                   groups=(NodeGroup(get_gpu(gpu), trays // trays_per_rack),),
                   gpus_per_node=per_node, intra_node_bandwidth=nvl * 1e9,
                   intra_node_latency=INTRA_LATENCY_S, nics_per_node=per_node,
                   inter_node_bandwidth=nic_gbps * 1e9 / 8, inter_node_latency=INTER_LATENCY_S,
                   intra_node_topology="switch", source=key, gpus_per_tray=per_tray,
                   nvlink_domain_gpus=per_tray * per_rack)


def _largest_divisor(n: int, most: int) -> int:
    return max(d for d in range(1, most + 1) if n % d == 0)


def check_trays_per_rack(name: str, trays: int, trays_per_rack: int) -> int:
    """``trays_per_rack`` trays in each rack of rack-scale preset ``name`` (``PRESET:NxT``):
    an integer >= 1, at most the rack's trays, dividing ``trays``; returns it."""
    key = str(name).strip().lower()
    per_rack, per_tray = RACKS[key][2], RACKS[key][1]
    check_int("trays_per_rack", trays_per_rack)
    if trays_per_rack > per_rack:
        raise SpecError("trays_per_rack", trays_per_rack,
                        f"{key}:{trays}x{trays_per_rack}: must be at most {per_rack} (a rack "
                        f"holds {per_rack} trays of {per_tray} GPUs, one NVLink domain)")
    if trays % trays_per_rack:
        raise SpecError("trays_per_rack", trays_per_rack,
                        f"{key}:{trays}x{trays_per_rack}: must divide the {trays} trays (the "
                        f"racks hold equal tray counts), e.g. "
                        f"{_largest_divisor(trays, per_rack)}")
    return trays_per_rack


def cluster_preset(name: str, num_nodes: int = 1, trays_per_rack: int | None = None) -> Cluster:
    """A preset cluster of ``num_nodes`` nodes (of ``num_nodes`` trays for a rack-scale
    preset such as ``gb200-nvl72``, in racks of ``trays_per_rack`` trays each: None takes
    the fewest racks of equal tray counts)."""
    key = str(name).strip().lower()
    if key in PLANED:
        base, planes, _ = PLANED[key]
        c = cluster_preset(base, num_nodes, trays_per_rack)
        return replace(c, name=f"{key}:{c.name.split(':')[1]}", planes=planes, source=key)
    if key in RACKS:
        return _rack_preset(key, num_nodes, trays_per_rack)
    if key not in NODE_PRESETS:
        raise SpecError("cluster", name, f"unknown preset; known: {', '.join(preset_names())}")
    if trays_per_rack is not None:
        raise SpecError("trays_per_rack", trays_per_rack,
                        f"{key} is not a rack-scale preset (those are "
                        f"{', '.join(RACKS)}); give {key}:NODES")
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
