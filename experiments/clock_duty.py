#!/usr/bin/env python
"""The one-micro-batch data-parallel clock as a duty cycle (docs/calibration.md §5.226,
``SystemConfig.overlap_clock_duty``, ``strategies.cost.stage.clock_duty``): every reference
row whose estimate the switch moves, with the overlapped collectives' seconds ``T_c``
(``clock_duty.dp_window_comm``), rank 0's compute at the full clock ``C``
(``clock_duty.rank_compute``), the duty-cycle factor, the step as priced (switch off) and
with the switch on, and the data-parallel term the estimate exposes.

    python experiments/clock_duty.py                      # the rows (analytic, ~1 min)
    python experiments/clock_duty.py --on experiments/reference_mape.py
    python experiments/clock_duty.py --on experiments/validate_published.py --tiers 1 --no-sim

``--on SCRIPT [ARGS]`` (or ``--on -m MODULE [ARGS]``) runs another command with the switch on
for every job (``clock_duty.switched_on`` True).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.mlperf8b_terms import run_command  # noqa: E402
from strategies.cost import overlap_clock  # noqa: E402
from strategies.cost.stage import clock_duty  # noqa: E402
from strategies.cost.stage.cost_arrays import record_of  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.plan_arrays import PlanArrays  # noqa: E402
from strategies.reference.cases import reference_cases, run_file_names  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data")


def _on(si) -> bool:
    return True


def window(job: Job) -> tuple[float, float, float]:
    """``T_c``, ``C`` (seconds) and the duty-cycle factor of ``job``'s one plan."""
    si = stage_inputs(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                      job.framework, job.system)
    P = si.P
    base = record_of(replace(si, slow=overlap_clock.overlap_slowdown(
        P.tp, P.tp_comm_overlap, P.cp, si.zero_g, si.whole, si.paired, dp_duty=1.0)))
    t_c = float(np.max(clock_duty.dp_window_comm(si, base)))
    c = float(np.max(clock_duty.rank_compute(si, base)))
    return t_c, c, float(overlap_clock.duty_cycle_factor(t_c, c))


def main() -> None:
    print("| file | row | measured s | off | on | T_c s | C s | factor | dp_comm s (on) |")
    print("|---|---|---|---|---|---|---|---|---|")
    tot: dict[str, list] = {}
    cases = ((f, c) for f in run_file_names(DATA)
             for c in reference_cases([os.path.join(DATA, f)]) if not c.skipped)
    for f, c in cases:
        off = estimate(c.job)
        with mock.patch.object(clock_duty, "switched_on", _on):
            on = estimate(c.job)
            if on.step_time_s == off.step_time_s:
                continue
            t_c, comp, fac = window(c.job)
        m = c.measured_step_s
        e = (off.step_time_s / m - 1, on.step_time_s / m - 1)
        tot.setdefault(f, []).append(e)
        print(f"| {f} | {c.id} | {m:.4f} | {100 * e[0]:+.1f} % | {100 * e[1]:+.1f} % | "
              f"{t_c:.4f} | {comp:.4f} | {fac:.4f} | {on.breakdown_s['dp_comm']:.4f} |")
    for f, v in tot.items():
        a = np.abs(np.array(v)).mean(axis=0) * 100
        print(f"\n{f}: {len(v)} rows moved, their MAPE off {a[0]:.2f} %, on {a[1]:.2f} %")


def switch_on(argv: list[str]) -> None:
    """Run ``argv`` (a script path or ``-m MODULE``, then its arguments) with the switch on."""
    with mock.patch.object(clock_duty, "switched_on", _on):
        run_command(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--on"]:
        switch_on(sys.argv[2:])
    else:
        main()
