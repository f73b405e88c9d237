"""The two pieces of gpt-oss's Megatron-Core layer the model did not price (docs/calibration.md
§5.163), each where Megatron-Bridge's gpt-oss bridge turns it on
(``variants.runs_gpt_oss_bridge``):

* the clamped quick-GEGLU builds its ``linear_offset`` with ``torch.tensor(..., device=...)``,
  a synchronising host-to-device copy, once per MoE layer forward and per rerun of the
  activation: priced by §5.13's one rule (``moe_time.queue_drain_time``), one Python operator
  to the next launch, i.e. exactly a synchronous launch boundary;
* the attention output's bias is added unfused (``bias_dropout_fusion`` off): 4 bytes per
  element of ``h`` forward, its gradient's reduction 2 backward, one kernel each;
* and, on every model with expert biases, the per-expert bias path's ``torch.split`` has a
  backward of its own, a ``cat`` of the gradients: 8 passes backward, not 6.

Closed forms to 1e-12, the stack and model gates, and two reference rows' estimates moving by
exactly the sum of the terms."""
from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

from strategies.cost import elementwise_bytes, elementwise_time, hbm_rate, moe_bytes, moe_time
from strategies.framework import DEFAULT, get_profile
from strategies.launch_blocking import HOST_PATH_S, SYNC_LAUNCH_GAP_S
from strategies.presets import model_preset
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.stacks.variants import runs_gpt_oss_bridge, with_fused_grouped_mlp
from topologies.gpus import get_gpu

REL = 1e-12
GPT_OSS = model_preset("gpt-oss-120b")
GB300 = get_gpu("GB300")


def test_the_bridge_predicate():
    """gpt-oss on Megatron-Core / NeMo only; not without its biases, sinks or clamp, not on a
    stack that does not run Megatron-Core's model code, not DeepSeek-V4 (clamp and sinks, no
    linear biases)."""
    for name in ("megatron-core", "nemo"):
        assert runs_gpt_oss_bridge(GPT_OSS, get_profile(name))
    for name in ("torchtitan", "automodel", "megatron-deepspeed", "jax-xla"):
        assert not runs_gpt_oss_bridge(GPT_OSS, get_profile(name))
    for field, value in (("bias", False), ("attention_sinks", False),
                         ("activation_clamp", None)):
        assert not runs_gpt_oss_bridge(dataclasses.replace(GPT_OSS, **{field: value}), DEFAULT)
    for name in ("deepseek-v4-flash", "qwen3-30b-a3b", "llama3-8b"):
        assert not runs_gpt_oss_bridge(model_preset(name), DEFAULT)


def test_geglu_sync_closed_form():
    """One sync per call, one operator to the next launch: gap + HOST_PATH_S, which is
    ``SYNC_LAUNCH_GAP_S`` at the stack's gap (gpt-oss: every layer MoE, share 1)."""
    assert (moe_bytes.GEGLU_SYNCS, moe_bytes.GEGLU_SYNC_HOST_OPS) == (1, 1)
    t = moe_time.geglu_sync_time(GPT_OSS, DEFAULT, GB300)
    assert t == pytest.approx(LAUNCH_GAP_S + HOST_PATH_S, rel=REL)
    assert t == pytest.approx(SYNC_LAUNCH_GAP_S, rel=REL)
    assert moe_time.queue_drain_time(1, DEFAULT, GB300) == pytest.approx(t, rel=REL)
    # the same rule as the alltoall dispatcher's sync (one Python operator after it)
    assert moe_time.moe_sync_time(GPT_OSS, DEFAULT, GB300, 0) == pytest.approx(t, rel=REL)
    ops = np.array([0.0, 1.0, 3.0])
    assert np.allclose(moe_time.queue_drain_time(ops, DEFAULT, GB300),
                       LAUNCH_GAP_S + ops * HOST_PATH_S, rtol=REL, atol=0)


def test_geglu_sync_gates():
    """Not on other models or stacks, and not under Transformer Engine's fused grouped MLP,
    which never calls the eager activation."""
    fused = with_fused_grouped_mlp(get_profile("nemo"), "mxfp8")
    assert moe_time.geglu_sync_time(GPT_OSS, fused, GB300) == 0.0
    assert moe_time.geglu_sync_time(GPT_OSS, get_profile("torchtitan"), GB300) == 0.0
    assert moe_time.geglu_sync_time(model_preset("qwen3-30b-a3b"), DEFAULT, GB300) == 0.0
    assert moe_time.geglu_sync_time(model_preset("deepseek-v4-flash"), DEFAULT, GB300) == 0.0


