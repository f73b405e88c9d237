"""The ``--cluster`` argument: ``PRESET:NODES``, ``PRESET:TRAYSxT`` (a rack-scale preset in
racks of ``T`` trays), ``PRESET``, presets joined by ``+`` (a mixed cluster) or a YAML/JSON
file.

>>> parse_cluster_arg("dgx-h100:4+dgx-a100:4").describe_gpus()
'32 x H100-SXM5-80GB + 32 x A100-SXM4-80GB'
"""
from __future__ import annotations

import os
from dataclasses import replace

from topologies.cluster.mapping import load_cluster_file
from topologies.cluster.preset_table import RACKS
from topologies.cluster.presets import cluster_preset
from topologies.cluster.spec import Cluster, NodeGroup
from topologies.errors import SpecError
from topologies.limits import parse_int_text


#: the names a cluster file may have
CLUSTER_EXTS = (".yaml", ".yml", ".json")


def mixed_cluster(text: str) -> Cluster:
    """``PRESET:NODES+PRESET:NODES...`` (``dgx-h100:4+dgx-a100:4``): one node group per term,
    each with its preset's GPU and links; the cluster-wide links (what the analytic collective
    costs read) are the slowest group's. The presets must share the node shape (GPUs and NICs
    per node, NVLink topology) and the scale-out network (its topology and planes: one fabric
    joins the groups); rack-scale presets are refused."""
    terms = [t.strip() for t in text.split("+")]
    parts = []
    for t in terms:
        if t.split(":")[0].strip().lower() in RACKS:
            raise SpecError("cluster", text, f"{t}: rack-scale presets cannot be mixed")
        c = parse_cluster_arg(t)
        parts.append(c)
    first = parts[0]
    for t, c in zip(terms[1:], parts[1:]):
        for attr in ("gpus_per_node", "nics_per_node", "intra_node_topology",
                     "inter_node_topology", "planes"):
            if getattr(c, attr) != getattr(first, attr):
                raise SpecError("cluster", text, f"{t} has {attr}={getattr(c, attr)} but "
                                f"{terms[0]} has {getattr(first, attr)}; the node groups of "
                                "one cluster share the node shape and the network")
    groups = tuple(NodeGroup(c.groups[0].gpu, c.groups[0].num_nodes, c.intra_node_bandwidth,
                             c.inter_node_bandwidth) for c in parts)
    return replace(first, name="+".join(c.name for c in parts), groups=groups,
                   intra_node_bandwidth=min(c.intra_node_bandwidth for c in parts),
                   inter_node_bandwidth=min(c.inter_node_bandwidth for c in parts),
                   source="mixed")


def parse_cluster_arg(text: str) -> Cluster:
    """``PRESET:NODES`` (``dgx-a100:128``), ``PRESET:TRAYSxT`` (a rack-scale preset's trays
    in racks of ``T``: ``gb200-nvl72:256x16``), ``PRESET`` (one node), several of them joined
    by ``+`` (a mixed cluster, :func:`mixed_cluster`) or a YAML file path."""
    text = str(text).strip()
    if "+" in text and not os.path.exists(text) and any(
            t.strip().endswith(CLUSTER_EXTS) for t in text.split("+")):
        raise SpecError("cluster", text, "a mixed cluster joins presets (PRESET:NODES+"
                        "PRESET:NODES); a cluster file describes one with node_groups")
    if text.endswith(CLUSTER_EXTS):
        return load_cluster_file(text)
    if "+" in text:
        return mixed_cluster(text)
    name, _, nodes = text.partition(":")
    if not nodes:
        try:
            return cluster_preset(name, 1)
        except SpecError:
            if not (text and os.path.exists(text)):
                raise
        raise SpecError("cluster", text, ("is a folder" if os.path.isdir(text) else "is a file")
                        + ", not a cluster file: a cluster file's name ends with .yaml, .yml "
                        "or .json (or give PRESET:NODES)") from None
    count, per = _count_and_trays_per_rack(text, name, nodes)
    return cluster_preset(name, count, per)


def _count_and_trays_per_rack(text: str, name: str, nodes: str) -> tuple[int, int | None]:
    """``NODES`` (or ``TRAYS``), or ``TRAYSxT`` for a rack-scale preset: the count and the
    trays per rack (None: the fewest racks)."""
    count, sep, per = nodes.strip().lower().partition("x")
    rack = name.strip().lower() in RACKS
    try:
        if rack and sep:
            return parse_int_text("nodes", count), parse_int_text("trays_per_rack", per)
        return parse_int_text("nodes", nodes), None
    except SpecError:
        if sep and not rack and count.strip().isdigit() and per.strip().isdigit():
            raise SpecError("cluster", text, f"NODESxT (trays per rack) needs a rack-scale "
                            f"preset ({', '.join(RACKS)}); give PRESET:NODES") from None
        raise SpecError("cluster", text, "must be PRESET:NODES (PRESET:TRAYS or PRESET:TRAYSxT, "
                        "T trays per rack, for a rack-scale preset) with NODES an integer, "
                        "e.g. dgx-a100:128, gb200-nvl72:256x16, or a .yaml file") from None
