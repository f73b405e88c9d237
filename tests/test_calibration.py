"""Calibration (docs/calibration.md): accuracy on the published runs that ship, and the
physical sanity of the efficiency model (efficiencies are fractions, a faster GPU is never
slower, each effect only applies where its mechanism does)."""
from __future__ import annotations

import os
import re
from dataclasses import fields, replace

import numpy as np
import pytest

from simulator.studies.validate import evaluate_case, load_cases, mape, summarize, validate_cases
from strategies.cost import attention_time, gemm_kernel, gemm_time, overlap_clock
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.estimate.scalar import estimate
from strategies.framework import PROFILES, get_profile
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import MEGATRON_CORE, MEGATRON_LM_2021
from strategies.stacks.pytorch import PYTORCH_EAGER
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.reference.entry_stack import framework_of
from topologies.cluster import NodeGroup, cluster_preset
from topologies.gpus import GPUS, gpu_from_mapping

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "calibration.md")

# Bounds stated in docs/calibration.md. The constants were chosen on the 23 runs of the
# calibration families (Narayanan 2021, NeMo 24.11: 3.2 % analytic); tier 1 also holds the
# Megatron-Core README's weak scaling and torchtitan's FSDP rows, whose micro-batch size and
# schedule the sources do not give (6.4 % over all 34 runs, worst -28.6 %), and tiers 2-3 are
# held out (13.9 % over 152 runs).
CALIBRATION_FAMILIES = ("narayanan2021_", "dgxc_nemo2411_")
TIER1_MAPE_BOUND = 5.0        # analytic, the calibration families' tier-1 runs
TIER1_WORST_BOUND = 10.0
TIER1_ALL_MAPE_BOUND = 8.0    # analytic, every tier-1 run with a step time
HELD_OUT_MAPE_BOUND = 20.0    # analytic, tiers 2-3 (not used to choose any constant)


@pytest.fixture(scope="module")
def tier1_rows():
    return validate_cases(load_cases(tiers=(1,)), simulate=False)


def _calibration_rows(rows):
    return [r for r in rows if r["id"].startswith(CALIBRATION_FAMILIES)]


def test_tier1_analytic_mape_under_bound(tier1_rows):
    s = summarize(_calibration_rows(tier1_rows), simulate=False)["analytic"]
    assert s["cases"] >= 23
    assert s["mape_pct"] < TIER1_MAPE_BOUND
    assert s["max_abs_error_pct"] < TIER1_WORST_BOUND
    every = summarize(tier1_rows, simulate=False)["analytic"]
    assert every["cases"] >= 34
    assert every["mape_pct"] < TIER1_ALL_MAPE_BOUND


def test_tier1_every_framework_under_bound(tier1_rows):
    cases = {c.id: c for c in load_cases(tiers=(1,))}
    by: dict[str, list[float]] = {}
    for r in _calibration_rows(tier1_rows):
        if r["analytic_error_pct"] is not None:
            by.setdefault(cases[r["id"]].job.framework.name, []).append(r["analytic_error_pct"])
    assert set(by) == {"megatron-lm-2021", "nemo"}          # NeMo 24.11 runs: the nemo profile
    for name, errs in by.items():
        assert mape(errs) < TIER1_MAPE_BOUND, name


def test_pipeline_overlap_implies_the_interleaved_schedule():
    """Megatron-Core overlaps pipeline sends only in the interleaved schedule: a source that
    ran with PP overlap on and names no schedule is validated as interleaved."""
    weak = [c for c in load_cases(tiers=(1,)) if c.id.startswith("megatron_core_h100_weak")]
    assert len(weak) == 9 and all(c.job is not None for c in weak)
    for c in weak:
        p = c.job.plan
        assert (p.schedule == "interleaved" and p.vpp > 1) if p.pp > 1 else p.schedule == "1f1b"
        assert c.how_measured.startswith("model FLOPs")


