"""The backward of the fused QKV projection's split (docs/calibration.md §5.167): a ``cat`` of
q, k and v's gradients (a read and a write of ``(a + 2g)·d / t`` 16-bit elements per token and
one kernel) wherever the split is ``torch.split`` (Megatron-LM, Megatron-DeepSpeed, and
Megatron-Core from Transformer Engine 2.3 on, whose ``_SplitAlongDim`` import fails) or TE's
``SplitAlongDim`` receives gradients that are not slices of one buffer; a view only for
multi-head attention without RoPE or q/k norms in cuDNN's fused attention on TE <= 2.2.

Closed forms to 1e-12, the view rule field by field, and reference rows' estimates moving by
exactly micro-batches x layers x the term, or not at all where it is a view."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import elementwise_bytes, elementwise_time, hbm_rate
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.presets import model_preset
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.stacks.profile_fields import check_profile
from strategies.stacks.variants import TE_LAST_SPLIT_ALONG_DIM, qkv_split_is_view
from topologies.gpus import get_gpu

REL = 1e-12
H100, A100 = get_gpu("H100"), get_gpu("A100")
GPT3 = model_preset("gpt3-175b")
LLAMA = model_preset("llama3-70b")
NEMO = get_profile("nemo")
NEMO_TE1 = dataclasses.replace(NEMO, te_version=(1, 10))


def test_bytes_closed_form():
    """4 bytes per element of q, k, v: ``4·b·s/cp·(a + 2g)·d/t``, vectorised over the plan;
    the hybrid model's attention share; 0 for MLA and DeepSeek-V4."""
    m = LLAMA
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    assert (a, g, d) == (64, 8, 128)
    want = 4.0 * 2 * m.seq_length / 2 * (a + 2 * g) * d / 4
    assert elementwise_bytes.qkv_split_cat_bytes(m, 2, 4, 2) == pytest.approx(want, rel=REL)
    tp = np.array([1, 2, 8])
    got = elementwise_bytes.qkv_split_cat_bytes(m, 1, tp, 1)
    assert got == pytest.approx(4.0 * m.seq_length * (a + 2 * g) * d / tp, rel=REL)
    h = model_preset("nemotron-h-56b")
    hb = elementwise_bytes.qkv_split_cat_bytes(h, 1, 1, 1)
    assert 0 < h.attention_share < 1
    assert hb == pytest.approx(4.0 * h.seq_length * (h.num_attention_heads + 2 * h.kv_heads)
                               * h.head_dim * h.attention_share, rel=REL)
    for name in ("deepseek-v3", "deepseek-v4-flash"):
        m = model_preset(name)
        assert not elementwise_bytes.has_fused_qkv_split(m)
        assert elementwise_bytes.qkv_split_cat_bytes(m, 1, 1, 1) == 0.0
        assert elementwise_time.qkv_split_cat_time(m, 1, 1, 1, True, H100, NEMO) == 0.0


def test_time_closed_form():
    """The bytes over the usable HBM bandwidth plus one launch gap, where the split cats."""
    m = LLAMA
    t = elementwise_time.qkv_split_cat_time(m, 1, 8, 1, True, H100, NEMO)
    want = (elementwise_bytes.qkv_split_cat_bytes(m, 1, 8, 1) / hbm_rate.usable_hbm(H100)
            + elementwise_bytes.QKV_SPLIT_CAT_KERNELS * LAUNCH_GAP_S)
    assert t == pytest.approx(want, rel=REL)
    # vectorised over flash and cp: the view only where both allow it (GPT-3 on TE 1.10)
    t = elementwise_time.qkv_split_cat_time(GPT3, 1, 8, np.array([1, 1, 2]),
                                            np.array([True, False, True]), H100, NEMO_TE1)
    one = elementwise_time.qkv_split_cat_time(GPT3, 1, 8, 1, False, H100, NEMO_TE1)
    two = elementwise_time.qkv_split_cat_time(GPT3, 1, 8, 2, True, H100, NEMO_TE1)
    assert t[0] == 0.0 and one > 0 and t[1] == one and t[2] == pytest.approx(two, rel=REL)
    # a stack with separate projections (torchtitan) or none modelled: nothing
    for name in ("torchtitan", "pytorch-eager", "jax-xla", "automodel"):
        assert get_profile(name).qkv_split == ""
        assert elementwise_time.qkv_split_cat_time(m, 1, 8, 1, True, H100,
                                                   get_profile(name)) == 0.0


