"""The passes around the fused QKV projection's split (docs/calibration.md §5.167,
``strategies.cost.qkv_split``):

* backward, a ``cat`` of q, k and v's gradients (a read and a write of ``(a + 2g)·d / t``
  16-bit elements per token, one kernel) wherever the split is ``torch.split`` (Megatron-LM,
  Megatron-DeepSpeed, and Megatron-Core from Transformer Engine 2.3 on, whose
  ``_SplitAlongDim`` import fails) or TE's ``SplitAlongDim`` receives gradients that are not
  slices of one buffer; a view only for multi-head attention without RoPE or q/k norms in
  cuDNN's fused attention on TE <= 2.2;
* forward, on Megatron-Core, q's reshape copy (grouped heads, several groups a rank) and TE's
  ``get_qkv_layout`` ``contiguous()`` copies (every layout but the ``sbh3d`` views).

Closed forms to 1e-12, the rules case by case, and reference rows' estimates moving by exactly
micro-batches x layers x the terms, or not at all where the split costs nothing."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import hbm_rate, qkv_split
from strategies.cost.qkv_split import TE_LAST_SPLIT_ALONG_DIM, qkv_split_is_view
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.presets import model_preset
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.stacks.profile_fields import check_profile
from topologies.gpus import get_gpu

REL = 1e-12
H100, A100 = get_gpu("H100"), get_gpu("A100")
GPT3 = model_preset("gpt3-175b")
LLAMA = model_preset("llama3-70b")
NEMO = get_profile("nemo")
NEMO_TE1 = dataclasses.replace(NEMO, te_version=(1, 10))
M2021 = get_profile("megatron-lm-2021")


def test_cat_bytes_closed_form():
    """4 bytes per element of q, k, v: ``4·b·s/cp·(a + 2g)·d/t``, vectorised over the plan;
    a hybrid model's attention share; 0 for MLA and DeepSeek-V4."""
    m = LLAMA
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    assert (a, g, d) == (64, 8, 128)
    want = 4.0 * 2 * m.seq_length / 2 * (a + 2 * g) * d / 4
    assert qkv_split.qkv_split_cat_bytes(m, 2, 4, 2) == pytest.approx(want, rel=REL)
    tp = np.array([1, 2, 8])
    got = qkv_split.qkv_split_cat_bytes(m, 1, tp, 1)
    assert got == pytest.approx(4.0 * m.seq_length * (a + 2 * g) * d / tp, rel=REL)
    h = model_preset("nemotron-h-56b")
    assert 0 < h.attention_share < 1
    assert qkv_split.qkv_split_cat_bytes(h, 1, 1, 1) == pytest.approx(
        4.0 * h.seq_length * (h.num_attention_heads + 2 * h.kv_heads) * h.head_dim
        * h.attention_share, rel=REL)
    for name in ("deepseek-v3", "deepseek-v4-flash"):
        m = model_preset(name)
        assert not qkv_split.has_fused_qkv_split(m)
        assert qkv_split.qkv_split_cat_bytes(m, 1, 1, 1) == 0.0
        assert qkv_split.qkv_layout_copies(m, 8) == (0.0, 0.0)
        assert qkv_split.qkv_split_time(m, 1, 1, 1, True, H100, NEMO) == (0.0, 0.0)


def test_layout_copies_case_by_case():
    """Elements per token and kernels of the forward copies (``a``, ``g``, ``d``; per GPU)."""
    m = LLAMA                                    # RoPE, a 64, g 8, d 128
    a, g, d = 64, 8, 128
    w, k = qkv_split.qkv_layout_copies(m, np.array([1, 4, 8]))
    # g/t > 1: q's reshape copies beside TE's copy of v; g/t = 1: v alone
    assert w == pytest.approx([(g + a) * d, (g + a) * d / 4, g * d / 8], rel=REL)
    assert k.tolist() == [2.0, 2.0, 1.0]
    mha_rope = dataclasses.replace(GPT3, position_embedding="rope")
    d3 = GPT3.head_dim
    assert qkv_split.qkv_layout_copies(mha_rope, 8) == pytest.approx(
        (GPT3.kv_heads * d3 / 8, 1.0), rel=REL)
    assert qkv_split.qkv_layout_copies(dataclasses.replace(GPT3, qk_norm=True), 8) \
        == pytest.approx((GPT3.kv_heads * d3 / 8, 1.0), rel=REL)
    # multi-head attention without RoPE: TE's sbh3d views, nothing copied
    assert qkv_split.qkv_layout_copies(GPT3, 8) == (0.0, 0.0)
    # grouped-query attention without RoPE: q reshaped + k, v copied, or all three by TE
    gqa = dataclasses.replace(GPT3, num_query_groups=16)
    w, k = qkv_split.qkv_layout_copies(gqa, np.array([8, 16]))
    assert w == pytest.approx((96 + 32) * d3 / np.array([8, 16]), rel=REL)
    assert k.tolist() == [3.0, 3.0]
    h = model_preset("nemotron-h-56b")          # no position embedding, GQA
    assert h.position_embedding != "rope" and h.kv_heads < h.num_attention_heads
    w, k = qkv_split.qkv_layout_copies(h, 4)
    assert w == pytest.approx((h.num_attention_heads + 2 * h.kv_heads) * h.head_dim
                              * h.attention_share / 4, rel=REL)
    assert k == pytest.approx(3 * h.attention_share, rel=REL)


