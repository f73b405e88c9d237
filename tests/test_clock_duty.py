"""The one-micro-batch data-parallel reduction's SM clock as a duty cycle
(``overlap_clock.duty_cycle_factor``, ``stage.clock_duty``, docs/calibration.md §5.226)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import overlap_clock
from strategies.cost.stage import stage_cost_arrays
from strategies.cost.stage.clock_duty import dp_window_comm, rank_compute
from strategies.cost.stage.cost_arrays import record_of
from strategies.cost.stage.inputs import stage_inputs
from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

R = overlap_clock.OVERLAP_CLOCK_RATIO
ON = SystemConfig(overlap_clock_duty=1.0)


def test_duty_cycle_closed_forms():
    f = overlap_clock.duty_cycle_factor
    assert f(0.0, 0.5) == 1.0                                  # no traffic: full clock
    for c in (1e-3, 0.4, 7.0):
        assert f(c / R, c) == pytest.approx(1 / R, rel=1e-12)  # comm lasts the slowed compute
        assert f(3 * c, c) == pytest.approx(1 / R, rel=1e-12)  # and beyond: capped
        for t in (0.1 * c, 0.5 * c, c):                        # inside: C' = C + (1 - r)·T_c
            assert f(t, c) * c == pytest.approx(c + (1 - R) * t, rel=1e-12)
    # work conservation: r·T_c done in the window, the rest at full rate after it
    c, t = 0.6, 0.25
    assert f(t, c) * c == pytest.approx(t + (c - R * t), rel=1e-12)
    got = f(np.array([0.0, 0.1, 10.0]), np.array([1.0, 1.0, 1.0]))
    assert got == pytest.approx([1.0, 1 + (1 - R) * 0.1, 1 / R], rel=1e-12)
    assert f(0.3, 0.0) == 1.0                                  # no compute: nothing to slow


def test_overlap_slowdown_takes_the_duty_only_where_dp_is_alone():
    w = np.array([True, True, False, True])
    tpo = np.array([False, True, False, False])
    tp = np.array([1, 2, 1, 1])
    cp = np.array([1, 1, 1, 2])
    got = overlap_clock.overlap_slowdown(tp, tpo, cp, 1, w, False, dp_duty=1.05)
    assert list(got) == [1.05, 1 / R, 1.0, 1 / R]
    assert list(overlap_clock.overlap_slowdown(tp, tpo, cp, 1, w)) == [1 / R, 1 / R, 1.0, 1 / R]


def _job(system=None, plan="tp=1,pp=1,dp=8,mbs=2,gbs=16"):
    return make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), parse_plan(plan),
                    dtype="bf16", system=system)


def _record(job):
    return stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.from_plans([job.plan]),
                             job.framework, job.system)


def test_record_reads_the_duty_cycle_of_its_collectives_and_compute():
    job = _job(ON)
    si = stage_inputs(job.model, job.cluster, job.dtype, PlanArrays.from_plans([job.plan]),
                      job.framework, job.system)
    base = record_of(replace(si, slow=overlap_clock.overlap_slowdown(
        1, False, 1, si.zero_g, si.whole, si.paired, dp_duty=1.0)))
    t_c, c = dp_window_comm(si, base), rank_compute(si, base)
    assert 0 < t_c[0] < c[0] * R                              # a part of the step
    want = overlap_clock.duty_cycle_factor(t_c, c)
    on, off = _record(job), _record(_job())
    assert on.slowdown[0] == pytest.approx(want[0], rel=1e-12)
    assert 1.0 < on.slowdown[0] < 1 / R
    assert off.slowdown[0] == 1 / R                           # the switch off: the whole step
    assert on.layer_fwd[0] < off.layer_fwd[0]
    assert base.slowdown[0] == 1.0
    # two micro-batches: no clock factor either way; TP overlap keeps 1/r either way
    assert _record(_job(ON, "tp=1,pp=1,dp=8,mbs=2,gbs=32")).slowdown[0] == 1.0
    tpo = "tp=2,pp=1,dp=4,mbs=2,gbs=8,sp=true,tp_comm_overlap=true"
    assert _record(_job(ON, tpo)).slowdown[0] == _record(_job(None, tpo)).slowdown[0] == 1 / R


def test_estimate_reads_the_record_and_the_switch_checks_its_range():
    on, off = estimate(_job(ON)), estimate(_job())
    assert on.step_time_s < off.step_time_s
    with pytest.raises(SpecError):
        SystemConfig(overlap_clock_duty=2.0)


def test_simulator_reads_the_same_record():
    from simulator.simulate import simulate
    on, off = simulate(_job(ON)), simulate(_job())
    est_on, est_off = estimate(_job(ON)), estimate(_job())
    assert on.step_time_s < off.step_time_s
    # the clock's seconds saved move the simulated step as they move the estimate's compute
    assert (off.step_time_s - on.step_time_s) == pytest.approx(
        est_off.step_time_s - est_on.step_time_s, rel=0.05)


def test_lower_bound_reads_the_same_record():
    from strategies.estimate.lower_bound import step_time_lower_bound
    def bound(job):
        return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                           PlanArrays.from_plans([job.plan]), job.framework,
                                           job.system)[0])
    on, off = _job(ON), _job()
    assert bound(on) < bound(off)
    assert bound(on) <= estimate(on).step_time_s


def test_arrays_and_one_plan_agree():
    plans = ["tp=1,pp=1,dp=8,mbs=2,gbs=16", "tp=1,pp=1,dp=8,mbs=1,gbs=8",
             "tp=1,pp=1,dp=8,mbs=2,gbs=32", "tp=2,pp=1,dp=4,mbs=1,gbs=4"]
    jobs = [_job(ON, p) for p in plans]
    j = jobs[0]
    many = stage_cost_arrays(j.model, j.cluster, j.dtype,
                             PlanArrays.from_plans([x.plan for x in jobs]), j.framework, ON)
    for i, x in enumerate(jobs):
        one = _record(x)
        assert many.slowdown[i] == pytest.approx(one.slowdown[0], rel=1e-12)
        assert many.layer_bwd[i] == pytest.approx(one.layer_bwd[0], rel=1e-12)
    assert 1.0 < many.slowdown[1] < 1 / R and many.slowdown[2] == 1.0
