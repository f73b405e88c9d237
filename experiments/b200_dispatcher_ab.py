#!/usr/bin/env python
"""Megatron-Bridge's B200 MoE rows against their counterparts, and the one public same-layout
A/B of Megatron's alltoall token dispatcher against HybridEP on an 8-GPU NVLink node.

Run (a few seconds, analytic only):

    python experiments/b200_dispatcher_ab.py            # Markdown tables on stdout

Table 1, term by term: the B200 rows that run Megatron's ``alltoall`` dispatcher at ep 8 (one
8-GPU NVLink node per expert group), the B200 row that runs DeepEP at ep 32, and their GB200
and B300 counterparts: measured and estimated step, the estimate's exposed terms
(``estimate(...).breakdown_s``) and the time missed per MoE layer and micro-batch on the
busiest rank, ``(measured - estimated) / (micro-batches x MoE layers per rank)``. Its last two
rows are the 26.04 table's DeepSeek-V3 B200 and B300 runs at pp 16, ep 8 with HybridEP
(``ROWS_2604_DS``), the layout the 25.11 B200 row ran with the alltoall dispatcher.

Table 2, the A/B: NVIDIA's 26.04 and 26.04.01 tables (Megatron-Bridge
``docs/performance-summary-archive.md`` at commit 067f987df03b, "## 26.04 NeMo Container" and
"## 26.04.01 NeMo Container", "Model: Qwen3_235B_a22B") ran Qwen3-235B-A22B on 256 GPUs with
the same layouts in both. Between their configs (Megatron-Bridge v0.4.0 and v0.4.2,
``git diff v0.4.0 v0.4.2 -- scripts/performance/configs/qwen/``) one field moved: B300's
dispatcher, alltoall in 26.04, HybridEP in 26.04.01 (PR #3490;
``strategies.reference.bridge_recipes.RECIPES_2604``). GB300, GB200 and H100 ran the same
configs in both containers, so their change is the releases' drift. Each 26.04 entry is the
26.04.01 entry with the 26.04 table's container and tokens/s; the reader applies the 26.04
config (``recipe_for``).

Table 2b: the only other public same-layout dispatcher A/B on an 8-GPU node found, a ratio
(``RATIO_1731``).

Table 2c: the rate the model gives NCCL inside an H100 and a B200 node beside NCCL's own
topology constant for the link (``NCCL_NVLINK``), the only public NCCL figure for B200's NVLink
found (no public ``alltoall_perf`` on 8 B200 was).

Table 2d: the expert-parallel overlap measured with and without on 8-GPU nodes with the
alltoall dispatcher (``OVERLAP_RUNS``: NVIDIA-NeMo/Megatron-Bridge PR #1760's B200 pair, the
26.02.01 and 26.04 tables' B300 runs), beside the model.

Table 3, the B300 A/B's leftover (the measured alltoall/HybridEP ratio less the model's) as
each lead would have to be to explain it all, and what that lead, so sized, would move on the
B200 row (same dispatcher, node and layout, micro-batch 1). Both are printed bounds, not
fitted into the model (docs/calibration.md §5.72).
"""
from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

BRIDGE_2604 = "strategies/reference/data/megatron_bridge_2604.json"
PUBLISHED_2026 = "strategies/reference/data/published_2026.json"
#: Table 1's rows: (id, file)
DECOMPOSE = (
    ("mbridge260401_qwen3235ba22b_b200_256_mxfp8", BRIDGE_2604),
    ("mbridge260401_qwen3235ba22b_b300_256_mxfp8", BRIDGE_2604),
    ("mbridge260401_qwen3235ba22b_gb200_256_mxfp8", BRIDGE_2604),
    ("mbridge2511_qwen3_235b_b200_64_mxfp8", PUBLISHED_2026),
    ("mbridge2511_dsv3_b200_256_mxfp8", PUBLISHED_2026),
    ("mbridge260401_deepseekv3_b200_256_mxfp8", BRIDGE_2604),
    ("mbridge260401_deepseekv3_gb200_256_mxfp8", BRIDGE_2604),
)
#: the 26.04 table's Qwen3-235B-A22B rows (docs/performance-summary-archive.md at
#: 067f987df03b, "## 26.04 NeMo Container"): (26.04.01 entry of the same GPU and layout,
#: tokens/s/GPU in 26.04)
ROWS_2604 = (
    ("mbridge260401_qwen3235ba22b_gb300_256_mxfp8", 6994),
    ("mbridge260401_qwen3235ba22b_gb200_256_mxfp8", 5672),
    ("mbridge260401_qwen3235ba22b_b300_256_mxfp8", 4865),
    ("mbridge260401_qwen3235ba22b_h100_256_fp8", 1686),
)
#: NVIDIA-NeMo/Megatron-Bridge issue #1731 (malay-nagda, 2026-01-21): "for B200: hybridep perf
#: was 8% higher than baseline for same config", "config used: TP1-PP16-VP1-EP8" (DeepSeek-V3's
#: B200 layout; the baseline config names no flex backend: Megatron's alltoall dispatcher).
#: (entry of that layout, measured throughput ratio HybridEP / alltoall); the issue gives no
#: batch or step, so the ratio is set beside the model's on the entry's own batch
RATIO_1731 = ("mbridge2511_dsv3_b200_256_mxfp8", 1.08)
#: the 26.04 table's DeepSeek-V3 B200 and B300 rows (same archive, "## 26.04 NeMo Container",
#: "Model: DeepSeekV3": MXFP8, 256 GPUs, gbs 4096, mbs 1, tp 1, pp 16, no VP, ep 8), whose v0.4.0
#: configs ran HybridEP (``bridge_recipes.RECIPES_2604``): (26.04.01 entry of the GPU,
#: tokens/s/GPU in 26.04); the entry's plan is set to the 26.04 layout (``DS_2604_PLAN``)
ROWS_2604_DS = (
    ("mbridge260401_deepseekv3_b200_256_mxfp8", 2815),
    ("mbridge260401_deepseekv3_b300_256_mxfp8", 3131),
)
DS_2604_PLAN = {"tp": 1, "pp": 16, "dp": 16, "cp": 1, "ep": 8, "microbatch": 1,
                "global_batch": 4096, "schedule": "1F1B", "virtual_stages": 1,
                "grad_accum": 256}