def test_the_view_rule():
    """TE's ``SplitAlongDim`` returns a view only for the ``sbh3d`` case: MHA, no RoPE, no
    q/k norm, cuDNN's fused attention (flash, sm 90+), cp 1, TE <= 2.2. ``torch.split``
    never does; ``te_version`` None is read as the newest releases (a ``cat``)."""
    assert TE_LAST_SPLIT_ALONG_DIM == (2, 2)
    assert qkv_split_is_view(GPT3, NEMO_TE1, H100, True, 1)
    assert qkv_split_is_view(GPT3, dataclasses.replace(NEMO, te_version=(2, 2)), H100, True, 1)
    assert qkv_split_is_view(GPT3, NEMO_TE1, get_gpu("B200"), True, 1)
    cats = [(GPT3, NEMO, H100, True, 1),                                  # te_version None
            (GPT3, dataclasses.replace(NEMO, te_version=(2, 3)), H100, True, 1),
            (GPT3, NEMO_TE1, A100, True, 1),                              # FlashAttention
            (GPT3, NEMO_TE1, H100, False, 1),                             # unfused attention
            (GPT3, NEMO_TE1, H100, True, 2),                              # context parallel
            (dataclasses.replace(GPT3, position_embedding="rope"), NEMO_TE1, H100, True, 1),
            (dataclasses.replace(GPT3, qk_norm=True), NEMO_TE1, H100, True, 1),
            (dataclasses.replace(GPT3, num_query_groups=8), NEMO_TE1, H100, True, 1),
            (GPT3, dataclasses.replace(NEMO_TE1, qkv_split="torch"), H100, True, 1),
            (GPT3, get_profile("megatron-lm-2021"), H100, True, 1),
            (GPT3, get_profile("megatron-deepspeed"), H100, True, 1)]
    for case in cats:
        assert not qkv_split_is_view(*case), case
    v = qkv_split_is_view(GPT3, NEMO_TE1, H100, np.array([True, True, False]),
                          np.array([1, 4, 1]))
    assert v.tolist() == [True, False, False]


def test_stacks_and_the_field_check():
    """Megatron-Core's family splits with TE (``"te"``), Megatron-LM 2021 and Megatron-DeepSpeed
    with ``torch.split``; a value outside the set is refused naming the field."""
    for name in ("megatron-core", "nemo", "hai-llm"):
        assert get_profile(name).qkv_split == "te"
    for name in ("megatron-lm-2021", "megatron-deepspeed"):
        assert get_profile(name).qkv_split == "torch"
    with pytest.raises(SpecError, match="qkv_split"):
        check_profile(dataclasses.replace(NEMO, qkv_split="cat"))


def _rows(path: str) -> dict:
    from strategies.reference.cases import case_from_entry, load_reference
    return {e["id"]: case_from_entry(e).job for e in load_reference(path)}


@pytest.mark.parametrize("path,rid", [
    ("strategies/reference/data/megatron_bridge_2604.json",
     "mbridge260401_gptoss120b_gb300_64_bf16"),
    ("strategies/reference/data/nemo_performance_2407.json", "nemo2407_llama3_8b_8gpu"),
    ("strategies/reference/data/published.json", "narayanan2021_t1_1.7B")])
def test_row_moves_by_exactly_the_term(path, rid):
    """pp 1: the step moves by micro-batches x layers x the backward ``cat`` (TE 2.14's
    ``torch.split``; RoPE under TE 1.8; Megatron-LM 2021 with full recomputation, which
    reruns no backward)."""
    from strategies.estimate import estimate
    job = _rows(path)[rid]
    m, p, fw, g = job.model, job.plan, job.framework, job.cluster.gpu
    after = estimate(job)
    before = estimate(dataclasses.replace(job, framework=dataclasses.replace(fw, qkv_split="")))
    t = elementwise_time.qkv_split_cat_time(m, p.mbs, p.tp, p.cp, p.flash_attn, g, fw,
                                            job.system)
    assert p.pp == 1 and t > 0
    n = before.num_microbatches * m.num_layers / p.pp
    assert after.step_time_s - before.step_time_s == pytest.approx(n * t, rel=1e-9)


def test_view_row_unchanged():
    """NeMo 24.07's GPT-3 175B (TE 1.8, MHA, learned positions, cuDNN on H100): the split's
    backward is a view, the estimate is the one without the term, bit for bit."""
    from strategies.estimate import estimate
    job = _rows("strategies/reference/data/nemo_performance_2407.json")[
        "nemo2407_gpt3_175b_128gpu"]
    fw = job.framework
    assert fw.te_version == (1, 8) and fw.qkv_split == "te"
    assert qkv_split_is_view(job.model, fw, job.cluster.gpu, job.plan.flash_attn, job.plan.cp)
    off = estimate(dataclasses.replace(job, framework=dataclasses.replace(fw, qkv_split="")))
    assert estimate(job).step_time_s == off.step_time_s
