#!/usr/bin/env python
"""Qwen3-30B-A3B on 16 H100 (two DGX nodes, Megatron-Bridge): what the estimate prices per MoE
layer and micro-batch, and what it still misses (docs/calibration.md §5.67).

Run (a few seconds, analytic only):

    python experiments/qwen3_h100_residual.py      # Markdown tables on stdout

Table 1: the two published rows of the layout (tp 1, pp 1, ep 16, mbs 1, gbs 1024, FP8 current
scaling, HybridEP; ``megatron_bridge_2604.json`` 26.04.01 and ``heldout_2026b.json`` 26.06),
measured and estimated, per MoE layer and micro-batch (48 MoE layers, 64 micro-batches).

Table 2: the estimate's parts of one MoE layer and micro-batch (forward + backward, the
stage-cost record's ``layer_time`` terms, read by wrapping the functions
``strategies.cost.layer_time`` sums while ``stage_costs`` runs; the expert all-to-all from the
estimate's ``ep_comm``; the output layer, embedding, DP and optimizer spread over the layers).

Table 3: NVIDIA's eager A/B on the same layout (Megatron-Bridge ``docs/training/
cuda-graphs.md`` at 067f987df03b: bf16, Megatron's alltoall dispatcher, 41.36 s) against the
FP8 HybridEP row: the measured and the estimated change of dispatcher and precision, and the
miss common to both.

Table 4: HybridEP's own published H100 EP16 times (two nodes over InfiniBand, 4096 tokens,
hidden 7168, top-8 of 128, 16 SMs: DeepEP branch ``hybrid-ep`` ``docs/README_Hybrid-EP.md``,
"Kernel Only" and "Torch API" columns) against the model's price of the same call
(``experiments/a2a_measured.py``), and the row's all-to-all at those ratios: what the
all-to-all could still hold.

Table 5: every Qwen3-30B-A3B row of the two files: micro-batch, tokens per micro-batch and GPU,
whether the plan graphs the whole step, and the miss per MoE layer and micro-batch
(``experiments/moe_residuals.residual_rows``): a miss that does not grow with the tokens is a
cost per layer call, not per token.

Table 6 (a lead not landed): the Llama rows whose table cell says FP8 (26.04.01 and 26.06) ran
the harness's ``*_FP8_CS_*`` configs too; their error as read (delayed scaling) and as they
would be read with current scaling.
"""
from __future__ import annotations

import contextlib
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from experiments import a2a_measured  # noqa: E402
from experiments.calibration_ablation import cost_holders  # noqa: E402
from experiments.moe_residuals import residual_rows  # noqa: E402
from strategies.cost import layer_time  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = "strategies/reference/data/"
ROWS = (("megatron_bridge_2604.json", "mbridge260401_qwen330ba3b_h100_16_fp8"),
        ("heldout_2026b.json", "mbridge2606_qwen330ba3b_h100_16_fp8"))
#: Megatron-Bridge docs/training/cuda-graphs.md (067f987df03b), "Representative Validation
#: Patterns": the 26.04 layout in bf16 with the alltoall dispatcher, eager, seconds per step
EAGER_BF16_ALLTOALL_S = 41.36
#: HybridEP README (branch hybrid-ep, docs/README_Hybrid-EP.md), H100, 16 ranks, 16 SMs, GB/s:
#: (op, "Torch API", "Kernel Only"); the ops as a2a_measured.HYBRID_OPS names them
HYBRID_H100_EP16 = (("dispatch (FP8)", 48.26, 68.48), ("dispatch (BF16)", 54.47, 71.71),
                    ("combine", 53.35, 62.95))
#: the layer_time terms recorded (``strategies.cost.layer_time`` imports each by name; wrapped
#: in every module that holds it, ``cost_holders``), each (forward, backward) or one forward
#: value (launch_time: the backward is twice it; moe_sync_time: forward only)
TERMS = ("units_time_fwd", "units_time_bwd", "attention_time_fwd", "cast_time",
         "moe_permute_time", "expert_pad_time", "expert_quantise_time", "moe_sync_time",
         "moe_host_time", "launch_time")


@contextlib.contextmanager
def recording():
    """Wrap ``TERMS`` so the first value each returns while ``stage_costs`` runs is kept (the
    mean layer's ``layer_time`` call, the first to use each); restored on exit."""
    seen: dict[str, object] = {}
    saved = [(m, n, getattr(m, n)) for n in TERMS for m in cost_holders(layer_time, n)]

    def wrap(name, f):
        def g(*a, **k):
            r = f(*a, **k)
            seen.setdefault(name, r)
            return r
        return g
    try:
        for m, n, f in saved:
            setattr(m, n, wrap(n, f))
        yield seen
    finally:
        for m, n, f in saved:
            setattr(m, n, f)


def _s(x) -> float:
    return float(np.asarray(x, dtype=float).ravel()[0])


def _entry(path: str, rid: str) -> dict:
    return {e["id"]: e for e in load_reference(DATA + path)}[rid]


