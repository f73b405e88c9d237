"""The PaxML GPT-3 175B FP8 rows of NVIDIA/dgxc-benchmarking v24.11.1 under their recipe, and
JAX's weight quantisation at every forward (docs/calibration.md §3.23)."""
from __future__ import annotations

import json

import pytest

from strategies.cost import compute as ct
from strategies.cost import counts, quantise
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.framework import JAX_XLA, MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays
from strategies.presets import model_preset
from strategies.reference.cases import DATA, case_from_entry
from strategies.reference.jax_recipes import remat_recipe
from topologies.cluster import cluster_preset


def _paxml_rows():
    with open(DATA) as f:
        data = json.load(f)
    return data, [e for e in data if e["id"].startswith("dgxc_paxml")]


def test_paxml_rows_take_the_recipes_save_qkv_out_proj():
    data, rows = _paxml_rows()
    assert len(rows) == 5
    for e in rows:
        case = case_from_entry(e, data)
        assert case.job.plan.recompute == "selective"
        assert case.job.plan.recompute_modules == ("core_attn", "layernorm", "mlp")
        note = [a for a in case.assumptions if a.startswith("recompute=")]
        assert len(note) == 1 and "paxml_mod_configs.py @v24.11.1" in note[0]
        assert "combined_qkv_proj" in note[0]


def test_paxml_recipe_is_fp8_only_and_names_qkv_and_out_proj():
    _, rows = _paxml_rows()
    saved, cite = remat_recipe(rows[0], "fp8")
    assert saved == ("qkv_proj", "out_proj") and "SAVE_QKV_OUT_PROJ" in cite
    assert remat_recipe(rows[0], "bf16") is None      # the recipe refuses bf16 at 175B


def test_weight_cast_passes_closed_form():
    assert quantise.weight_cast_passes(False, 7, 2) == 1.0
    assert quantise.weight_cast_passes(True, 1, 0) == 1.0
    assert quantise.weight_cast_passes(True, 1, 2) == 2.0
    assert quantise.weight_cast_passes(True, 3, 1) == 6.0
    assert quantise.weight_cast_passes(True, 4, 0) == 4.0


def _job(fw, plan, dtype="fp8"):
    return make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), parse_plan(plan),
                    dtype=dtype, framework=fw)


@pytest.mark.parametrize("plan,casts", [
    ("tp=1,pp=1,dp=16,mbs=1,gbs=16,zero=3,recompute=full", 2.0),   # 1 micro-batch, rerun
    ("tp=1,pp=1,dp=16,mbs=1,gbs=48,zero=3,recompute=full", 6.0),   # 3 micro-batches
    ("tp=1,pp=1,dp=16,mbs=1,gbs=32,zero=3,recompute=none", 2.0),   # 2, no rerun
])
def test_jax_quantises_the_weights_at_every_forward(plan, casts):
    """JAX's optimizer-time weight casts are ``weight_cast_passes`` times Megatron-Core's one
    per step, in the scalar and the array form alike; bf16 has none."""
    m, gpu = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2).gpu
    w = counts.layer_params_per_gpu(m, 1, 1) * m.num_layers
    once = ct.weight_cast_time(w, gpu, "fp8")
    jax8, jax16 = stage_costs(_job(JAX_XLA, plan)), stage_costs(_job(JAX_XLA, plan, "bf16"))
    assert jax8.optimizer_by_stage[0] - jax16.optimizer_by_stage[0] == \
        pytest.approx(casts * once, rel=1e-12)
    mc8, mc16 = stage_costs(_job(MEGATRON_CORE, plan)), stage_costs(_job(MEGATRON_CORE, plan,
                                                                           "bf16"))
    assert mc8.optimizer_by_stage[0] - mc16.optimizer_by_stage[0] == \
        pytest.approx(once, rel=1e-12)
    job = _job(JAX_XLA, plan)
    arr = stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.from_plans([job.plan]),
                            JAX_XLA)
    p = job.plan
    assert float(quantise.weight_cast_passes(True, p.gbs / (p.mbs * p.dp),
                                             RECOMPUTE_CODE[p.recompute])) == casts
    assert float(arr.optimizer_first[0]) == pytest.approx(jax8.optimizer_by_stage[0], rel=1e-12)
