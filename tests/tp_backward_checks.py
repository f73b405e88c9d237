"""Shared helpers of the TP backward-overlap tests (tests/test_sp_regather.py,
tests/test_dgrad_reduce.py): a small dense job, its layer's communication seconds from the
vectorised estimate, and its lower bound."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.simulate import simulate
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def tp_job(spec: str = "tp=8,pp=1,mbs=1,gbs=4,sp=true", model: str = "llama3-8b",
           layers: int = 4, fw=MEGATRON_CORE, dtype: str = "bf16", nodes: int = 1):
    """``model`` cut to ``layers`` layers on ``nodes`` DGX H100 under the plan ``spec``."""
    m = replace(model_preset(model), num_layers=layers)
    return make_job(m, cluster_preset("dgx-h100", nodes), parse_plan(spec), framework=fw,
                    dtype=dtype)


def layer_comm(job) -> float:
    """The mean layer's communication seconds of the vectorised estimate."""
    r = estimate_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                        job.framework)
    return float(np.ravel(r["layer_comm_s"])[0])


def bound(job) -> float:
    """The job's lower bound on the simulated step (seconds)."""
    return float(np.ravel(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                                PlanArrays.of_plan(job.plan),
                                                job.framework))[0])


def switch_pair(spec: str, fw, switch: str, dtype: str = "bf16", nodes: int = 1,
                layers: int = 4):
    """``tp_job`` of ``spec`` on stack ``fw`` and on the same stack with its profile field
    ``switch`` off: the rule under test on and off, all else equal."""
    return (tp_job(spec, layers=layers, fw=fw, dtype=dtype, nodes=nodes),
            tp_job(spec, layers=layers, fw=replace(fw, **{switch: False}), dtype=dtype,
                   nodes=nodes))


#: (plan, DGX H100 nodes) on which a TP rule's estimate and contention-free simulation are
#: compared: one pipeline with op-level recompute, two stages across nodes with full recompute
SIM_CASES = [("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=op", 1),
             ("tp=8,pp=2,mbs=1,gbs=8,sp=true,zero=0,recompute=full,schedule=1f1b", 2)]


def assert_moves_with_simulation(on, off) -> float:
    """The rule adds time, and the estimate and the contention-free simulation move by the
    same seconds (to 1e-9); the lower bound stays below the simulation of ``on``. Returns
    that simulated step (seconds)."""
    import pytest
    e = estimate(on).step_time_s - estimate(off).step_time_s
    s_on = simulate(on, network="contention-free").step_time_s
    s = s_on - simulate(off, network="contention-free").step_time_s
    assert e > 0 and s == pytest.approx(e, rel=1e-9)
    assert bound(on) <= s_on * (1 + 1e-9)
    return s_on
