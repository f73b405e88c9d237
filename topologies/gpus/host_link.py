"""The link between a GPU and its host CPU's memory: bytes/s one GPU moves in one direction
(device to host, or host to device) when every GPU of the node copies at once. Read by the
activation-offload time model (``strategies.cost.offload``) through ``GPU.host_link_bandwidth``;
the catalog (``topologies.gpus.catalog``) sets each part's from ``HOST_LINK`` here (one place).

PCI Express x16 rates per direction, after the 128b/130b line code of generations 3 to 5
(PCI-SIG, PCI Express Base Specification 3.0/4.0/5.0: 8, 16 and 32 GT/s per lane):
``lanes · GT/s · 128/130 / 8`` bytes/s, 15.75, 31.5 and 63.0 GB/s. TLP headers and DMA set-up
take a further few per cent that is not modelled (the figure is the link's, not a measured
copy's). Which generation each part's host link runs (its datasheet's "PCIe Gen" line):
V100 SXM2 Gen3; A100 SXM4 Gen4 ("PCIe Gen4: 64 GB/s", bidirectional); H100/H800/H200 SXM and
H100 PCIe Gen5 ("PCIe Gen5: 128 GB/s"); the HGX B200/B300 boards Gen5 to the x86 host (their
hosts' CPUs run Gen5; the B300 board's Gen6 lanes go to the ConnectX-8 NICs); AMD MI300X/MI325X/
MI355X Gen5 x16 ("PCIe Gen5 x16: 128 GB/s").

NVLink-C2C (Grace superchips): 900 GB/s bidirectional per superchip (NVIDIA GB200 NVL72 and
GB300 NVL72 specifications, "NVLink-C2C 900 GB/s"; the Blackwell architecture brief: one Grace
CPU joined to two Blackwell GPUs over it), so 450 GB/s per direction, which the superchip's two
GPUs share when both copy at once (Megatron-Core's ranks offload in step): 225 GB/s per GPU
per direction. A GH200 (one GPU per Grace) would have the 450 alone; it is not in the catalog.
"""
from __future__ import annotations

GB = 1e9


def pcie_x16(gt_per_s: float) -> float:
    """Bytes/s per direction of a PCI Express x16 link at ``gt_per_s`` GT/s per lane with the
    128b/130b line code (generations 3 to 5): ``16 · gt · 128/130 / 8 · 1e9``."""
    return 16 * gt_per_s * 1e9 * 128 / 130 / 8


PCIE_GEN3_X16 = pcie_x16(8.0)      # 15.75 GB/s
PCIE_GEN4_X16 = pcie_x16(16.0)     # 31.5 GB/s
PCIE_GEN5_X16 = pcie_x16(32.0)     # 63.0 GB/s
#: NVLink-C2C, 900 GB/s bidirectional per Grace superchip, per direction
C2C_PER_DIRECTION = 900 * GB / 2
#: GPUs a Grace CPU's NVLink-C2C serves on a GB200/GB300 superchip
GPUS_PER_GRACE = 2

#: the catalog's parts (``GPU.name``) -> bytes/s per GPU per direction to host memory
HOST_LINK: dict[str, float] = {
    "V100-SXM2-32GB": PCIE_GEN3_X16,
    "A100-SXM4-40GB": PCIE_GEN4_X16,
    "A100-SXM4-80GB": PCIE_GEN4_X16,
    "H100-SXM5-80GB": PCIE_GEN5_X16,
    "H800-SXM5-80GB": PCIE_GEN5_X16,
    "H100-PCIe-80GB": PCIE_GEN5_X16,
    "H100-96GB-500W": PCIE_GEN5_X16,
    "H200-SXM-141GB": PCIE_GEN5_X16,
    "B200-SXM-180GB": PCIE_GEN5_X16,
    "B300-SXM-288GB": PCIE_GEN5_X16,
    "GB200": C2C_PER_DIRECTION / GPUS_PER_GRACE,
    "GB300": C2C_PER_DIRECTION / GPUS_PER_GRACE,
    "MI300X": PCIE_GEN5_X16,
    "MI325X": PCIE_GEN5_X16,
    "MI355X": PCIE_GEN5_X16,
}
