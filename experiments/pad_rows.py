#!/usr/bin/env python
"""NeMo's drop-and-pad MoE rows beside the nearest rows that do not pad, term by term of the
estimate's breakdown (docs/calibration.md §5.135). Analytic, a few seconds:

    python experiments/pad_rows.py

Table 1, every row of a reference file whose plan pads to capacity (``moe_pad_to_capacity``,
NeMo 2's ``MegatronTokenDropCallback``): the measured and estimated step, and each of them
and each term of the estimate's ``breakdown_s`` per MoE layer and micro-batch of the busiest
pipeline rank (``num_moe_layers / pp`` layers, ``experiments/moe_residuals.py``'s
normalisation), with what the row runs that the sources name: dispatcher, CUDA graphs, TP
overlap, the padded load (``token_counts.padded_load``: the expert GEMMs' rows over the
mean share; 1.0 where the capacity ``C`` is whole) and whether its ``etp·ep`` ranks fit one
NVLink domain of the row's cluster (``etp·ep`` consecutive ranks, Megatron-Core's
expert grid; ``etp`` defaults to ``tp``).

Table 2, ``PAIRS``: each padded row against the nearest row of the same model (else the same
GPU and dispatcher) in another file that does not pad: the difference of the measured and of
each breakdown term per MoE layer and micro-batch, and the part of the measured difference
that no term of the estimate carries (``left``).

Table 3, the GB200 DeepSeek-V3 layout: the estimate with the stated first/last stage layers
(NeMo ``scripts/performance/llm/pretrain_deepseek_v3.py`` L73-77 at 7a8f1cc7bc40: 15, 16,
16, 14 of the 61 layers) and with the reader's fallback where no split is stated (every
stage as the busiest: 4 × 16 = 64 layers), the busiest rank's layers either way.
"""
from __future__ import annotations

import copy
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost.token_counts import padded_load  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join("strategies", "reference", "data")
#: files whose MoE rows state ``moe_pad_to_capacity`` (docs/calibration.md §5.125)
PAD_FILES = ("dgxc_2505.json", "nemo_performance_25.json")
#: the breakdown terms printed; the rest of ``breakdown_s`` is summed as ``other``
TERMS = ("compute", "recompute", "tp_comm", "ep_comm", "bubble")
#: (padded row, its file, nearest non-padded row, its file, why that one)
PAIRS = (
    ("dgxc2505_deepseek_v3_671b_gb200_256_bf16", "dgxc_2505.json",
     "mbridge260401_deepseekv3_gb200_256_mxfp8", "megatron_bridge_2604.json",
     "same model, GPU, GPU count, pp 4, 16 layers a rank, 64 micro-batches"),
    ("dgxc2505_deepseek_v3_671b_gb200_256_bf16", "dgxc_2505.json",
     "mbridge2606_deepseekv3_gb200_256_mxfp8", "heldout_2026b.json",
     "same model, GPU, GPU count, pp 4, 16 layers a rank, 64 micro-batches, graphed"),
    ("dgxc2505_deepseek_v3_671b_h100_1024_bf16", "dgxc_2505.json",
     "automodel_deepseekv3_h100_1024", "automodel_perf.json",
     "same model, GPU and GPU count, bf16, not padded (DeepEP, torch stack)"),
    ("dgxc2505_llama4_400b_gb200_256_bf16", "dgxc_2505.json",
     "mbridge2511_qwen3_235b_gb200_256_bf16", "published_2026.json",
     "GB200, 256 GPUs, bf16, alltoall dispatcher, ep 32-64, eager, not padded"),
    ("dgxc2504_grok1_314b_h100_512_bf16", "dgxc_2505.json",
     "mbridge260401_qwen3235ba22b_h100_256_fp8", "megatron_bridge_2604.json",
     "H100, Megatron-Core alltoall dispatcher, tp > 1 with SP, eager, not padded"),
)


