"""The GEMM rate a published run implies (experiments/gemm_in_situ.py, docs/calibration.md
§3.13), and the software the MosaicML H100 rows state.

The implied factor is found on the run's own job with only the GPU's sustained GEMM fractions
changed, so: a factor of 1 changes nothing, compute-bound GEMM time goes exactly as the
inverse of the factor, the bisection recovers a factor it was given, and a factor that would
put a fraction above 1 is refused by the GPU spec with the field, value and rule."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.gemm_in_situ import (MMA_SYNC_FRACTION, implied_scale, with_gemm_scale)
from strategies.cost import gemm_kernel, gemm_shapes, gemm_time
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.reference.cases import case_from_entry
from topologies.gpus import get_gpu

DATA = Path(__file__).resolve().parent.parent / "strategies" / "reference" / "data"
ENTRIES = json.loads((DATA / "published.json").read_text())
BY_ID = {e["id"]: e for e in ENTRIES}


def _case(ident: str):
    case = case_from_entry(BY_ID[ident])
    assert case.job is not None, case.skipped
    return case


def test_scale_one_changes_nothing():
    job = _case("mosaic_mpt7b_h100_8gpu_seq2048_mb6").job
    assert estimate(with_gemm_scale(job, 1.0)).step_time_s == estimate(job).step_time_s


def test_scale_touches_only_the_gemm_fractions():
    job = _case("dgxc_nemo2411_gpt3_175B_fp8_128gpu").job
    gpu, new = job.cluster.groups[0].gpu, with_gemm_scale(job, 0.5).cluster.groups[0].gpu
    assert new.matmul_efficiency == pytest.approx(0.5 * gpu.matmul_efficiency, rel=1e-15)
    assert new.fp8_matmul_efficiency == pytest.approx(0.5 * gpu.fp8_matmul_efficiency,
                                                      rel=1e-15)
    assert replace(new, matmul_efficiency=gpu.matmul_efficiency,
                   fp8_matmul_efficiency=gpu.fp8_matmul_efficiency) == gpu


@pytest.mark.parametrize("scale", [0.5, 2 / 3, 0.9])
def test_compute_bound_gemm_time_goes_as_the_inverse_of_the_factor(scale):
    # MPT-7B's layer at 12288 tokens: every GEMM is compute-bound on H100, so its forward time
    # is 2MNK / (peak x eff x shape terms) plus the fixed time of each kernel
    # (``gemm_kernel.gemm_fixed_s``), and the ratio of the rate terms is exactly 1/scale
    job = _case("mosaic_mpt7b_h100_8gpu_seq2048_mb6").job
    m, gpu = job.model, job.cluster.groups[0].gpu
    slow = with_gemm_scale(job, scale).cluster.groups[0].gpu
    fixed = sum(g[0] for g in gemm_shapes.layer_gemms(m, 6, 1, 1, 1)) \
        * gemm_kernel.gemm_fixed_s(gpu)
    assert fixed > 0
    t0 = gemm_time.gemm_time_fwd(m, 6, 1, 1, 1, gpu, "bf16") - fixed
    t1 = gemm_time.gemm_time_fwd(m, 6, 1, 1, 1, slow, "bf16") - fixed
    assert t1 / t0 == pytest.approx(1 / scale, rel=1e-12)


def test_bisection_recovers_a_given_factor():
    job = _case("mosaic_mpt7b_h100_8gpu_seq2048_mb6").job
    target = estimate(with_gemm_scale(job, 0.8)).step_time_s
    assert implied_scale(job, target) == pytest.approx(0.8, abs=1e-4)


def test_unreachable_step_gives_none():
    job = _case("mosaic_mpt7b_h100_8gpu_seq2048_mb6").job
    fastest = estimate(with_gemm_scale(job, 1 / job.cluster.groups[0].gpu.matmul_efficiency))
    assert implied_scale(job, 0.5 * fastest.step_time_s) is None


def test_a_fraction_above_one_is_refused_with_field_value_rule():
    with pytest.raises(SpecError) as e:
        replace(get_gpu("H100"), matmul_efficiency=1.2)
    msg = str(e.value)
    assert "gpu.matmul_efficiency" in msg and "1.2" in msg and "(0, 1]" in msg


def test_bisection_never_asks_for_a_fraction_above_one():
    # the search's upper end puts the largest of the part's fractions exactly at 1 (A100 bf16
    # 0.80 -> factor 1.25), so an over-fast run gives None instead of a refused GPU
    case = _case("mosaic_mpt1b_a100_8gpu_seq512_mb56")
    assert implied_scale(case.job, 1e-6) is None
    top = with_gemm_scale(case.job, 1 / 0.80).cluster.groups[0].gpu
    assert top.matmul_efficiency == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize("ident", ["mosaic_mpt7b_h100_8gpu_seq2048_mb6",
                                   "mosaic_mpt1b_h100_8gpu_seq512_mb56",
                                   "mosaic_mpt70b_h100ls_128gpu_seq2048_mb8"])
def test_short_sequence_h100_rows_imply_more_than_mma_sync(ident):
    # the CUDA 11.8 / mma.sync hypothesis would put these GEMM-bound rows at 2/3 of the
    # catalog's rate; what they imply lies between that and the catalog (docs §3.13)
    case = _case(ident)
    s = implied_scale(case.job, case.measured_step_s)
    assert s is not None and MMA_SYNC_FRACTION < s < 1.0


def test_mosaic_h100_rows_state_a_cuda_12_build():
    rows = [e for e in ENTRIES if e["id"].startswith("mosaic_") and "h100" in e["id"]]
    assert len(rows) == 61
    for e in rows:
        sw = e["source"]["software"]
        assert "CUDA 12.1" in sw and "PyTorch 2.1.0" in sw and "11.8" not in sw, e["id"]