@pytest.mark.slow
def test_held_out_tiers_stay_bounded():
    """Tiers 2-3 (other frameworks, sweeps, fp8) were not used to choose any constant; the
    bound guards against fitting tier 1 at their expense."""
    rows = validate_cases(load_cases(tiers=(2, 3)), simulate=False)
    s = summarize(rows, simulate=False)["analytic"]
    assert s["cases"] >= 100
    assert s["mape_pct"] < HELD_OUT_MAPE_BOUND


@pytest.mark.parametrize("case_id", ["narayanan2021_t1_1.7B", "narayanan2021_t1_18.4B",
                                     "narayanan2021_t1_145.6B",
                                     "dgxc_nemo2411_nemotron4_340B_bf16_128gpu"])
def test_simulated_close_to_measured_and_to_analytic(case_id):
    case = next(c for c in load_cases(tiers=(1,)) if c.id == case_id)
    row = evaluate_case(case, simulate=True)
    assert abs(row["simulated_error_pct"]) < 8.0
    gap = row["simulated_step_time_s"] / row["analytic_step_time_s"] - 1
    assert abs(gap) < 0.05


# ----------------------------------------------------------------- the constants

def test_efficiencies_are_fractions():
    for gpu in GPUS.values():
        for dtype in gpu.peak_flops:
            assert 0 < gpu.gemm_efficiency(dtype) <= 1, (gpu.name, dtype)
        assert 0 < gpu.attention_efficiency <= 1
    assert 0 < DEFAULT_SYSTEM.hbm_efficiency <= 1 and 0 < overlap_clock.OVERLAP_CLOCK_RATIO <= 1
    for fw in PROFILES.values():
        assert 0 <= fw.launch_gap_s < 1e-4 and fw.kernels_per_layer >= 0


def test_every_catalog_efficiency_is_documented():
    """Each GPU's sustained GEMM efficiency appears in docs/calibration.md with its source."""
    text = open(DOC, encoding="utf-8").read()
    for gpu in GPUS.values():
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| {gpu.name} ")), None)
        assert row is not None, gpu.name
        assert f"{gpu.matmul_efficiency:.2f}" in row, gpu.name
    for name in ("OVERLAP_CLOCK_RATIO", "SHAPE_SCALE", "LAUNCH_GAP_S",
                 "NVLINK_EFFICIENCY", "NETWORK_EFFICIENCY"):
        assert name in text, name
    for f in fields(SystemConfig):                 # every policy constant, with its value
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| `{f.name}` ")), None)
        assert row is not None, f.name
        assert f"{getattr(DEFAULT_SYSTEM, f.name):g}" in row, f.name


def test_custom_gpu_fp8_efficiency():
    g = gpu_from_mapping({"name": "x", "bf16_tflops": 1000, "fp8_tflops": 2000, "hbm_gib": 80,
                          "hbm_tbps": 3, "matmul_efficiency": 0.7, "fp8_matmul_efficiency": 0.6})
    assert g.gemm_efficiency("bf16") == 0.7 and g.gemm_efficiency("fp8") == 0.6


# ----------------------------------------------------------------- monotonicity

def _with_gpu(job, gpu):
    cl = replace(job.cluster, groups=(NodeGroup(gpu, job.cluster.num_nodes),))
    return make_job(job.model, cl, job.plan, dtype=job.dtype, framework=job.framework)


JOBS = [("gpt3-175b", "dgx-a100", 8, Plan(tp=8, pp=8, mbs=1, gbs=64, schedule="interleaved",
                                          vpp=3, sp=True, zero=1)),
        ("llama3-8b", "dgx-h100", 2, Plan(tp=2, mbs=2, gbs=64, sp=True, tp_comm_overlap=True)),
        ("mpt-7b", "dgx-h100", 1, Plan(mbs=4, gbs=64, zero=3))]