def _entry(file: str, ident: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rows = load_reference(os.path.join(DATA, file))
    for r in rows:
        if isinstance(r, dict) and r.get("id") == ident:
            return r, rows
    raise KeyError(f"{ident} not in {file}")


def row_terms(entry: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's figures: measured and estimated step (s), the layer-micro-batches of its
    busiest rank, and the measured, the estimate and each term per MoE layer and micro-batch
    (ms), with the plan facts the sources name."""
    case = case_from_entry(entry, rows)
    job = case.job
    est = estimate(job)
    m, pl = job.model, job.plan
    n = est.num_microbatches * m.num_moe_layers / pl.pp
    per = {k: 1e3 * est.breakdown_s.get(k, 0.0) / n for k in TERMS}
    per["other"] = 1e3 * sum(v for k, v in est.breakdown_s.items() if k not in TERMS) / n
    span = (pl.tp if pl.etp is None else pl.etp) * pl.ep   # the expert grid's tp_ep_group
    pad = bool(pl.moe_pad_to_capacity)
    load = float(padded_load(m, pl.mbs, pl.tp, pl.cp, pl.moe_capacity_factor)) if pad else None
    return {"id": entry["id"], "gpu": job.cluster.gpu.name, "dtype": job.dtype,
            "measured": case.measured_step_s, "estimate": est.step_time_s,
            "error": 100 * (est.step_time_s / case.measured_step_s - 1),
            "layer_mb": n, "meas_ms": 1e3 * case.measured_step_s / n,
            "est_ms": 1e3 * est.step_time_s / n, "terms": per,
            "dispatcher": pl.moe_dispatcher, "graphs": bool(pl.cuda_graph),
            "tp_overlap": bool(pl.tp_comm_overlap), "padded_load": load,
            "in_domain": span <= job.cluster.nvlink_domain_size, "span": span,
            "domain": job.cluster.nvlink_domain_size}


def pad_rows() -> list[dict[str, Any]]:
    """``row_terms`` of every padded row of ``PAD_FILES`` that has a measured step."""
    out = []
    for f in PAD_FILES:
        rows = load_reference(os.path.join(DATA, f))
        for r in rows:
            if not isinstance(r, dict) or not r.get("plan", {}).get("moe_pad_to_capacity"):
                continue
            case = case_from_entry(r, rows)
            if case.job is None or case.measured_step_s is None:
                continue
            out.append(row_terms(r, rows))
    return out


def pair_rows() -> list[tuple[dict[str, Any], dict[str, Any], dict[str, float], float, str]]:
    """Each of ``PAIRS``: (padded, non-padded, the per-term difference padded - non-padded in
    ms per MoE layer and micro-batch, what of the measured difference no term carries, why)."""
    out = []
    for a_id, a_f, b_id, b_f, why in PAIRS:
        a, b = row_terms(*_entry(a_f, a_id)), row_terms(*_entry(b_f, b_id))
        diff = {k: a["terms"][k] - b["terms"][k] for k in a["terms"]}
        left = (a["meas_ms"] - b["meas_ms"]) - (a["est_ms"] - b["est_ms"])
        out.append((a, b, diff, left, why))
    return out


def layout_rows() -> list[tuple[str, float, float, int, float]]:
    """GB200 DeepSeek-V3: (id, estimate with the stated split s, with the reader's even
    fallback s, the busiest rank's layers stated, even)."""
    out = []
    rows = load_reference(os.path.join(DATA, "dgxc_2505.json"))
    for r in rows:
        if not (isinstance(r, dict) and "deepseek_v3" in r["id"] and "gb200" in r["id"]):
            continue
        stated = case_from_entry(r, rows).job
        bal = copy.deepcopy(r)
        bal["plan"].pop("first_stage_layers", None)
        bal["plan"].pop("last_stage_layers", None)
        balanced = case_from_entry(bal, rows).job
        out.append((r["id"], estimate(stated).step_time_s, estimate(balanced).step_time_s,
                    _busiest(stated), _busiest(balanced)))
    return out


def _busiest(job: Any) -> int:
    """The most transformer layers any pipeline stage of ``job`` holds."""
    return max(job.layers_of_stage(i) for i in range(job.plan.pp))


def _fmt_terms(t: dict[str, float]) -> str:
    return " | ".join(f"{t[k]:+.2f}" if k != "compute" else f"{t[k]:.2f}"
                      for k in (*TERMS, "other"))


def main(rs: list[dict[str, Any]] | None = None, pairs: list[tuple] | None = None) -> None:
    """Print the tables; ``rs`` and ``pairs``: ``pad_rows()`` and ``pair_rows()`` already
    computed (computed here when None)."""
    head = " | ".join((*TERMS, "other"))
    print("Table 1: padded rows, ms per MoE layer and micro-batch of the busiest rank\n")
    print(f"| row | measured s | estimate s | error | measured | estimate | {head} | "
          "dispatcher | graphs | TP overlap | padded load | etp·ep in a domain |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * (len(TERMS) + 1) + "---|---|---|---:|---|")
    for r in pad_rows() if rs is None else rs:
        print(f"| {r['id']} | {r['measured']:.3f} | {r['estimate']:.3f} | {r['error']:+.1f} % | "
              f"{r['meas_ms']:.2f} | {r['est_ms']:.2f} | {_fmt_terms(r['terms'])} | "
              f"{r['dispatcher']} | {r['graphs']} | {r['tp_overlap']} | "
              f"{r['padded_load']:.4f} | {r['span']} ≤ {r['domain']}: {r['in_domain']} |")
    print("\nTable 2: padded − nearest non-padded, ms per MoE layer and micro-batch\n")
    print(f"| padded | non-padded | why | measured a / b | estimate a / b | Δ measured | "
          f"Δ estimate | {head} (Δ) | left |")
    print("|---|---|---|---:|---:|---:|---:|" + "---:|" * (len(TERMS) + 1) + "---:|")
    for a, b, diff, left, why in pair_rows() if pairs is None else pairs:
        print(f"| {a['id']} ({a['error']:+.1f} %) | {b['id']} ({b['error']:+.1f} %) | {why} | "
              f"{a['meas_ms']:.2f} / {b['meas_ms']:.2f} | {a['est_ms']:.2f} / {b['est_ms']:.2f} "
              f"| {a['meas_ms'] - b['meas_ms']:+.2f} | {a['est_ms'] - b['est_ms']:+.2f} | "
              + " | ".join(f"{diff[k]:+.2f}" for k in (*TERMS, "other"))
              + f" | {left:+.2f} |")
    print("\nTable 3: GB200 DeepSeek-V3, the stated layout against the even fallback (64 layers)\n")
    print("| row | stated s | even s | busiest rank's layers stated / even |")
    print("|---|---:|---:|---|")
    for ident, s, bal, ls, lb in layout_rows():
        print(f"| {ident} | {s:.3f} | {bal:.3f} | {ls} / {lb} |")


if __name__ == "__main__":
    main()
