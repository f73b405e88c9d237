#!/usr/bin/env python
"""The model's expert-parallel all-to-all beside DeepEP's and HybridEP's published measurements.

Run (under a second, analytic only):

    python experiments/a2a_measured.py            # Markdown table on stdout

For every published case, the model's time for one dispatch (or combine) alone on its links,
``strategies.cost.comm.collective_time("alltoall", ...)`` (the function the estimate reads;
the simulator runs the same phases, ``strategies.collectives.all_to_all``), with the bytes
and the node share of ``strategies.cost.ep_dispatch.ep_dedup`` for DeepEP's deduplicating kernels
(dispatcher code 1) and their share of NVLink's rate (``ep_dispatch.ep_nvlink_share``; a second
column at NCCL's rate, share 1, the model before docs/calibration.md §5.27), beside the time
the publication implies: its "logical" bytes divided by its bandwidth. The last line prints
the BF16 NVLink-bound ratios at share 1 whose median ``ep_dispatch.EP_KERNEL_NVLINK_SHARE`` is.
DeepEP's tests count (deepseek-ai/DeepEP at ebfe47e, ``tests/test_intranode.py`` and
``tests/test_internode.py``; at dd758ca, ``tests/elastic/test_ep.py``):

* intranode (NVLink): the bytes a rank receives, one copy per (token, destination rank), its
  own share included, ``recv_x.numel()``;
* internode (RDMA): the bytes a rank sends, one copy per (token, destination node), its own
  node included, ``num_rdma_token_sent · hidden``;

in FP8 with one FP32 scale per 128 values (``fp8_factor = (1 + 4/128)/2`` of BF16) for the
dispatch, BF16 for the combine. Routing is uniform over the experts (random scores), on
``min(nodes, 4)`` of the nodes (groups = nodes) in the internode test. The expectation of those
counts under uniform routing is ``ep_dispatch.expert_hit_probability``'s, the one the model uses.

Sources:

* DeepEP V1 (deepseek-ai/DeepEP ``docs/legacy.md``, the README of its first release, commit
  ebfe47e, 24 Feb 2025): normal kernels on H800 (NVLink ~160 GB/s, CX7 400 Gb/s ~50 GB/s),
  4096 tokens per rank, hidden 7168, top-4 groups, top-8 of 256 experts, FP8 dispatch, BF16
  combine: intranode EP8 153 / 158 GB/s (NVLink), internode EP16 43 / 43, EP32 58 / 57, EP64
  51 / 50 GB/s (RDMA). Cluster ``hgx-h800`` (DeepSeek-V3's: 8 GPUs, NVLink 200 GB/s per
  direction, one 400 Gb/s NIC per GPU).
* DeepEP V2 (README at dd758ca, 2026): SM100, EP8 in one node, 8K tokens, hidden 7168, top-8,
  FP8 dispatch, BF16 combine, 64 SMs: 726 / 740 GB/s (NVLink). Cluster ``dgx-b200`` (NVLink 5,
  900 GB/s per direction). V2's SM90 rows (EP 8x2, 8x4 on CX7) do not say which GPU, and are
  left out.

* HybridEP (DeepEP branch ``hybrid-ep`` at 94a9f8f, ``docs/README_Hybrid-EP.md``, tables of
  commit 7febc6e, February 2026; its ``tests/test_hybrid_ep.py`` counts bytes as DeepEP does,
  ``tests/utils.py`` ``count_rdma_send_from_routing_map`` keeping the local node "to align
  with the implementation in the DeepEP"): 4096 tokens per rank, hidden 7168, top-8 of 8
  local experts per rank, uniform random routing (no group limit), "kernel only" times at the
  largest SM count each table gives: H100 EP16/32/64 (16 SMs; IB GB/s; cluster ``dgx-h100``),
  B200 EP8 (16 SMs; NVLink; ``dgx-b200``), GB200 EP8 and EP36 in one NVL72 rack (32 SMs;
  ``gb200-nvl72``). The same tables' "Torch API" times (the call as a framework makes it: the
  kernel, a device-to-device copy out of the buffer, a device synchronisation) are 0.6-0.8 of
  the kernel-only bandwidth; the training rows' dispatcher pays those through the Python call
  (priced elsewhere: ``moe_bytes.moe_permute_bytes``, ``MOE_SYNCS_FWD``), so the comparison here
  is of the kernel with the links.

Not compared: DeepEP's low-latency kernels (pure RDMA, 128 tokens, per-expert copies: inference
decoding, not what the training rows run).
"""
from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm, ep_dispatch, moe_bytes, token_counts  # noqa: E402
from strategies.cost.comm.links import nic_rate  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

