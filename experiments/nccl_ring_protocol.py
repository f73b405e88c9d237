"""Which latency a ring step pays: NCCL's protocol choice for the flat ring, its tuning
constants per protocol, the public small-message measurements, and the presets (an analysis;
docs/calibration.md §5.229; the model is not changed).

NCCL times every enabled (algorithm, protocol) pair as ``latency + nBytes/bandwidth`` and
runs the cheapest (NVIDIA/nccl ``src/graph/tuning.cc`` ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``, read at tag v2.27.7-1; the tables are the same at v2.18.3-1 but for
the PPN-1 rule). For the ring (``RING``) of ``n`` ranks on ``nodes`` nodes:

    latency   = baseLat[p] + (nsteps - nInter)·max(intraLat[p], netOverhead[p]) + nInter·interLat[p]
    nsteps    = n - 1 (all-gather, reduce-scatter), 2(n - 1) (all-reduce)
    nInter    = nodes - 1, 2(nodes - 1)
    netOverhead = 1 us on Intel hosts (2 on AMD), x3 for Simple, only with nodes > 1
    busBw     = nChannels·bw; LL: min(llMaxBw, busBw/2) (llMaxBw 141 / 282 GB/s on one Hopper /
                Blackwell node, 39 / 20.4 GB/s across 2 / more nodes of Intel hosts); LL128: min(0.92·busBw, nChannels·36.7 GB/s
                (Hopper; 73.4 Blackwell)); algBw = busBw·n/nsteps
    Simple all-reduce across nodes: latency x1.4 (Ampere on; x1.9 before) past 64 B a channel and rank

with ``baseLat`` (LL, LL128, Simple) = 6.6, 14.0, 8.4 us and ``hwLat`` NVLink 0.6, 1.9, 3.4 us,
NET 2.7, 4.0, 14.0 us. LL128 is enabled by default on Hopper and Blackwell up to PXN
(``ncclParamLl128C2c``) and on Ampere up to PXB: DGX A100/H100/B200 nodes, whose GPUs reach
their NIC through one PCIe switch, run it between nodes.

Printed: (1) per protocol and size, NCCL's time and choice for the reduce-scatter over the
groups the reference rows' small-message questions are about, next to the presets' ring
latency (``(n - nodes)·2 us + (nodes - 1)·5 us`` per pass, rail-aligned); (2) the public
nccl-tests small-message measurements against NCCL's LL latency and the presets.

Run:
    python experiments/nccl_ring_protocol.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topologies.cluster.preset_table import INTER_LATENCY_S, INTRA_LATENCY_S  # noqa: E402

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}          # baseLat, Ring
NVLINK_LAT_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}         # hwLat[NVLINK], Ring
NET_LAT_US = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}           # hwLat[NET], Ring
NET_LAT_PPN1_US = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}      # hwLat[NET], Tree (PPN 1, 2.27)
NET_OVERHEAD_US = 1.0                                            # getNetOverhead, Intel host
LL_MAX_BW_NODE = {"ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}  # llMaxBws[arch][0]
LL_MAX_BW_NET = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}  # llMaxBws[cpu][1 | 2], GB/s
LL128_CH_BW = {"ampere": 20.0, "hopper": 36.7, "blackwell": 73.4}                # perChMaxRingLL128Bws, GB/s


def steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    """(nsteps, nInterSteps) of NCCL's ring for ``kind``."""
    p = 2 if kind == "allreduce" else 1
    return p * (n - 1), (0 if nodes == 1 else p * (nodes - 1))


def ring_latency_us(kind: str, proto: str, n: int, nodes: int) -> float:
    """NCCL's modelled ring latency (us) for one call, ``proto`` in ``PROTOCOLS``."""
    nsteps, ninter = steps(kind, n, nodes)
    intra = NVLINK_LAT_US[proto]
    if nodes > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
    inter = (NET_LAT_PPN1_US if n == nodes else NET_LAT_US)[proto]
    return BASE_LAT_US[proto] + (nsteps - ninter) * intra + ninter * inter


def ll_max_bw(nodes: int, arch: str, cpu: str = "intel") -> float:
    """``llMaxBw`` (GB/s): by GPU on one node, by host CPU and node count (2, more) across."""
    if nodes == 1:
        return LL_MAX_BW_NODE[arch]
    return LL_MAX_BW_NET[cpu][0 if nodes == 2 else 1]


def ring_time_us(kind: str, proto: str, nbytes: float, n: int, nodes: int, bus_gbs: float,
                 channels: int, arch: str = "hopper", cpu: str = "intel") -> float:
    """NCCL's modelled time (us) of one ring call of ``nbytes`` at ``bus_gbs`` GB/s
    (``nChannels·bw``, the Simple bus bandwidth) over ``channels`` channels."""
    bus = bus_gbs
    if proto == "LL":
        bus = min(ll_max_bw(nodes, arch, cpu), bus * 0.5)
    elif proto == "LL128":
        bus = min(bus * 0.92, channels * LL128_CH_BW[arch])
    nsteps, _ = steps(kind, n, nodes)
    lat = ring_latency_us(kind, proto, n, nodes)
    if (proto == "Simple" and kind == "allreduce" and nodes > 1
            and nbytes / (channels * n) >= 64):
        lat *= 1.4
    return lat + nbytes / (1000.0 * bus * n / nsteps)


