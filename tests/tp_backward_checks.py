"""Shared helpers of the TP backward-overlap tests (tests/test_sp_regather.py,
tests/test_dgrad_reduce.py): a small dense job, its layer's communication seconds from the
vectorised estimate, and its lower bound."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.framework import MEGATRON_CORE
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
