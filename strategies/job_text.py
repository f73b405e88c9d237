"""``job_from_text``: a ``Job`` from the words ``--model``, ``--cluster`` and ``--plan`` take
(a model preset or file, ``PRESET:NODES``, ``key=value,...``), what the examples in the
library's docstrings build their jobs with.

>>> job = job_from_text("gpt3-175b", "dgx-a100:128", "tp=8,pp=8,mbs=1", global_batch=1536)
>>> job.plan.dp, job.num_microbatches, job.cluster.num_gpus
(16, 96, 1024)
"""
from __future__ import annotations

from typing import Any

from strategies.hf_config import load_model_arg
from strategies.job import Job, make_job
from strategies.plan import parse_plan
from topologies.cluster.arg import parse_cluster_arg


def job_from_text(model: str, cluster: str, plan: str, global_batch: int | None = None,
                  **make_job_args: Any) -> Job:
    """``make_job`` of the model ``load_model_arg(model)``, the cluster
    ``parse_cluster_arg(cluster)`` and the plan ``parse_plan(plan)``; ``global_batch``
    (sequences per step) and the other keywords (``dtype``, ``framework``, ...) as
    ``make_job``'s."""
    return make_job(load_model_arg(model), parse_cluster_arg(cluster), parse_plan(plan),
                    global_batch=global_batch, **make_job_args)