@pytest.mark.parametrize("model,cluster,nodes,plan", JOBS)
def test_faster_gpu_is_never_slower(model, cluster, nodes, plan):
    job = make_job(model_preset(model), cluster_preset(cluster, nodes), plan)
    g = job.cluster.gpu
    base = estimate(job).step_time_s
    faster = [replace(g, peak_flops={k: 1.5 * v for k, v in g.peak_flops.items()}),
              replace(g, hbm_bandwidth=1.5 * g.hbm_bandwidth),
              replace(g, matmul_efficiency=min(1.0, 1.2 * g.matmul_efficiency),
                      fp8_matmul_efficiency=None),
              replace(g, attention_efficiency=min(1.0, 1.2 * g.attention_efficiency))]
    for f in faster:
        assert estimate(_with_gpu(job, f)).step_time_s <= base * (1 + 1e-12)
    assert estimate(_with_gpu(job, faster[0])).step_time_s < base


def test_newer_gpu_is_faster_on_the_same_network():
    plan = Plan(tp=8, pp=2, mbs=1, gbs=64)
    a100 = make_job(model_preset("gpt-18.4b"), cluster_preset("dgx-a100", 4), plan)
    h100 = _with_gpu(a100, GPUS["H100-SXM5-80GB"])
    assert estimate(h100).step_time_s < estimate(a100).step_time_s


# ----------------------------------------------------------------- where each effect applies

def test_unfused_gradient_accumulation_costs_per_microbatch():
    """Megatron-LM 2021 adds each micro-batch's gradient into main_grad with a separate
    kernel; Megatron-Core fuses it. The difference grows with the micro-batch count."""
    m, cl = model_preset("gpt-18.4b"), cluster_preset("dgx-a100", 2)
    diffs = []
    for gbs in (16, 64):
        plan = Plan(tp=8, mbs=1, gbs=gbs, flash_attn=False)
        old = estimate(make_job(m, cl, plan, framework=MEGATRON_LM_2021)).step_time_s
        new = estimate(make_job(m, cl, plan, framework=MEGATRON_CORE)).step_time_s
        diffs.append(old - new)
    assert 0 < diffs[0] < diffs[1]
    assert diffs[1] > 3 * diffs[0]        # 4x the micro-batches


def test_overlap_clock_penalty_only_with_continuous_overlap():
    slow = overlap_clock.overlap_slowdown(np.array([1, 4, 4, 1, 1]),
                                          np.array([True, True, False, False, False]),
                                          np.array([1, 1, 1, 2, 1]), np.array([0, 1, 1, 0, 3]))
    r = 1 / overlap_clock.OVERLAP_CLOCK_RATIO
    assert list(slow) == [1.0, r, 1.0, r, r]


def test_tp_overlap_splits_gemms_along_m():
    m, gpu = model_preset("gpt3-175b"), GPUS["H100-SXM5-80GB"]
    whole = gemm_time.gemm_time_fwd(m, 1, 4, 1, 1, gpu, "bf16", False)
    split = gemm_time.gemm_time_fwd(m, 1, 4, 1, 1, gpu, "bf16", True)
    assert split > whole
    assert gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, gpu, "bf16", True) == \
        gemm_time.gemm_time_fwd(m, 1, 1, 1, 1, gpu, "bf16", False)


def test_reference_runs_get_their_framework():
    cases = {c.id: c for c in load_cases(tiers=None)}
    assert cases["narayanan2021_t1_1008B"].job.framework is MEGATRON_LM_2021
    assert cases["dgxc_nemo2411_gpt3_175B_bf16_128gpu"].job.framework.name == "nemo"
    mosaic = next(c for i, c in cases.items() if i.startswith("mosaic_") and c.job is not None)
    assert mosaic.job.framework is PYTORCH_EAGER
    maxtext = next(c for i, c in cases.items() if "maxtext" in i and c.job is not None)
    assert maxtext.job.framework is JAX_XLA
    assert framework_of({"source": {"ref": "Someone et al. 2020"}}) is MEGATRON_LM_2021
    assert framework_of({"source": {"ref": "A benchmark, 2024"}}) is MEGATRON_CORE
    for r in cases.values():
        if r.job is not None:
            assert any(re.search(r"^framework ", a) for a in r.assumptions)