#: NCCL's own NVLink rate per link and generation (NVIDIA/nccl ``src/graph/topo.h``:
#: ``SM90_NVLINK_BW 20.6``, ``SM100_NVLINK_BW 40.1`` GB/s, which NVIDIA/nccl issue #1807 quotes
#: for v2.27 with its B200 log line "maxBw 721.8"), times the 18 NVLinks of an H100 or B200 (NVIDIA
#: H100 and DGX B200 datasheets): (cluster preset, GB/s per link)
NCCL_NVLINK = (("dgx-h100", 20.6), ("dgx-b200", 40.1))
NVLINKS_PER_GPU = 18
B300_AB = "mbridge260401_qwen3235ba22b_b300_256_mxfp8"
#: EP-overlap pairs, measured with and without ``moe_a2a_overlap`` on 8-GPU nodes with the
#: alltoall dispatcher: (label, base entry, 26.04 tokens/s/GPU or None, plan fields, measured s,
#: source). A B300 run is built on the 26.04 entry (``entry_2604``): the 26.04 run is that row;
#: the 26.02.01 run (its table's VP 4 is Megatron-Bridge v0.3.0's B300 V2 config, pp 8, vp 4,
#: ep 8, mbs 1, no flex backend, whose ``moe_a2a_overlap=True`` is assumed with it: v0.3.1's
#: has neither VP nor overlap) fits no config the reader holds, so its plan
#: states the dispatcher and the overlap, and it keeps the container's bf16 gradient reduction,
#: which v0.3.0 sets too (``qwen/qwen3_llm_pretrain.py`` L41-42)
OVERLAP_RUNS = (
    ("B200 64 GPUs, overlap + vp 2 (the 25.11 row)", "mbridge2511_qwen3_235b_b200_64_mxfp8",
     None, {}, 20.1, "PR #1760: 20.1 s"),
    ("B200 64 GPUs, no overlap, no vp", "mbridge2511_qwen3_235b_b200_64_mxfp8", None,
     {"virtual_stages": 1, "schedule": "1F1B", "ep_overlap": False}, 16.9,
     "PR #1760: 16.9 s"),
    ("B300 256 GPUs, overlap + vp 4, mbs 1 (26.02.01)", B300_AB, 2644,
     {"virtual_stages": 4, "schedule": "interleaved 1F1B", "microbatch": 1, "grad_accum": 256,
      "ep_overlap": True, "moe_dispatcher": "alltoall"}, 8192 * 4096 / (2644 * 256),
     "26.02.01 table: 2644 tokens/s/GPU"),
    ("B300 256 GPUs, no overlap, mbs 2 (26.04)", B300_AB, 4865, {},
     8192 * 4096 / (4865 * 256), "26.04 table: 4865 tokens/s/GPU"),
)
TABLE_2604 = "docs/performance-summary-archive.md (26.04 NeMo container), commit 067f987df03b"
B200_ROW = "mbridge260401_qwen3235ba22b_b200_256_mxfp8"


def _entries() -> dict[str, dict]:
    return {e["id"]: e for f in (BRIDGE_2604, PUBLISHED_2026) for e in load_reference(f)}


def _layers_per_rank(job) -> float:
    return job.model.num_moe_layers / job.plan.pp


