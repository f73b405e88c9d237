#!/usr/bin/env python
"""Llama 3.1 405B fp8 on GB200, the two plans term by term (docs/calibration.md §5.180): DGX
Cloud / NeMo 2025's tp4 pp8 vp8 cp2 (GBS 64-256, 32 micro-batches) against Megatron-Bridge
25.11+'s tp4 pp16 vp4 cp1 (GBS 1536, 384 micro-batches). Every figure is GPU-microseconds per
trained token (a term's seconds x GPUs / tokens per step), so the plans read side by side.

    python experiments/plan405_terms.py      # tables 1-6 (a few seconds)

Table 1: each GB200 row's step by term. Table 2: the model moved from one plan to the other one
field at a time. Table 3: one layer per token by GEMM shape (the TP-overlap pieces) at cp 2 and
cp 1. Table 4: the same-container rows of the old plan on DGX-B200 and GB200 (Megatron-Bridge's
25.09/25.11 tables, ``COMPARATORS``), measured against the model. Table 5: the within-release
plan ratios, measured against the model. Table 6: what the measured ratio would ask of each of
the old plan's terms alone.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.llama405_blackwell import _slow, cases, layer_parts  # noqa: E402
from strategies.cost import gemm_shapes, gemm_time  # noqa: E402
from strategies.estimate.scalar import BREAKDOWN_KEYS, estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.reference.cases import Case, case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data")
#: the old plan's row every ladder starts from, and the new plan's it ends at
OLD, NEW = "dgxc2505_llama31_405b_gb200_256_fp8", "mbridge260401_llama31405b_gb200_256_fp8"
#: the GB200 fp8 rows of both plans (table 1): old plan, then new plan
GB200_ROWS = ("dgxc2505_llama31_405b_gb200_128_fp8", OLD, "dgxc2505_llama31_405b_gb200_512_fp8",
              "nemo2504_llama3405b_gb200_128", "mbridge2511_llama405b_gb200_256_fp8cs", NEW,
              "mbridge2606_llama31405b_gb200_256_fp8")
#: the step's terms as ``estimate`` names them (``ep_comm`` is 0 on a dense model)
TERMS = tuple(k for k in BREAKDOWN_KEYS if k != "ep_comm")
#: the old plan's row on B200 (NeMo 25.02), the job the B200 comparators re-price
B200_OLD = "nemo2502_llama3405b_b200_128"
ARCHIVE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at 067f987df03b, "
           "'{r} NeMo Container' Pre-Training table, System {s}, {m} row")
#: the same 8B job on the two parts (NeMo 25.04's GB200 and 25.02's B200 tables)
B200_8B, GB200_8B = "nemo2502_llama38b_b200_8", "nemo2504_llama38b_gb200_8"


@dataclass(frozen=True)
class Comparator:
    """A published row the reference files do not hold, of the same job as reference row
    ``base`` (its model, cluster and plan; the 405B rows the old plan, tp4 pp8 cp2 vp8, mbs 1,
    GBS 64 on 128 GPUs; the 8B rows tp1, mbs 2, GBS 128 on 8 GPUs): ``tokens`` tokens/s per
    GPU as printed, re-priced on ``base``'s job in ``dtype``."""

    size: str
    release: str
    gpu: str
    dtype: str
    tokens: float
    base: str
    source: str


#: Megatron-Bridge's 25.09 and 25.11 tables: the old plan beside the new one in one container
#: (the parenthesised figures are the 32x32-block MXFP8 runs, the tables' footnote; 25.09's
#: GB200 row puts its old plan in the parentheses, FSDP 0 TP 4 PP 8 CP 2 VP 8 GA 32), and the
#: 8B job on both parts: (model, release, GPU, dtype, tokens/s per GPU as printed)
_PRINTED = (("405b", "25.09", "B200", "fp8-current", 664), ("405b", "25.09", "B200", "mxfp8", 622),
            ("405b", "25.09", "GB200", "mxfp8", 578), ("405b", "25.11", "B200", "fp8-current", 661),
            ("405b", "25.11", "B200", "mxfp8", 624), ("8b", "25.09", "B200", "fp8-current", 29994),
            ("8b", "25.09", "GB200", "fp8-current", 31357),
            ("8b", "25.11", "B200", "fp8-current", 30624),
            ("8b", "25.11", "GB200", "fp8-current", 31508))
