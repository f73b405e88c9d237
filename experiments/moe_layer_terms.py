#!/usr/bin/env python
"""One MoE layer and micro-batch of Qwen3-30B-A3B on five GPUs, term by term, and which term's
cross-GPU scaling the measured ratios disagree with (docs/calibration.md §5.171). Nothing is
fitted; the script reads the cost model's own terms.

Run (about half a minute, analytic only):

    python experiments/moe_layer_terms.py          # Markdown tables on stdout

Table 1: the estimate's terms of one MoE layer and micro-batch (ms, forward + backward; the
stage-cost record's ``layer_time`` terms read as ``experiments/qwen3_h100_residual.py``
reads them, the routed experts' GEMMs apart from the attention projections and the router,
the expert all-to-all from the estimate's ``ep_comm``), for the 26.04.01 rows of
``megatron_bridge_2604.json`` (eager, HybridEP, TE graphs of the router and preprocess only)
and the 26.06 rows of ``heldout_2026b.json`` (full-iteration graph, EP overlap, TE's fused
grouped MLP), with the measured time and the miss per MoE layer and micro-batch.

Table 2: pairs of rows: the measured step ratio against the model's, and the model's ratio of
the GPU-rate terms (GEMMs, attention, HBM passes), so a term whose scaling the measurement
does not follow shows as the gap between the two.

Table 3: every 26.04.01 MXFP8 HybridEP MoE row of ``megatron_bridge_2604.json``: the miss per
MoE layer and micro-batch beside the local experts, the tokens per micro-batch and the host
CPU: what the miss scales with.

``--by-gpu`` (about a minute) prints instead the mean signed analytic error and the MAPE of
the MoE and the dense rows by GPU over every reference file but ``published.json``
(``experiments/reference_mape.py``'s per-row errors; MoE by ``job.model.is_moe``).
"""
from __future__ import annotations

import contextlib
import glob
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from experiments.calibration_ablation import cost_holders  # noqa: E402
from experiments.moe_expert_launches import host_cpu  # noqa: E402
from experiments.moe_residuals import BRIDGE_2604, residual_rows  # noqa: E402
from experiments.qwen3_h100_residual import parts  # noqa: E402
from experiments.reference_mape import file_cases  # noqa: E402
from strategies.cost import layer_time  # noqa: E402
from strategies.cost.gemm_time import units_time_bwd, units_time_fwd  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = "strategies/reference/data/"
#: (file, id, label) of the Qwen3-30B-A3B rows: the 26.04.01 five and the 26.06 graphed three
ROWS = tuple((f, f"mbridge{c}_qwen330ba3b_{g}", f"{c[:5]} {g.split('_')[0]}") for f, c, g in (
    ("megatron_bridge_2604.json", "260401", "gb300_8_mxfp8"),
    ("megatron_bridge_2604.json", "260401", "b300_8_mxfp8"),
    ("megatron_bridge_2604.json", "260401", "gb200_8_mxfp8"),
    ("megatron_bridge_2604.json", "260401", "b200_8_mxfp8"),
    ("megatron_bridge_2604.json", "260401", "h100_16_fp8"),
    ("heldout_2026b.json", "2606", "gb300_8_mxfp8"),
    ("heldout_2026b.json", "2606", "b300_8_mxfp8"),
    ("heldout_2026b.json", "2606", "gb200_8_mxfp8")))
#: (numerator, denominator) row labels of table 2, and what differs between them
PAIRS = (("26040 gb300", "26040 b300", "same chip and plan; Grace against x86 host"),
         ("2606 gb300", "2606 b300", "the same, graphed: no host in the step"),
         ("26040 gb200", "26040 b200", "same plan; Grace against x86 (B200 also graphs attn)"),
         ("26040 gb300", "26040 gb200", "Blackwell Ultra mbs 8 against Blackwell mbs 4"),
         ("2606 gb300", "2606 gb200", "the same, graphed"),
         ("26040 b300", "26040 b200", "x86 both; mbs 8 against mbs 4"))
#: ``qwen3_h100_residual.parts``' names of its GEMM sum and of the layer's remainder
GEMMS = "GEMMs (dense + expert; backward data + weight)"
REST = "norms, activation, residual and gradient accumulation (rest of layer)"
#: table 1's terms that run at a GPU rate (GEMM, attention, HBM passes), for table 2
RATE_TERMS = ("attention projections (QKV, output) GEMMs", "router GEMM",
              "routed expert GEMMs (fc1, fc2; fwd + dgrad + wgrad)", "attention (fused kernel)",
              "FP8 casts (bytes)", "token permutations (fused permute)",
              "norms, activation, residual and gradient accumulation (rest of layer)",
              "output layer, loss, embedding (per layer)")