# bytes per value of DeepEP's FP8 tokens with their scales: the model's FP8 dispatch rule
FP8_FACTOR = moe_bytes.dispatch_element_bytes(True, "fp8-blockwise")
BF16 = float(token_counts.ACT_BYTES)
LEGACY = "DeepEP V1, docs/legacy.md (H800)"
V2 = "DeepEP V2, README (SM100)"
HYBRID_H100 = "HybridEP, H100, 16 SMs"
HYBRID_B200 = "HybridEP, B200, 16 SMs"
HYBRID_GB200 = "HybridEP, GB200, 32 SMs"
HYBRID_OPS = ("dispatch (FP8)", "dispatch (BF16)", "combine")


@dataclass(frozen=True)
class Case:
    """One published bandwidth: ``source``, ``op`` (dispatch / combine), cluster ``preset``
    (``units`` of it: nodes, or trays of a rack-scale preset) and ``ep`` ranks, ``tokens`` per
    rank, ``hidden``, ``topk`` of ``experts``, bytes per value ``bpe``, ``gbps`` (logical GB/s
    over ``link``); ``grouped``: DeepEP V1's internode test, routing to ``min(nodes, 4)``
    groups of experts, one group per node."""
    source: str
    op: str
    preset: str
    units: int
    ep: int
    tokens: int
    hidden: int
    topk: int
    experts: int
    bpe: float
    gbps: float
    link: str
    grouped: bool = False