def test_attn_bias_add_closed_form():
    """4 bytes per element of h forward, 2 backward, over the GPU's tokens (divided by tp under
    SP), at the usable HBM bandwidth plus one launch gap each way."""
    b, T, h = 4, 4 * 4096, GPT_OSS.hidden_size
    assert elementwise_bytes.ATTN_BIAS_ADD_BYTES == (4.0, 2.0)
    f, bw = elementwise_bytes.attn_bias_add_bytes(GPT_OSS, b, 1, 1, False)
    assert (f, bw) == (pytest.approx(4 * T * h, rel=REL), pytest.approx(2 * T * h, rel=REL))
    f2, _ = elementwise_bytes.attn_bias_add_bytes(GPT_OSS, b, 2, 1, True)
    assert f2 == pytest.approx(4 * T * h / 2, rel=REL)
    f3, _ = elementwise_bytes.attn_bias_add_bytes(GPT_OSS, b, 2, 1, False)
    assert f3 == pytest.approx(4 * T * h, rel=REL)        # no SP: every tp rank adds it all
    hbm = hbm_rate.usable_hbm(GB300)
    tf, tb = elementwise_time.attn_bias_add_time(GPT_OSS, b, 1, 1, False, GB300)
    assert tf == pytest.approx(4 * T * h / hbm + LAUNCH_GAP_S, rel=REL)
    assert tb == pytest.approx(2 * T * h / hbm + LAUNCH_GAP_S, rel=REL)
    arr = elementwise_time.attn_bias_add_time(GPT_OSS, np.array([1, 4]), 1, 1, False, GB300)[0]
    assert arr[1] == tf and arr[0] == elementwise_time.attn_bias_add_time(
        GPT_OSS, 1, 1, 1, False, GB300)[0]
    for fw in (get_profile("torchtitan"), get_profile("automodel")):
        assert elementwise_time.attn_bias_add_time(GPT_OSS, b, 1, 1, False, GB300, fw) == (0.0,
                                                                                          0.0)
    assert elementwise_time.attn_bias_add_time(model_preset("qwen3-30b-a3b"), b, 1, 1, False,
                                               GB300) == (0.0, 0.0)


def _old_bias_kernels(m, ep):
    """``moe_bytes.expert_bias_kernels`` before §5.163: no backward ``cat``."""
    f, b = moe_bytes.EXPERT_BIAS_KERNELS
    local = m.num_experts / np.asarray(ep, dtype=float)
    return (f * local + 1)[()], (b * local)[()]


def _off():
    """Every §5.163 term switched off where it is read: the predicate at its two call sites,
    the expert bias's backward passes and kernels as they were (6, no split ``cat``)."""
    return (mock.patch.object(moe_time, "runs_gpt_oss_bridge", lambda m, fw: False),
            mock.patch.object(elementwise_time, "runs_gpt_oss_bridge", lambda m, fw: False),
            mock.patch.object(moe_bytes, "EXPERT_BIAS_PASSES", (6, 6)),
            mock.patch.object(moe_bytes, "expert_bias_kernels", _old_bias_kernels))


def test_expert_bias_split_cat_closed_form():
    """The split's backward ``cat``: two more 16-bit passes over the routed fc2 output
    (``T·k·h·load``) and one more kernel a layer, beside the unchanged forward."""
    rows, h = 4 * 4096 * 4 * 1.25, GPT_OSS.hidden_size
    f, b = moe_bytes.expert_bias_bytes(GPT_OSS, 4, 1, 1, load=1.25)
    assert f == pytest.approx(6 * 2 * rows * h, rel=REL)
    assert b == pytest.approx(8 * 2 * rows * h, rel=REL)
    assert moe_bytes.expert_bias_kernels(GPT_OSS, 64) == (2 * 2 + 1, 4 * 2 + 1)
    tf, tb = moe_time.expert_bias_time(GPT_OSS, 4, 1, 1, 64, GB300, load=1.25)
    with _off()[2], _off()[3]:
        of, ob = moe_time.expert_bias_time(GPT_OSS, 4, 1, 1, 64, GB300, load=1.25)
    assert tf == of
    assert tb - ob == pytest.approx(2 * 2 * rows * h / hbm_rate.usable_hbm(GB300)
                                    + LAUNCH_GAP_S, rel=1e-9)


@pytest.mark.parametrize("rid,reruns", [("mbridge260401_gptoss120b_gb300_64_bf16", 0),
                                        ("mbridge260401_gptoss120b_gb200_64_bf16", 1)])
