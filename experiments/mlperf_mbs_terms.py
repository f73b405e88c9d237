#!/usr/bin/env python
"""The MLPerf GPT-3 175B micro-batch-2 rows decomposed (docs/calibration.md §5.219): which
term of the estimate grows with the micro-batch, and where the per-sample rate misses.

1. ``row_terms``: every H100 micro-batch-2 row of ``heldout_mlperf_gpt3.json`` and the same
   job at micro-batch 1 (the global batch kept, twice the micro-batches): step and the
   estimate's terms (``estimate(...).breakdown_s``).
2. ``layer_terms``: one layer's kernel seconds per sample at micro-batch 1 and 2 (the v4.1
   64-node job): the GEMMs (forward; backward = data + weight gradient) as
   ``gemm_time.gemm_units`` prices them (with TP overlap each ring-exchange GEMM runs as
   ``tp`` pieces of ``mbs·seq/tp`` rows), the attention core, the FP8 casts, the other
   elementwise kernels and the launch gaps, before the overlap clock factor
   (``overlap_clock.overlap_slowdown``, printed).
3. ``pairs``: two rows of one release, plan and micro-batch that differ in the micro-batches
   per pipeline ``M`` only read as ``step = a + b·M``: ``b`` the time per micro-batch on the
   critical stage, ``a`` what does not scale with ``M`` (bubble, data-parallel tail,
   optimizer), measured and estimated; and NeMo 24.07's GPT-3 175B pair
   (``nemo_performance_2407.json``: one stack, micro-batch 1 on 128 GPUs and 2 on 512) as
   the estimate's signed error.

    python experiments/mlperf_mbs_terms.py      # a few seconds, analytic only
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import elementwise_bytes, gemm_shapes  # noqa: E402
from strategies.cost.attention_time import attention_time_fwd  # noqa: E402
from strategies.cost.elementwise_time import cast_time, launch_time  # noqa: E402
from strategies.cost.gemm_time import (fixed_shares, gemm_units, units_time_bwd,  # noqa: E402
                                       units_time_fwd, whole_split)
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.cost.quant_scope import scope_formats  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data")
MLPERF = os.path.join(DATA, "heldout_mlperf_gpt3.json")
NEMO2407 = os.path.join(DATA, "nemo_performance_2407.json")
LAYER_ROW = "mlperf41_gpt3_nvidia_eos_n64"
#: rows of one release, plan and micro-batch whose micro-batches per pipeline differ
PAIRS = (("mlperf30_gpt3_coreweave_coreweave_hgxh100_n96",
          "mlperf30_gpt3_coreweave_coreweave_hgxh100_n192"),
         ("mlperf31_gpt3_nvidia_eos_n64", "mlperf31_gpt3_nvidia_eos-dfw_n512"),
         ("mlperf41_gpt3_nvidia_eos_n32", "mlperf41_gpt3_nvidia_eos_n64"),
         ("mlperf41_gpt3_oracle_1536xBM.GPU.H100.8", "mlperf41_gpt3_oracle_3072xBM.GPU.H100.8"))
NEMO_PAIR = ("nemo2407_gpt3_175b_128gpu", "nemo2407_gpt3_175b_512gpu")


def at_mbs(job: Job, mbs: int) -> Job:
    """``job`` at micro-batch ``mbs`` (the global batch kept)."""
    return make_job(job.model, job.cluster, replace(job.plan, mbs=mbs), dtype=job.dtype,
                    framework=job.framework, system=job.system)


def micro_batches(job: Job) -> float:
    """Micro-batches per step and pipeline."""
    p = job.plan
    return p.gbs / (p.mbs * p.dp)


def layer_terms(job: Job) -> dict[str, float]:
    """One layer's kernel seconds per micro-batch on one GPU by kind (the parts
    ``layer_time.layer_time`` sums), before the overlap clock factor ``slow``."""
    si = stage_inputs(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                      job.framework, job.system)
    m, P, fw, sy, gpu, dtype = job.model, si.P, si.fw, si.sy, si.gpu, si.dtype
    b, tp, cp, ep, sp, tpo = P.mbs, P.tp, P.cp, P.ep, P.sp, P.tp_comm_overlap
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, None, 1.0,
                                         whole_split(tp, sp, fw))
    units = gemm_units([g for _, g in parts], tp, gpu, dtype, tpo, fw, sy,
                       shares=fixed_shares(parts, m, ep, fw),
                       formats=scope_formats(parts, m, sy.quant_scope, dtype))
    counts = [g[0] for _, g in parts]
    g_b, g_w = units_time_bwd(counts, units)
    a_f, a_b = attention_time_fwd(m, b, tp, cp, P.flash_attn, gpu, 1.0, fw, sy,
                                  P.hierarchical_cp)
    c_f, c_b = cast_time(m, b, tp, cp, sp, gpu, dtype, sy, fw)
    e = elementwise_bytes.elementwise_bytes_fwd(m, b, tp, cp, sp, fw.elementwise_kernels) \
        / usable_hbm(gpu, sy)
    return {"slow": float(si.slow), "gemm fwd": float(units_time_fwd(counts, units)),
            "gemm bwd": float(g_b), "of which wgrad": float(g_w), "attention fwd": float(a_f),
            "attention bwd": float(a_b), "casts fwd+bwd": float(c_f + c_b),
            "elementwise fwd+bwd": float(3 * e), "launch gaps": 3 * float(launch_time(fw, gpu=gpu))}


def fit_pair(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float]:
    """``(a, b)`` of ``y = a + b·x`` through two points."""
    b = (y[0] - y[1]) / (x[0] - x[1])
    return y[0] - b * x[0], b


def main() -> None:
    rows = load_reference(MLPERF)
    by_id = {r["id"]: r for r in rows}
    jobs = {r["id"]: case_from_entry(r, rows) for r in rows}

    print("## 1. The H100 micro-batch-2 rows and the same job at micro-batch 1\n")
    print("| row | mbs | M | measured s | step s | error | compute | tp_comm | pp_comm | "
          "dp_comm | bubble |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rid, c in jobs.items():
        if by_id[rid]["plan"]["microbatch"] != 2 or by_id[rid]["hardware"]["gpu"] != "H100 SXM":
            continue
        for j in (c.job, at_mbs(c.job, 1)):
            e = estimate(j)
            t = e.breakdown_s
            err = f"{100 * (e.step_time_s / c.measured_step_s - 1):+.1f} %" \
                if j is c.job else "-"
            print(f"| {rid} | {j.plan.mbs} | {micro_batches(j):g} | "
                  f"{c.measured_step_s:.3f} | {e.step_time_s:.3f} | {err} | "
                  + " | ".join(f"{t[k]:.3f}" for k in ("compute", "tp_comm", "pp_comm",
                                                       "dp_comm", "bubble")) + " |")

    print(f"\n## 2. One layer's kernel ms per sample ({LAYER_ROW}'s job)\n")
    two = jobs[LAYER_ROW].job
    t2, t1 = layer_terms(two), layer_terms(at_mbs(two, 1))
    print("| term | mbs 1 | mbs 2 | mbs 2 / mbs 1 |")
    print("|---|---|---|---|")
    for k in t1:
        if k == "slow":
            continue
        a, b = 1e3 * t1[k], 1e3 * t2[k] / 2
        print(f"| {k} | {a:.4f} | {b:.4f} | {b / a:.3f} |")
    s1 = sum(v for k, v in t1.items() if k not in ("slow", "of which wgrad"))
    s2 = sum(v for k, v in t2.items() if k not in ("slow", "of which wgrad")) / 2
    print(f"| **sum** | {1e3 * s1:.4f} | {1e3 * s2:.4f} | {s2 / s1:.3f} |")
    print(f"\noverlap clock factor on the GEMMs and attention: {t1['slow']:.4f} (both)")

    print("\n## 3. step = a + b·M: pairs of one release and plan\n")
    print("| pair | M | measured a, b (s) | estimated a, b (s) | b est / meas | b per sample "
          "meas / est (ms) |")
    print("|---|---|---|---|---|---|")
    for p in PAIRS:
        cs = [jobs[i] for i in p]
        ms = tuple(micro_batches(c.job) for c in cs)
        am, bm = fit_pair(ms, tuple(c.measured_step_s for c in cs))
        ae, be = fit_pair(ms, tuple(estimate(c.job).step_time_s for c in cs))
        mbs = cs[0].job.plan.mbs
        print(f"| {p[0]} / {p[1].split('_', 3)[-1]} (mbs {mbs}) | {ms[0]:g}, {ms[1]:g} | "
              f"{am:.3f}, {bm:.4f} | {ae:.3f}, {be:.4f} | {be / bm:.3f} | "
              f"{1e3 * bm / mbs:.1f} / {1e3 * be / mbs:.1f} |")

    print("\n## 4. One stack at micro-batch 1 and 2 (NeMo 24.07, nemo_performance_2407.json)\n")
    nemo = load_reference(NEMO2407)
    print("| row | GPUs | mbs | M | measured s | estimated s | error | per sample meas / est "
          "(ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in nemo:
        if r["id"] not in NEMO_PAIR:
            continue
        c = case_from_entry(r, nemo)
        e = estimate(c.job)
        m, mbs = micro_batches(c.job), c.job.plan.mbs
        print(f"| {r['id']} | {r['hardware']['n_gpus']} | {mbs} | {m:g} | "
              f"{c.measured_step_s:.3f} | {e.step_time_s:.3f} | "
              f"{100 * (e.step_time_s / c.measured_step_s - 1):+.1f} % | "
              f"{1e3 * c.measured_step_s / (m * mbs):.1f} / "
              f"{1e3 * e.step_time_s / (m * mbs):.1f} |")


if __name__ == "__main__":
    main()
