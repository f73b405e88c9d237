#!/usr/bin/env python
"""The MLPerf Llama 3.1 8B held-out rows term by term (docs/calibration.md §5.224): why the
estimate's compute alone exceeds the measured step on the 13 single-node/two-node rows at
micro-batch 2, and what the three tp-2 rows miss.

1. ``rows``: every row's measured and estimated step, the estimate's terms
   (``estimate(...).breakdown_s``), the overlap clock factor on its GEMMs and attention
   (``StageInputs.slow``) and the model TFLOP/s per GPU, measured and estimated, from the
   benchmark's own ``MODEL_TFLOP_PER_SAMPLE=421.59`` (``config_common_8b.sh``).
2. ``layer``: one layer's kernel ms per 1,000 tokens (``mlperf_mbs_terms.layer_terms``,
   before the clock factor) on a B200 fp8 mbs-2 row, its cp-2 mbs-1 twin, a B200 nvfp4 row,
   a B300 fp8 row and the GB200 nvfp4 row.
3. ``what_if``: each row with the overlap clock's one-micro-batch rule off
   (``overlap_clock.dp_overlaps_whole_step`` False: the clock factor then only where TP
   overlap, ring attention or ZeRO-2/3 set it), beside the rows as priced.
4. Every row of every reference file (``run_file_names``) whose clock factor the
   one-micro-batch rule alone sets: as priced, the rule off, and the rule as a duty cycle
   (the clock drop only while the data-parallel collectives run: the rule-off step plus
   ``C·(1 − OVERLAP_CLOCK_RATIO)``, ``C`` the collectives' whole time, the ``dp_comm`` term of
   the same job with ``overlap_grad_reduce`` and ``overlap_param_gather`` off, capped at the
   rule's full charge). A what-if, not the model.

    python experiments/mlperf8b_terms.py      # 45 s, analytic only
    python experiments/mlperf8b_terms.py --rule-off experiments/reference_mape.py
    python experiments/mlperf8b_terms.py --rule-off -m simulator.cli validate --tiers 1 --no-sim

``--rule-off SCRIPT [ARGS]`` (or ``-m MODULE [ARGS]``) runs another command with the
one-micro-batch rule off, as section 3 does: the what-if's figures on every reference file.
"""
from __future__ import annotations

import os
import runpy
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.mlperf_mbs_terms import layer_terms  # noqa: E402
from dataclasses import replace  # noqa: E402

from strategies.cost import overlap_clock  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.job import Job, make_job  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference, run_file_names  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "heldout_mlperf_llama8b.json")
#: model FLOP of one 8,192-token sample (``config_common_8b.sh`` ``MODEL_TFLOP_PER_SAMPLE``)
MODEL_FLOP_PER_SAMPLE = 421.59e12
PREFIX = "mlperf51_llama318b_"
LAYER_ROWS = ("hpgdgxb200x8n1_b200_8", "hpgdgxb200x8n4_b200_32", "nebiusb200n1_b200_8",
              "as8126gsnb3rt_b300_8", "tychengpu8ngc2509nemo_gb200_8")
TERMS = ("compute", "tp_comm", "cp_comm", "dp_comm", "optimizer")


def clock(job: Job) -> float:
    """The overlap clock factor on the job's GEMMs and attention (``StageInputs.slow``)."""
    si = stage_inputs(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                      job.framework, job.system)
    return float(np.max(si.slow))


def model_tflops(job: Job, step_s: float) -> float:
    """Model TFLOP/s per GPU at ``step_s`` seconds a step."""
    p = job.plan
    return MODEL_FLOP_PER_SAMPLE * p.gbs / (p.dp * p.tp * p.cp * p.pp) / step_s / 1e12


def _no_whole_step(dp, mb, ogr):
    return np.zeros(np.broadcast(np.asarray(dp), np.asarray(mb), np.asarray(ogr)).shape, bool)


def collectives_s(job: Job) -> float:
    """The data-parallel collectives' whole time a step (seconds): ``dp_comm`` of ``job`` with
    neither the gradient reduction nor the parameter gather overlapped."""
    p = replace(job.plan, overlap_grad_reduce=False, overlap_param_gather=False)
    j = make_job(job.model, job.cluster, p, dtype=job.dtype, framework=job.framework,
                 system=job.system)
    return estimate(j).breakdown_s["dp_comm"]