def row_table() -> list[tuple]:
    """``(id, dtype, dispatcher, measured s, estimated s, error %, measured ms, estimated ms,
    missed ms per MoE layer and micro-batch)``."""
    out = []
    for path, rid in ROWS:
        case = case_from_entry(_entry(path, rid))
        job = case.job
        est = estimate(job)
        n = est.num_microbatches * job.model.num_moe_layers / job.plan.pp
        out.append((rid, job.dtype, job.plan.moe_dispatcher, case.measured_step_s,
                    est.step_time_s, 100 * (est.step_time_s / case.measured_step_s - 1),
                    1e3 * case.measured_step_s / n, 1e3 * est.step_time_s / n,
                    1e3 * (case.measured_step_s - est.step_time_s) / n))
    return out


def parts(entry: dict) -> tuple[list[tuple[str, float]], float]:
    """The estimate's parts of one MoE layer and micro-batch of ``entry`` (ms, forward +
    backward) and the estimate's ms per MoE layer and micro-batch they sum to."""
    job = case_from_entry(entry).job
    assert [k for k, n in job.model.layer_counts().items() if n] == ["moe"]
    with recording() as r:
        sc = stage_costs(job)
    est = estimate(job)
    L = job.model.num_moe_layers / job.plan.pp
    n = est.num_microbatches * L
    g_b = _s(r["units_time_bwd"][0])         # data and weight gradients together
    a_f, a_b = (_s(x) for x in r["attention_time_fwd"])
    c_f, c_b = (_s(x) for x in r["cast_time"])
    p_f, p_b = (_s(x) for x in r["moe_permute_time"])
    q_f, q_b = (_s(x) for x in r["expert_pad_time"])
    k_f, k_b = (_s(x) for x in r["expert_quantise_time"])
    h_f, h_b = (_s(x) for x in r["moe_host_time"])
    launch, sync = _s(r["launch_time"]), _s(r["moe_sync_time"])
    layer = _s(sc.layer_fwd) + _s(sc.layer_bwd)
    named = [("GEMMs (dense + expert; backward data + weight)",
              _s(r["units_time_fwd"]) + g_b),
             ("attention (fused kernel)", a_f + a_b),
             ("FP8 casts (bytes)", c_f + c_b),
             ("token permutations (fused permute)", p_f + p_b),
             ("quantisation padding copies", q_f + q_b),
             ("per-expert quantise launches (current scaling)", k_f + k_b),
             ("launch gaps (3 x kernels_per_layer)", 3 * launch),
             ("dispatcher sync", sync),
             ("host launches of the expert path (exposed)", h_f + h_b)]
    named.append(("norms, activation, residual and gradient accumulation (rest of layer)",
                  layer - sum(v for _, v in named)))
    per = {k: v / n for k, v in est.breakdown_s.items()}
    rest = sum(v for k, v in per.items() if k not in ("compute", "ep_comm"))
    named = [(k, 1e3 * v) for k, v in named]
    named.append(("output layer, loss, embedding (per layer)",
                  1e3 * (per["compute"] - layer)))
    named.append(("expert all-to-all (HybridEP: 2 dispatch + 2 combine)", 1e3 * per["ep_comm"]))
    named.append(("DP, optimizer, other", 1e3 * rest))
    return named, 1e3 * est.step_time_s / n


def ab_table() -> tuple:
    """``(measured bf16 alltoall s, measured FP8 HybridEP s, estimated bf16 alltoall s,
    estimated FP8 HybridEP s, missed ms per layer-mb bf16, FP8)``."""
    e = copy.deepcopy(_entry(*ROWS[0]))
    fp8 = case_from_entry(e)
    e["id"] = e["id"].replace("_fp8", "_bf16_eager_ab")
    e["precision"] = "bf16"
    e["plan"].update(moe_dispatcher="alltoall", ep_overlap=False, cuda_graph=False)
    e["derived"] = {"step_time_s": EAGER_BF16_ALLTOALL_S}
    e["measured"] = {}
    bf16 = case_from_entry(e)
    eb, ef = estimate(bf16.job), estimate(fp8.job)
    n = ef.num_microbatches * fp8.job.model.num_moe_layers
    return (EAGER_BF16_ALLTOALL_S, fp8.measured_step_s, eb.step_time_s, ef.step_time_s,
            1e3 * (EAGER_BF16_ALLTOALL_S - eb.step_time_s) / n,
            1e3 * (fp8.measured_step_s - ef.step_time_s) / n)


def hybrid_h100_ratios() -> list[tuple[str, float, float]]:
    """``(op, model / published time kernel-only, model / published time through the Torch
    API)`` of HybridEP's H100 EP16 rows (a2a_measured's model time)."""
    model = {r.case.op: r for r in a2a_measured.rows()
             if r.case.source == a2a_measured.HYBRID_H100 and r.case.ep == 16}
    out = []
    for op, torch_gbps, kernel_gbps in HYBRID_H100_EP16:
        row = model[op]
        assert abs(row.case.gbps - kernel_gbps) < 1e-9
        out.append((op, row.ratio, row.ratio * torch_gbps / kernel_gbps))
    return out


