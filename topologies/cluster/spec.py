"""The frozen cluster specs: ``NodeGroup`` (nodes of one GPU type) and ``Cluster`` (the node
shape, the links, the network, the faults), with their checks, the views a mixed cluster is
priced through (``group_view``, ``fastest_view``) and the YAML-file form (``to_dict``; read
back by ``topologies.cluster.mapping``). Units: bytes/s and seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from topologies.cluster.network import (INTER_TOPOLOGIES, INTRA_TOPOLOGIES, RAIL_ONLY_INTRA,
                                        SWITCHED_TOPOLOGIES)
from topologies.cluster.preset_table import RACK_PRESETS, rack_preset_name
from topologies.errors import SpecError
from topologies.faults import Faults
from topologies.gpus import GPU, gpu_to_mapping
from topologies.gpu_profile import check_node
from topologies.planes import check_planes
from topologies.limits import (MAX_BANDWIDTH_BPS, MIN_BANDWIDTH_BPS, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_LATENCY_S,
                               MAX_NODES, MAX_OVERSUBSCRIPTION, check_int, check_name,
                               check_number)



@dataclass(frozen=True)
class NodeGroup:
    """``num_nodes`` nodes of one GPU type (heterogeneous clusters have several groups).

    ``intra_node_bandwidth`` / ``inter_node_bandwidth`` (bytes/s per direction, per GPU into
    the node fabric and per NIC): this group's own links; None takes the cluster's. The
    simulator's network graph uses them; the analytic collective costs use the cluster's.
    """

    gpu: GPU
    num_nodes: int
    intra_node_bandwidth: float | None = None
    inter_node_bandwidth: float | None = None


@dataclass(frozen=True)
class Cluster:
    """A cluster of identical-shape nodes. Bandwidths are per direction.

    ``intra_node_bandwidth``: bytes/s each GPU can send into the node fabric (NVSwitch port).
    ``inter_node_bandwidth``: bytes/s of one NIC; a node has ``nics_per_node`` of them.
    ``oversubscription``: ratio of downlinks to uplinks at the leaf switches (1 = full bisection).
    ``faults``: stragglers and degraded links (``topologies.faults``; empty = healthy).
    ``storage_write_bandwidth``: bytes/s the whole cluster can write checkpoints at (None:
    ``strategies.goodput``'s default per GPU).
    """

    name: str
    groups: tuple[NodeGroup, ...]
    gpus_per_node: int
    intra_node_bandwidth: float
    intra_node_latency: float
    nics_per_node: int
    inter_node_bandwidth: float
    inter_node_latency: float
    oversubscription: float = 1.0
    intra_node_topology: str = "switch"
    inter_node_topology: str = "rail_fat_tree"
    nodes_per_leaf: int = 32
    faults: Faults = Faults()
    storage_write_bandwidth: float | None = None
    source: str = field(default="", compare=False)
    gpus_per_tray: int | None = None
    nvlink_domain_gpus: int | None = None
    planes: int = 1

    def __post_init__(self) -> None:
        check_name("cluster.name", self.name)
        if not isinstance(self.groups, tuple) or not self.groups:
            raise SpecError("nodes", 0, "a cluster needs at least one node")
        for g in self.groups:
            if not isinstance(g, NodeGroup) or not isinstance(g.gpu, GPU):
                raise SpecError("node_groups", g, "must be node groups of a GPU and a node count")
            check_int("nodes", g.num_nodes, hi=MAX_NODES)
            for name in ("intra_node_bandwidth", "inter_node_bandwidth"):
                if getattr(g, name) is not None:
                    check_number(f"node_groups.{name}", getattr(g, name), 0.0,
                                 MAX_BANDWIDTH_BPS, lo_open=True, sane_lo=MIN_BANDWIDTH_BPS)
        check_int("gpus_per_node", self.gpus_per_node, hi=MAX_GPUS_PER_NODE)
        for g in self.groups:
            if g.gpu.profile is not None:
                check_node(g.gpu.profile, self.gpus_per_node)
        total = sum(g.num_nodes for g in self.groups) * self.gpus_per_node
        if total > MAX_GPUS:
            raise SpecError("num_gpus", total, f"must be <= {MAX_GPUS:,} (a sanity limit)")
        check_int("nics_per_node", self.nics_per_node, hi=MAX_GPUS_PER_NODE)
        check_int("nodes_per_leaf", self.nodes_per_leaf, hi=MAX_NODES)
        for name in ("intra_node_bandwidth", "inter_node_bandwidth"):
            check_number(name, getattr(self, name), 0.0, MAX_BANDWIDTH_BPS, lo_open=True,
                         sane_lo=MIN_BANDWIDTH_BPS)
        for name in ("intra_node_latency", "inter_node_latency"):
            check_number(name, getattr(self, name), 0.0, MAX_LATENCY_S)
        check_number("oversubscription", self.oversubscription, 1.0, MAX_OVERSUBSCRIPTION)
        if self.intra_node_topology not in INTRA_TOPOLOGIES:
            raise SpecError("intra_node_topology", self.intra_node_topology,
                            f"must be one of {', '.join(INTRA_TOPOLOGIES)}")
        if self.inter_node_topology not in INTER_TOPOLOGIES:
            raise SpecError("inter_node_topology", self.inter_node_topology,
                            f"must be one of {', '.join(INTER_TOPOLOGIES)}")
        check_planes(self.planes)
        if self.planes > 1 and self.inter_node_topology not in SWITCHED_TOPOLOGIES:
            raise SpecError("planes", self.planes, f"a {self.inter_node_topology} network has "
                            f"no switch planes; planes > 1 needs one of "
                            f"{', '.join(SWITCHED_TOPOLOGIES)}")
        if self.inter_node_topology == "rail_only" and self.gpus_per_node > 1 \
                and self.intra_node_topology not in RAIL_ONLY_INTRA:
            raise SpecError("inter_node_topology", "rail_only",
                            f"a rail-only network forwards cross-rail traffic through one "
                            f"NVLink hop inside a node; intra_node_topology="
                            f"{self.intra_node_topology} cannot (needs "
                            f"{' or '.join(RAIL_ONLY_INTRA)})")
        if self.storage_write_bandwidth is not None:
            check_number("storage_write_bandwidth", self.storage_write_bandwidth, 0.0,
                         MAX_BANDWIDTH_BPS * MAX_GPUS, lo_open=True, sane_lo=MIN_BANDWIDTH_BPS)
        if not isinstance(self.faults, Faults):
            raise SpecError("faults", self.faults, "must be a Faults (topologies.faults)")
        self.faults.check_against(total, self.num_nodes, self.gpus_per_node, self.planes)
        if self.gpus_per_tray is not None:
            check_int("gpus_per_tray", self.gpus_per_tray, hi=MAX_GPUS_PER_NODE)
            if self.gpus_per_node % self.gpus_per_tray:
                raise SpecError("gpus_per_tray", self.gpus_per_tray,
                                f"must divide gpus_per_node={self.gpus_per_node} (an NVLink "
                                "domain holds whole trays)")
        if self.nvlink_domain_gpus is not None:
            check_int("nvlink_domain_gpus", self.nvlink_domain_gpus, hi=MAX_GPUS_PER_NODE)
            if self.gpus_per_node > self.nvlink_domain_gpus:
                raise SpecError("gpus_per_node", self.gpus_per_node,
                                f"a node is one NVLink domain, which holds at most "
                                f"nvlink_domain_gpus={self.nvlink_domain_gpus} GPUs")

    @property
    def num_nodes(self) -> int:
        return sum(g.num_nodes for g in self.groups)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def gpu(self) -> GPU:
        """The GPU type of the lowest bf16 peak: the type the analytic arrays and the memory
        model price by default. Which type a step waits for depends on the work (a small GEMM
        can run slower on a type of higher peak): ``strategies.estimate.mixed.slowest_gpu``."""
        return min((g.gpu for g in self.groups), key=lambda x: (x.peak("bf16"), x.hbm_bytes))

    @property
    def min_hbm_bytes(self) -> float:
        return min(g.gpu.hbm_bytes for g in self.groups)

    @property
    def heterogeneous(self) -> bool:
        return len({g.gpu.name for g in self.groups}) > 1

    @property
    def fastest_gpu(self) -> GPU:
        """The GPU type of the highest bf16 peak (``fastest_view``'s). Not the fastest at
        every op: the lower bound takes each op's least over the types present
        (``strategies.estimate.bound.gpu_types.fastest_of_each``)."""
        return max((g.gpu for g in self.groups), key=lambda x: (x.peak("bf16"), x.hbm_bytes))

    def fastest_view(self) -> "Cluster":
        """This cluster with every node holding ``fastest_gpu`` and the fastest links of any
        group: the links a lower bound on a mixed cluster's step may assume (itself when
        uniform; its compute per op is the least over the types, not this type's)."""
        if self.uniform:
            return self
        fast = self.fastest_gpu
        return replace(self, groups=tuple(NodeGroup(fast, g.num_nodes) for g in self.groups),
                       intra_node_bandwidth=max(map(self.intra_bandwidth_of_group, self.groups)),
                       inter_node_bandwidth=max(map(self.inter_bandwidth_of_group, self.groups)))

    def group_view(self, index: int, links: bool = True) -> "Cluster":
        """This cluster with every node holding node group ``index``'s GPU and (``links``)
        its links; ``links=False`` keeps the cluster-wide links (what a collective across
        the groups runs at)."""
        g = self.groups[index]
        out = replace(self, groups=tuple(NodeGroup(g.gpu, h.num_nodes) for h in self.groups))
        if not links:
            return out
        return replace(out, intra_node_bandwidth=self.intra_bandwidth_of_group(g),
                       inter_node_bandwidth=self.inter_bandwidth_of_group(g))

    def group_of_node(self, node: int) -> NodeGroup:
        """The node group that holds ``node`` (groups are numbered in file order)."""
        n = node
        for g in self.groups:
            if n < g.num_nodes:
                return g
            n -= g.num_nodes
        raise SpecError("node", node, f"out of range 0..{self.num_nodes - 1}")

    def gpu_of_node(self, node: int) -> GPU:
        return self.group_of_node(node).gpu

    def gpu_of_rank(self, rank: int) -> GPU:
        """The GPU type of global rank ``rank`` (GPU ``rank`` of the graph)."""
        return self.gpu_of_node(rank // self.gpus_per_node)

    def intra_bandwidth_of_node(self, node: int) -> float:
        """Bytes/s each GPU of ``node`` sends into its node fabric (its group's, else the
        cluster's)."""
        bw = self.group_of_node(node).intra_node_bandwidth
        return self.intra_node_bandwidth if bw is None else bw

    def inter_bandwidth_of_node(self, node: int) -> float:
        """Bytes/s of one NIC of ``node`` (its group's, else the cluster's)."""
        bw = self.group_of_node(node).inter_node_bandwidth
        return self.inter_node_bandwidth if bw is None else bw

    @property
    def uniform(self) -> bool:
        """One GPU type and one set of links on every node (a symmetry the folding needs)."""
        return len({(repr(g.gpu), self.intra_bandwidth_of_group(g),
                     self.inter_bandwidth_of_group(g))
                    for g in self.groups}) == 1

    def intra_bandwidth_of_group(self, g: NodeGroup) -> float:
        return self.intra_node_bandwidth if g.intra_node_bandwidth is None \
            else g.intra_node_bandwidth

    def inter_bandwidth_of_group(self, g: NodeGroup) -> float:
        return self.inter_node_bandwidth if g.inter_node_bandwidth is None \
            else g.inter_node_bandwidth

    def gpu_counts(self) -> list[tuple[GPU, int]]:
        """(GPU type, number of GPUs) per distinct type, in group order."""
        out: dict[str, list] = {}
        for g in self.groups:
            out.setdefault(g.gpu.name, [g.gpu, 0])[1] += g.num_nodes * self.gpus_per_node
        return [(gpu, n) for gpu, n in out.values()]

    def describe_gpus(self) -> str:
        """The GPUs in words: ``64 x A100-SXM4-80GB``, or per type for a mixed cluster,
        ``32 x H100-SXM5-80GB + 32 x A100-SXM4-80GB``."""
        return " + ".join(f"{n} x {gpu.name}" for gpu, n in self.gpu_counts())

    def mean_peak(self, dtype: str) -> float:
        """The cluster's summed dense ``dtype`` peak over its GPU count (FLOP/s per GPU): MFU
        divides by this times the GPUs. One GPU type: exactly that GPU's peak."""
        counts = self.gpu_counts()
        if len(counts) == 1:
            return counts[0][0].peak(dtype)
        return sum(gpu.peak(dtype) * n for gpu, n in counts) / self.num_gpus

    @property
    def nvlink_domain_size(self) -> int:
        """GPUs that share one NVLink domain (the used GPUs of a rack; the node)."""
        return self.gpus_per_node

    @property
    def nvlink_domain_capacity(self) -> int:
        """GPUs one NVLink domain can hold (72 for an NVL72 rack); >= ``nvlink_domain_size``."""
        return self.nvlink_domain_gpus or self.gpus_per_node

    @property
    def gpus_per_host(self) -> int:
        """GPUs per host operating system (a compute tray, or the whole node)."""
        return self.gpus_per_tray or self.gpus_per_node

    @property
    def num_hosts(self) -> int:
        return self.num_gpus // self.gpus_per_host

    def describe_domain(self) -> str:
        """The NVLink domains in words, e.g. ``4 NVLink domains of 64 GPUs (16 of 18 trays of
        4 GPUs; 8 of 72 GPU slots left empty in each)`` (``Infinity Fabric`` on AMD GPUs)."""
        n, g = self.num_nodes, self.gpus_per_node
        fabric = "Infinity Fabric" if self.gpu.vendor == "amd" else "NVLink"
        text = f"{n} {fabric} domain{'s' if n > 1 else ''} of {g} GPUs"
        if self.gpus_per_tray and self.gpus_per_tray < g:
            t = self.gpus_per_tray
            text += f" ({g // t} of {self.nvlink_domain_capacity // t} trays of {t} GPUs"
            empty = self.nvlink_domain_capacity - g
            text += f"; {empty} of {self.nvlink_domain_capacity} GPU slots left empty in each)" \
                if empty else ")"
        elif self.nvlink_domain_capacity > g:
            text += f" ({self.nvlink_domain_capacity - g} of {self.nvlink_domain_capacity} " \
                    "GPU slots left empty in each)"
        return text

    @property
    def inter_node_bandwidth_per_gpu(self) -> float:
        """Bytes/s of NIC bandwidth per GPU (per direction), before oversubscription: of the
        NICs a GPU uses, at most one each (``topologies.graph.rails``: NICs beyond the GPU
        count carry no training traffic in the simulator either)."""
        return min(self.nics_per_node, self.gpus_per_node) * self.inter_node_bandwidth \
            / self.gpus_per_node

    def with_nodes(self, num_nodes: int) -> "Cluster":
        """The same cluster with ``num_nodes`` nodes (NVLink domains); a rack-scale preset's
        name counts trays, as ``PRESET:TRAYS`` does (``PRESET:TRAYSxT`` where the fewest racks
        would hold another count)."""
        check_int("nodes", num_nodes, hi=MAX_NODES)
        if len(self.groups) != 1:
            raise SpecError("nodes", num_nodes, "cannot resize a heterogeneous cluster; edit its YAML")
        name = f"{self.name.split(':')[0]}:{num_nodes}"
        if self.source in RACK_PRESETS:
            per_rack = self.gpus_per_node // self.gpus_per_host
            name = rack_preset_name(self.source, num_nodes * per_rack, per_rack)
        return replace(self, groups=(replace(self.groups[0], num_nodes=num_nodes),), name=name)

    def to_dict(self) -> dict[str, Any]:
        """The YAML-file form (file units), for JSON output and round trips."""
        d: dict[str, Any] = {
            "name": self.name,
            "gpus_per_node": self.gpus_per_node,
            "intra_node_GBps": self.intra_node_bandwidth / 1e9,
            "intra_node_latency_us": self.intra_node_latency * 1e6,
            "intra_node_topology": self.intra_node_topology,
            "nics_per_node": self.nics_per_node,
            "inter_node_gbps": self.inter_node_bandwidth * 8 / 1e9,
            "inter_node_latency_us": self.inter_node_latency * 1e6,
            "oversubscription": self.oversubscription,
            "inter_node_topology": self.inter_node_topology,
            "nodes_per_leaf": self.nodes_per_leaf,
        }
        if self.planes > 1:
            d["network"] = {"kind": "multi_plane", "planes": self.planes,
                            "plane_topology": d.pop("inter_node_topology")}
        if self.gpus_per_tray is not None:
            d["gpus_per_tray"] = self.gpus_per_tray
        if self.nvlink_domain_gpus is not None:
            d["nvlink_domain_gpus"] = self.nvlink_domain_gpus
        if len(self.groups) == 1:
            d["gpu"] = gpu_to_mapping(self.groups[0].gpu)
            d["nodes"] = self.groups[0].num_nodes
        else:
            d["node_groups"] = [_group_to_dict(g) for g in self.groups]
        if self.faults:
            d["faults"] = self.faults.to_dict()
        if self.storage_write_bandwidth is not None:
            d["storage_write_GBps"] = self.storage_write_bandwidth / 1e9
        return d

    def with_faults(self, faults: Faults) -> "Cluster":
        """This cluster with ``faults`` added (an entry replaces the same GPU or link)."""
        return replace(self, faults=self.faults.merged(faults))


def _group_to_dict(g: NodeGroup) -> dict[str, Any]:
    d: dict[str, Any] = {"gpu": gpu_to_mapping(g.gpu), "nodes": g.num_nodes}
    if g.intra_node_bandwidth is not None:
        d["intra_node_GBps"] = g.intra_node_bandwidth / 1e9
    if g.inter_node_bandwidth is not None:
        d["inter_node_gbps"] = g.inter_node_bandwidth * 8 / 1e9
    return d

