#!/usr/bin/env python
"""The 26.06 Megatron-Bridge MoE rows that ran a full-iteration CUDA graph: what the static
shapes cost them (docs/calibration.md §5.182).

Megatron-Bridge v0.5.0 (the 26.06 container's) calls ``set_full_iter_cg_configs`` wherever a
config captures the whole step. It sets no per-expert capacity (``moe_expert_capacity_factor``
and ``moe_pad_expert_input_to_capacity`` stay unset: the harness's ``--use_tokendrop`` defaults
to None, ``scripts/performance/utils/overrides.py`` L317-323) but a per-rank budget,
``moe_expert_rank_capacity_factor`` (``RANK_CF``): Megatron-Core ``_HybridEPManager.
setup_metadata`` (core d0b3b775, ``token_dispatcher.py`` L1041-1053) sizes HybridEP's permuted
output at ``T·k·cf`` rows, rounded up to 256 (``PAD_MULTIPLE``), ``T`` the rank's tokens; only
rows past that budget are dropped. The experts' GEMMs run the routed rows
(``tokens_per_expert`` from HybridEP, on the device; the fused grouped MLP's
``padded_offsets`` are their running sums), not the budget.

Per row: the rank's routed rows ``R = T·k`` (forced-balanced routing: every expert's mean
share), the budget ``B``, the most alignment rows (``255·E/ep``), the budget's headroom over
both, and that headroom in units of ``σ ≤ k·sqrt(T)`` (the spread of the rows a rank receives:
each token sends at most ``k`` copies to a rank, so the variance per token is at most
``k·E[c] = k²/ep``, summed over the ``ep·T`` tokens of the group). Then a what-if, not a
reading: the estimate with every expert padded to a per-expert capacity at the same factor
(``moe_pad_to_capacity``, ``moe_capacity_factor = cf``).

    python experiments/fullgraph_budget.py      # Markdown on stdout, a few seconds
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "strategies", "reference", "data", "heldout_2026b.json")
#: ``moe_expert_rank_capacity_factor`` that v0.5.0's ``set_full_iter_cg_configs`` leaves on the
#: 26.06 rows' configs (scripts/performance/configs/...), by model
RANK_CF = {
    "deepseek-v3": (1.5, "deepseek/deepseek_llm_pretrain.py L59"),
    "gpt-oss-120b": (1.5, "gpt_oss/gpt_oss_llm_pretrain.py L49-50 (the 120B configs set none)"),
    "qwen3-30b-a3b": (1.5, "qwen/qwen3_llm_pretrain.py L53"),
    "qwen3-235b-a22b": (1.5, "qwen/qwen3_llm_pretrain.py L53"),
}
#: rows of HybridEP's permuted buffer and of each expert's split are multiples of this with
#: Transformer Engine's op fuser (core ``moe_utils.get_align_size_for_quantization``)
PAD_MULTIPLE = 256


@dataclass(frozen=True)
class Budget:
    """One rank's rows per micro-batch and MoE layer. ``routed``: ``T·k``; ``budget``: the
    static buffer; ``align``: the most alignment rows (``(PAD_MULTIPLE-1)·E/ep``);
    ``sigma``: the bound on the routed rows' standard deviation (rows)."""
    routed: int
    budget: int
    align: int
    sigma: float

    @property
    def headroom(self) -> float:
        """The budget over the routed and alignment rows (1.0: full)."""
        return self.budget / (self.routed + self.align)

    @property
    def z(self) -> float:
        """The free rows in units of ``sigma``: how far a drop is."""
        return (self.budget - self.routed - self.align) / self.sigma


def rank_budget(tokens: int, topk: int, cf: float, experts: int, ep: int) -> Budget:
    """The budget of a rank holding ``tokens`` tokens (``T``, before routing) of a model with
    ``experts`` routed experts, ``topk`` per token, at rank capacity factor ``cf``, split over
    ``ep`` ranks. Refuses non-positive sizes and an ``ep`` that does not divide ``experts``."""
    for name, v in (("tokens", tokens), ("topk", topk), ("cf", cf), ("experts", experts),
                    ("ep", ep)):
        if not v > 0:
            raise ValueError(f"rank_budget: {name}={v!r} must be > 0")
    if experts % ep:
        raise ValueError(f"rank_budget: ep={ep} must divide experts={experts}")
    b = int(tokens * topk * cf)
    b += -b % PAD_MULTIPLE
    return Budget(tokens * topk, b, (PAD_MULTIPLE - 1) * (experts // ep),
                  topk * math.sqrt(tokens))


def graphed_rows() -> list[tuple[dict, list[dict]]]:
    """The 26.06 Megatron-Bridge rows of ``heldout_2026b.json`` whose plan runs the
    full-iteration graph, with their file's rows."""
    rows = json.load(open(DATA))
    return [(r, rows) for r in rows
            if r["id"].startswith("mbridge2606") and r["plan"].get("cuda_graph")]


def row_table(row: dict, siblings: list[dict]) -> dict:
    """One row's budget and estimates (seconds): as read, and padded per expert at ``cf``."""
    case = case_from_entry(row, siblings)
    job = case.job
    m, p = job.model, job.plan
    cf, where = RANK_CF[m.name]
    tokens = p.mbs * row["model"]["seq_len"] // (p.tp * p.cp)
    bud = rank_budget(tokens, m.moe_router_topk, cf, m.num_experts, p.ep)
    pad = replace(job, plan=replace(p, moe_capacity_factor=cf, moe_pad_to_capacity=True))
    return dict(id=row["id"], cf=cf, where=where, budget=bud, pad=p.moe_pad_to_capacity,
                capacity=p.moe_capacity_factor, measured=case.measured_step_s,
                read=estimate(job).step_time_s, padded=estimate(pad).step_time_s)


def main() -> None:
    print("| row | cf (v0.5.0) | T·k | budget | align ≤ | headroom | z | plan pad / cf | "
          "measured s | as read | padded at cf (what-if) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row, rows in graphed_rows():
        t = row_table(row, rows)
        b = t["budget"]
        err = lambda s: 100 * (s / t["measured"] - 1)  # noqa: E731
        print(f"| {t['id']} | {t['cf']} ({t['where']}) | {b.routed} | {b.budget} | {b.align} | "
              f"{b.headroom:.3f} | {b.z:.0f} | {t['pad']} / {t['capacity']} | "
              f"{t['measured']:.3f} | {t['read']:.3f} ({err(t['read']):+.1f} %) | "
              f"{t['padded']:.3f} ({err(t['padded']):+.1f} %) |")


if __name__ == "__main__":
    main()