def choice(kind: str, nbytes: float, n: int, nodes: int, bus_gbs: float, channels: int,
           arch: str = "hopper") -> str:
    """The protocol NCCL's model runs the ring call with (the least modelled time)."""
    return min(PROTOCOLS, key=lambda p: ring_time_us(kind, p, nbytes, n, nodes, bus_gbs,
                                                      channels, arch))


def preset_latency_us(kind: str, n: int, nodes: int) -> float:
    """The presets' ring latency (us): ``passes·((n - nodes)·intra + (nodes - 1)·inter)``,
    rail-aligned (no relay), as ``ring.striped_time`` charges it."""
    p = 2 if kind == "allreduce" else 1
    return p * ((n - nodes) * INTRA_LATENCY_S + (nodes - 1) * INTER_LATENCY_S) * 1e6


# (source, what, n, nodes, kind, measured us); each a public nccl-tests line at a small size,
# where NCCL runs LL (nccl-tests #123: NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1, one channel)
ONE_CHANNEL = "DGX A100, ring forced, 1 channel, 8-128 B"
MEASURED = (
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 2, 1, "allreduce", 10.0),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 3, 1, "allreduce", 13.76),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 4, 1, "allreduce", 16.88),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 5, 1, "allreduce", 20.8),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 6, 1, "allreduce", 25.2),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 7, 1, "allreduce", 29.5),
    ("NVIDIA/nccl-tests#123", ONE_CHANNEL, 8, 1, "allreduce", 33.7),
    ("NVIDIA/nccl#583", "2 A100 SXM4 in a node, 32 B", 2, 1, "allreduce", 10.14),
    ("NVIDIA/nccl-tests#150", "2 A100 nodes x 1 GPU, HDR IB, 8 B", 2, 2, "allreduce", 19.90),
    ("NVIDIA/nccl#812", "2 DGX A100, RoCE, NCCL_ALGO=Ring, 8 B", 16, 2, "allreduce", 93.12),
    ("mscclpp NDmv4 (§5.49)", "2 x 8 A100, HDR IB, 1 KiB", 16, 2, "allgather", 33.74),
)


def slope_intercept(points) -> tuple[float, float]:
    """Least-squares line ``t = a + b·x`` through ``(x, t)`` points: (a, b)."""
    xs, ts = [float(x) for x, _ in points], [float(t) for _, t in points]
    m = len(xs)
    mx, mt = sum(xs) / m, sum(ts) / m
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    return mt - b * mx, b


CASES = (   # (row or shape, n, nodes, arch, Simple busBw GB/s, channels)
    ("UF B200 x 256 (dp·cp 256 over 32 nodes)", 256, 32, "blackwell", 360.0, 16),
    ("UF B200 x 32 (dp·cp 32 over 4 nodes)", 32, 4, "blackwell", 360.0, 16),
    ("megatron_core_h100_weak_1.7B (dp 48 over 6 nodes)", 48, 6, "hopper", 360.0, 16),
    ("one DGX H100 (8 ranks)", 8, 1, "hopper", 360.0, 16),
)
SIZES = (2 ** 10, 2 ** 20, 2 ** 24, 2 ** 26, 2 ** 28, 2 ** 30)


def main() -> None:
    print("## NCCL's ring protocol choice for one reduce-scatter (tuning.cc v2.27.7-1), us\n")
    print("| group | S | LL | LL128 | Simple | NCCL runs | its latency | presets' latency |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n, nodes, arch, bus, ch in CASES:
        for S in SIZES:
            t = {p: ring_time_us("reducescatter", p, S, n, nodes, bus, ch, arch)
                 for p in PROTOCOLS}
            c = choice("reducescatter", S, n, nodes, bus, ch, arch)
            size = f"{S / 2**20:g} MiB" if S >= 2 ** 20 else f"{S / 2**10:g} KiB"
            print(f"| {name} | {size} | {t['LL']:.0f} | {t['LL128']:.0f} | "
                  f"{t['Simple']:.0f} | {c} | "
                  f"{ring_latency_us('reducescatter', c, n, nodes):.1f} | "
                  f"{preset_latency_us('reducescatter', n, nodes):.1f} |")
    print()
    print("## Public small-message measurements (nccl-tests), us\n")
    print("| source | setup | n | nodes | measured | NCCL LL model | presets |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for src, what, n, nodes, kind, us in MEASURED:
        print(f"| {src} | {what} | {n} | {nodes} | {us:.2f} | "
              f"{ring_latency_us(kind, 'LL', n, nodes):.1f} | "
              f"{preset_latency_us(kind, n, nodes):.1f} |")
    a, b = slope_intercept([(2 * (n - 1), us) for src, _, n, _, _, us in MEASURED
                            if src == "NVIDIA/nccl-tests#123"])
    print(f"\nnccl-tests#123 (one channel, DGX A100): {b:.2f} us a ring step, {a:.2f} us a "
          f"call (least squares over the 7 points above; NCCL's LL model: 0.6 us a step, "
          f"6.6 a call; the presets: {INTRA_LATENCY_S * 1e6:g} us a step, none a call)")


if __name__ == "__main__":
    main()
