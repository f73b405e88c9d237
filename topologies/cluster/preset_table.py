"""The cluster presets as data: the DGX/HGX/MI nodes (``NODE_PRESETS``), the rack-scale NVLink
domains (``RACKS``) and the multi-plane variants (``PLANED``), the default link latencies, and
the catalogue's queries (names, descriptions, the GPUs ``PRESET:1`` counts). The clusters are
built from these rows in ``topologies.cluster.presets``.

>>> preset_unit_gpus("dgx-h100"), preset_unit_gpus("gb200-nvl72")
(8, 4)
>>> default_trays_per_rack("gb200-nvl72", 64), default_trays_per_rack("gb200-nvl72", 256)
(16, None)
>>> rack_preset_name("gb200-nvl72", 64, 16), rack_preset_name("gb200-nvl72", 256, 16)
('gb200-nvl72:64', 'gb200-nvl72:256x16')
"""
from __future__ import annotations

from topologies.errors import SpecError

# name -> (gpu, gpus/node, NVLink GB/s per GPU per dir, NICs, NIC Gb/s, intra topology, doc)
NODE_PRESETS: dict[str, tuple[str, int, float, int, float, str, str]] = {
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
NODE_PRESETS.update({
    "dgx-b300": ("B300-SXM-288GB", 8, 900, 8, 800, "switch",
                 "8x B300-288GB, NVLink5 900 GB/s/GPU, 8x 800 Gb/s ConnectX-8"),
    "mi325x": ("MI325X", 8, 448, 8, 400, "mesh",
               "8x MI325X, Infinity Fabric full mesh (7 x 64 GB/s), 8x 400 Gb/s"),
    "mi355x": ("MI355X", 8, 537.6, 8, 400, "mesh",
               "8x MI355X, Infinity Fabric full mesh (7 x 76.8 GB/s), 8x 400 Gb/s"),
})
# Rack-scale NVLink domains: name -> (gpu, GPUs per tray, trays per rack, NVLink GB/s per GPU
# per direction, NIC Gb/s (one NIC per GPU), doc). PRESET:N counts trays; the racks hold equal
# tray counts (64 trays = 4 racks of 16 trays = 4 NVLink domains of 64 GPUs), the fewest racks
# by default (``default_trays_per_rack``) or T trays each for PRESET:NxT.
RACKS: dict[str, tuple[str, int, int, float, float, str]] = {
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
PLANED: dict[str, tuple[str, int, str]] = {
    "dgx-b300-2plane": ("dgx-b300", 2,
                        "dgx-b300 with each 800 Gb/s ConnectX-8 as 2 x 400 Gb/s ports into two "
                        "independent Spectrum-X Ethernet planes"),
    "gb300-nvl72-2plane": ("gb300-nvl72", 2,
                           "gb300-nvl72 with each 800 Gb/s ConnectX-8 as 2 x 400 Gb/s ports "
                           "into two independent Spectrum-X Ethernet planes; PRESET:N counts "
                           "trays"),
}
RACKS.update({k: RACKS[base] for k, (base, _, _) in PLANED.items() if base in RACKS})
#: the rack-scale presets' names (``PRESET:N`` counts trays), multi-plane variants included
RACK_PRESETS = tuple(RACKS)
# Latencies (s): one hop through NVSwitch / NVLink; NIC-to-NIC through the fat tree. Against
# nccl-tests' small-message rings (DGX A100: 1.98 us a step) and NCCL's LL128 tuning row (1.9 /
# 4.0 us a step, the protocol it runs latency-bound rings with): docs/calibration.md §5.229.
INTRA_LATENCY_S = 2.0e-6
INTER_LATENCY_S = 5.0e-6


def preset_names() -> list[str]:
    """Every preset name: the nodes, the racks, then the multi-plane variants."""
    return [*NODE_PRESETS, *(k for k in RACKS if k not in PLANED),
            *(k for k in PLANED if k not in RACKS), *(k for k in PLANED if k in RACKS)]


def preset_description(name: str) -> str:
    """Preset ``name``'s hardware in one line (``name`` as ``preset_names`` spells it)."""
    if name in PLANED:
        return PLANED[name][-1]
    return (RACKS.get(name) or NODE_PRESETS[name])[-1]


def preset_unit_gpus(name: str) -> int:
    """GPUs that ``PRESET:1`` counts: a node (8) or, for a rack-scale preset, a tray (4)."""
    key = str(name).strip().lower()
    if key in RACKS:
        return RACKS[key][1]
    if key in PLANED:
        key = PLANED[key][0]
    if key not in NODE_PRESETS:
        raise SpecError("cluster", name, f"unknown preset; known: {', '.join(preset_names())}")
    return NODE_PRESETS[key][1]


def default_trays_per_rack(name: str, trays: int) -> int | None:
    """Trays per rack when ``trays`` trays of rack-scale preset ``name`` fill the fewest racks
    (``ceil(trays / trays-per-rack)``) with equal tray counts; None where those racks cannot
    hold equal counts (256 trays over 15 racks)."""
    per_rack = RACKS[str(name).strip().lower()][2]
    racks = -(-trays // per_rack)
    return None if trays % racks else trays // racks


def rack_preset_name(name: str, trays: int, trays_per_rack: int) -> str:
    """The ``--cluster`` text of ``trays`` trays of rack-scale preset ``name`` in racks of
    ``trays_per_rack``: ``PRESET:N`` where the default split gives those racks, else
    ``PRESET:NxT``."""
    key = str(name).strip().lower()
    if default_trays_per_rack(key, trays) == trays_per_rack:
        return f"{key}:{trays}"
    return f"{key}:{trays}x{trays_per_rack}"