#: each model and part's reference row (the job re-priced) and its name in the tables
_BASES = {("405b", "B200"): B200_OLD, ("405b", "GB200"): "nemo2504_llama3405b_gb200_128",
          ("8b", "B200"): B200_8B, ("8b", "GB200"): GB200_8B}
_NAMES = {"405b": "LLAMA3.1_405B", "8b": "LLAMA3_8B"}
COMPARATORS = tuple(
    Comparator(m, r, g, dt, tok, _BASES[(m, g)], ARCHIVE.format(r=r, s=f"DGX-{g}", m=_NAMES[m]))
    for m, r, g, dt, tok in _PRINTED)


def all_cases() -> dict[str, Case]:
    """``llama405_blackwell.cases``, the NeMo performance-summary 405B rows and its two 8B
    rows the comparators re-price (``B200_8B``, ``GB200_8B``), by id."""
    out = cases()
    rows = load_reference(os.path.join(DATA, "nemo_performance_25.json"))
    for r in rows:
        if "405b" in r["id"] or r["id"] in (B200_8B, GB200_8B):
            c = case_from_entry(r, rows)
            if c.job is not None:
                out[r["id"]] = c
    return out


def tokens_per_gpu(job: Job) -> float:
    """Tokens one GPU's share of a step trains: ``gbs · seq / GPUs``."""
    return job.plan.gbs * job.seq_len / job.cluster.num_gpus


def per_token(job: Job) -> dict[str, float]:
    """The estimate of ``job`` in GPU-µs per trained token: ``step`` and each of ``TERMS``
    (a term's seconds over ``tokens_per_gpu``); they sum to ``step``."""
    e = estimate(job)
    n = 1e6 / tokens_per_gpu(job)
    out = {k: e.breakdown_s[k] * n for k in TERMS}
    out["step"] = e.step_time_s * n
    return out


def measured_per_token(c: Case) -> float:
    """The row's measured step in GPU-µs per trained token."""
    return c.measured_step_s * 1e6 / tokens_per_gpu(c.job)


def rejob(base: Job, dtype: str | None = None, **plan: int) -> Job:
    """``base`` with ``plan``'s fields replaced (dp re-derived from the GPUs) and ``dtype``."""
    return make_job(base.model, base.cluster, replace(base.plan, dp=None, **plan),
                    dtype=dtype or base.dtype, framework=base.framework, system=base.system)


def ladder(old: Job, new: Job) -> list[tuple[str, Job]]:
    """The old plan moved to the new one field at a time on the old row's 256 GB200 (the
    micro-batches per pipeline kept at 32 until the last step): the scaling recipe, cp 2 → 1,
    pp 8 vp 8 → pp 16 vp 4, GBS 1536, then, where the two stacks differ in it, Megatron-Core's
    ``overlap_param_gather_with_optimizer_step`` as ``new``'s plan sets it (NeMo 2's
    performance scripts on, Megatron-Bridge off: docs/calibration.md §5.200); the last job is
    ``new``'s plan on ``old``'s cluster and stack with that switch."""
    dt = new.dtype
    m = old.num_microbatches
    p = new.plan
    steps = [("old plan (tp4 pp8 vp8 cp2, GBS 128, m 32, delayed)", old),
             ("+ current scaling", rejob(old, dt)),
             ("+ cp 1 (dp 8, GBS 256, m 32)", rejob(old, dt, cp=1, gbs=m * 8)),
             ("+ pp 16 vp 4 (dp 4, GBS 128, m 32)",
              rejob(old, dt, cp=1, pp=p.pp, vpp=p.vpp, gbs=m * 4)),
             ("+ GBS 1536 (m 384) = new plan",
              rejob(old, dt, cp=1, pp=p.pp, vpp=p.vpp, gbs=p.gbs))]
    opt = new.plan.param_gather_with_optimizer
    if steps[-1][1].plan.param_gather_with_optimizer != opt:
        last = steps[-1][1]
        steps[-1] = ("+ GBS 1536 (m 384)", last)
        steps.append((f"+ overlap_param_gather_with_optimizer_step {'on' if opt else 'off'}"
                      " = new plan",
                      make_job(last.model, last.cluster,
                               replace(last.plan, param_gather_with_optimizer=opt),
                               dtype=last.dtype, framework=last.framework,
                               system=last.system)))
    return steps