def ds_2604(entries: dict[str, dict] | None = None) -> list[dict]:
    """The 26.04 DeepSeek-V3 entries of ``ROWS_2604_DS`` (``entry_2604`` with ``DS_2604_PLAN``)."""
    entries = entries or _entries()
    out = []
    for rid, tokens in ROWS_2604_DS:
        e = entry_2604(entries[rid], tokens)
        e["plan"] = dict(e["plan"], **DS_2604_PLAN)
        out.append(e)
    return out


def decompose(entries: dict[str, dict] | None = None) -> list[tuple]:
    """``(id, GPU, dispatcher, ep, mbs, measured s, estimated s, error %, compute, ep_comm,
    bubble, other exposed s, missed ms per MoE layer and micro-batch)`` of ``DECOMPOSE``, then
    of the 26.04 DeepSeek-V3 rows (``ds_2604``)."""
    entries = entries or _entries()
    out = []
    for e in [entries[rid] for rid, _ in DECOMPOSE] + ds_2604(entries):
        rid = e["id"]
        case = case_from_entry(e)
        job, est = case.job, estimate(case.job)
        b = est.breakdown_s
        other = sum(v for k, v in b.items() if k not in ("compute", "ep_comm", "bubble"))
        gap = case.measured_step_s - est.step_time_s
        out.append((rid, job.cluster.gpu.name, job.plan.moe_dispatcher, job.plan.ep,
                    job.plan.mbs, case.measured_step_s, est.step_time_s,
                    100 * (est.step_time_s / case.measured_step_s - 1), b["compute"],
                    b["ep_comm"], b["bubble"], other,
                    1e3 * gap / (est.num_microbatches * _layers_per_rank(job))))
    return out


def entry_2604(base: dict, tokens: float) -> dict:
    """The 26.04 table's row of ``base``'s GPU and layout: ``base`` (a 26.04.01 entry) with the
    26.04 container and ``tokens`` tokens/s/GPU."""
    e = copy.deepcopy(base)
    e["id"] = base["id"].replace("mbridge260401_", "mbridge2604_")
    e["source"] = dict(base["source"], table=TABLE_2604)
    e["measured"] = {"tokens_per_s_per_gpu": tokens}
    e.pop("derived", None)
    return e


def pairs(entries: dict[str, dict] | None = None) -> list[tuple]:
    """``(26.04.01 id, dispatcher 26.04 -> 26.04.01, measured s 26.04, 26.04.01, measured
    ratio, estimated s 26.04, 26.04.01, estimated ratio)`` of ``ROWS_2604``."""
    entries = entries or _entries()
    out = []
    for rid, tokens in ROWS_2604:
        old, new = case_from_entry(entry_2604(entries[rid], tokens)), case_from_entry(entries[rid])
        eo, en = estimate(old.job).step_time_s, estimate(new.job).step_time_s
        out.append((rid, f"{old.job.plan.moe_dispatcher} -> {new.job.plan.moe_dispatcher}",
                    old.measured_step_s, new.measured_step_s,
                    old.measured_step_s / new.measured_step_s, eo, en, eo / en))
    return out


def ratio_1731(entries: dict[str, dict] | None = None) -> tuple[str, float, float, float]:
    """``(id, measured ratio, estimated alltoall s, estimated ratio alltoall/HybridEP)`` of
    ``RATIO_1731``: the entry as read, then with ``moe_dispatcher="hybridep"``."""
    entries = entries or _entries()
    rid, measured = RATIO_1731
    job = case_from_entry(entries[rid]).job
    a = estimate(job).step_time_s
    h = estimate(replace(job, plan=replace(job.plan, moe_dispatcher="hybridep"))).step_time_s
    return rid, measured, a, a / h


def nvlink_rates() -> list[tuple[str, float, float]]:
    """``(cluster, model GB/s, NCCL GB/s)``: the rate the model gives NCCL's collectives inside
    a node (``intra_node_bandwidth x comm.NVLINK_EFFICIENCY``, what an 8-GPU alltoall reaches as
    bus bandwidth) beside NCCL's topology constant times the GPU's links (``NCCL_NVLINK``)."""
    from strategies.cost.comm import NVLINK_EFFICIENCY
    from topologies.cluster import cluster_preset
    return [(name, cluster_preset(name).intra_node_bandwidth * NVLINK_EFFICIENCY / 1e9,
             per_link * NVLINKS_PER_GPU) for name, per_link in NCCL_NVLINK]


def overlap_runs(entries: dict[str, dict] | None = None) -> list[tuple[str, float, float, str]]:
    """``(label, measured s, estimated s, source)`` of ``OVERLAP_RUNS``: the base entry (its
    26.04 row where tokens are given) with the plan fields set and the source's step."""
    entries = entries or _entries()
    out = []
    for label, rid, tokens, fields, measured, source in OVERLAP_RUNS:
        e = copy.deepcopy(entries[rid]) if tokens is None else entry_2604(entries[rid], tokens)
        e["plan"] = dict(e["plan"], **fields)
        e["measured"], e["derived"] = {}, {"step_time_s": measured}
        out.append((label, measured, estimate(case_from_entry(e).job).step_time_s, source))
    return out