@contextlib.contextmanager
def host_args():
    """Keep the first ``moe_host_time`` call's keyword arguments (the mean layer's
    ``layer_time`` call: its ``priced`` GEMM parts and ``slow``); restored on exit."""
    seen: dict = {}
    saved = [(m, getattr(m, "moe_host_time")) for m in cost_holders(layer_time, "moe_host_time")]

    def wrap(f):
        def g(*a, **k):
            seen.setdefault("kw", k)
            return f(*a, **k)
        return g
    try:
        for m, f in saved:
            m.moe_host_time = wrap(f)
        yield seen
    finally:
        for m, f in saved:
            m.moe_host_time = f


def _entry(path: str, rid: str) -> dict:
    return {e["id"]: e for e in load_reference(DATA + path)}[rid]


def gemm_split(entry: dict) -> tuple[float, float, float, float]:
    """ms ``(attention projections, router, routed experts)`` of the mean layer's GEMMs
    (forward + backward data and weight gradients) as ``layer_time`` priced them, ``slow``
    (the SM-share slowdown, 1 without overlapped communication) included, and ``slow``."""
    job = case_from_entry(entry).job
    with host_args() as seen:
        stage_costs(job)
    kw = seen["kw"]
    gemms, units = kw["priced"]
    slow = kw["slow"]

    def ms(sel) -> float:
        c = [gemms[i][1][0] for i in sel]
        u = [units[i] for i in sel]
        return 1e3 * float(np.ravel(slow * (units_time_fwd(c, u) + units_time_bwd(c, u)[0]))[0])
    routed = [i for i, (p, g) in enumerate(gemms) if p == "routed_mlp" and g[4] is not None]
    router = [i for i, (p, g) in enumerate(gemms) if p == "routed_mlp" and g[4] is None]
    rest = [i for i in range(len(gemms)) if i not in routed + router]
    return ms(rest), ms(router), ms(routed), float(np.ravel(slow)[0])


