"""The unfused attention path's memory traffic per score element (docs/calibration.md §3.25):
13 bytes forward, 19 backward (Megatron's ``ParallelAttention`` and autograd of its ops), and
Megatron-DeepSpeed's ALiBi, whose ``baddbmm(alibi, q, k^T, beta=1)`` copies the expanded bias
into the scores and reads it back: 4 more bytes per element in every forward (the recomputed
one too), none in the backward, and only on that stack, only without FlashAttention."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost import attention_counts
from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.layer_time import layer_time
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.deepspeed import ALIBI_BADDBMM_BYTES, MEGATRON_DEEPSPEED
from strategies.stacks.megatron import MEGATRON_CORE, MEGATRON_LM_2021
from strategies.presets import model_preset
from topologies.gpus import get_gpu

GPU = get_gpu("a100")


def test_pass_bytes():
    # forward: QK^T writes 2; fused softmax reads 2, writes 2; dropout reads 2, writes 2 and
    # a 1-byte mask; AV reads 2
    assert attention_counts.SCORE_BYTES_FWD == 2 + (2 + 2) + (2 + 2 + 1) + 2
    # backward: dP written 2, P read for dV 2; dropout back 2 + 1 + 2; softmax back
    # 2 + 2 + 2; dS read for dQ and for dK 2 + 2
    assert attention_counts.SCORE_BYTES_BWD == (2 + 2) + (2 + 1 + 2) + (2 + 2 + 2) + (2 + 2)
    # ALiBi's baddbmm: the expanded bias copied into the result (2), read as C (2)
    assert ALIBI_BADDBMM_BYTES == 2 + 2


@pytest.mark.parametrize("tp,b", [(1, 1), (4, 2), (8, 2)])
def test_backward_streams_19_not_twice_13(tp, b):
    m = model_preset("gpt3-175b")
    f, bw = attention_time_fwd(m, b, tp, 1, False, GPU, fw=MEGATRON_LM_2021)
    elems = m.num_attention_heads * m.seq_length ** 2 * b / tp
    hbm = usable_hbm(GPU)
    # the GEMMs' backward is twice their forward; the bytes are 19 against 2 x 13
    assert bw - 2 * f == pytest.approx((19 - 26) * elems / hbm, rel=1e-9)
    assert attention_counts.softmax_bytes_bwd(m, b, tp, 1, True) == 0.0


@pytest.mark.parametrize("tp,b", [(4, 2), (8, 1)])
def test_alibi_adds_its_bytes_to_each_forward_only(tp, b):
    alibi = model_preset("bloom-176b")
    learned = replace(alibi, position_embedding="learned")
    assert alibi.position_embedding == "alibi"
    elems = alibi.num_attention_heads * alibi.seq_length ** 2 * b / tp
    extra = ALIBI_BADDBMM_BYTES * elems / usable_hbm(GPU)
    f0, b0 = attention_time_fwd(learned, b, tp, 1, False, GPU, fw=MEGATRON_DEEPSPEED)
    f1, b1 = attention_time_fwd(alibi, b, tp, 1, False, GPU, fw=MEGATRON_DEEPSPEED)
    assert f1 - f0 == pytest.approx(extra, rel=1e-9)
    assert b1 == b0
    kw = dict(b=b, tp=tp, cp=1, ep=1, sp=False, flash=False, recompute=2, gpu=GPU,
              dtype="bf16", fw=MEGATRON_DEEPSPEED)
    l0, l1 = layer_time(learned, **kw), layer_time(alibi, **kw)
    assert l1.fwd - l0.fwd == pytest.approx(extra, rel=1e-9)
    assert l1.recompute - l0.recompute == pytest.approx(extra, rel=1e-9)   # rerun forward
    assert l1.bwd == l0.bwd
    # a stack whose ALiBi path was not read, and FlashAttention, charge nothing for it
    assert attention_time_fwd(alibi, b, tp, 1, False, GPU, fw=MEGATRON_LM_2021) == \
        attention_time_fwd(learned, b, tp, 1, False, GPU, fw=MEGATRON_LM_2021)
    assert attention_time_fwd(alibi, b, tp, 1, True, GPU, fw=MEGATRON_DEEPSPEED) == \
        attention_time_fwd(learned, b, tp, 1, True, GPU, fw=MEGATRON_DEEPSPEED)


def test_which_stacks_read_it():
    assert MEGATRON_DEEPSPEED.alibi_score_bytes == ALIBI_BADDBMM_BYTES
    for name, fw in PROFILES.items():
        if fw is not MEGATRON_DEEPSPEED:
            assert fw.alibi_score_bytes == 0.0, name


@pytest.mark.parametrize("bad", [-1.0, 100.0, True, "4"])
def test_bad_alibi_bytes(bad):
    with pytest.raises(SpecError, match="framework.alibi_score_bytes"):
        replace(MEGATRON_CORE, alibi_score_bytes=bad)