def gemm_rows(job: Job) -> list[dict[str, float]]:
    """One layer's GEMMs of ``job`` (qkv, proj, fc1, fc2) per token a rank holds: the shape of
    each piece the forward runs (TP overlap's ``tp`` pieces of ``M/tp`` rows), and the
    forward, data-gradient and weight-gradient µs per token with the overlap clock, as
    ``layer_time`` prices them (``gemm_time.gemm_units``)."""
    P, m, gpu = job.plan, job.model, job.cluster.gpu
    parts = gemm_shapes.layer_gemm_parts(m, P.mbs, P.tp, P.cp, 1, None, None, 1.0)
    gemms = [g for _, g in parts]
    units = gemm_time.gemm_units(gemms, P.tp, gpu, job.dtype, P.tp_comm_overlap, job.framework,
                                 job.system, shares=gemm_time.fixed_shares(parts, m, 1,
                                                                           job.framework))
    slow, tok = _slow(job), P.mbs * job.seq_len / P.cp
    out = []
    for name, (count, M, N, K, _), (pieces, f, dp, d, w) in zip(
            ("qkv", "proj", "fc1", "fc2"), gemms, units):
        out.append({"name": name, "M_piece": M / pieces, "N": N, "K": K, "pieces": pieces,
                    "fwd": 1e6 * slow * count * pieces * f / tok,
                    "dgrad": 1e6 * slow * count * dp * d / tok,
                    "wgrad": 1e6 * slow * count * w / tok,
                    "tflops": 3 * 2 * count * M * N * K / (slow * count * (pieces * f + dp * d + w))
                    / 1e12})
    return out


def comparator_job(c: Comparator, cs: dict[str, Case]) -> Job:
    """The job ``c`` is priced on: its ``base`` row's job in ``c.dtype``."""
    return rejob(cs[c.base].job, c.dtype)


def model_tokens(job: Job) -> float:
    """The model's tokens/s per GPU of ``job``."""
    return tokens_per_gpu(job) / estimate(job).step_time_s


def release_pairs(cs: dict[str, Case]) -> list[tuple[str, float, float]]:
    """Within-release ratios (label, measured, model) of tokens/s per GPU: 25.11's new plan on
    GB200 over its old plan on B200 (FP8-CS, two parts and two plans), the old plan on GB200
    over B200 (25.09 MXFP8) and the 8B job on GB200 over B200 (25.09, 25.11 FP8-CS): the same
    job on the two parts."""
    by = {(c.size, c.release, c.gpu, c.dtype): c for c in COMPARATORS}
    new = cs["mbridge2511_llama405b_gb200_256_fp8cs"]
    meas_new = tokens_per_gpu(new.job) / new.measured_step_s
    b11 = by[("405b", "25.11", "B200", "fp8-current")]
    out = [("405B 25.11 FP8-CS: new plan GB200 / old plan B200", meas_new / b11.tokens,
            model_tokens(new.job) / model_tokens(comparator_job(b11, cs)))]
    for size, rel, dt in (("405b", "25.09", "mxfp8"), ("8b", "25.09", "fp8-current"),
                          ("8b", "25.11", "fp8-current")):
        g, b = by[(size, rel, "GB200", dt)], by[(size, rel, "B200", dt)]
        out.append((f"{size.upper()} {rel} {dt}: GB200 / B200, same job", g.tokens / b.tokens,
                    model_tokens(comparator_job(g, cs)) / model_tokens(comparator_job(b, cs))))
    return out