def test_row_moves_by_exactly_the_terms(rid, reruns):
    """pp 1: the step moves by micro-batches x layers x (bias add forward + backward + the
    sync, once more where ``moe_act`` is recomputed: the GB200 row's recipe)."""
    from strategies.estimate import estimate
    from strategies.reference.cases import case_from_entry, load_reference
    rows = {e["id"]: e for e in
            load_reference("strategies/reference/data/megatron_bridge_2604.json")}
    job = case_from_entry(rows[rid]).job
    m, p, fw, g = job.model, job.plan, job.framework, job.cluster.gpu
    after = estimate(job)
    a, b, c, d = _off()
    with a, b, c, d:
        before = estimate(job)
        bias_old = moe_time.expert_bias_time(m, p.mbs, p.tp, p.cp, p.ep, g, p.moe_imbalance,
                                             p.etp, fw, job.system)[1]
    bias_new = moe_time.expert_bias_time(m, p.mbs, p.tp, p.cp, p.ep, g, p.moe_imbalance,
                                         p.etp, fw, job.system)[1]
    uf, ub = elementwise_time.attn_bias_add_time(m, p.mbs, p.tp, p.cp, p.sp, g, fw, job.system)
    sync = moe_time.geglu_sync_time(m, fw, g)
    n = before.num_microbatches * m.num_layers / p.pp
    assert p.pp == 1 and sync > 0 and uf > 0 and bias_new > bias_old
    assert after.step_time_s - before.step_time_s == pytest.approx(
        n * (uf + ub + (1 + reruns) * sync + bias_new - bias_old), rel=1e-9)


def test_layer_ops_table_reads_the_terms():
    """``experiments/gptoss_layer_ops.py``: every row names a source, the §5.163 rows carry
    exactly the new terms, and the priced rows' seconds are the cost functions' own."""
    from experiments import gptoss_layer_ops as glo
    from strategies.reference.cases import case_from_entry, load_reference
    rows = {e["id"]: e for e in load_reference(glo.FILE)}
    job = case_from_entry(rows[glo.ROW]).job
    ops, tot = glo.layer_ops(job)
    assert all(src for _, src, *_ in ops)
    assert {state for *_, state in ops} <= {"priced", "§5.163", "§5.167", "view", "host",
                                            "sized"}
    # §5.167's rows carry qkv_split_time's own (forward, backward)
    qs = [(f, b) for _, _, _, f, b, state in ops if state == "§5.167"]
    assert (qs[0][0], qs[1][1]) == tot["qkv_split"] and qs[0][1] == qs[1][0] == 0.0
    assert min(tot["qkv_split"]) > 0
    new = [(f, b) for _, _, _, f, b, state in ops if state == "§5.163"]
    p, g, fw = job.plan, job.cluster.gpu, job.framework
    assert new[:2] == [elementwise_time.attn_bias_add_time(GPT_OSS, p.mbs, p.tp, p.cp, p.sp,
                                                           g, fw, job.system),
                       (moe_time.geglu_sync_time(GPT_OSS, fw, g), 0.0)]
    assert tot["geglu"] == new[1][0] and new[2][1] == tot["split_cat"]
    # the split's cat is what EXPERT_BIAS_PASSES' 6 -> 8 adds to the bias path's backward
    a, b, c, d = _off()
    with c, d:
        old = moe_time.expert_bias_time(GPT_OSS, p.mbs, p.tp, p.cp, p.ep, g, p.moe_imbalance,
                                        p.etp, fw, job.system)[1]
    now = moe_time.expert_bias_time(GPT_OSS, p.mbs, p.tp, p.cp, p.ep, g, p.moe_imbalance,
                                    p.etp, fw, job.system)[1]
    assert now - old == pytest.approx(tot["split_cat"], rel=1e-9)


def test_bias_loop_only_where_megatron_core_runs_it():
    """Megatron-Core's per-expert ``_apply_bias`` loop runs after the unfused ``GroupedLinear``
    only: not under Transformer Engine's fused grouped MLP (the biases in cuDNN's grouped
    GEMM), not in NeMo AutoModel (its own loop, ``elementwise_bytes.expert_bias_bytes``, was
    charged besides it before §5.163), not on stacks without experts' biases read."""
    nemo = get_profile("nemo")
    fused = with_fused_grouped_mlp(nemo, "mxfp8")
    assert moe_time.bias_loop(nemo) and moe_time.bias_loop(DEFAULT)
    for fw in (fused, get_profile("automodel"), get_profile("torchtitan")):
        assert not moe_time.bias_loop(fw)
        assert moe_time.expert_bias_time(GPT_OSS, 4, 1, 1, 8, GB300, fw=fw) == (0.0, 0.0)
    on = moe_time.expert_bias_time(GPT_OSS, 4, 1, 1, 8, GB300, fw=nemo)
    assert on[0] > 0 and on[1] > 0
    # AutoModel's own bias adds stay charged, once (eager_variant_time)
    am = get_profile("automodel")
    xf, xb = elementwise_bytes.expert_bias_bytes(GPT_OSS, 4, 1, 1)
    hbm = hbm_rate.usable_hbm(GB300)
    assert elementwise_time.eager_variant_time(GPT_OSS, 4, 1, 1, GB300, fw=am) == (
        pytest.approx(xf / hbm, rel=REL), pytest.approx(xb / hbm, rel=REL))