def main() -> None:
    print("| row | dtype | dispatcher | measured s | estimated s | error | measured ms | "
          "estimated ms | missed ms per MoE layer and micro-batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rid, dt, disp, m, e, err, mm, em, miss in row_table():
        print(f"| {rid} | {dt} | {disp} | {m:.2f} | {e:.2f} | {err:+.1f} % | {mm:.2f} | "
              f"{em:.2f} | {miss:.2f} |")
    named, total = parts(_entry(*ROWS[0]))
    print(f"\n| {ROWS[0][1]}: part of one MoE layer and micro-batch | ms |\n|---|---|")
    for k, v in named:
        print(f"| {k} | {v:.3f} |")
    print(f"| sum (the estimate per MoE layer and micro-batch) | {sum(v for _, v in named):.3f}"
          f" (estimate {total:.3f}) |")
    mb, mf, eb, ef, xb, xf = ab_table()
    print("\n| same layout (cuda-graphs.md A/B, 26.04.01 row) | measured s | estimated s | "
          "missed ms per MoE layer and micro-batch |\n|---|---|---|---|")
    print(f"| bf16, alltoall, eager | {mb:.2f} | {eb:.2f} | {xb:.2f} |")
    print(f"| FP8 current scaling, HybridEP | {mf:.2f} | {ef:.2f} | {xf:.2f} |")
    print(f"| change | {mf - mb:+.2f} | {ef - eb:+.2f} | {xf - xb:+.2f} |")
    ratios = hybrid_h100_ratios()
    a2a = dict(named)["expert all-to-all (HybridEP: 2 dispatch + 2 combine)"]
    print("\n| HybridEP H100 EP16 (README, 16 SMs) | model / published, kernel only | "
          "model / published, Torch API |\n|---|---|---|")
    for op, rk, rt in ratios:
        print(f"| {op} | {rk:.2f} | {rt:.2f} |")
    bf16 = [r for r in ratios if r[0] != "dispatch (FP8)"]
    k = np.mean([1 / r[1] for r in bf16])
    t = np.mean([1 / r[2] for r in bf16])
    print(f"\nThe row's all-to-all, {a2a:.3f} ms per MoE layer and micro-batch in the model, at "
          f"the BF16 dispatch's and the combine's published pace: {a2a * k:.3f} ms kernel only "
          f"(+{a2a * (k - 1):.3f}), {a2a * t:.3f} ms through the Torch API "
          f"(+{a2a * (t - 1):.3f}); the row misses "
          f"{row_table()[0][-1]:.3f} ms.")
    main_qwen30()
    print("\n| Llama row, table cell FP8 | error as read (delayed) | read as current scaling |"
          "\n|---|---|---|")
    for rid, a, b in llama_fp8_rows():
        print(f"| {rid} | {a:+.1f} % | {b:+.1f} % |")


def qwen30_rows() -> list[tuple]:
    """``(id, GPU, dtype, mbs, tokens per micro-batch and GPU, whole-step graph, error %,
    missed ms per MoE layer and micro-batch)`` of every Qwen3-30B-A3B row of ``ROWS``' files."""
    out = []
    for path, _ in ROWS:
        graphed = {e["id"]: case_from_entry(e).job for e in load_reference(DATA + path)
                   if "qwen330ba3b" in e["id"]}
        for rid, gpu, dt, mbs, _m, _e, err, miss, _layer in residual_rows(DATA + path):
            if rid in graphed:
                job = graphed[rid]
                tokens = mbs * job.model.seq_length // (job.plan.tp * job.plan.cp)
                out.append((rid, gpu, dt, mbs, tokens, bool(job.plan.cuda_graph), err, miss))
    return out


def main_qwen30() -> None:
    print("\n| Qwen3-30B-A3B row | GPU | dtype | mbs | tokens per micro-batch | whole-step graph "
          "| error | missed ms per MoE layer and micro-batch |\n|---|---|---|---|---|---|---|---|")
    for rid, gpu, dt, mbs, tok, g, err, miss in qwen30_rows():
        print(f"| {rid} | {gpu} | {dt} | {mbs} | {tok} | {'yes' if g else 'no'} | {err:+.1f} % "
              f"| {miss:.2f} |")


def llama_fp8_rows() -> list[tuple[str, float, float]]:
    """``(id, error % as read, error % read as current scaling)`` of the plain-FP8 Llama rows
    of ``ROWS``' files."""
    out = []
    for path, _ in ROWS:
        rows = load_reference(DATA + path)
        for e in rows:
            if e.get("precision") != "fp8" or "llama" not in e["id"]:
                continue
            case = case_from_entry(e, rows)
            cur = copy.deepcopy(e)
            cur["precision"] = "fp8 (current scaling)"
            m = case.measured_step_s
            out.append((e["id"], 100 * (estimate(case.job).step_time_s / m - 1),
                        100 * (estimate(case_from_entry(cur, rows).job).step_time_s / m - 1)))
    return out


if __name__ == "__main__":
    main()