def plan_ratio(cs: dict[str, Case]) -> tuple[float, float]:
    """(the model's new-over-old plan ratio on GB200 in tokens/s per GPU, FP8-CS: 25.11's row
    over NeMo 25.04's tp4 pp8 cp2 vp8 row; the model's GB200/B200 factor of the old plan:
    NeMo 25.04's GB200 job over 25.11's B200 job, both FP8-CS)."""
    old = model_tokens(cs["nemo2504_llama3405b_gb200_128"].job)
    b11 = next(c for c in COMPARATORS if (c.size, c.release, c.gpu, c.dtype)
               == ("405b", "25.11", "B200", "fp8-current"))
    return (model_tokens(cs["mbridge2511_llama405b_gb200_256_fp8cs"].job) / old,
            old / model_tokens(comparator_job(b11, cs)))


def implied_plan_ratios(pairs: list[tuple[str, float, float]],
                        gpu_factor: float) -> list[tuple[str, float, float]]:
    """The new-over-old plan ratio on GB200 in 25.11 that ``pairs[0]`` (measured new-plan GB200
    over old-plan B200) implies under each reading of the old plan's GB200/B200 factor:
    (reading, factor, ``pairs[0]`` measured / factor). The readings: the model's
    ``gpu_factor``; the 405B MXFP8 pair's measured ratio (the same plan on both parts); the
    model's factor times each 8B pair's measured / model."""
    meas0 = pairs[0][1]
    out = [("the model's factor", gpu_factor, meas0 / gpu_factor),
           (f"{pairs[1][0]} (measured)", pairs[1][1], meas0 / pairs[1][1])]
    for label, meas, mod in pairs[2:]:
        f = gpu_factor * meas / mod
        out.append((f"model x {label} measured/model", f, meas0 / f))
    return out


def needed_excess(cs: dict[str, Case]) -> tuple[float, dict[str, float]]:
    """What the measured old/new ratio (26.04.01) asks of the old plan if the new plan's
    estimate stood: the GPU-µs per token the old row's estimate lacks, and each candidate
    term of the old row (GPU-µs per token; attention and GEMMs as their shares of the compute
    term, ``layer_parts``) with the factor it would need to carry that alone."""
    old, new = cs[OLD], cs[NEW]
    t = per_token(old.job)
    ratio = measured_per_token(old) / measured_per_token(new)
    extra = ratio * per_token(new.job)["step"] - t["step"]
    p = layer_parts(old.job)
    terms = {k: t[k] for k in ("bubble", "pp_comm", "dp_comm", "optimizer", "cp_comm", "tp_comm")}
    terms.update({k: t["compute"] * p[k] / p["total"] for k in ("attention", "gemm")})
    return extra, terms


def _plan(job: Job) -> str:
    P = job.plan
    return f"tp{P.tp} pp{P.pp} vp{P.vpp} cp{P.cp} GBS {P.gbs} m {job.num_microbatches}"


