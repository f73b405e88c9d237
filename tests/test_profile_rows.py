"""``experiments/profile_rows.py``: a reference row takes a measured profile the way a cluster
file's ``gpu: {profile: FILE}`` gives it; the what-if refuses a GPU of other peaks."""
from __future__ import annotations

import os

import pytest

from experiments import profile_rows as pr
from simulator.studies.validate import load_cases
from strategies.estimate.scalar import estimate
from topologies.errors import SpecError
from topologies.gpu_profile import load_gpu_profile
from topologies.gpus import get_gpu

RUN2 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "docs", "measurements", "h200_2026-11-29", "run2")
HELDOUT = os.path.join(pr.DATA, "heldout_2026b.json")


def _job(gpu: str):
    return next(c.job for c in load_cases(HELDOUT, None)
                if c.job is not None and c.job.cluster.gpu.name == get_gpu(gpu).name)


def test_a_row_takes_the_profile_as_a_cluster_file_gives_it():
    job = _job("H200")
    path = os.path.join(RUN2, "default.yaml")
    a, b = pr.with_profile(job, path), pr.with_gpu_profile(job, load_gpu_profile(path))
    assert a.cluster.gpu.profile == b.cluster.gpu.profile == load_gpu_profile(path)
    assert a.cluster.num_gpus == job.cluster.num_gpus and a.plan == job.plan
    assert estimate(a).step_time_s == estimate(b).step_time_s != estimate(job).step_time_s
    # the loader's rule: a profile applies to the GPU it measured
    with pytest.raises(SpecError, match="not on"):
        pr.with_profile(_job("H100"), path)


def test_gemm_attention_only_drops_memory_and_launch_gap():
    prof = pr.gemm_attention_only(load_gpu_profile(os.path.join(RUN2, "default.yaml")))
    assert prof.hbm_bandwidth is None and prof.launch_gap_s is None
    assert prof.gemm and prof.attention


def test_what_if_needs_the_same_peaks():
    pr.same_peaks(get_gpu("H200"), get_gpu("H100"))
    with pytest.raises(SpecError, match="peak"):
        pr.same_peaks(get_gpu("H200"), get_gpu("A100"))


def test_gemm_only_keeps_the_gemms():
    prof = load_gpu_profile(os.path.join(RUN2, "default.yaml"))
    g = pr.gemm_only(prof)
    assert g.gemm == prof.gemm and not g.attention and g.hbm_bandwidth is None