def _deepep_v1(op: str, ep: int, gbps: float, link: str) -> Case:
    return Case(LEGACY, op, "hgx-h800", max(1, ep // 8), ep, 4096, 7168, 8, 256,
                FP8_FACTOR if op == "dispatch" else BF16, gbps, link, grouped=ep > 8)


def _hybrid(source: str, op: str, preset: str, units: int, ep: int, gbps: float,
            link: str) -> Case:
    bpe = FP8_FACTOR if op == "dispatch (FP8)" else BF16
    return Case(source, op, preset, units, ep, 4096, 7168, 8, 8 * ep, bpe, gbps, link)


CASES = (
    _deepep_v1("dispatch", 8, 153, "NVLink"), _deepep_v1("combine", 8, 158, "NVLink"),
    _deepep_v1("dispatch", 16, 43, "RDMA"), _deepep_v1("combine", 16, 43, "RDMA"),
    _deepep_v1("dispatch", 32, 58, "RDMA"), _deepep_v1("combine", 32, 57, "RDMA"),
    _deepep_v1("dispatch", 64, 51, "RDMA"), _deepep_v1("combine", 64, 50, "RDMA"),
    Case(V2, "dispatch", "dgx-b200", 1, 8, 8192, 7168, 8, 256, FP8_FACTOR, 726, "NVLink"),
    Case(V2, "combine", "dgx-b200", 1, 8, 8192, 7168, 8, 256, BF16, 740, "NVLink"),
    *(_hybrid(HYBRID_H100, op, "dgx-h100", ep // 8, ep, g, "RDMA")
      for ep, gs in ((16, (68.48, 71.71, 62.95)), (32, (55.35, 57.69, 57.46)),
                     (64, (46.52, 49.97, 49.77)))
      for op, g in zip(HYBRID_OPS, gs)),
    *(_hybrid(HYBRID_B200, op, "dgx-b200", 1, 8, g, "NVLink")
      for op, g in zip(HYBRID_OPS, (599.27, 734.95, 673.84))),
    *(_hybrid(HYBRID_GB200, op, "gb200-nvl72", ep // 4, ep, g, "NVLink")
      for ep, gs in ((8, (713.98, 764.03, 737.13)), (36, (489.27, 632.31, 596.99)))
      for op, g in zip(HYBRID_OPS, gs)),
)


@dataclass(frozen=True)
class Row:
    """A case priced: model and published seconds, the model's logical GB/s, which port
    bounds the model (``NVLink`` or ``NIC``)."""
    case: Case
    model_s: float
    published_s: float
    model_gbps: float
    bound: str

    @property
    def ratio(self) -> float:
        """Model time over published time (< 1: the model is faster)."""
        return self.model_s / self.published_s


def price(c: Case, nvlink_share: float | None = None) -> Row:
    """The model's time of case ``c`` and the published one (module docstring);
    ``nvlink_share``: the kernel's share of NVLink's rate (default the model's for DeepEP and
    HybridEP, ``ep_dispatch.ep_nvlink_share``; 1: NCCL's rate, the model before §5.27)."""
    share = float(ep_dispatch.ep_nvlink_share(1)) if nvlink_share is None else nvlink_share
    cl = cluster_preset(c.preset, c.units)
    G = cl.gpus_per_node
    nodes = max(1, c.ep // G)
    groups = nodes if c.grouped else None          # DeepEP V1's internode test
    top = min(nodes, 4) if c.grouped else None
    m = replace(model_preset("deepseek-v3"), hidden_size=c.hidden, num_experts=c.experts,
                moe_router_topk=c.topk, moe_router_num_groups=groups,
                moe_router_group_topk=top)
    byte_scale, remote = (float(x) for x in ep_dispatch.ep_dedup(m, c.ep, 1, G, 1))
    nbytes = c.tokens * c.hidden * c.bpe * c.topk * byte_scale     # per rank, one per dest rank
    t = float(comm.collective_time("alltoall", nbytes, c.ep, 1, cl, remote, share))
    if nodes == 1:
        logical = nbytes
    else:
        p_node = float(ep_dispatch.expert_hit_probability(c.experts, c.topk, nodes, groups, top))
        logical = c.tokens * nodes * p_node * c.hidden * c.bpe
    # which port is busier (all_to_all.two_level_time's two terms, latency aside)
    k = min(c.ep, G)
    b_in = cl.intra_node_bandwidth * comm.NVLINK_EFFICIENCY * share
    t_in = (k - 1) * nodes * nbytes / (c.ep * b_in)
    t_out = (c.ep - k) * remote * nbytes / (c.ep * float(nic_rate(cl)))
    return Row(c, t, logical / (c.gbps * 1e9), logical / t / 1e9,
               "NVLink" if t_in >= t_out else "NIC")


def rows(nvlink_share: float | None = None) -> list[Row]:
    return [price(c, nvlink_share) for c in CASES]


def bf16_nvlink_ratios() -> list[float]:
    """Model time over published time at NCCL's NVLink rate (share 1) for the published
    NVLink-bound cases in BF16 (every combine, HybridEP's BF16 dispatch): what
    ``ep_dispatch.EP_KERNEL_NVLINK_SHARE`` is the median of."""
    return [r.ratio for r in rows(1.0)
            if r.bound == "NVLink" and r.case.bpe == BF16]


def main() -> None:
    print("| source | op | cluster | EP | published GB/s | model GB/s | published us | model us "
          "| model / published time | at NCCL's NVLink rate (before) | model's busier port |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r, r1 in zip(rows(), rows(1.0)):
        c = r.case
        print(f"| {c.source} | {c.op} | {c.preset} | {c.ep} | {c.gbps:g} ({c.link}) | "
              f"{r.model_gbps:.1f} | {r.published_s * 1e6:.0f} | {r.model_s * 1e6:.0f} | "
              f"{r.ratio:.2f} | {r1.ratio:.2f} | {r.bound} |")
    ratios = sorted(bf16_nvlink_ratios())
    print(f"\nBF16 NVLink-bound cases at share 1: model / published time "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f} "
          f"(ep_dispatch.EP_KERNEL_NVLINK_SHARE = {ep_dispatch.EP_KERNEL_NVLINK_SHARE})")


if __name__ == "__main__":
    main()