def main() -> None:
    cs = all_cases()
    print("Table 1: each GB200 fp8 row's step, GPU-µs per trained token\n")
    print("| row | plan | dtype | measured | model | error | " + " | ".join(TERMS) + " |")
    print("|---|---|---|---:|---:|---:|" + "---:|" * len(TERMS))
    for rid in GB200_ROWS:
        c = cs[rid]
        t, meas = per_token(c.job), measured_per_token(c)
        print(f"| {rid} | {_plan(c.job)} | {c.job.dtype} | {meas:.1f} | {t['step']:.1f} "
              f"| {100 * (t['step'] / meas - 1):+.1f} % | "
              + " | ".join(f"{t[k]:.1f}" for k in TERMS) + " |")
    old, new = cs[OLD], cs[NEW]
    print("\nTable 2: the old plan moved to the new one field at a time (256 GB200), "
          "GPU-µs per token\n")
    print("| step | model | × previous | " + " | ".join(TERMS) + " |")
    print("|---|---:|---:|" + "---:|" * len(TERMS))
    prev = None
    for name, j in ladder(old.job, new.job):
        t = per_token(j)
        x = "" if prev is None else f"{prev / t['step']:.3f}"
        print(f"| {name} | {t['step']:.1f} | {x} | " + " | ".join(f"{t[k]:.1f}" for k in TERMS)
              + " |")
        prev = t["step"]
    mo, mn = per_token(old.job)["step"], per_token(new.job)["step"]
    print(f"\nold/new per token: model {mo / mn:.3f}; measured {measured_per_token(old) / measured_per_token(new):.3f} "
          f"(26.04.01), {measured_per_token(old) / measured_per_token(cs['mbridge2511_llama405b_gb200_256_fp8cs']):.3f} (25.11)")
    print("\nTable 3: one layer per token a rank holds (µs, overlap clock in), current scaling, "
          "256 GB200\n")
    print("| GEMM | cp | piece M x N x K | pieces | fwd | dgrad | wgrad | TFLOP/s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for cp, j in ((2, rejob(old.job, new.job.dtype)), (1, new.job)):
        for g in gemm_rows(j):
            print(f"| {g['name']} | {cp} | {g['M_piece']:.0f} x {g['N']:.0f} x {g['K']:.0f} "
                  f"| {g['pieces']:.0f} | {g['fwd']:.3f} | {g['dgrad']:.3f} | {g['wgrad']:.3f} "
                  f"| {g['tflops']:.0f} |")
    print("\n| cp | GEMM | attention | casts | elementwise | launch | layer |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for cp, j in ((2, rejob(old.job, new.job.dtype)), (1, new.job)):
        p, tok = layer_parts(j), j.plan.mbs * j.seq_len / j.plan.cp
        print(f"| {cp} | " + " | ".join(f"{1e6 * p[k] / tok:.3f}" for k in
                                        ("gemm", "attention", "casts", "elementwise", "launch",
                                         "total")) + " |")
    print("\nTable 4: the old plan (405B tp4 pp8 vp8 cp2, GBS 64, 128 GPUs) and the 8B job in "
          "Megatron-Bridge's 25.09/25.11 tables, with the reference rows they pair with, "
          "tokens/s per GPU\n")
    print("| model | release | GPU | dtype | measured | model | measured / model |")
    print("|---|---|---|---|---:|---:|---:|")
    for c in COMPARATORS:
        mt = model_tokens(comparator_job(c, cs))
        print(f"| {c.size} | {c.release} | {c.gpu} | {c.dtype} | {c.tokens:.0f} | {mt:.0f} "
              f"| {c.tokens / mt:.3f} |")
    for rid in (B200_OLD, "nemo2504_llama3405b_gb200_128", "mbridge2511_llama405b_gb200_256_fp8cs",
                NEW, B200_8B, GB200_8B):
        c = cs[rid]
        meas, mt = tokens_per_gpu(c.job) / c.measured_step_s, model_tokens(c.job)
        print(f"| {rid} | | {c.job.cluster.gpu.name} | {c.job.dtype} | {meas:.0f} | {mt:.0f} "
              f"| {meas / mt:.3f} |")
    print("\nTable 5: within one release, tokens/s per GPU ratios\n")
    print("| pair | measured | model | measured / model |")
    print("|---|---:|---:|---:|")
    pairs = release_pairs(cs)
    for label, meas, mod in pairs:
        print(f"| {label} | {meas:.3f} | {mod:.3f} | {meas / mod:.3f} |")
    model_ratio, gpu_factor = plan_ratio(cs)
    print(f"\nThe model's plan ratio on GB200 (25.11 new over NeMo 25.04 old, FP8-CS): "
          f"{model_ratio:.3f}; the measured one the first pair implies, by the old plan's "
          "GB200/B200 factor:\n")
    print("| factor read as | GB200/B200 | implied plan ratio | over the model's |")
    print("|---|---:|---:|---:|")
    for label, f, r in implied_plan_ratios(pairs, gpu_factor):
        print(f"| {label} | {f:.3f} | {r:.3f} | {r / model_ratio:.3f} |")
    extra, terms = needed_excess(cs)
    print(f"\nTable 6: the measured old/new ratio (26.04.01) with the new plan's estimate kept "
          f"asks the old row for {extra:.1f} GPU-µs per token more "
          f"({extra * tokens_per_gpu(old.job) / 1e6:.2f} s per step); each candidate term alone\n")
    print("| old-plan term | GPU-µs per token | factor to carry it alone |")
    print("|---|---:|---:|")
    for k, v in terms.items():
        print(f"| {k} | {v:.1f} | {(v + extra) / v:.1f} |")


if __name__ == "__main__":
    main()