def row_terms(path: str, rid: str) -> tuple[list[tuple[str, float]], float, float, dict]:
    """``(terms, estimate ms, measured ms, facts)`` per MoE layer and micro-batch of one row
    (``parts``' terms with the GEMMs split by ``gemm_split``; they sum to the estimate)."""
    entry = _entry(path, rid)
    case = case_from_entry(entry)
    job = case.job
    named, total = parts(entry)
    proj, router, routed, _slow = gemm_split(entry)
    # ``parts`` records the GEMMs before ``slow`` and leaves the rest in the layer's remainder
    extra = proj + router + routed - dict(named)[GEMMS]
    out = []
    for k, v in named:
        if k == REST:
            out.append((k, v - extra))
        elif k.startswith("GEMMs"):
            out += [(RATE_TERMS[0], proj), (RATE_TERMS[1], router), (RATE_TERMS[2], routed)]
        elif k.startswith("per-expert quantise launches"):
            out.append(("per-expert quantise launches (split_quantize)", v))
        else:
            out.append((k, v))
    per = 1e3 * case.measured_step_s / (job.model.num_moe_layers / job.plan.pp) \
        / (job.plan.gbs // (job.plan.mbs * job.plan.dp))
    facts = {"mbs": job.plan.mbs, "tokens": job.plan.mbs * job.model.seq_length,
             "local": job.model.num_experts // job.plan.ep, "host": host_cpu(job.cluster.gpu.name),
             "dtype": job.dtype}
    return out, total, per, facts


def table1() -> dict:
    """Print table 1; return ``{label: (terms, estimate, measured, facts)}``."""
    rows = {lab: row_terms(f, rid) for f, rid, lab in ROWS}
    labs = [lab for *_, lab in ROWS]
    print("| term, ms per MoE layer and micro-batch | " + " | ".join(labs) + " |")
    print("|---|" + "---|" * len(labs))
    for key in ("mbs", "tokens", "local", "host", "dtype"):
        print(f"| {key} | " + " | ".join(str(rows[lab][3][key]) for lab in labs) + " |")
    for i, (k, _) in enumerate(rows[labs[0]][0]):
        print(f"| {k} | " + " | ".join(f"{rows[lab][0][i][1]:.3f}" for lab in labs) + " |")
    for name, j in (("estimate", 1), ("measured", 2)):
        print(f"| **{name}** | " + " | ".join(f"{rows[lab][j]:.3f}" for lab in labs) + " |")
    print("| **miss** | " + " | ".join(f"{rows[lab][2] - rows[lab][1]:.3f}" for lab in labs)
          + " |")
    return rows


def rate_ms(row) -> float:
    """ms of the GPU-rate terms (``RATE_TERMS``) of one table-1 row."""
    return sum(v for k, v in row[0] if k in RATE_TERMS)


def table2(rows: dict) -> list[tuple]:
    """Print table 2; return ``(a, b, measured ratio, model ratio, model rate-terms ratio)``
    per pair, step ratios of the same global batch (per MoE layer and micro-batch times the
    micro-batches)."""
    out = []
    print("\n| pair | what differs | measured step ratio | model step ratio | model ratio of "
          "the GPU-rate terms | measured / model |\n|---|---|---|---|---|---|")
    for a, b, what in PAIRS:
        ra, rb = rows[a], rows[b]
        # equal tokens per step and GPU: step ratio = per-layer-mb ratio x (mbs_b / mbs_a)
        w = rb[3]["mbs"] / ra[3]["mbs"]
        meas, model = ra[2] / rb[2] * 1 / w, ra[1] / rb[1] * 1 / w
        rate = rate_ms(ra) / rate_ms(rb) / w
        out.append((a, b, meas, model, rate))
        print(f"| {a} / {b} | {what} | {meas:.3f} | {model:.3f} | {rate:.3f} | "
              f"{meas / model:.3f} |")
    return out


def table3() -> list[tuple]:
    """Print table 3; return ``(id, GPU, host, local experts, tokens per micro-batch, miss ms
    per MoE layer and micro-batch, miss per local expert µs)`` of the 26.04.01 MXFP8
    HybridEP MoE rows."""
    jobs = {e["id"]: case_from_entry(e).job for e in load_reference(BRIDGE_2604)}
    out = []
    for rid, gpu, dt, mbs, _m, _e, err, miss, _layer in residual_rows(BRIDGE_2604):
        job = jobs[rid]
        if dt != "mxfp8" or job.plan.moe_dispatcher != "hybridep":
            continue
        local = job.model.num_experts // job.plan.ep
        out.append((rid, gpu, host_cpu(gpu), local, mbs * job.model.seq_length // job.plan.tp,
                    miss, 1e3 * miss / local, err))
    print("\n| 26.04.01 row (MXFP8, HybridEP, eager) | GPU | host | local experts | tokens per "
          "micro-batch | error | miss ms per MoE layer and micro-batch | miss µs per local "
          "expert |\n|---|---|---|---|---|---|---|---|")
    for rid, gpu, host, local, tok, miss, per, err in sorted(out, key=lambda r: (r[3], r[0])):
        print(f"| {rid} | {gpu} | {host} | {local} | {tok} | {err:+.1f} % | {miss:.2f} | "
              f"{per:.0f} |")
    return out


def by_gpu() -> dict[tuple[str, str], list[float]]:
    """``{("moe" | "dense", GPU name): [analytic error %, ...]}`` over the files
    ``reference_mape`` runs but ``published.json``, printed as a table."""
    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in sorted(glob.glob(DATA + "*.json")):
        if f.endswith("/published.json") or "schedule_studies" in f:  # as reference_mape
            continue
        rows = [c for c in file_cases(f) if not c.get("skipped")]
        kind = {}
        for e in load_reference(f):
            job = case_from_entry(e).job
            if job is not None:
                kind[e["id"]] = ("moe" if job.model.is_moe else "dense", job.cluster.gpu.name)
        for c in rows:
            if c["id"] in kind:
                acc[kind[c["id"]]].append(c["analytic_error_pct"])
    print("| rows | GPU | runs | mean signed error | MAPE |\n|---|---|---|---|---|")
    for (k, g), v in sorted(acc.items()):
        print(f"| {k} | {g} | {len(v)} | {sum(v) / len(v):+.1f} % | "
              f"{sum(abs(x) for x in v) / len(v):.1f} % |")
    return dict(acc)


def main(argv: list[str] | None = None) -> None:
    if "--by-gpu" in (sys.argv[1:] if argv is None else argv):
        by_gpu()
        return
    rows = table1()
    table2(rows)
    table3()


if __name__ == "__main__":
    main()