def rule_rows() -> None:
    """Section 4: the rows whose clock factor only the one-micro-batch rule sets."""
    data = os.path.dirname(DATA)
    print("| file | row | measured s | as priced | rule off | duty cycle | C s | compute s |")
    print("|---|---|---|---|---|---|---|---|")
    tot = {}
    for f in run_file_names(data):
        rows = load_reference(os.path.join(data, f))
        for r in rows:
            c = case_from_entry(r, rows)
            if c.skipped:
                continue
            e = estimate(c.job)
            with mock.patch.object(overlap_clock, "dp_overlaps_whole_step", _no_whole_step):
                if clock(c.job) != 1.0:
                    continue
                off = estimate(c.job)
                if off.step_time_s == e.step_time_s:
                    continue
                cs = collectives_s(c.job)
            extra = min(cs * (1.0 - overlap_clock.OVERLAP_CLOCK_RATIO),
                        e.step_time_s - off.step_time_s)
            m = c.measured_step_s
            errs = [x / m - 1 for x in (e.step_time_s, off.step_time_s, off.step_time_s + extra)]
            tot.setdefault(f, []).append(errs)
            print(f"| {f} | {r['id']} | {m:.4f} | " + " | ".join(f"{100 * x:+.1f} %" for x in errs)
                  + f" | {cs:.4f} | {e.breakdown_s['compute']:.4f} |")
    for f, v in tot.items():
        a = np.abs(np.array(v)).mean(axis=0) * 100
        print(f"\n{f}: {len(v)} rows, MAPE as priced {a[0]:.2f} %, rule off {a[1]:.2f} %, "
              f"duty cycle {a[2]:.2f} %")


def main() -> None:
    rows = load_reference(DATA)
    cases = [(r["id"].removeprefix(PREFIX), case_from_entry(r, rows)) for r in rows]
    cases = [(i, c) for i, c in cases if not c.skipped]
    print("## 1. The rows term by term\n")
    print("| row | dtype | mbs tp cp dp | measured s | estimate s | error | "
          + " | ".join(TERMS) + " | clock | model TFLOP/s meas / est |")
    print("|---|---|---|---|---|---|" + "---|" * len(TERMS) + "---|---|")
    priced = {}
    for i, c in cases:
        j, e = c.job, estimate(c.job)
        priced[i] = e.step_time_s
        p, m = j.plan, c.measured_step_s
        print(f"| {i} | {j.dtype} | {p.mbs} {p.tp} {p.cp} {p.dp} | {m:.4f} | "
              f"{e.step_time_s:.4f} | {100 * (e.step_time_s / m - 1):+.1f} % | "
              + " | ".join(f"{e.breakdown_s[k]:.4f}" for k in TERMS)
              + f" | {clock(j):.3f} | {model_tflops(j, m):.0f} / "
              f"{model_tflops(j, e.step_time_s):.0f} |")

    print("\n## 2. One layer's kernel ms per 1,000 tokens (before the clock factor)\n")
    by = dict(cases)
    terms = {i: layer_terms(by[i].job) for i in LAYER_ROWS}
    print("| term | " + " | ".join(LAYER_ROWS) + " |")
    print("|---|" + "---|" * len(LAYER_ROWS))
    keys = [k for k in terms[LAYER_ROWS[0]] if k != "slow"]
    per_k = {i: by[i].job.plan.mbs * by[i].job.model.seq_length / by[i].job.plan.cp / 1e3
             for i in LAYER_ROWS}
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{1e3 * terms[i][k] / per_k[i]:.4f}"
                                       for i in LAYER_ROWS) + " |")
    print("| **sum** (wgrad in bwd) | " + " | ".join(
        f"{1e3 * sum(v for k, v in terms[i].items() if k not in ('slow', 'of which wgrad')) / per_k[i]:.4f}"
        for i in LAYER_ROWS) + " |")
    print("| clock factor | " + " | ".join(f"{terms[i]['slow']:.3f}" for i in LAYER_ROWS)
          + " |")

    print("\n## 3. What-if: the one-micro-batch clock rule off\n")
    print("| row | mbs | measured s | as priced | rule off |")
    print("|---|---|---|---|---|")
    errs = {"as priced": [], "rule off": []}
    with mock.patch.object(overlap_clock, "dp_overlaps_whole_step", _no_whole_step):
        for i, c in cases:
            m, off = c.measured_step_s, estimate(c.job).step_time_s
            errs["as priced"].append(priced[i] / m - 1)
            errs["rule off"].append(off / m - 1)
            print(f"| {i} | {c.job.plan.mbs} | {m:.4f} | {100 * (priced[i] / m - 1):+.1f} % | "
                  f"{100 * (off / m - 1):+.1f} % |")
    for k, v in errs.items():
        print(f"\n{k}: MAPE {100 * np.mean(np.abs(v)):.2f} %, mean {100 * np.mean(v):+.2f} % "
              f"over {len(v)}")
    print("\n## 4. Every reference row the one-micro-batch clock rule alone slows\n")
    rule_rows()


def rule_off(argv: list[str]) -> None:
    """Run ``argv`` (a script path or ``-m MODULE``, then its arguments) with
    ``overlap_clock.dp_overlaps_whole_step`` False."""
    with mock.patch.object(overlap_clock, "dp_overlaps_whole_step", _no_whole_step):
        run_command(argv)


def run_command(argv: list[str]) -> None:
    """Run ``argv`` in this process: a script path, or ``-m MODULE``, then its arguments."""
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rule-off"]:
        rule_off(sys.argv[2:])
    else:
        main()
