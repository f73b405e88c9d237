#!/usr/bin/env python
"""The model's expert-parallel all-to-all beside DeepEP's published measurements.

Run (under a second, analytic only):

    python experiments/a2a_measured.py            # Markdown table on stdout

For every published case, the model's time for one dispatch (or combine) alone on its links,
``strategies.cost.comm.collective_time("alltoall", ...)`` (the function the estimate reads;
the simulator runs the same phases, ``strategies.collectives.all_to_all``), with the bytes
and the node share of ``strategies.cost.counts.ep_dedup`` for DeepEP's deduplicating kernels
(dispatcher code 1), beside the time the publication implies: its "logical" bytes divided by
its bandwidth. DeepEP's tests count (deepseek-ai/DeepEP at ebfe47e, ``tests/test_intranode.py``
and ``tests/test_internode.py``; at dd758ca, ``tests/elastic/test_ep.py``):

* intranode (NVLink): the bytes a rank receives, one copy per (token, destination rank), its
  own share included, ``recv_x.numel()``;
* internode (RDMA): the bytes a rank sends, one copy per (token, destination node), its own
  node included, ``num_rdma_token_sent · hidden``;

in FP8 with one FP32 scale per 128 values (``fp8_factor = (1 + 4/128)/2`` of BF16) for the
dispatch, BF16 for the combine. Routing is uniform over the experts (random scores), on
``min(nodes, 4)`` of the nodes (groups = nodes) in the internode test. The expectation of those
counts under uniform routing is ``counts.expert_hit_probability``'s, the one the model uses.

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

Not compared: DeepEP's low-latency kernels (pure RDMA, 128 tokens, per-expert copies: inference
decoding, not what the training rows run).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm, counts  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

FP8_FACTOR = 1 + 4 / 128        # bytes per value of DeepEP's FP8 tokens with their scales
BF16 = 2.0
LEGACY = "DeepEP V1, docs/legacy.md (H800)"
V2 = "DeepEP V2, README (SM100)"


@dataclass(frozen=True)
class Case:
    """One published bandwidth: ``source``, ``op`` (dispatch / combine), cluster ``preset``
    and ``ep`` ranks (8 per node), ``tokens`` per rank, ``hidden``, ``topk`` of ``experts``,
    bytes per value ``bpe``, ``gbps`` (logical GB/s over ``link``)."""
    source: str
    op: str
    preset: str
    ep: int
    tokens: int
    hidden: int
    topk: int
    experts: int
    bpe: float
    gbps: float
    link: str


CASES = (
    Case(LEGACY, "dispatch", "hgx-h800", 8, 4096, 7168, 8, 256, FP8_FACTOR, 153, "NVLink"),
    Case(LEGACY, "combine", "hgx-h800", 8, 4096, 7168, 8, 256, BF16, 158, "NVLink"),
    Case(LEGACY, "dispatch", "hgx-h800", 16, 4096, 7168, 8, 256, FP8_FACTOR, 43, "RDMA"),
    Case(LEGACY, "combine", "hgx-h800", 16, 4096, 7168, 8, 256, BF16, 43, "RDMA"),
    Case(LEGACY, "dispatch", "hgx-h800", 32, 4096, 7168, 8, 256, FP8_FACTOR, 58, "RDMA"),
    Case(LEGACY, "combine", "hgx-h800", 32, 4096, 7168, 8, 256, BF16, 57, "RDMA"),
    Case(LEGACY, "dispatch", "hgx-h800", 64, 4096, 7168, 8, 256, FP8_FACTOR, 51, "RDMA"),
    Case(LEGACY, "combine", "hgx-h800", 64, 4096, 7168, 8, 256, BF16, 50, "RDMA"),
    Case(V2, "dispatch", "dgx-b200", 8, 8192, 7168, 8, 256, FP8_FACTOR, 726, "NVLink"),
    Case(V2, "combine", "dgx-b200", 8, 8192, 7168, 8, 256, BF16, 740, "NVLink"),
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


def price(c: Case, gpus_per_node: int = 8) -> Row:
    """The model's time of case ``c`` and the published one (module docstring)."""
    nodes = max(1, c.ep // gpus_per_node)
    groups = nodes if nodes > 1 else None          # DeepEP's test: groups = nodes
    m = replace(model_preset("deepseek-v3"), hidden_size=c.hidden, num_experts=c.experts,
                moe_router_topk=c.topk, moe_router_num_groups=groups,
                moe_router_group_topk=min(nodes, 4) if groups else None)
    cl = cluster_preset(c.preset, nodes)
    byte_scale, remote = (float(x) for x in counts.ep_dedup(m, c.ep, 1, gpus_per_node, 1))
    nbytes = c.tokens * c.hidden * c.bpe * c.topk * byte_scale     # per rank, one per dest rank
    t = float(comm.collective_time("alltoall", nbytes, c.ep, 1, cl, remote))
    if nodes == 1:
        logical = nbytes
    else:
        p_node = float(counts.expert_hit_probability(c.experts, c.topk, nodes, groups,
                                                     min(nodes, 4)))
        logical = c.tokens * nodes * p_node * c.hidden * c.bpe
    # which port is busier (all_to_all.two_level_time's two terms, latency aside)
    k = min(c.ep, gpus_per_node)
    b_in = cl.intra_node_bandwidth * comm.NVLINK_EFFICIENCY
    t_in = (k - 1) * nodes * nbytes / (c.ep * b_in)
    t_out = (c.ep - k) * remote * nbytes / (c.ep * float(comm._nic_rate(cl)))
    return Row(c, t, logical / (c.gbps * 1e9), logical / t / 1e9,
               "NVLink" if t_in >= t_out else "NIC")


def rows() -> list[Row]:
    return [price(c) for c in CASES]


def main() -> None:
    print("| source | op | cluster | EP | published GB/s | model GB/s | published us | model us "
          "| model / published time | model's busier port |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows():
        c = r.case
        print(f"| {c.source} | {c.op} | {c.preset} | {c.ep} | {c.gbps:g} ({c.link}) | "
              f"{r.model_gbps:.1f} | {r.published_s * 1e6:.0f} | {r.model_s * 1e6:.0f} | "
              f"{r.ratio:.2f} | {r.bound} |")


if __name__ == "__main__":
    main()
