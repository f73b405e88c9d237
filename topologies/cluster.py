"""Cluster specs: presets, the ``PRESET:NODES`` syntax and the YAML format.

Units inside: bytes/s and seconds. Files say ``intra_node_GBps`` (gigabytes/s per GPU per
direction), ``inter_node_gbps`` (gigabits/s per NIC per direction) and ``*_latency_us``; they are
converted once, here.

A *node* is one NVLink (or Infinity Fabric) domain: the GPUs that reach each other through the
scale-up fabric. For an 8-GPU DGX that is the server; for a GB200/GB300 NVL72 rack it is the
rack's used trays (``gpus_per_tray`` GPUs each, up to ``nvlink_domain_gpus`` = 72 GPUs), one
NVLink switch fabric across trays, with the scale-out NICs between racks. Everything that asks
"does this traffic stay on NVLink?" asks :func:`same_nvlink_domain` / ``nvlink_domain_size``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from topologies.errors import SpecError
from topologies.faults import Faults, faults_from_mapping
from topologies.gpus import GPU, get_gpu, gpu_from_mapping, gpu_to_mapping
from topologies.gpu_profile import check_node
from topologies.planes import check_planes
from topologies.limits import (MAX_BANDWIDTH_BPS, MIN_BANDWIDTH_BPS, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_LATENCY_S,
                               MAX_NODES, MAX_OVERSUBSCRIPTION, check_int, check_name,
                               check_number, parse_int_text)

INTRA_TOPOLOGIES = ("switch", "mesh", "ring")
INTER_TOPOLOGIES = ("rail_fat_tree", "fat_tree", "rail_only", "torus", "ring")
#: inter-node topologies built of leaves and spines, which can be split into planes
SWITCHED_TOPOLOGIES = ("rail_fat_tree", "fat_tree", "rail_only")
#: intra-node fabrics that forward a rail-only network's cross-rail traffic in one hop
RAIL_ONLY_INTRA = ("switch", "mesh")


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
            _positive_int("nodes", g.num_nodes)
            for name in ("intra_node_bandwidth", "inter_node_bandwidth"):
                if getattr(g, name) is not None:
                    check_number(f"node_groups.{name}", getattr(g, name), 0.0,
                                 MAX_BANDWIDTH_BPS, lo_open=True, sane_lo=MIN_BANDWIDTH_BPS)
        _positive_int("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE)
        for g in self.groups:
            if g.gpu.profile is not None:
                check_node(g.gpu.profile, self.gpus_per_node)
        total = sum(g.num_nodes for g in self.groups) * self.gpus_per_node
        if total > MAX_GPUS:
            raise SpecError("num_gpus", total, f"must be <= {MAX_GPUS:,} (a sanity limit)")
        _positive_int("nics_per_node", self.nics_per_node, MAX_GPUS_PER_NODE)
        _positive_int("nodes_per_leaf", self.nodes_per_leaf)
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
            _positive_int("gpus_per_tray", self.gpus_per_tray, MAX_GPUS_PER_NODE)
            if self.gpus_per_node % self.gpus_per_tray:
                raise SpecError("gpus_per_tray", self.gpus_per_tray,
                                f"must divide gpus_per_node={self.gpus_per_node} (an NVLink "
                                "domain holds whole trays)")
        if self.nvlink_domain_gpus is not None:
            _positive_int("nvlink_domain_gpus", self.nvlink_domain_gpus, MAX_GPUS_PER_NODE)
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
        (``strategies.estimate.lower_bound.fastest_of_each``)."""
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
        name counts trays, as ``PRESET:TRAYS`` does."""
        _positive_int("nodes", num_nodes)
        if len(self.groups) != 1:
            raise SpecError("nodes", num_nodes, "cannot resize a heterogeneous cluster; edit its YAML")
        count = num_nodes * self.gpus_per_node // self.gpus_per_host \
            if self.source in _RACKS else num_nodes
        return replace(self, groups=(replace(self.groups[0], num_nodes=num_nodes),),
                       name=f"{self.name.split(':')[0]}:{count}")

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


def _positive_int(name: str, v: Any, hi: int = MAX_NODES) -> None:
    check_int(name, v, 1, hi)


def nvlink_domain_of(cluster: Cluster, rank: Any) -> Any:
    """NVLink domain index of global rank(s) ``rank`` (int or numpy array): ``rank //
    nvlink_domain_size``. The one rule for "is this traffic on NVLink?"."""
    return rank // cluster.nvlink_domain_size


def same_nvlink_domain(cluster: Cluster, a: Any, b: Any) -> Any:
    """True where ranks ``a`` and ``b`` share an NVLink domain (broadcasts over arrays)."""
    return nvlink_domain_of(cluster, a) == nvlink_domain_of(cluster, b)


def fits_nvlink_domain(cluster: Cluster, group_size: Any) -> Any:
    """True where contiguous groups of ``group_size`` ranks (tp, or ep over adjacent ranks)
    never straddle two NVLink domains: the size divides the domain."""
    return cluster.nvlink_domain_size % group_size == 0


# name -> (gpu, gpus/node, NVLink GB/s per GPU per dir, NICs, NIC Gb/s, intra topology, doc)
_PRESETS: dict[str, tuple[str, int, float, int, float, str, str]] = {
    "dgx-a100": ("A100-SXM4-80GB", 8, 300, 8, 200, "switch",
                 "8x A100-SXM4-80GB, NVSwitch 300 GB/s/GPU, 8x 200 Gb/s HDR IB, rail fat tree"),
    "dgx-a100-40gb": ("A100-SXM4-40GB", 8, 300, 8, 200, "switch",
                      "8x A100-SXM4-40GB, NVSwitch 300 GB/s/GPU, 8x 200 Gb/s HDR IB"),
    "dgx-h100": ("H100-SXM5-80GB", 8, 450, 8, 400, "switch",
                 "8x H100-SXM5-80GB, NVSwitch 450 GB/s/GPU, 8x 400 Gb/s NDR IB, rail fat tree"),
    "hgx-h800": ("H800-SXM5-80GB", 8, 200, 8, 400, "switch",
                 "8x H800-SXM5-80GB, NVLink 200 GB/s/GPU (400 bidirectional), 8x 400 Gb/s IB "
                 "CX7, one NIC per GPU (DeepSeek-V3's cluster)"),
    "dgx-h200": ("H200-SXM-141GB", 8, 450, 8, 400, "switch",
                 "8x H200-141GB, NVSwitch 450 GB/s/GPU, 8x 400 Gb/s NDR IB"),
    "dgx-b200": ("B200-SXM-180GB", 8, 900, 8, 400, "switch",
                 "8x B200-180GB, NVLink5 900 GB/s/GPU, 8x 400 Gb/s NDR IB"),
    "hgx-h100-pcie": ("H100-PCIe-80GB", 8, 64, 4, 200, "switch",
                      "8x H100-PCIe (NVLink bridges not modelled: PCIe Gen5 64 GB/s), 4x 200 Gb/s"),
    "mi300x": ("MI300X", 8, 448, 8, 400, "mesh",
               "8x MI300X, Infinity Fabric full mesh (7 x 64 GB/s), 8x 400 Gb/s"),
}
_PRESETS.update({
    "dgx-b300": ("B300-SXM-288GB", 8, 900, 8, 800, "switch",
                 "8x B300-288GB, NVLink5 900 GB/s/GPU, 8x 800 Gb/s ConnectX-8"),
    "mi325x": ("MI325X", 8, 448, 8, 400, "mesh",
               "8x MI325X, Infinity Fabric full mesh (7 x 64 GB/s), 8x 400 Gb/s"),
    "mi355x": ("MI355X", 8, 537.6, 8, 400, "mesh",
               "8x MI355X, Infinity Fabric full mesh (7 x 76.8 GB/s), 8x 400 Gb/s"),
})
# Rack-scale NVLink domains: name -> (gpu, GPUs per tray, trays per rack, NVLink GB/s per GPU
# per direction, NIC Gb/s (one NIC per GPU), doc). PRESET:N counts trays; the racks hold equal
# tray counts (64 trays = 4 racks of 16 trays = 4 NVLink domains of 64 GPUs).
_RACKS: dict[str, tuple[str, int, int, float, float, str]] = {
    "gb200-nvl72": ("GB200", 4, 18, 900, 400,
                    "NVL72 racks: 18 trays x 4 GB200 GPUs, one NVLink 5 domain of 72 GPUs "
                    "(900 GB/s/GPU through 9 NVLink switch trays), 1x 400 Gb/s ConnectX-7 "
                    "per GPU between racks"),
    "gb300-nvl72": ("GB300", 4, 18, 900, 800,
                    "NVL72 racks: 18 trays x 4 GB300 GPUs, one NVLink 5 domain of 72 GPUs "
                    "(900 GB/s/GPU), 1x 800 Gb/s ConnectX-8 per GPU between racks"),
}
# Multi-plane variants of presets: name -> (base preset, planes, doc). ConnectX-8 runs as 800
# Gb/s InfiniBand XDR or as 2 x 400 Gb/s Ethernet into two Spectrum-X planes (NVIDIA's
# ConnectX-8 SuperNIC product brief and Hot Chips 2025 talk).
_PLANED: dict[str, tuple[str, int, str]] = {
    "dgx-b300-2plane": ("dgx-b300", 2,
                        "dgx-b300 with each 800 Gb/s ConnectX-8 as 2 x 400 Gb/s ports into two "
                        "independent Spectrum-X Ethernet planes"),
    "gb300-nvl72-2plane": ("gb300-nvl72", 2,
                           "gb300-nvl72 with each 800 Gb/s ConnectX-8 as 2 x 400 Gb/s ports "
                           "into two independent Spectrum-X Ethernet planes; PRESET:N counts "
                           "trays"),
}
_RACKS.update({k: _RACKS[base] for k, (base, _, _) in _PLANED.items() if base in _RACKS})
RACK_PRESETS = tuple(_RACKS)
# Latencies (s): one hop through NVSwitch / NVLink; NIC-to-NIC through the fat tree.
INTRA_LATENCY_S = 2.0e-6
INTER_LATENCY_S = 5.0e-6


def preset_names() -> list[str]:
    return [*_PRESETS, *(k for k in _RACKS if k not in _PLANED),
            *(k for k in _PLANED if k not in _RACKS), *(k for k in _PLANED if k in _RACKS)]


def preset_description(name: str) -> str:
    if name in _PLANED:
        return _PLANED[name][-1]
    return (_RACKS.get(name) or _PRESETS[name])[-1]


def preset_unit_gpus(name: str) -> int:
    """GPUs that ``PRESET:1`` counts: a node (8) or, for a rack-scale preset, a tray (4)."""
    key = str(name).strip().lower()
    if key in _RACKS:
        return _RACKS[key][1]
    if key in _PLANED:
        key = _PLANED[key][0]
    if key not in _PRESETS:
        raise SpecError("cluster", name, f"unknown preset; known: {', '.join(preset_names())}")
    return _PRESETS[key][1]


def _rack_preset(key: str, trays: int) -> Cluster:
    gpu, per_tray, per_rack, nvl, nic_gbps, _ = _RACKS[key]
    _positive_int("trays", trays)
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
    if key in _PLANED:
        base, planes, _ = _PLANED[key]
        c = cluster_preset(base, num_nodes)
        return replace(c, name=f"{key}:{c.name.split(':')[1]}", planes=planes, source=key)
    if key in _RACKS:
        return _rack_preset(key, num_nodes)
    if key not in _PRESETS:
        raise SpecError("cluster", name, f"unknown preset; known: {', '.join(preset_names())}")
    gpu, per_node, nvl, nics, nic_gbps, intra, _ = _PRESETS[key]
    _positive_int("nodes", num_nodes)
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
    _positive_int("num_gpus", num_gpus, MAX_GPUS)
    if num_gpus % unit:
        what = "trays" if str(name).strip().lower() in _RACKS else "nodes"
        raise SpecError("cluster", name, f"holds {unit} GPUs per {what[:-1]}, which does not "
                        f"divide {num_gpus} GPUs")
    return cluster_preset(name, num_gpus // unit)


def mixed_cluster(text: str) -> Cluster:
    """``PRESET:NODES+PRESET:NODES...`` (``dgx-h100:4+dgx-a100:4``): one node group per term,
    each with its preset's GPU and links; the cluster-wide links (what the analytic collective
    costs read) are the slowest group's. The presets must share the node shape (GPUs and NICs
    per node, NVLink topology) and the scale-out network (its topology and planes: one fabric
    joins the groups); rack-scale presets are refused."""
    terms = [t.strip() for t in text.split("+")]
    parts = []
    for t in terms:
        if t.split(":")[0].strip().lower() in _RACKS:
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
    """``PRESET:NODES`` (``dgx-a100:128``), ``PRESET`` (one node), several of them joined by
    ``+`` (a mixed cluster, :func:`mixed_cluster`) or a YAML file path."""
    text = str(text).strip()
    if text.endswith((".yaml", ".yml", ".json")):
        from topologies.yaml_io import load_cluster_file
        return load_cluster_file(text)
    if "+" in text:
        return mixed_cluster(text)
    name, _, nodes = text.partition(":")
    if not nodes:
        return cluster_preset(name, 1)
    try:
        n = parse_int_text("nodes", nodes)
    except SpecError:
        raise SpecError("cluster", text, "must be PRESET:NODES (PRESET:TRAYS for a rack-scale "
                        "preset) with NODES an integer, e.g. dgx-a100:128, or a .yaml file"
                        ) from None
    return cluster_preset(name, n)


_KEYS = {"name", "gpu", "nodes", "gpus_per_node", "intra_node_GBps", "intra_node_latency_us",
         "intra_node_topology", "nics_per_node", "inter_node_gbps", "inter_node_latency_us",
         "oversubscription", "inter_node_topology", "node_groups", "preset", "nodes_per_leaf",
         "faults", "storage_write_GBps", "gpus_per_tray", "nvlink_domain_gpus", "network"}
_NETWORK_KEYS = {"kind", "planes", "plane_topology"}


def cluster_from_mapping(d: Mapping[str, Any], base_dir: str | None = None) -> Cluster:
    """A cluster from the YAML mapping (see docs/clusters.md). ``preset:`` fills defaults.
    ``base_dir``: the folder relative GPU profile paths (``gpu: {profile: FILE}``) start from."""
    if not isinstance(d, Mapping):
        raise SpecError("cluster", type(d).__name__, "a cluster file must hold a mapping")
    unknown = sorted((str(k) for k in set(d) - _KEYS))
    if unknown:
        raise SpecError("cluster", unknown[0], f"unknown key; allowed: {', '.join(sorted(_KEYS))}")
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
    merged = {**base, **{k: v for k, v in d.items() if k != "preset"}}
    topology, planes = network_from_mapping(merged)
    if "node_groups" in d:
        merged.pop("gpu", None)
        merged.pop("nodes", None)
    for req in ("gpus_per_node", "intra_node_GBps", "nics_per_node", "inter_node_gbps"):
        if req not in merged:
            raise SpecError(req, None, "is required in a cluster file (or give preset:)")
    groups = _groups(merged, base_dir)
    # file units, checked before they are converted (10**400 GB/s must not overflow)
    num = {
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
    if planes > 1:   # on the checked rates (a missing or malformed one is refused above)
        check_planes(planes, num["inter_node_gbps"], "network.planes")
        for i, g in enumerate(merged.get("node_groups") or ()):
            if "inter_node_gbps" in g:    # a group's own NICs split over the same planes
                gbps = float(g["inter_node_gbps"])      # checked by _groups
                try:
                    check_planes(planes, gbps, "network.planes")
                except SpecError as e:
                    raise SpecError(f"node_groups[{i}].inter_node_gbps", g["inter_node_gbps"],
                                    f"with network.planes={planes}: {e.rule}") from None
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


def network_from_mapping(d: Mapping[str, Any]) -> tuple[str, int]:
    """``(inter_node_topology, planes)`` of a cluster mapping: its ``network:`` section
    (``{kind: multi_plane, planes: N, plane_topology: T}`` or ``{kind: T}``), else its
    ``inter_node_topology`` with one plane."""
    if "network" not in d:
        return d.get("inter_node_topology", "rail_fat_tree"), 1
    net = d["network"]
    if not isinstance(net, Mapping):
        raise SpecError("network", net, "must be a mapping {kind: ..., planes: N}")
    unknown = sorted(str(k) for k in set(net) - _NETWORK_KEYS)
    if unknown:
        raise SpecError("network", unknown[0],
                        f"unknown key; allowed: {', '.join(sorted(_NETWORK_KEYS))}")
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


_GROUP_KEYS = {"gpu", "nodes", "intra_node_GBps", "inter_node_gbps"}


def _gpu(v: Any, base_dir: str | None = None) -> GPU:
    return gpu_from_mapping(v, base_dir) if isinstance(v, Mapping) else \
        get_gpu(check_name("gpu", v))


def _groups(d: Mapping[str, Any], base_dir: str | None = None) -> tuple[NodeGroup, ...]:
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
            _positive_int(f"node_groups[{i}].nodes", g["nodes"])
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
    _positive_int("nodes", nodes)
    return (NodeGroup(_gpu(d["gpu"], base_dir), nodes),)
