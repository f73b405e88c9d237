#!/usr/bin/env python
"""The model's NCCL all-to-all across nodes beside the public nccl-tests measurements found.

Run (under a second, analytic only):

    python experiments/nccl_alltoall_measured.py       # Markdown tables on stdout

For every public ``alltoall_perf`` figure whose setup the source states in text, the model's
time of one all-to-all of ``size`` bytes per rank alone on its links,
``strategies.cost.comm.collective_time("alltoall", ...)`` (what the estimate, the lower bound
and, through ``strategies.collectives.all_to_all``, the simulator read), beside the measured
time. nccl-tests (``src/alltoall.cu``, ``AlltoAllGetBw``) reports ``algbw = size/time`` and
``busbw = algbw·(n-1)/n``; a figure given as a bandwidth is turned into a time that way.

The closed form the model prices across nodes is the one NCCL's maintainers give: an
all-to-all over ``N`` nodes is bound by each GPU's own NIC (NCCL's all-to-all "cannot
aggregate the bandwidth of multiple NICs", S. Jeaugey, NVIDIA/nccl-tests issue #267,
2024-11-19) and its algorithm bandwidth tends to ``N/(N-1)`` times the NIC's per-GPU rate
(the ``(N-1)/N`` of each rank's bytes that leave the node; nccl-tests issue #130,
2023-02-03); an NDR CX-7 NIC "should achieve up to 48-49 GB/s" (issue #267) or "46-48 GB/s"
(issue #290, 2025-03-03), and the model's ``NETWORK_EFFICIENCY`` × 50 GB/s is 45.
``maintainers_algbw`` is that formula; the tests hold the model's closed form to it.

Sources (the issue text as stored; figures given only as images are not used):

* ``deepep3``: deepseek-ai/DeepEP issue #3 (YangZhou1997, 2025-02-25): two DGX-H100 nodes,
  one 400 Gb/s NIC per GPU, "standard nccl-tests alltoall with NVLink disabled to stress test
  the network": 46 GB/s busbw (the message size of that figure is in an image, not stated),
  CC and adaptive routing on. With NVLink off every pair crosses a NIC: priced as 16 ranks
  one per node (``dgx-h100``), whose busbw is the model's per-GPU NIC rate.
* ``ndmv4``: microsoft/mscclpp ``docs/performance-ndmv4.md`` (at 7f3f366): Azure NDm A100 v4
  (8 × A100-80GB on NVSwitch, 8 × 200 Gb/s HDR InfiniBand, one per GPU: the ``dgx-a100``
  preset), NCCL 2.17.1, nccl-tests in-place numbers: all-to-all busbw 37.80 GB/s at 1G and
  37.81 at 4G over 2 nodes × 8 GPUs, 15.48 at 1G over 2 nodes × 1 GPU (NCCL's all-gather on
  that same 2 × 1 setup: 15.84); 1K latency 49.75 µs (2 × 8) and 29.84 µs (2 × 1), NCCL's
  all-gather 33.74 and 16.08 µs.
* ``nccl1531``: NVIDIA/nccl issue #1531 (fj1425fj, 2024-12-05): 8 nodes × 8 H800, 64 ranks,
  ``alltoall_perf -b 8M -e 16G -f 2 -g 1``; the 8 MiB line: out-of-place 337.8 µs (algbw
  24.83 GB/s), in-place 295.6 µs (28.38). The issue's text does not state the NICs; priced on
  ``hgx-h800`` (one 400 Gb/s NIC per GPU, DeepSeek's H800 nodes). Its larger sizes (where
  the reporter sees "a bandwidth drop when the data size was 1G") are not in the stored text.

Looked at, no usable figure: NVIDIA/nccl-tests issue #267 (six H100 nodes, 8 × 400 Gb/s
RoCE: the all-to-all tables are images; NVIDIA: "All numbers look good"), NVIDIA/nccl issue
#1792 (16 H20 nodes, "busbw is only 20+GB", NICs and sizes not stated; NVIDIA: "not the
expected behavior"), NVIDIA/nccl issue #2169 (4 H100 in one node: NVLink only),
nccl-tests issue #78 (V100, 100 Gb/s), deepseek-ai/DeepEP issue #59 (8 H100 nodes, NCCL
dispatch 13 ms in a Megatron profile; the bytes are not stated), Azure/AI-benchmarking-guide
(no all-to-all), the DeepEP and HybridEP READMEs (their own kernels, §5.27).

The second table gives the per-peer message (``size/n``) of the measurements beside that of
the training rows the lead came from (docs/calibration.md §5.47): the only measurement above
the model's time has per-peer messages of 128 KiB (= NCCL_P2P_NET_CHUNKSIZE's default),
the rows' are 3.1-3.7 MB.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm  # noqa: E402
from strategies.cost.comm.links import nic_rate  # noqa: E402
from topologies.cluster import Cluster, cluster_preset  # noqa: E402


@dataclass(frozen=True)
class Measured:
    """One public ``alltoall_perf`` figure: ``key``, ``source``, cluster ``preset`` with
    ``nodes`` nodes, ``ranks`` in all, ``stride`` between them in the model's rank order (1:
    every GPU; ``gpus_per_node``: one rank per node), ``size`` bytes per rank (0: not stated,
    priced at 1 GiB), and ``time_us`` or, when only a bandwidth is given, ``busbw`` GB/s;
    ``kind``: the collective (an all-gather on the same link for comparison)."""
    key: str
    source: str
    preset: str
    nodes: int
    ranks: int
    stride: int
    size: int
    time_us: float = 0.0
    busbw: float = 0.0
    note: str = ""
    kind: str = "alltoall"


MEASURED = (
    Measured("ndmv4_2x8_1G", "microsoft/mscclpp performance-ndmv4.md, NDm A100 v4 2 x 8, 1G",
             "dgx-a100", 2, 16, 1, 1 << 30, busbw=37.80, note="NCCL 2.17.1, in-place"),
    Measured("ndmv4_2x8_4G", "microsoft/mscclpp performance-ndmv4.md, NDm A100 v4 2 x 8, 4G",
             "dgx-a100", 2, 16, 1, 4 << 30, busbw=37.81, note="NCCL 2.17.1, in-place"),
    Measured("ndmv4_2x1_1G", "microsoft/mscclpp performance-ndmv4.md, NDm A100 v4 2 x 1, 1G",
             "dgx-a100", 2, 2, 8, 1 << 30, busbw=15.48,
             note="one GPU per node; NCCL's all-gather there: 15.84 (0.70 of the model)"),
    Measured("ndmv4_2x1_1G_allgather",
             "microsoft/mscclpp performance-ndmv4.md, NDm A100 v4 2 x 1, 1G, all-gather",
             "dgx-a100", 2, 2, 8, 1 << 30, busbw=15.84, kind="allgather",
             note="the same link under a ring collective"),
    Measured("deepep3", "deepseek-ai/DeepEP#3 (2025-02-25), 2 DGX-H100, NVLink disabled",
             "dgx-h100", 16, 16, 8, 0, busbw=46.0,
             note="every pair over a 400 Gb/s NIC; size not stated (peak)"),
    Measured("nccl1531_oop", "NVIDIA/nccl#1531 (2024-12-05), 8 x 8 H800, out-of-place",
             "hgx-h800", 8, 64, 1, 8388608, time_us=337.8, note="NICs not stated"),
    Measured("nccl1531_ip", "NVIDIA/nccl#1531 (2024-12-05), 8 x 8 H800, in-place",
             "hgx-h800", 8, 64, 1, 8388608, time_us=295.6, note="NICs not stated"),
)

#: small-message times (µs): (key, source, preset, nodes, ranks, stride, size, measured µs, kind)
LATENCY = (
    Measured("ndmv4_2x8_1K", "mscclpp performance-ndmv4.md, 2 x 8, 1K, all-to-all", "dgx-a100",
             2, 16, 1, 1024, time_us=49.75),
    Measured("ndmv4_2x1_1K", "mscclpp performance-ndmv4.md, 2 x 1, 1K, all-to-all", "dgx-a100",
             2, 2, 8, 1024, time_us=29.84),
    Measured("ndmv4_2x8_1K_ag", "mscclpp performance-ndmv4.md, 2 x 8, 1K, all-gather",
             "dgx-a100", 2, 16, 1, 1024, time_us=33.74, kind="allgather"),
    Measured("ndmv4_2x1_1K_ag", "mscclpp performance-ndmv4.md, 2 x 1, 1K, all-gather",
             "dgx-a100", 2, 2, 8, 1024, time_us=16.08, kind="allgather"),
    Measured("deepep3_small", "DeepEP#3, 2 DGX-H100, NVLink disabled, small message",
             "dgx-h100", 16, 16, 8, 1024, time_us=30.0, note="size not stated: priced at 1 KiB"),
)

#: the size a figure stated without one is priced at (large: the latency term negligible)
UNSTATED_SIZE = 1 << 30


@dataclass(frozen=True)
class TrainingA2A:
    """The expert all-to-all of a training row (docs/calibration.md §5.47's lead): ``tokens``
    per rank (``seq/(cp·tp)``, sequence parallel), ``topk``, ``hidden``, 16-bit, over ``ep``
    ranks ``stride`` apart on ``preset``."""
    row: str
    tokens: int
    topk: int
    hidden: int
    ep: int
    stride: int
    preset: str = "dgx-h100"

    @property
    def size(self) -> int:
        return 2 * self.tokens * self.topk * self.hidden


TRAINING = (
    # seq 8192, tp 4, cp 2, ep 8 (dgx-benchmarking v25.05.05 grok1 README, dgxc_2505.json)
    TrainingA2A("dgxc2505_grok1_314b_h100_512_bf16", 8192 // (2 * 4), 2, 6144, 8, 8),
    # seq 4096, tp 2, ep 64 (deepseek_v3 README, dgxc_2505.json)
    TrainingA2A("dgxc2505_deepseek_v3_671b_h100_512_bf16", 4096 // 2, 8, 7168, 64, 2),
)


def cluster_of(m: Measured) -> Cluster:
    return cluster_preset(m.preset, m.nodes)


def measured_time(m: Measured) -> float:
    """Seconds of the measurement: its time, or ``size/algbw`` with ``algbw = busbw·n/(n-1)``
    (nccl-tests' ``AlltoAllGetBw``)."""
    if m.time_us:
        return m.time_us * 1e-6
    algbw = m.busbw * 1e9 * m.ranks / (m.ranks - 1)
    return (m.size or UNSTATED_SIZE) / algbw


def model_time(m: Measured) -> float:
    """Seconds of the model's all-to-all of the measurement's setup (``comm.collective_time``)."""
    return float(comm.collective_time(m.kind, m.size or UNSTATED_SIZE, m.ranks, m.stride,
                                      cluster_of(m)))


def busbw(size: float, n: int, t: float) -> float:
    """nccl-tests' busbw, GB/s, of an all-to-all of ``size`` bytes per rank over ``n`` ranks in
    ``t`` s."""
    return size / t * (n - 1) / n / 1e9


def maintainers_algbw(cluster: Cluster, nodes: int) -> float:
    """NCCL's maintainers' large-message algorithm bandwidth of an all-to-all over ``nodes``
    nodes, bytes/s: ``N/(N-1)`` times one GPU's NIC rate (nccl-tests issue #130), at the
    model's achievable NIC rate (``nic_rate``)."""
    return nodes / (nodes - 1) * float(nic_rate(cluster))


def latency_gap() -> float:
    """Seconds by which NCCL's measured 1 KiB all-to-all over 2 × 8 A100 (NDm A100 v4) exceeds
    the model's: the most the all-to-all's fixed time could add per call on these fabrics."""
    m = LATENCY[0]
    return measured_time(m) - model_time(m)


def main() -> None:
    print("| measurement | ranks | size/rank | per-peer | measured us | model us "
          "| model / measured time | measured busbw | model busbw | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in MEASURED:
        size = m.size or UNSTATED_SIZE
        tm, tp = measured_time(m), model_time(m)
        print(f"| {m.source} | {m.ranks} | {size / 2**20:g} MiB{'' if m.size else ' (*)'} "
              f"| {size / m.ranks / 2**10:g} KiB | {tm * 1e6:.1f} | {tp * 1e6:.1f} "
              f"| {tp / tm:.2f} | {busbw(size, m.ranks, tm):.2f} "
              f"| {busbw(size, m.ranks, tp):.2f} | {m.note} |")
    print("\n(*) size not stated: priced at 1 GiB, where the latency term is negligible.\n")
    print("| small message | kind | ranks | measured us | model us | measured - model us | note |")
    print("|---|---|---|---|---|---|---|")
    for m in LATENCY:
        tm, tp = measured_time(m), model_time(m)
        print(f"| {m.source} | {m.kind} | {m.ranks} | {tm * 1e6:.2f} | {tp * 1e6:.2f} "
              f"| {(tm - tp) * 1e6:.2f} | {m.note} |")
    gap = latency_gap()
    print(f"\nNCCL all-to-all's small-message time over the model's, 2 x 8 NDm A100 v4: "
          f"{gap * 1e6:.2f} us per call.\n")
    print("| training row (§5.47 lead) | EP | stride | size/rank | per-peer | model us "
          "| that gap / model time |")
    print("|---|---|---|---|---|---|---|")
    for r in TRAINING:
        nodes = max(1, r.ep * r.stride // 8)
        t = float(comm.collective_time("alltoall", r.size, r.ep, r.stride,
                                       cluster_preset(r.preset, nodes)))
        print(f"| {r.row} | {r.ep} | {r.stride} | {r.size / 1e6:.1f} MB "
              f"| {r.size / r.ep / 1e6:.2f} MB | {t * 1e6:.0f} | {gap / t:.3f} |")


if __name__ == "__main__":
    main()