def leads(entries: dict[str, dict] | None = None) -> dict[str, float]:
    """The B300 A/B's leftover and the two leads sized to it (module docstring, table 3):
    ``gap_s`` (measured alltoall step less the HybridEP one, less the model's difference),
    ``per_layer_mb_ms`` (that gap as a time per MoE layer and micro-batch, busiest rank),
    ``a2a_rate`` (the share of the modelled NCCL all-to-all rate that would make the
    alltoall run's exposed ``ep_comm`` absorb the gap), and the B200 row's estimate with each:
    ``b200_fixed_s`` (the per-layer-and-micro-batch time on its own micro-batches and
    layers), ``b200_rate_s`` (its ``ep_comm`` at that rate); ``b200_measured_s``."""
    entries = entries or _entries()
    tokens = dict(ROWS_2604)[B300_AB]
    old = case_from_entry(entry_2604(entries[B300_AB], tokens))
    new = case_from_entry(entries[B300_AB])
    eo, en = estimate(old.job), estimate(new.job)
    gap = (old.measured_step_s - new.measured_step_s) - (eo.step_time_s - en.step_time_s)
    per = gap / (eo.num_microbatches * _layers_per_rank(old.job))
    rate = eo.breakdown_s["ep_comm"] / (eo.breakdown_s["ep_comm"] + gap)
    b200 = case_from_entry(entries[B200_ROW])
    eb = estimate(b200.job)
    fixed = eb.step_time_s + per * eb.num_microbatches * _layers_per_rank(b200.job)
    slow = eb.step_time_s + eb.breakdown_s["ep_comm"] * (1 / rate - 1)
    return {"gap_s": gap, "per_layer_mb_ms": 1e3 * per, "a2a_rate": rate,
            "b200_estimate_s": eb.step_time_s, "b200_fixed_s": fixed, "b200_rate_s": slow,
            "b200_measured_s": b200.measured_step_s}


def main() -> str:
    entries = _entries()
    lines = ["| run | GPU | dispatcher | ep | mbs | measured s | estimated s | error | compute s "
             "| ep_comm s | bubble s | other s | missed ms per MoE layer and micro-batch |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in decompose(entries):
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.2f} | {r[6]:.2f} | "
                     f"{r[7]:+.1f} % | {r[8]:.2f} | {r[9]:.2f} | {r[10]:.2f} | {r[11]:.2f} | "
                     f"{r[12]:.2f} |")
    lines += ["", "| Qwen3-235B-A22B, same GPU and layout | dispatcher 26.04 -> 26.04.01 | "
              "measured s 26.04 | 26.04.01 | ratio | estimated s 26.04 | 26.04.01 | ratio |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in pairs(entries):
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.3f} | {r[5]:.2f} | "
                     f"{r[6]:.2f} | {r[7]:.3f} |")
    rid, measured, a, ratio = ratio_1731(entries)
    lines += ["", "| issue #1731, B200 TP1-PP16-VP1-EP8 | measured HybridEP/alltoall throughput | "
              "estimated alltoall s (the entry's batch) | estimated ratio |", "|---|---:|---:|---:|",
              f"| {rid} | {measured:.3f} | {a:.2f} | {ratio:.3f} |"]
    lines += ["", "| cluster | model NVLink rate for NCCL's collectives GB/s | NCCL topo.h per link x "
              f"{NVLINKS_PER_GPU} links GB/s | model / NCCL |", "|---|---:|---:|---:|"]
    for name, model, nccl in nvlink_rates():
        lines.append(f"| {name} | {model:.1f} | {nccl:.1f} | {model / nccl:.3f} |")
    lines += ["", "| EP overlap pair (alltoall dispatcher) | measured s | estimated s | source |",
              "|---|---:|---:|---|"]
    for label, measured, est, source in overlap_runs(entries):
        lines.append(f"| {label} | {measured:.2f} | {est:.2f} | {source} |")
    d = leads(entries)
    lines += ["", "| B300 A/B leftover s | as ms per MoE layer and micro-batch | as a share of "
              "the modelled NCCL all-to-all rate | B200 row estimate s | + that time | at that "
              "rate | measured s |", "|---:|---:|---:|---:|---:|---:|---:|",
              f"| {d['gap_s']:.2f} | {d['per_layer_mb_ms']:.2f} | {d['a2a_rate']:.2f} | "
              f"{d['b200_estimate_s']:.2f} | {d['b200_fixed_s']:.2f} | {d['b200_rate_s']:.2f} | "
              f"{d['b200_measured_s']:.2f} |"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