def test_framework_profile_lookup():
    assert get_profile(None) is MEGATRON_CORE
    assert get_profile("Megatron-LM-2021") is MEGATRON_LM_2021
    with pytest.raises(Exception):
        get_profile("nope")
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1), Plan(gbs=8),
                   framework="pytorch-eager")
    assert job.to_dict()["framework"] == "pytorch-eager"


# ----------------------------------------------------------------- H100 (docs/calibration.md §3.4)

def test_flashattention2_is_slower_only_on_hopper():
    """FlashAttention-2 (pytorch-eager) has no Hopper code path: slower than the native kernel
    on H100, the same kernel as the native one on A100."""
    m = model_preset("mpt-7b")
    for name, slower in (("H100-SXM5-80GB", True), ("A100-SXM4-80GB", False)):
        g = GPUS[name]
        fa2 = attention_time.attention_time_fwd(m, 4, 1, 1, True, g, 1.0, PYTORCH_EAGER)[0]
        native = attention_time.attention_time_fwd(m, 4, 1, 1, True, g, 1.0, MEGATRON_CORE)[0]
        assert (fa2 > native) if slower else (fa2 == native), name


def test_k_knee_scales_with_the_sm_rate():
    a100, h100 = GPUS["A100-SXM4-80GB"], GPUS["H100-SXM5-80GB"]
    assert gemm_kernel.k_knee(a100, "bf16") == pytest.approx(gemm_kernel.SHAPE_SCALE)
    assert gemm_kernel.k_knee(h100, "bf16") == pytest.approx(64 * (989.4 / 132) / (312 / 108))
    assert gemm_kernel.k_knee(h100, "fp8") == pytest.approx(2 * gemm_kernel.k_knee(h100, "bf16"),
                                                            rel=1e-3)
    custom = gpu_from_mapping({"name": "x", "bf16_tflops": 1000, "hbm_gib": 80, "hbm_tbps": 3})
    assert custom.sm_count is None and gemm_kernel.k_knee(custom, "bf16") == gemm_kernel.SHAPE_SCALE


def test_custom_gpu_fa2_and_sm_count_round_trip():
    from topologies.gpus import gpu_to_mapping
    g = gpu_from_mapping({"name": "x", "bf16_tflops": 1000, "hbm_gib": 80, "hbm_tbps": 3,
                          "fa2_attention_efficiency": 0.3, "sm_count": 100})
    assert g.flash_efficiency("fa2") == 0.3 and g.flash_efficiency() == 0.5
    assert gpu_from_mapping(gpu_to_mapping(g)) == g
    with pytest.raises(Exception):
        gpu_from_mapping({"name": "x", "bf16_tflops": 1000, "hbm_gib": 80, "hbm_tbps": 3,
                          "sm_count": 1.5})


def test_unstated_recompute_follows_the_framework_default():
    """JAX stacks (MaxText, Praxis) rematerialise the whole layer unless told otherwise: by
    the row or by its recipe (the DGX Cloud MaxText and PaxML recipes' policies,
    docs/calibration.md §3.17 and §3.23, ``tests/test_maxtext_remat.py``,
    ``tests/test_paxml_recipe.py``): every unstated JAX row of tiers 2-3 has a recipe today."""
    assert JAX_XLA.default_recompute == "full" and MEGATRON_LM_2021.default_recompute == "full"
    assert MEGATRON_CORE.default_recompute == "none" == PYTORCH_EAGER.default_recompute
    jax = [c for c in load_cases(tiers=(2, 3)) if c.job is not None
           and c.job.framework is JAX_XLA and c.raw["plan"].get("recompute") is None]
    recipe = [c for c in jax if c.id.startswith(("dgxc_maxtext", "dgxc_paxml"))]
    assert len(recipe) == 17 and all(c.job.plan.recompute == "selective" for c in recipe)
    rest = [c for c in jax if c not in recipe]
    assert all(c.job.plan.recompute == "full" for c in rest)
