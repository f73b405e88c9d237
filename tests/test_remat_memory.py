"""What a JAX remat policy keeps per layer (jax-xla, docs/memory.md "JAX remat policies").

Under selective recomputation a MaxText layer keeps its input and the named tensors its policy
saves that the backward reads (``strategies.remat_policies.saved_names``): never the attention
output when the fused kernel's forward reruns (``core_attn``), never ``mlpwo`` (no backward op
reads it, ``jax.checkpoint`` drops unused residuals), never an unnamed tensor (norm outputs,
dropout masks). The scalar model, the array model and the simulator's activation track read
the one rule (``activations.named_remat_bytes``).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.output.metrics_json import activation_memory_json
from simulator.simulate import simulate
from simulator.studies.validate import load_cases
from strategies.cost.recompute import modules_mask
from strategies.stacks.profile import stack_system
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import rank_memory_arrays
from strategies.memory.scalar import fits, memory_by_stage, peak_memory
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.remat_policies import POLICIES, policy_recompute, saved_names
from topologies.cluster import cluster_preset

LLAMA = model_preset("llama3-70b")
ALL = ("core_attn", "layernorm", "mlp")


def _closed_form(mods, s, b, tp, sp):
    """Bytes per GPU: input and out_proj ``2sbh`` (``/t`` with SP), Q ``2sbh/t``, K and V
    ``2·2·s·b·g·d/t``; ``context`` ``2sbh/t`` unless ``core_attn``; the gate and up outputs
    ``2·2·s·b·F/t`` unless ``mlp``."""
    h, g, d, F = LLAMA.hidden_size, LLAMA.kv_heads, LLAMA.head_dim, LLAMA.ffn_hidden_size
    sd = tp if sp else 1
    out = 2 * s * b * h / sd * 2 + 2 * s * b * h / tp + 4 * s * b * g * d / tp
    if "core_attn" not in mods:
        out += 2 * s * b * h / tp
    if "mlp" not in mods:
        out += 4 * s * b * F / tp
    return out


@pytest.mark.parametrize("mods", [ALL, ("core_attn", "layernorm"), ("layernorm", "mlp"),
                                  ("layernorm",)])
@pytest.mark.parametrize("tp,sp", [(1, False), (4, False), (4, True)])
def test_saved_bytes_closed_form(mods, tp, sp):
    s, b = 4096, 2
    got = act.layer_activation_bytes(LLAMA, s, b, tp, sp, 1, "selective", True, mods,
                                     remat_named=True)
    assert got == pytest.approx(_closed_form(mods, s, b, tp, sp), rel=1e-12)
    # the array form, one plan per module set
    arr = act.named_remat_bytes(LLAMA, s, b, tp, sp, 1, modules_mask(mods))
    assert float(arr) == pytest.approx(got, rel=1e-15)


def test_recipe_policies_keep_six_and_a_half_sbh():
    """Llama 2 70B (``g·d = h/8``): both DGX Cloud policies keep ``6.5·s·b·h`` per layer,
    bf16's saved ``mlpwo`` adding nothing; Megatron's table under the same modules keeps
    ``8.5·s·b·h`` (the attention output more; Llama trains without dropout) and ``10.5·s·b·h``
    for the same shapes trained with dropout (its two ``sbh`` masks)."""
    m = model_preset("llama2-70b")
    s, b = 4096, 2
    sbh = s * b * m.hidden_size
    for policy in ("save_dot_except_mlpwi", "save_dot_except_mlp"):
        rc, mods = policy_recompute(policy)
        assert (rc, mods) == ("selective", ALL)
        assert "mlpwo" not in saved_names(mods)
        assert act.layer_activation_bytes(m, s, b, recompute=rc, modules=mods,
                                          remat_named=True) / sbh == pytest.approx(6.5)
    assert "mlpwo" in POLICIES["save_dot_except_mlpwi"]
    assert act.layer_activation_bytes(m, s, b, recompute="selective",
                                      modules=ALL) / sbh == pytest.approx(8.5)
    assert act.layer_activation_bytes(replace(m, dropout=True), s, b, recompute="selective",
                                      modules=ALL) / sbh == pytest.approx(10.5)


def test_saved_names_follow_the_modules():
    assert saved_names(ALL) == {"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj"}
    assert "context" in saved_names(("layernorm", "mlp"))
    assert {"mlpwi_0", "mlpwi_1"} <= saved_names(("core_attn", "layernorm"))


def _small():
    return replace(model_preset("llama3-8b"), name="dense-small", num_layers=8,
                   seq_length=512, vocab_size=32000)


@pytest.mark.parametrize("text", [
    "tp=1,pp=2,dp=4,mbs=1,gbs=16,schedule=gpipe,recompute=selective,"
    "recompute_modules=core_attn+layernorm+mlp",
    "tp=2,sp=true,pp=1,dp=4,mbs=2,gbs=16,zero=3,recompute=selective,"
    "recompute_modules=layernorm+mlp",
])
def test_estimate_array_simulator_agree(text):
    """jax-xla: each simulated rank's activation peak is ``memory_by_stage``'s to 1e-9 and
    the array model gives the stage's total; Megatron's table under the same modules keeps
    as much or more (more by the dropout masks of a model trained with dropout)."""
    job = make_job(_small(), cluster_preset("dgx-h100", 1), parse_plan(text),
                   framework="jax-xla")
    stages = memory_by_stage(job)
    rows = activation_memory_json(simulate(job), job)
    assert {r["stage"] for r in rows} == set(range(job.plan.pp))
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r
    P = PlanArrays.from_plans([job.plan])
    for s, want in enumerate(stages):
        # the stack's system as memory reads it (fp32 weights only, ``stack_system``)
        got = rank_memory_arrays(job.model, P, s, job.dtype,
                                 stack_system(job.framework, job.system), job.cluster.gpu,
                                 remat_named=True,
                                 loss_bytes=job.framework.loss.peak_bytes)[0]
        assert float(got) == pytest.approx(want.total, rel=1e-9), s
    p = job.plan
    table = act.layer_activation_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                       p.recompute, p.flash_attn, p.recompute_modules)
    assert table >= act.job_layer_activation_bytes(job)
    dropped = replace(job.model, dropout=True)
    assert act.layer_activation_bytes(dropped, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                      p.recompute, p.flash_attn, p.recompute_modules) > \
        act.job_layer_activation_bytes(job)


def test_dgxc_maxtext_rows_fit_80_gb():
    """The DGX Cloud MaxText Llama 2 70B rows ran on 80 GB H100s: every row fits."""
    rows = [c for c in load_cases(tiers=(2, 3)) if c.id.startswith("dgxc_maxtext")]
    assert len(rows) == 12
    for c in rows:
        assert fits(c.job), (c.id, peak_memory(c.job)[1].total / 1e9)