def test_time_closed_form():
    """Forward: the copies' bytes over the usable HBM bandwidth plus a launch gap each, on
    Megatron-Core only; backward: the cat's plus one gap, where the split cats."""
    m, hbm, T = LLAMA, hbm_rate.usable_hbm(H100), LLAMA.seq_length
    f, b = qkv_split.qkv_split_time(m, 1, 8, 1, True, H100, NEMO)
    w, k = qkv_split.qkv_layout_copies(m, 8)
    assert f == pytest.approx(4.0 * T * w / hbm + k * LAUNCH_GAP_S, rel=REL)
    assert b == pytest.approx(qkv_split.qkv_split_cat_bytes(m, 1, 8, 1) / hbm
                              + qkv_split.CAT_KERNELS * LAUNCH_GAP_S, rel=REL)
    # torch.split stacks: the cat, no layout copies (no Transformer Engine attention)
    f21, b21 = qkv_split.qkv_split_time(m, 1, 8, 1, True, H100, M2021)
    assert f21 == 0.0 and b21 == pytest.approx(b, rel=REL)
    # vectorised over flash and cp: the view only where both allow it (GPT-3 on TE 1.10)
    f, b = qkv_split.qkv_split_time(GPT3, 1, 8, np.array([1, 1, 2]),
                                    np.array([True, False, True]), H100, NEMO_TE1)
    one = qkv_split.qkv_split_time(GPT3, 1, 8, 1, False, H100, NEMO_TE1)[1]
    two = qkv_split.qkv_split_time(GPT3, 1, 8, 2, True, H100, NEMO_TE1)[1]
    assert f.tolist() == [0.0, 0.0, 0.0]
    assert b[0] == 0.0 and one > 0 and b[1] == one and b[2] == pytest.approx(two, rel=REL)
    for name in ("torchtitan", "pytorch-eager", "jax-xla", "automodel"):
        assert get_profile(name).qkv_split == ""
        assert qkv_split.qkv_split_time(m, 1, 8, 1, True, H100, get_profile(name)) \
            == (0.0, 0.0)


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
            (GPT3, M2021, H100, True, 1),
            (GPT3, get_profile("megatron-deepspeed"), H100, True, 1)]
    for case in cats:
        assert not qkv_split_is_view(*case), case
    v = qkv_split_is_view(GPT3, NEMO_TE1, H100, np.array([True, True, False]),
                          np.array([1, 4, 1]))
    assert v.tolist() == [True, False, False]


def test_stacks_and_the_field_check():
    """Megatron-Core's family splits as ``"te"``, Megatron-LM 2021 and Megatron-DeepSpeed with
    ``torch.split``; a value outside the set is refused naming the field."""
    for name in ("megatron-core", "nemo", "hai-llm"):
        assert get_profile(name).qkv_split == "te"
    for name in ("megatron-lm-2021", "megatron-deepspeed"):
        assert get_profile(name).qkv_split == "torch"
    with pytest.raises(SpecError, match="qkv_split"):
        check_profile(dataclasses.replace(NEMO, qkv_split="cat"))


def _job(path: str, rid: str):
    from strategies.reference.cases import case_from_entry, load_reference
    return case_from_entry({e["id"]: e for e in load_reference(path)}[rid]).job


@pytest.mark.parametrize("path,rid,reruns", [
    ("strategies/reference/data/megatron_bridge_2604.json",
     "mbridge260401_gptoss120b_gb300_64_bf16", 0),
    ("strategies/reference/data/nemo_performance_2407.json", "nemo2407_llama3_8b_8gpu", 0),
    ("strategies/reference/data/published.json", "narayanan2021_t1_1.7B", 1)])
def test_row_moves_by_exactly_the_terms(path, rid, reruns):
    """pp 1: the step moves by micro-batches x layers x (forward copies x (1 + full reruns)
    + the backward cat): gpt-oss on TE 2.14 (``torch.split``; q reshaped, v copied), Llama 3
    8B on TE 1.8 (RoPE), Megatron-LM 2021 under full recomputation (no copies: its forward
    term is 0, so its rerun adds nothing)."""
    from strategies.estimate import estimate
    job = _job(path, rid)
    m, p, fw, g = job.model, job.plan, job.framework, job.cluster.gpu
    after = estimate(job)
    before = estimate(dataclasses.replace(job, framework=dataclasses.replace(fw, qkv_split="")))
    f, b = qkv_split.qkv_split_time(m, p.mbs, p.tp, p.cp, p.flash_attn, g, fw, job.system)
    assert p.pp == 1 and b > 0 and (f > 0) == (fw.qkv_split == "te")
    n = before.num_microbatches * m.num_layers / p.pp
    assert after.step_time_s - before.step_time_s == pytest.approx(
        n * ((1 + reruns) * f + b), rel=1e-9)


def test_view_row_unchanged():
    """NeMo 24.07's GPT-3 175B (TE 1.8, MHA, learned positions, cuDNN on H100): no copy, the
    split's backward a view; the estimate is the one without the split's terms, bit for bit."""
    from strategies.estimate import estimate
    job = _job("strategies/reference/data/nemo_performance_2407.json",
               "nemo2407_gpt3_175b_128gpu")
    fw, p = job.framework, job.plan
    assert fw.te_version == (1, 8) and fw.qkv_split == "te"
    assert qkv_split.qkv_split_time(job.model, p.mbs, p.tp, p.cp, p.flash_attn,
                                    job.cluster.gpu, fw, job.system) == (0.0, 0.0)
    off = estimate(dataclasses.replace(job, framework=dataclasses.replace(fw, qkv_split="")))
    assert estimate(job).step_time_s == off.step_time_s
